//! The process's own rows: the run lock, its registration and status
//! (clock, reference, intake's counts), and the definitions of types and
//! counters.

use tokio_postgres::Client;

use tidemark_store::StoreError;

use super::add_counts;

/// Advisory-lock key of the profile database's owner ("tdmkprof").
const PROFILE_LOCK: i64 = 0x7464_6d6b_7072_6f66;

/// Takes the database's profile lock on this session; `false` if another
/// session holds it.
pub async fn try_lock(c: &Client) -> Result<bool, StoreError> {
    let r = c
        .query_one("SELECT pg_try_advisory_lock($1)", &[&PROFILE_LOCK])
        .await?;
    Ok(r.get(0))
}

/// The backend pid holding the profile lock, and the process name it
/// registered, if a process runs.
pub async fn lock_holder(c: &Client) -> Result<Option<(i32, Option<String>)>, StoreError> {
    let r = c
        .query_opt(
            "SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)
             WHERE l.locktype = 'advisory' AND l.classid = ($1::bigint >> 32)::int::oid
               AND l.objid = ($1::bigint & 4294967295)::oid AND l.objsubid = 1 AND l.granted
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&PROFILE_LOCK],
        )
        .await?;
    Ok(r.map(|r| (r.get(0), r.get(1))))
}

/// The clock a profile process named `name` saved last (`tidemark status`).
pub async fn clock_of(c: &Client, name: &str) -> Result<Option<i64>, StoreError> {
    Ok(c.query_opt(
        "SELECT clock_ms FROM tidemark.profile_process WHERE name = $1",
        &[&name],
    )
    .await?
    .and_then(|r| r.get(0)))
}

/// What the previous run saved: its clock and `max_future` reference.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Saved {
    /// The process clock (never moves back).
    pub clock_ms: Option<i64>,
    /// The newest tick heard.
    pub reference_ms: Option<i64>,
}

/// Registers the process under `name` and returns what the database holds
/// of the last run (whatever its name: one process owns the database).
pub async fn register(
    c: &Client,
    name: &str,
    config: &serde_json::Value,
) -> Result<Saved, StoreError> {
    let saved = c
        .query_opt(
            "SELECT max(clock_ms), max(reference_ms) FROM tidemark.profile_process",
            &[],
        )
        .await?
        .map(|r| Saved {
            clock_ms: r.get(0),
            reference_ms: r.get(1),
        })
        .unwrap_or_default();
    write_registration(c, name, config, saved, true).await?;
    Ok(saved)
}

/// Writes the registration again after a reconnect: the server may be a
/// promoted standby that never received it (`profile_status` reads it), and
/// the connection's backend is a new one. `started_at` is kept if present.
pub async fn rejoin(
    c: &Client,
    name: &str,
    config: &serde_json::Value,
    saved: Saved,
) -> Result<(), StoreError> {
    write_registration(c, name, config, saved, false).await
}

/// The registration's row, with this connection's backend; the clock and
/// reference never move back; `started_at` is now when `started`.
async fn write_registration(
    c: &Client,
    name: &str,
    config: &serde_json::Value,
    saved: Saved,
    started: bool,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO tidemark.profile_process (name, clock_ms, reference_ms, config, pid, host)
         VALUES ($1, $2, $3, $4, pg_backend_pid(), inet_client_addr()::text)
         ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config, pid = EXCLUDED.pid,
             host = EXCLUDED.host, updated_at = now(),
             started_at = CASE WHEN $5 THEN now() ELSE tidemark.profile_process.started_at END,
             clock_ms = greatest(tidemark.profile_process.clock_ms, EXCLUDED.clock_ms),
             reference_ms = greatest(tidemark.profile_process.reference_ms, EXCLUDED.reference_ms)",
        &[
            &name,
            &saved.clock_ms,
            &saved.reference_ms,
            config,
            &started,
        ],
    )
    .await?;
    Ok(())
}

/// Saves the clock and reference (never moving either back) and adds
/// `counts` to the process-wide rows (worker -1: intake's own reasons).
pub async fn save_status(
    c: &Client,
    name: &str,
    saved: Saved,
    counts: &[(String, i64)],
) -> Result<(), StoreError> {
    c.execute(
        "UPDATE tidemark.profile_process SET updated_at = now(),
             clock_ms = greatest(clock_ms, $2), reference_ms = greatest(reference_ms, $3)
         WHERE name = $1",
        &[&name, &saved.clock_ms, &saved.reference_ms],
    )
    .await?;
    add_counts(c, -1, counts.iter().map(|(r, n)| (r.as_str(), *n))).await
}

/// Appends a type at the next position; returns it.
pub async fn add_type(c: &Client, name: &str) -> Result<i16, StoreError> {
    let r = c
        .query_one(
            "INSERT INTO tidemark.profile_types (position, name)
             SELECT coalesce(max(position), 0) + 1, $1 FROM tidemark.profile_types RETURNING position",
            &[&name],
        )
        .await?;
    Ok(r.get(0))
}

/// Appends a counter at the next position; returns it.
pub async fn add_counter(
    c: &Client,
    name: &str,
    event: &str,
    half_life_ms: i64,
) -> Result<i16, StoreError> {
    let r = c
        .query_one(
            "INSERT INTO tidemark.profile_counters (position, name, event, half_life_ms)
             SELECT coalesce(max(position), 0) + 1, $1, $2, $3 FROM tidemark.profile_counters
             RETURNING position",
            &[&name, &event, &half_life_ms],
        )
        .await?;
    Ok(r.get(0))
}
