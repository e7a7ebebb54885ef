//! The queries the benches read their figures with, from outside the
//! processes they measure (as an operator's `psql` would). The system's own
//! SQL is in its owners' `store` modules.

use futures_util::SinkExt;
use tokio_postgres::{Client, Row, Statement};

/// A shard's applied clock, if it has swept.
pub async fn shard_clock(c: &Client, shard: &str) -> anyhow::Result<Option<i64>> {
    Ok(c.query_opt(
        "SELECT clock_ms FROM tidemark.shards WHERE name = $1",
        &[&shard],
    )
    .await?
    .and_then(|r| r.get(0)))
}

/// When the last observation was emitted, ms since the epoch (0 if none).
pub async fn last_emission_ms(c: &Client) -> anyhow::Result<f64> {
    Ok(c
        .query_one(
            "SELECT coalesce(extract(epoch FROM max(emitted_at)) * 1000, 0)::float8 FROM tidemark.observations",
            &[],
        )
        .await?
        .get(0))
}

/// Every observation: `(target, txid, label, features)` in columns 0-3.
pub async fn observations(c: &Client) -> anyhow::Result<Vec<Row>> {
    Ok(c.query(
        "SELECT target, txid, label, features, kind, delay_ms FROM tidemark.observations ORDER BY shard, seq",
        &[],
    )
    .await?)
}

/// Merges the profile process logged.
pub async fn merges(c: &Client) -> anyhow::Result<i64> {
    Ok(
        c.query_one("SELECT count(*) FROM tidemark.profile_merges", &[])
            .await?
            .get(0),
    )
}

/// Live rows in the tables of schema `schema` (the statistics' estimate).
pub async fn live_rows(c: &Client, schema: &str) -> anyhow::Result<i64> {
    Ok(c
        .query_one(
            "SELECT coalesce(sum(n_live_tup), 0)::bigint FROM pg_stat_user_tables WHERE schemaname = $1",
            &[&schema],
        )
        .await?
        .get(0))
}

/// Events in a shard's buffer.
pub async fn buffered(c: &Client, shard: &str) -> anyhow::Result<i64> {
    let table = format!(
        "{}.events",
        tidemark_store::quote_ident(&format!("shard_{shard}"))
    );
    Ok(c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await?
        .get(0))
}

/// One round trip.
pub async fn ping(c: &Client) -> anyhow::Result<()> {
    c.simple_query("SELECT 1").await?;
    Ok(())
}

/// Whether this connection is encrypted.
pub async fn ssl(c: &Client) -> anyhow::Result<bool> {
    Ok(c.query_one(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )
    .await?
    .get(0))
}

/// COPYs `rows` rows of ~100 bytes into a temporary table.
pub async fn copy_rows(c: &Client, rows: usize) -> anyhow::Result<()> {
    c.batch_execute("CREATE TEMP TABLE IF NOT EXISTS copied (n bigint, pad text)")
        .await?;
    let pad = "x".repeat(90);
    let sink = c.copy_in("COPY copied FROM STDIN").await?;
    futures_util::pin_mut!(sink);
    let mut buf = String::with_capacity(1 << 20);
    for i in 0..rows {
        buf.push_str(&format!("{i}\t{pad}\n"));
        if buf.len() > (1 << 20) - 200 {
            sink.send(bytes::Bytes::from(std::mem::take(&mut buf)))
                .await?;
        }
    }
    sink.send(bytes::Bytes::from(buf)).await?;
    sink.finish().await?;
    Ok(())
}

/// Events the profile process applied (0 before it registered).
pub async fn applied(c: &Client) -> anyhow::Result<i64> {
    Ok(
        c.query_opt("SELECT events_applied FROM tidemark.profile_status", &[])
            .await?
            .map_or(0, |r| r.get(0)),
    )
}

/// The open transactions of the other client backends of this database:
/// `(pid, xact start µs, age ms, lock waited on, application_name, wrote)`.
pub async fn transactions_statement(c: &Client) -> anyhow::Result<Statement> {
    Ok(c.prepare(
        "SELECT pid, (extract(epoch FROM xact_start) * 1e6)::bigint,
                extract(epoch FROM clock_timestamp() - xact_start)::float8 * 1e3,
                CASE WHEN wait_event_type = 'Lock' THEN wait_event END,
                application_name, backend_xid IS NOT NULL, left(query, 70)
         FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND xact_start IS NOT NULL AND backend_type = 'client backend'",
    )
    .await?)
}

/// Profile storage: `(avg profile row bytes, persons, profiles table bytes,
/// identifiers, merges)`.
pub async fn profile_sizes(c: &Client) -> anyhow::Result<(f64, i64, i64, i64, i64)> {
    let r = c
        .query_one(
            "SELECT avg(pg_column_size(p.*))::float8, count(*), pg_total_relation_size('tidemark.profiles'),
                    (SELECT count(*) FROM tidemark.profile_ids), (SELECT count(*) FROM tidemark.profile_merges)
             FROM tidemark.profiles p",
            &[],
        )
        .await?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
}

/// The three market types at positions 1–3, as a profile process that
/// counts them would have defined them (a synthetic trail's rows name them).
pub async fn trail_types(c: &Client) -> anyhow::Result<()> {
    c.batch_execute(
        "INSERT INTO tidemark.profile_types VALUES (1, 'impression'), (2, 'click'), (3, 'install')
         ON CONFLICT DO NOTHING",
    )
    .await?;
    Ok(())
}

/// Trail rows `from..=to` of a synthetic load: `persons` persons, events
/// spread over `span` ms from `start`, of the three market types (positions
/// 1–3, [`trail_types`]), each carrying only its own identifier.
pub async fn fill_trail(
    c: &Client,
    (start, span): (i64, i64),
    from: i64,
    to: i64,
    persons: i64,
) -> anyhow::Result<()> {
    c.execute(
        "INSERT INTO tidemark.profile_trail (id, ts, type, txid, ids)
         SELECT 'user:p' || (g % $4), $1 + (hashint8(g)::bigint & 2147483647) % $5,
                (1 + g % 3)::smallint, md5(g::text)::uuid, NULL
         FROM generate_series($2::bigint, $3::bigint) g",
        &[&start, &from, &to, &persons, &span],
    )
    .await?;
    Ok(())
}

/// Rewrites the trail rows of the day starting at `day` as chunks
/// (sql/V0015) of `per` events of one identifier each, consecutive in
/// time, as workers write them; returns the chunks written.
pub async fn chunk_day(c: &Client, day: i64, per: i64) -> anyhow::Result<u64> {
    let n = c
        .execute(
            "WITH moved AS (
                 DELETE FROM tidemark.profile_trail WHERE ts >= $1 AND ts < $1 + 86400000 AND ids IS NULL
                 RETURNING id, ts, type, txid),
             ranked AS (
                 SELECT id, ts, type, txid, (row_number() OVER (PARTITION BY id ORDER BY ts, type, txid) - 1) / $2 AS k
                 FROM moved)
             INSERT INTO tidemark.profile_trail_chunks (id, base, ids, off, type, txid)
             SELECT id, $1, NULL, array_agg((ts - $1)::integer ORDER BY ts, type, txid),
                    array_agg(type ORDER BY ts, type, txid), array_agg(txid ORDER BY ts, type, txid)
             FROM ranked GROUP BY id, k",
            &[&day, &per],
        )
        .await?;
    Ok(n)
}

/// Sets the trail's visibility map and statistics, as autovacuum would
/// after a day's partition is written (index-only scans).
pub async fn vacuum_trail(c: &Client) -> anyhow::Result<()> {
    c.batch_execute("VACUUM (ANALYZE) tidemark.profile_trail, tidemark.profile_trail_chunks")
        .await?;
    Ok(())
}

/// Flushes what the prefill wrote, so that the measured window does not
/// pay for it (a real table's old days were written long ago): without it
/// the first checkpoint of the run wrote the prefill's gigabytes while
/// ingest started.
pub async fn checkpoint(c: &Client) -> anyhow::Result<()> {
    c.batch_execute("CHECKPOINT").await?;
    Ok(())
}

/// Bytes on disk of every trail partition, chunks and packed days
/// included, with their indexes and TOAST.
pub async fn trail_bytes(c: &Client) -> anyhow::Result<i64> {
    Ok(c
        .query_one(
            "SELECT sum(pg_total_relation_size(inhrelid))::bigint FROM pg_inherits
             WHERE inhparent IN ('tidemark.profile_trail'::regclass, 'tidemark.profile_trail_packed'::regclass,
                                 'tidemark.profile_trail_chunks'::regclass)",
            &[],
        )
        .await?
        .get(0))
}

/// The soak's sample: `profile_seen`'s bytes on disk (indexes
/// included), its rows as the planner estimates them, its partitions,
/// the trail's bytes (rows, chunks and packed days), and `profiles` with
/// `profile_ids`' bytes.
pub async fn soak_sizes(c: &Client) -> anyhow::Result<(i64, i64, i64, i64, i64)> {
    let r = c
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid))
                                 FILTER (WHERE p.relname = 'profile_seen'), 0)::bigint,
                    coalesce(sum(c.reltuples)
                                 FILTER (WHERE p.relname = 'profile_seen' AND c.reltuples > 0), 0)::bigint,
                    count(*) FILTER (WHERE p.relname = 'profile_seen'),
                    coalesce(sum(pg_total_relation_size(i.inhrelid))
                                 FILTER (WHERE p.relname IN ('profile_trail', 'profile_trail_chunks',
                                                             'profile_trail_packed')), 0)::bigint,
                    pg_total_relation_size('tidemark.profiles')
                        + pg_total_relation_size('tidemark.profile_ids')
             FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                  JOIN pg_class c ON c.oid = i.inhrelid
             WHERE p.relnamespace = 'tidemark'::regnamespace",
            &[],
        )
        .await?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
}

/// First-copy marks counted, and their bytes on disk with indexes.
pub async fn marks_on_disk(c: &Client) -> anyhow::Result<(i64, i64)> {
    let r = c
        .query_one(
            "SELECT count(*),
                    coalesce((SELECT sum(pg_total_relation_size(inhrelid))::bigint FROM pg_inherits
                              WHERE inhparent = 'tidemark.profile_seen'::regclass), 0)
             FROM tidemark.profile_seen",
            &[],
        )
        .await?;
    Ok((r.get(0), r.get(1)))
}

/// What a standby's `tidemark.profile_status` says of its lag (ms).
pub async fn replica_lag(c: &Client) -> anyhow::Result<Option<i64>> {
    Ok(
        c.query_opt("SELECT replica_lag_ms FROM tidemark.profile_status", &[])
            .await?
            .and_then(|r| r.get(0)),
    )
}

/// Observations per kind (SPEC 5): `(kind, rows)`.
pub async fn kinds(c: &Client) -> anyhow::Result<Vec<(String, i64)>> {
    Ok(c.query(
        "SELECT kind, count(*) FROM tidemark.observations GROUP BY kind ORDER BY kind",
        &[],
    )
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect())
}
