//! Per-shard bookkeeping in the logged `tidemark` schema: registration and the
//! run lock, clock, watermarks, observation sequence, counters and gaps.

use std::collections::HashMap;

use tokio_postgres::{Client, GenericClient};

use tidemark_store::StoreError;

/// Advisory-lock namespace for shard names (the second key is `hashtext(name)`).
const SHARD_LOCK_CLASS: i32 = 0x7464_6d6b; // "tdmk"

/// What a shard finds at start.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardRow {
    /// `None` until a clock has been applied.
    pub clock_ms: Option<i64>,
    /// The next observation number.
    pub next_seq: i64,
    /// The newest tick heard by the previous run (the `max_future` reference).
    pub reference_ms: Option<i64>,
    /// Whether the shard had run against this database before.
    pub existed: bool,
}

/// Takes the run lock of a shard name on this session, for as long as the
/// session lives. `false` if another session holds it.
pub async fn try_lock(c: &Client, shard: &str) -> Result<bool, StoreError> {
    let r = c
        .query_one(
            "SELECT pg_try_advisory_lock($1, hashtext($2))",
            &[&SHARD_LOCK_CLASS, &shard],
        )
        .await?;
    Ok(r.get(0))
}

/// The process holding a shard's lock, if any: `(pid, client address)`.
pub async fn lock_holder(
    c: &Client,
    shard: &str,
) -> Result<Option<(i32, Option<String>)>, StoreError> {
    let r = c
        .query_opt(
            "SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)
             WHERE l.locktype = 'advisory' AND l.classid = $1::int::oid
               AND l.objid = hashtext($2)::oid AND l.granted",
            &[&SHARD_LOCK_CLASS, &shard],
        )
        .await?;
    Ok(r.map(|r| (r.get(0), r.get(1))))
}

/// Registers (or re-registers) a shard and returns its saved state.
pub async fn register(
    c: &Client,
    shard: &str,
    prefixes: &[String],
    rate: f64,
    clock_kind: &str,
    config: &serde_json::Value,
) -> Result<ShardRow, StoreError> {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let r = c
        .query_one(
            "INSERT INTO tidemark.shards (name, prefixes, rate, clock_kind, config, pid, host)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (name) DO UPDATE SET prefixes = excluded.prefixes, rate = excluded.rate,
                 clock_kind = excluded.clock_kind, config = excluded.config, pid = excluded.pid,
                 host = excluded.host, started_at = now(), updated_at = now()
             RETURNING clock_ms, next_seq, xmax <> 0, reference_ms",
            &[
                &shard,
                &prefixes,
                &rate,
                &clock_kind,
                config,
                &(std::process::id() as i32),
                &host.trim(),
            ],
        )
        .await?;
    Ok(ShardRow {
        clock_ms: r.get(0),
        next_seq: r.get(1),
        existed: r.get(2),
        reference_ms: r.get(3),
    })
}

/// Saved watermarks by phase name.
pub async fn watermarks(c: &Client, shard: &str) -> Result<HashMap<String, i64>, StoreError> {
    Ok(c.query(
        "SELECT phase, wm_ms FROM tidemark.watermarks WHERE shard = $1",
        &[&shard],
    )
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect())
}

/// Saves the applied clock, the `max_future` reference, the next sequence
/// number and every watermark `(phase, offset_ms, wm_ms)`: call inside the
/// transaction that emitted.
pub async fn save_progress(
    c: &impl GenericClient,
    shard: &str,
    clock_ms: i64,
    reference_ms: Option<i64>,
    next_seq: i64,
    marks: &[(String, i64, i64)],
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE tidemark.shards SET clock_ms = $2, next_seq = $3, updated_at = now(),
             reference_ms = greatest(reference_ms, $4) WHERE name = $1",
        &[&shard, &clock_ms, &next_seq, &reference_ms],
    )
    .await?;
    let phases: Vec<&str> = marks.iter().map(|m| m.0.as_str()).collect();
    let offsets: Vec<i64> = marks.iter().map(|m| m.1).collect();
    let wms: Vec<i64> = marks.iter().map(|m| m.2).collect();
    c.execute(
        "INSERT INTO tidemark.watermarks (shard, phase, offset_ms, wm_ms)
         SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[])
         ON CONFLICT (shard, phase) DO UPDATE
             SET offset_ms = excluded.offset_ms,
                 wm_ms = greatest(watermarks.wm_ms, excluded.wm_ms), updated_at = now()",
        &[&shard, &phases, &offsets, &wms],
    )
    .await?;
    Ok(())
}

/// Adds to named counters.
pub async fn add_counters(
    c: &impl GenericClient,
    shard: &str,
    deltas: &[(String, i64)],
) -> Result<(), StoreError> {
    let deltas: Vec<&(String, i64)> = deltas.iter().filter(|d| d.1 != 0).collect();
    if deltas.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = deltas.iter().map(|d| d.0.as_str()).collect();
    let values: Vec<i64> = deltas.iter().map(|d| d.1).collect();
    c.execute(
        "INSERT INTO tidemark.shard_counters (shard, name, value)
         SELECT $1, * FROM unnest($2::text[], $3::bigint[])
         ON CONFLICT (shard, name) DO UPDATE
             SET value = shard_counters.value + excluded.value, updated_at = now()",
        &[&shard, &names, &values],
    )
    .await?;
    Ok(())
}

/// All counters of a shard, by name.
pub async fn counters(c: &Client, shard: &str) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(c.query(
        "SELECT name, value FROM tidemark.shard_counters WHERE shard = $1 ORDER BY name",
        &[&shard],
    )
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect())
}

/// Records a creation-time range whose buffered events were lost.
pub async fn record_gap(
    c: &impl GenericClient,
    shard: &str,
    from_ms: i64,
    to_ms: i64,
    reason: &str,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO tidemark.gaps (shard, from_ms, to_ms, reason) VALUES ($1, $2, $3, $4)",
        &[&shard, &from_ms, &to_ms, &reason],
    )
    .await?;
    Ok(())
}

/// The next observation number the server holds for a shard.
pub async fn next_seq(c: &impl GenericClient, shard: &str) -> Result<i64, StoreError> {
    let r = c
        .query_one(
            "SELECT next_seq FROM tidemark.shards WHERE name = $1",
            &[&shard],
        )
        .await?;
    Ok(r.get(0))
}

/// Sets the next observation number (a jump after a gap, SPEC 12).
pub async fn set_next_seq(
    c: &impl GenericClient,
    shard: &str,
    next: i64,
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE tidemark.shards SET next_seq = $2, updated_at = now() WHERE name = $1",
        &[&shard, &next],
    )
    .await?;
    Ok(())
}

/// Records the last database error a shard met (shown by `shard_status`).
pub async fn record_error(c: &Client, shard: &str, error: &str) -> Result<(), StoreError> {
    c.execute(
        "UPDATE tidemark.shards SET last_error = $2, last_error_at = now() WHERE name = $1",
        &[&shard, &error],
    )
    .await?;
    Ok(())
}

/// One event set aside because the database refused it on its own.
#[derive(Debug, Clone)]
pub struct Quarantined<'a> {
    /// The message's topic.
    pub topic: &'a str,
    /// The payload as received.
    pub payload: &'a [u8],
    /// The database's error.
    pub reason: &'a str,
    /// Its SQLSTATE, if the server gave one.
    pub sqlstate: Option<&'a str>,
}

/// Keeps a refused event in `tidemark.quarantine` unless the shard already
/// holds `max` rows there; returns whether it was kept.
pub async fn quarantine(
    c: &Client,
    shard: &str,
    q: &Quarantined<'_>,
    max: i64,
) -> Result<bool, StoreError> {
    let n = c
        .execute(
            "INSERT INTO tidemark.quarantine (shard, topic, payload, reason, sqlstate)
             SELECT $1, $2, $3, $4, $5
             WHERE (SELECT count(*) FROM tidemark.quarantine WHERE shard = $1) < $6",
            &[&shard, &q.topic, &q.payload, &q.reason, &q.sqlstate, &max],
        )
        .await?;
    Ok(n == 1)
}

/// Records an observation that could not be written (inside the sweep's transaction).
pub async fn record_emission_gap(
    c: &impl GenericClient,
    shard: &str,
    target: &str,
    txid: &str,
    created_ms: i64,
    reason: &str,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO tidemark.emission_gaps (shard, target, txid, created_at, reason)
         VALUES ($1, $2, $3, to_timestamp($4::float8 / 1000), $5) ON CONFLICT DO NOTHING",
        &[&shard, &target, &txid, &(created_ms as f64), &reason],
    )
    .await?;
    Ok(())
}

/// Names a shard's session (seen in `pg_stat_activity`) and lets its commits
/// return before their WAL flush: the buffer is unlogged anyway, and a sweep
/// asks for the flush itself (its observations are the durable product).
pub async fn configure_session(c: &Client, shard: &str) -> Result<(), StoreError> {
    c.batch_execute(&format!(
        "SET application_name = {}; SET synchronous_commit = off; {}",
        tidemark_store::quote_literal(&format!("tidemark shard {shard}")),
        tidemark_store::WRITER_SESSION
    ))
    .await?;
    Ok(())
}

/// A shard's registration, as `tidemark shard --status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardInfo {
    /// The applied clock; `None` before the first sweep.
    pub clock_ms: Option<i64>,
    /// The next observation number.
    pub next_seq: i64,
    /// The share of transactions its prefixes sample.
    pub rate: f64,
    /// Its txid prefixes.
    pub prefixes: Vec<String>,
    /// When the last run started.
    pub started_at: String,
    /// When its progress was last saved.
    pub updated_at: String,
}

/// A shard's registration, if it ever ran against this database.
pub async fn shard_info(c: &Client, shard: &str) -> Result<Option<ShardInfo>, StoreError> {
    let row = c
        .query_opt(
            "SELECT clock_ms, next_seq, rate, prefixes, started_at::text, updated_at::text
             FROM tidemark.shards WHERE name = $1",
            &[&shard],
        )
        .await?;
    Ok(row.map(|r| ShardInfo {
        clock_ms: r.get(0),
        next_seq: r.get(1),
        rate: r.get(2),
        prefixes: r.get(3),
        started_at: r.get(4),
        updated_at: r.get(5),
    }))
}
