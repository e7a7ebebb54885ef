//! Packing a past trail day into one row per identifier, and returning
//! the space it freed (sql/V0014, V0015).

use tokio_postgres::Client;

use tidemark_store::StoreError;

use super::partitions::{chunks_name, packed_name, Daily, PARTITION_OPTIONS};
use crate::core::days::Part;

/// The starts of the trail partitions packed and tidied: nothing left to do.
pub async fn packed_parts(c: &Client) -> Result<Vec<i64>, StoreError> {
    let rows = c
        .query(
            "SELECT base FROM tidemark.profile_trail_packed_parts WHERE tidied",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Packs a trail partition (sql/V0014): the chunks (sql/V0015) and rows of
/// events that carried only the identifier they are under become one row
/// per identifier, in one transaction whose snapshot both copies and
/// deletes, so a late event written meanwhile stays as it is and nothing is
/// moved twice or lost.
/// Writers are never blocked; readers see the rows before or after, whole.
/// Returns the events packed (`None`: packed before). [`tidy_trail`] then
/// returns the space.
pub async fn pack_trail(c: &mut Client, p: Part) -> Result<Option<i64>, StoreError> {
    let Part::Span(from, to) = p else {
        return Ok(None);
    };
    let (rows, packed, chunks) = (
        format!("tidemark.{}", Daily::Trail.name(p)),
        format!("tidemark.{}", packed_name(p)),
        format!("tidemark.{}", chunks_name(p)),
    );
    // Every row's base is the partition's start: bounds that hold that value
    // alone let a read prune to the days it asks for exactly. The chunks'
    // is made with the day's partition, unless someone else made that.
    for (parent, child) in [
        ("profile_trail_packed", &packed),
        ("profile_trail_chunks", &chunks),
    ] {
        tidemark_store::create_partition(
            c,
            "CREATE TABLE",
            &format!("tidemark.{parent}"),
            child,
            &format!("FOR VALUES FROM ({from}) TO ({})", from + 1),
            PARTITION_OPTIONS,
            "SELECT 1",
        )
        .await?;
    }
    let tx = c
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await?;
    let done = tx
        .query_opt(
            "SELECT 1 FROM tidemark.profile_trail_packed_parts WHERE base = $1",
            &[&from],
        )
        .await?;
    if done.is_some() {
        return Ok(None);
    }
    // Offsets fit an integer: a partition spans at most a day.
    tx.execute(
        &format!(
            "INSERT INTO {packed}
             SELECT id, $1, array_agg(off ORDER BY off, type, txid),
                    array_agg(type ORDER BY off, type, txid), array_agg(txid ORDER BY off, type, txid)
             FROM (SELECT id, (ts - $1)::integer AS off, type, txid FROM {rows} WHERE ids IS NULL
                   UNION ALL
                   SELECT c.id, (c.base - $1)::integer + u.off, u.type, u.txid
                   FROM {chunks} c CROSS JOIN LATERAL unnest(c.off, c.type, c.txid) AS u(off, type, txid)
                   WHERE c.ids IS NULL) e
             GROUP BY id"
        ),
        &[&from],
    )
    .await?;
    let rows_moved = tx
        .execute(&format!("DELETE FROM {rows} WHERE ids IS NULL"), &[])
        .await? as i64;
    let chunked: i64 = tx
        .query_one(
            &format!(
                "WITH d AS (DELETE FROM {chunks} WHERE ids IS NULL RETURNING cardinality(off) AS n)
                 SELECT coalesce(sum(n), 0)::bigint FROM d"
            ),
            &[],
        )
        .await?
        .get(0);
    let events = rows_moved + chunked;
    tx.execute(
        "INSERT INTO tidemark.profile_trail_packed_parts (base, until, events) VALUES ($1, $2, $3)",
        &[&from, &to, &events],
    )
    .await?;
    tx.commit().await?;
    Ok(Some(events))
}

/// Returns a packed day's freed space: `VACUUM` frees the heap's pages (and
/// gives the empty ones at its end back), and the index, which `VACUUM`
/// never shrinks, is built again concurrently (readers and late writers go
/// on). An index an interrupted rebuild left invalid is dropped first.
/// Marks the day tidied.
pub async fn tidy_trail(c: &Client, p: Part) -> Result<(), StoreError> {
    let Part::Span(from, _) = p else {
        return Ok(());
    };
    for table in [Daily::Trail.name(p), chunks_name(p)] {
        tidy(c, &format!("tidemark.{table}")).await?;
    }
    c.execute(
        "UPDATE tidemark.profile_trail_packed_parts SET tidied = true WHERE base = $1",
        &[&from],
    )
    .await?;
    Ok(())
}

/// `VACUUM` and `REINDEX CONCURRENTLY` of one emptied table, dropping first
/// what an interrupted rebuild left invalid.
async fn tidy(c: &Client, rows: &str) -> Result<(), StoreError> {
    let invalid = c
        .query(
            "SELECT i.indexrelid::regclass::text FROM pg_index i
             WHERE i.indrelid = $1::text::regclass AND NOT i.indisvalid",
            &[&rows],
        )
        .await?;
    for r in &invalid {
        let name: String = r.get(0);
        let name = if name.contains('.') {
            name
        } else {
            format!("tidemark.{name}")
        };
        c.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
            .await?;
    }
    c.batch_execute(&format!("VACUUM {rows}")).await?;
    c.batch_execute(&format!("REINDEX TABLE CONCURRENTLY {rows}"))
        .await?;
    Ok(())
}
