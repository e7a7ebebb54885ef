//! `tidemark-bench trail-read`: a person's trail of 7 days read through
//! `tidemark-reader` from a large trail table, one row per event, then in
//! chunks, then packed.

use std::time::Instant;

use tidemark_reader::Reader;
use tidemark_store::Cluster;
use tidemark_testkit::Rng;

use super::read::percentiles;
use super::trail_table::{fill_day, pack_days, DAY};
use crate::fresh_db;

/// A trail table of `rows` events over 7 days, persons with at most ~1,000
/// events in range; times `tidemark_reader::Reader::trail` of 7 days with
/// one row per event, then as chunks of 3 events (sql/V0015), then again
/// once the days are packed (sql/V0014).
pub async fn trail_bench(
    cluster: &Cluster,
    rows: i64,
    per_person: i64,
    samples: usize,
) -> anyhow::Result<()> {
    let url = fresh_db(cluster, "bench_trail").await?;
    let mut c = tidemark_store::connect(&url).await?;
    let day0 = (tidemark_market::now_ms() / DAY - 7) * DAY;
    let persons = (rows / per_person).max(1);
    let t = Instant::now();
    crate::store::trail_types(&c).await?;
    tidemark_profiles::store::create_partition(
        &c,
        tidemark_profiles::store::Daily::Trail,
        tidemark_profiles::days::Part::Span(day0 + 7 * DAY, day0 + 8 * DAY),
    )
    .await?;
    // Each person gets `per_person` events spread over 7 days.
    for d in 0..7 {
        let (first, last) = (rows * d / 7, rows * (d + 1) / 7);
        fill_day(&c, (day0 + d * DAY, DAY), first, last - first, persons).await?;
    }
    crate::store::vacuum_trail(&c).await?;
    let size = crate::store::trail_bytes(&c).await?;
    println!(
        "trail table: {rows} events, {persons} persons (~{} each over 7 days), {:.0} MB ({:.1} bytes/event), loaded in {:.0}s",
        rows / persons,
        size as f64 / 1e6,
        size as f64 / rows as f64,
        t.elapsed().as_secs_f64()
    );
    let reader = Reader::new(&url, 1)?;
    let read = |label: &'static str| {
        let reader = reader.clone();
        async move {
            let mut rng = Rng(7);
            let mut lat = Vec::with_capacity(samples);
            let mut events = 0;
            for _ in 0..samples {
                let id = format!("user:p{}", rng.next() % persons as u64);
                let t = Instant::now();
                let got = reader.trail(&id, day0, day0 + 8 * DAY, None).await?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                events += got.len();
            }
            println!(
                "  trail of one person, 7 days (avg {} events), {label}: {}",
                events / samples,
                percentiles(lat)
            );
            anyhow::Ok(())
        }
    };
    read("one row per event").await?;
    // As workers write them (sql/V0015): 3 events of one identifier a chunk,
    // about what the ingest benchmark's transactions hold (3.4).
    let t = Instant::now();
    let mut chunks = 0;
    for d in 0..7 {
        chunks += crate::store::chunk_day(&c, day0 + d * DAY, 3).await?;
    }
    // The emptied rows' index would count against the chunks.
    c.batch_execute("REINDEX TABLE tidemark.profile_trail")
        .await?;
    crate::store::vacuum_trail(&c).await?;
    let size = crate::store::trail_bytes(&c).await?;
    println!(
        "chunks: {chunks} in {:.0}s, {:.0} MB ({:.1} bytes/event)",
        t.elapsed().as_secs_f64(),
        size as f64 / 1e6,
        size as f64 / rows as f64
    );
    read("chunks of 3 events").await?;
    pack_days(&mut c, (0..7).map(|d| day0 + d * DAY)).await?;
    c.batch_execute("ANALYZE tidemark.profile_trail_packed")
        .await?;
    let size = crate::store::trail_bytes(&c).await?;
    println!(
        "packed: {:.0} MB ({:.1} bytes/event)",
        size as f64 / 1e6,
        size as f64 / rows as f64
    );
    read("packed days").await?;
    Ok(())
}
