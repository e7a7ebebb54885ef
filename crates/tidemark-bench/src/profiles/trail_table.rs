//! A large trail table, as the benchmarks need one: days of events filled
//! a million a statement, then packed as the profile process packs them.

use std::time::Instant;

/// A day in ms: trail partitions are whole UTC days.
pub(super) const DAY: i64 = 86_400_000;

/// A trail table already holding 7 days (a run from an empty
/// table never reaches a real one's size): `per_day` events in each of the
/// 7 UTC days before today and in today's until now, so ingest writes into a
/// partition, and an index, already that large.
pub(super) async fn prefill_trail(url: &str, per_day: i64, persons: i64) -> anyhow::Result<()> {
    let mut c = tidemark_store::connect(url).await?;
    let now = tidemark_market::now_ms();
    let today = now / DAY * DAY;
    crate::store::trail_types(&c).await?;
    let t = Instant::now();
    for d in 0..=7 {
        let start = today - (7 - d) * DAY;
        let span = if start == today {
            (now - today).max(1)
        } else {
            DAY
        };
        fill_day(&c, (start, span), d * per_day, per_day, persons).await?;
        println!(
            "  trail prefill: day {} of 8, {per_day} events, {:.0}s",
            d + 1,
            t.elapsed().as_secs_f64()
        );
    }
    crate::store::vacuum_trail(&c).await?;
    println!(
        "trail table prefilled: {} events, {:.0} MB, in {:.0}s",
        8 * per_day,
        crate::store::trail_bytes(&c).await? as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    // The 7 days before today, packed as the process packs them an hour
    // after each ends.
    pack_days(&mut c, (1..=7).map(|d| today - d * DAY)).await?;
    let t = Instant::now();
    crate::store::checkpoint(&c).await?;
    println!(
        "trail table packed: {:.0} MB (checkpointed in {:.1}s)",
        crate::store::trail_bytes(&c).await? as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Makes the trail partition of the day at `start` and fills it with `rows`
/// events numbered from `first` ([`crate::store::fill_trail`]) over `span`
/// ms, a million per statement.
pub(super) async fn fill_day(
    c: &tokio_postgres::Client,
    (start, span): (i64, i64),
    first: i64,
    rows: i64,
    persons: i64,
) -> anyhow::Result<()> {
    tidemark_profiles::store::create_partition(
        c,
        tidemark_profiles::store::Daily::Trail,
        tidemark_profiles::days::Part::Span(start, start + DAY),
    )
    .await?;
    let mut done = 0;
    while done < rows {
        let n = 1_000_000.min(rows - done);
        let from = first + done;
        crate::store::fill_trail(c, (start, span), from, from + n - 1, persons).await?;
        done += n;
    }
    Ok(())
}

/// Packs the trail days starting at `days` (`tidemark_profiles::store::pack_trail`),
/// printing the events packed per second.
pub(super) async fn pack_days(
    c: &mut tokio_postgres::Client,
    days: impl Iterator<Item = i64>,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let mut events = 0;
    for start in days {
        let part = tidemark_profiles::days::Part::Span(start, start + DAY);
        events += tidemark_profiles::store::pack_trail(c, part)
            .await?
            .unwrap_or(0);
        tidemark_profiles::store::tidy_trail(c, part).await?;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "trail days packed: {events} events in {secs:.1}s ({:.0} events/s, VACUUM and REINDEX included)",
        events as f64 / secs
    );
    Ok(())
}
