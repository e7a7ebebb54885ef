//! The profile tables (SPEC 11, `sql/V0007__profiles.sql`): the run lock,
//! definitions, partitions (marks by type and hour or day, trails by UTC
//! day), and the statements the link stage and a worker run inside each of
//! their transactions, writing the rows
//! `core`'s plans decide ([`IdRow`], [`StoredPerson`], [`Merge`],
//! [`TrailRow`], re-exported here).
//!
//! Logged tables and synchronous commits: what a commit returned for is on
//! disk. Partitions are created and dropped only between batches, by the one
//! connection that holds the lock, since DDL on a partitioned table waits for
//! every writer.

use tidemark_reader::store::{is_wide, PROFILE_COLUMNS};
use tokio_postgres::{Client, GenericClient, Transaction};

use tidemark_store::{PgUuid, StoreError};

pub use crate::core::{IdRow, Merge, StoredId, StoredPerson, TrailRow};

/// Advisory-lock key of the profile database's owner ("tdmkprof").
const PROFILE_LOCK: i64 = 0x7464_6d6b_7072_6f66;

/// Taken by [`quarantine`] for its transaction ("tdmkqrnt").
const QUARANTINE_LOCK: i64 = 0x7464_6d6b_7172_6e74;

pub use crate::core::days::DAY_MS;
use crate::core::days::{day_of, Part};

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

/// Adds to a worker's counts by reason.
pub async fn add_counts<'a>(
    c: &impl GenericClient,
    worker: i16,
    counts: impl IntoIterator<Item = (&'a str, i64)>,
) -> Result<(), StoreError> {
    let (reasons, ns): (Vec<&str>, Vec<i64>) = counts.into_iter().filter(|(_, n)| *n != 0).unzip();
    if reasons.is_empty() {
        return Ok(());
    }
    c.execute(
        "INSERT INTO tidemark.profile_counts (worker, reason, n)
         SELECT $1, r, n FROM unnest($2::text[], $3::bigint[]) AS u(r, n)
         ON CONFLICT (worker, reason) DO UPDATE SET n = tidemark.profile_counts.n + EXCLUDED.n",
        &[&worker, &reasons, &ns],
    )
    .await?;
    Ok(())
}

/// Keeps an event the database refused on its own in
/// `tidemark.profile_quarantine` unless it already holds `max` rows;
/// returns whether it was kept. Concurrent callers (link groups run on
/// several connections) are serialised by an advisory lock held to `tx`'s
/// end, so the count they see is the count they add to. Not a table lock:
/// an operator's open transaction that deleted rows would hold ingest
/// behind it.
pub async fn quarantine(
    tx: &Transaction<'_>,
    topic: &str,
    payload: &str,
    reason: &str,
    sqlstate: Option<&str>,
    max: i64,
) -> Result<bool, StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&QUARANTINE_LOCK])
        .await?;
    let n = tx
        .execute(
            "INSERT INTO tidemark.profile_quarantine (topic, payload, reason, sqlstate)
             SELECT $1, $2, $3, $4
             WHERE (SELECT count(*) FROM tidemark.profile_quarantine) < $5",
            &[&topic, &payload.as_bytes(), &reason, &sqlstate, &max],
        )
        .await?;
    Ok(n == 1)
}

/// Counts by reason over all workers.
pub async fn counts(c: &impl GenericClient) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT reason, sum(n)::bigint FROM tidemark.profile_counts GROUP BY reason ORDER BY reason",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Every identifier with its person, `(id, person)` in identifier order: how
/// the database bridged them, for scoring against a market's true persons.
pub async fn identifiers(c: &impl GenericClient) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT id, person FROM tidemark.profile_ids ORDER BY id COLLATE \"C\"",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
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

/// A partitioned table, or one type's part of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Daily {
    /// `profile_seen`'s partitions of one type (its position), by the
    /// txid's creation time.
    Seen(i16),
    /// `profile_trail`, by the event's UTC day.
    Trail,
}

impl Daily {
    fn table(self) -> &'static str {
        match self {
            Daily::Seen(_) => "profile_seen",
            Daily::Trail => "profile_trail",
        }
    }

    /// The partition bound at `ms`, as the table's partition key.
    fn bound(self, ms: i64) -> String {
        match self {
            Daily::Seen(t) => format!("{t}, '{}'", seen_key_prefix(ms)),
            Daily::Trail => ms.to_string(),
        }
    }

    /// The partition bound below everything.
    fn lowest(self) -> String {
        match self {
            Daily::Seen(t) => format!("{t}, MINVALUE"),
            Daily::Trail => "MINVALUE".into(),
        }
    }

    /// A partition's table name, unqualified: `profile_seen_<type>_<from>_<to>`
    /// and `profile_seen_<type>_before_<to>` in ms; `profile_trail_<day>` and
    /// `profile_trail_before_<day>` in days since the epoch.
    fn name(self, p: Part) -> String {
        let t = self.table();
        match (self, p) {
            (Daily::Seen(ty), Part::Span(from, to)) => format!("{t}_{ty}_{from}_{to}"),
            (Daily::Seen(ty), Part::Before(to)) => format!("{t}_{ty}_before_{to}"),
            (Daily::Trail, Part::Span(from, to)) if from % DAY_MS == 0 && to == from + DAY_MS => {
                format!("{t}_{}", from / DAY_MS)
            }
            (Daily::Trail, Part::Span(from, to)) => format!("{t}_{from}_{to}"),
            (Daily::Trail, Part::Before(to)) => format!("{t}_before_{}", to / DAY_MS),
        }
    }

    /// The table and partition a name is, if it is one of `table`'s.
    fn parse(table: &str, name: &str) -> Option<(Daily, Part)> {
        let rest = name.strip_prefix(table)?.strip_prefix('_')?;
        let n = |s: &str| s.parse::<i64>().ok();
        let words: Vec<&str> = rest.split('_').collect();
        if table == "profile_seen" {
            let part = match words[1..] {
                ["before", to] => Part::Before(n(to)?),
                [from, to] => Part::Span(n(from)?, n(to)?),
                _ => return None,
            };
            return Some((Daily::Seen(words[0].parse().ok()?), part));
        }
        let part = match words[..] {
            ["before", day] => Part::Before(n(day)? * DAY_MS),
            [day] => Part::Span(n(day)? * DAY_MS, (n(day)? + 1) * DAY_MS),
            [from, to] => Part::Span(n(from)?, n(to)?),
            _ => return None,
        };
        Some((Daily::Trail, part))
    }
}

/// The smallest seen key at `ms`: the creation time as the first 12 hex digits.
fn seen_key_prefix(ms: i64) -> String {
    hyphenate(&format!("{ms:012x}"), &"0".repeat(20))
}

/// `8-4-4-4-12`: how PostgreSQL prints a uuid, of 32 hex digits given in
/// two parts. One allocation: a key is made for every event.
fn hyphenate(a: &str, b: &str) -> String {
    let mut out = String::with_capacity(36);
    for (i, c) in a.chars().chain(b.chars()).enumerate() {
        if matches!(i, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(c);
    }
    out
}

/// The `profile_seen` key of a txid (32 lowercase hex digits): its creation
/// time first, as PostgreSQL prints the uuid.
pub fn seen_key(txid: &str) -> String {
    let (random, created) = txid.split_at(20);
    hyphenate(created, random)
}

/// The partitions of `profile_seen` (every type's) and `profile_trail`
/// (a day of `profile_trail_chunks` counts as its day's, so a day whose
/// trail partition went without its chunks' is still seen and retired).
pub async fn partitions(c: &Client) -> Result<Vec<(Daily, Part)>, StoreError> {
    let rows = c
        .query(
            "SELECT p.relname, c.relname FROM pg_inherits i
             JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
             WHERE i.inhparent IN ('tidemark.profile_seen'::regclass,
                                   'tidemark.profile_trail'::regclass,
                                   'tidemark.profile_trail_chunks'::regclass)",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| Daily::parse(r.get(0), r.get(1)))
        .collect())
}

/// Every profile partition's storage options. Marks and trails are only
/// inserted, and their keys are alike from day to day, so their statistics
/// keep their shape as a partition grows: analyzed when it grew by a fifth
/// (a handful of times over its life) rather than after every 2% (the
/// embedded cluster's default for the churning shard buffers), which under
/// ingest is every autovacuum round. V0016 says the same of the tables.
const PARTITION_OPTIONS: &str = "WITH (autovacuum_analyze_scale_factor = 0.2)";

/// Creates a partition (idempotent).
pub async fn create_partition(c: &Client, which: Daily, p: Part) -> Result<(), StoreError> {
    let t = which.table();
    let range = match p {
        Part::Span(from, to) => format!(
            "FOR VALUES FROM ({}) TO ({})",
            which.bound(from),
            which.bound(to)
        ),
        Part::Before(to) => format!(
            "FOR VALUES FROM ({}) TO ({})",
            which.lowest(),
            which.bound(to)
        ),
    };
    if which == Daily::Trail {
        // First: a trail partition found on a restart promises its chunks'.
        let bases = match p {
            Part::Span(from, _) => format!("FOR VALUES FROM ({from}) TO ({})", from + 1),
            Part::Before(to) => format!("FOR VALUES FROM (MINVALUE) TO ({to})"),
        };
        tidemark_store::create_partition(
            c,
            "CREATE TABLE",
            "tidemark.profile_trail_chunks",
            &format!("tidemark.{}", chunks_name(p)),
            &bases,
            PARTITION_OPTIONS,
            "SELECT 1",
        )
        .await?;
    }
    tidemark_store::create_partition(
        c,
        "CREATE TABLE",
        &format!("tidemark.{t}"),
        &format!("tidemark.{}", which.name(p)),
        &range,
        PARTITION_OPTIONS,
        "SELECT 1",
    )
    .await
}

/// Drops a partition (idempotent), and for trails its chunks, its packed
/// rows and those days' wide identifier lists.
pub async fn drop_partition(c: &Client, which: Daily, p: Part) -> Result<(), StoreError> {
    let mut sql = format!("DROP TABLE IF EXISTS tidemark.{}", which.name(p));
    if which == Daily::Trail {
        sql += &format!(
            "; DROP TABLE IF EXISTS tidemark.{}; DROP TABLE IF EXISTS tidemark.{}",
            packed_name(p),
            chunks_name(p)
        );
    }
    tidemark_store::ddl(c, &sql).await?;
    if which == Daily::Trail {
        let (from, to) = match p {
            Part::Span(from, to) => (from, to),
            Part::Before(to) => (i64::MIN, to),
        };
        c.execute(
            "DELETE FROM tidemark.profile_trail_wide WHERE ts >= $1 AND ts < $2",
            &[&from, &to],
        )
        .await?;
        c.execute(
            "DELETE FROM tidemark.profile_trail_packed_parts WHERE base >= $1 AND base < $2",
            &[&from, &to],
        )
        .await?;
    }
    Ok(())
}

/// The `profile_trail_packed` partition holding a trail partition's packed
/// rows: `profile_trail_packed_<day>`, or by its bounds in ms.
fn packed_name(p: Part) -> String {
    Daily::Trail
        .name(p)
        .replacen("profile_trail", "profile_trail_packed", 1)
}

/// The `profile_trail_chunks` partition (sql/V0015) of a trail partition's
/// days: `profile_trail_chunks_<day>`, or by its bounds in ms.
fn chunks_name(p: Part) -> String {
    Daily::Trail
        .name(p)
        .replacen("profile_trail", "profile_trail_chunks", 1)
}

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

/// Opens one of the process's connections, named for `pg_stat_activity`.
/// Parallel query is off in it: ingest is parallel across connections
/// already, and a lookup's parallel workers took the CPU of transactions
/// holding row locks (worker transactions p99 71-87 ms with, 48-50 ms
/// without; docs/benchmarks/profiles.md, part eight). Random reads are priced as
/// the cached, SSD-backed reads they are (`random_page_cost` 1.1, not the
/// spinning disks' 4): at the default the planner answered a batch's
/// lookup of 15,000 identifiers with a scan of the whole identifier table,
/// which grows with it (141 ms at 1.36M identifiers, against 49 ms through
/// the index; part ten).
pub async fn connect(url: &str, name: &str) -> Result<Client, StoreError> {
    let c = tidemark_store::connect_as(url, name).await?;
    c.batch_execute(&format!(
        "SET max_parallel_workers_per_gather = 0; SET random_page_cost = 1.1; {}",
        tidemark_store::WRITER_SESSION
    ))
    .await?;
    Ok(c)
}

/// A connection for packing: its waits for locks (and for older snapshots,
/// `REINDEX CONCURRENTLY`'s) end after [`tidemark_store::DDL_LOCK_TIMEOUT`],
/// to be tried again later, and its server session ends within a second of
/// the connection closing (a process stopped or killed mid-statement).
pub async fn packer(url: &str, name: &str) -> Result<Client, StoreError> {
    let c = connect(url, name).await?;
    c.batch_execute(&format!(
        "SET lock_timeout = '{}'; SET client_connection_check_interval = '1s'",
        tidemark_store::DDL_LOCK_TIMEOUT
    ))
    .await?;
    Ok(c)
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

/// Records `(key, type position)` pairs, each once; returns, per pair, whether
/// this call recorded it (the first copy). Keys are [`seen_key`]s. Sorted
/// before insertion, so concurrent workers lock keys in one order and cannot
/// deadlock.
pub async fn record_seen(
    tx: &Transaction<'_>,
    pairs: &[(String, i16)],
) -> Result<Vec<bool>, StoreError> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let (keys, types): (Vec<&str>, Vec<i16>) = pairs.iter().map(|(k, t)| (k.as_str(), *t)).unzip();
    let rows = tx
        .query(
            "INSERT INTO tidemark.profile_seen (key, type)
             SELECT k::uuid, t FROM unnest($1::text[], $2::smallint[]) AS u(k, t) ORDER BY 1, 2
             ON CONFLICT DO NOTHING RETURNING key::text, type",
            &[&keys, &types],
        )
        .await?;
    let new: std::collections::HashSet<(String, i16)> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(pairs.iter().map(|p| new.contains(p)).collect())
}

/// Batches whose marks go straight to `ON CONFLICT` after the last copy
/// met: copies come in runs (a replay, a publisher's retries), and each
/// plain insert that meets one is work thrown away.
pub const CAREFUL_BATCHES: u32 = 16;

/// How the next batch's marks are taken ([`take_marks`]): one per
/// connection (a worker's link group shares its worker's).
#[derive(Debug, Default)]
pub struct Marking {
    careful: u32,
}

/// Takes the first-copy marks of `pairs`, as [`record_seen`] does, as the
/// first statement of `tx`. Most events are first copies, and a plain
/// `INSERT` costs about half of `INSERT … ON CONFLICT DO NOTHING` (which
/// probes the index before each speculative insertion and logs its
/// confirmation; docs/benchmarks/profiles.md, "Plain marks"). So the marks are
/// inserted plainly unless one of the last [`CAREFUL_BATCHES`] batches met
/// a copy; the unique index still decides, and waits for a concurrent writer of the
/// same mark as `ON CONFLICT` would. Returns `None` when a mark was already
/// taken: `tx` is then aborted, having done nothing else, and the caller
/// rolls it back and begins again. Copies within `pairs` are all first
/// copies when the mark is new, as with [`record_seen`].
pub async fn take_marks(
    tx: &Transaction<'_>,
    pairs: &[(String, i16)],
    how: &mut Marking,
) -> Result<Option<Vec<bool>>, StoreError> {
    if pairs.is_empty() {
        return Ok(Some(Vec::new()));
    }
    if how.careful > 0 {
        let first = record_seen(tx, pairs).await?;
        how.careful = if first.contains(&false) {
            CAREFUL_BATCHES
        } else {
            how.careful - 1
        };
        return Ok(Some(first));
    }
    let distinct: std::collections::BTreeSet<(&str, i16)> =
        pairs.iter().map(|(k, t)| (k.as_str(), *t)).collect();
    let (keys, types): (Vec<&str>, Vec<i16>) = distinct.into_iter().unzip();
    let inserted = tx
        .execute(
            "INSERT INTO tidemark.profile_seen (key, type)
             SELECT k::uuid, t FROM unnest($1::text[], $2::smallint[]) AS u(k, t) ORDER BY 1, 2",
            &[&keys, &types],
        )
        .await;
    match inserted {
        Ok(_) => Ok(Some(vec![true; pairs.len()])),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            how.careful = CAREFUL_BATCHES;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Which `(key, type)` pairs a first copy already took, without taking any.
pub async fn already_seen(
    c: &impl GenericClient,
    pairs: &[(String, i16)],
) -> Result<Vec<bool>, StoreError> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let (keys, types): (Vec<&str>, Vec<i16>) = pairs.iter().map(|(k, t)| (k.as_str(), *t)).unzip();
    let rows = c
        .query(
            "SELECT s.key::text, s.type FROM tidemark.profile_seen s
             JOIN unnest($1::text[], $2::smallint[]) AS u(k, t) ON s.key = u.k::uuid AND s.type = u.t",
            &[&keys, &types],
        )
        .await?;
    let old: std::collections::HashSet<(String, i16)> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(pairs.iter().map(|p| old.contains(p)).collect())
}

fn person_from(r: &tokio_postgres::Row, at: usize) -> StoredPerson {
    StoredPerson {
        person: r.get(at),
        profile: tidemark_reader::store::person_at(r, at + 1, r.get(at + 8))
            .expect("an inner join has a profile"),
    }
}

/// The stored identifiers among `ids`, with their persons, in one round trip.
/// The master's first `ts` is looked up only when the identifier is not the
/// master itself (most persons have one identifier): a quarter of the
/// statement's time (docs/benchmarks.md). Identifier rows are never deleted,
/// so a master always has one.
pub async fn load(c: &impl GenericClient, ids: &[&str]) -> Result<Vec<StoredId>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            &format!(
                "SELECT i.id, i.first_ts, i.refusals, i.blocklisted_at IS NOT NULL,
                        p.person, {PROFILE_COLUMNS},
                        CASE WHEN p.master = i.id THEN i.first_ts
                             ELSE (SELECT m.first_ts FROM tidemark.profile_ids m
                                   WHERE m.id = p.master) END
                 FROM tidemark.profile_ids i JOIN tidemark.profiles p USING (person)
                 WHERE i.id = ANY($1)"
            ),
            &[&ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StoredId {
            id: r.get(0),
            first_ts: r.get(1),
            refusals: r.get(2),
            blocklisted: r.get(3),
            person: person_from(r, 4),
        })
        .collect())
}

/// The persons of the stored identifiers among `ids`: `(id, person)`.
pub async fn persons_of(
    c: &impl GenericClient,
    ids: &[&str],
) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT id, person FROM tidemark.profile_ids WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Stored identifiers among `ids`, with their person, first ts and
/// whether they are blocklisted.
pub async fn placed(
    c: &impl GenericClient,
    ids: &[&str],
) -> Result<Vec<(String, i64, i64, bool)>, StoreError> {
    let rows = c
        .query(
            "SELECT id, person, first_ts, blocklisted_at IS NOT NULL
             FROM tidemark.profile_ids WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect())
}

/// `n` fresh person numbers (a sequence: numbers of a rolled-back batch are
/// skipped, never reused).
pub async fn new_persons(tx: &Transaction<'_>, n: usize) -> Result<Vec<i64>, StoreError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(
            "SELECT nextval('tidemark.profile_person_seq') FROM generate_series(1, $1)",
            &[&(n as i32)],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Inserts or updates identifier rows.
pub async fn upsert_ids(tx: &Transaction<'_>, rows: &[IdRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let id: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let person: Vec<i64> = rows.iter().map(|r| r.person).collect();
    let first: Vec<i64> = rows.iter().map(|r| r.first_ts).collect();
    let refusals: Vec<i64> = rows.iter().map(|r| r.refusals).collect();
    let blocklisted: Vec<bool> = rows.iter().map(|r| r.blocklisted).collect();
    tx.execute(
        "INSERT INTO tidemark.profile_ids AS i (id, person, first_ts, refusals, blocklisted_at)
         SELECT id, person, first_ts, refusals, CASE WHEN b THEN now() END
         FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bool[])
              AS u(id, person, first_ts, refusals, b)
         ON CONFLICT (id) DO UPDATE SET person = EXCLUDED.person, first_ts = EXCLUDED.first_ts,
             refusals = EXCLUDED.refusals,
             blocklisted_at = coalesce(i.blocklisted_at, EXCLUDED.blocklisted_at)",
        &[&id, &person, &first, &refusals, &blocklisted],
    )
    .await?;
    Ok(())
}

/// Moves every identifier of each absorbed person to its survivor, and
/// deletes the absorbed persons' rows: at most `max_ids` rows per merge.
pub async fn absorb(
    tx: &Transaction<'_>,
    absorbed: &[i64],
    into: &[i64],
) -> Result<(), StoreError> {
    if absorbed.is_empty() {
        return Ok(());
    }
    tx.execute(
        "UPDATE tidemark.profile_ids i SET person = m.w
         FROM unnest($1::bigint[], $2::bigint[]) AS m(l, w) WHERE i.person = m.l",
        &[&absorbed, &into],
    )
    .await?;
    tx.execute(
        "DELETE FROM tidemark.profiles WHERE person = ANY($1)",
        &[&absorbed],
    )
    .await?;
    Ok(())
}

/// Appends merges to the log.
pub async fn log_merges(tx: &Transaction<'_>, merges: &[Merge]) -> Result<(), StoreError> {
    if merges.is_empty() {
        return Ok(());
    }
    let ts: Vec<i64> = merges.iter().map(|m| m.ts).collect();
    let txid: Vec<&str> = merges.iter().map(|m| m.txid.as_str()).collect();
    let master: Vec<&str> = merges.iter().map(|m| m.master.as_str()).collect();
    let absorbed: Vec<&str> = merges.iter().map(|m| m.absorbed.as_str()).collect();
    tx.execute(
        "INSERT INTO tidemark.profile_merges (ts, txid, master, absorbed)
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])",
        &[&ts, &txid, &master, &absorbed],
    )
    .await?;
    Ok(())
}

/// New identifiers, each a new person; returns each one's person number, in order.
pub async fn insert_ids(
    tx: &Transaction<'_>,
    ids: &[&str],
    first_ts: &[i64],
) -> Result<Vec<i64>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(
            "INSERT INTO tidemark.profile_ids (id, person, first_ts)
             SELECT id, nextval('tidemark.profile_person_seq'), ts
             FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(id, ts, n) ORDER BY n
             RETURNING id, person",
            &[&ids, &first_ts],
        )
        .await?;
    let by_id: std::collections::HashMap<String, i64> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(ids.iter().map(|id| by_id[*id]).collect())
}

/// Lowers identifiers' first `ts` where an earlier event carried them.
pub async fn lower_first_ts(
    tx: &Transaction<'_>,
    ids: &[&str],
    first_ts: &[i64],
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "UPDATE tidemark.profile_ids i SET first_ts = u.ts
         FROM unnest($1::text[], $2::bigint[]) AS u(id, ts)
         WHERE i.id = u.id AND u.ts < i.first_ts",
        &[&ids, &first_ts],
    )
    .await?;
    Ok(())
}

/// Writes persons whole (insert or replace), in one statement. Every
/// person's arrays have the same lengths (`counters`, `types`): they travel
/// flattened and are sliced back per row.
pub async fn upsert_persons(
    tx: &Transaction<'_>,
    persons: &[StoredPerson],
    counters: usize,
    types: usize,
) -> Result<(), StoreError> {
    if persons.is_empty() {
        return Ok(());
    }
    let mut person = Vec::with_capacity(persons.len());
    let mut master = Vec::with_capacity(persons.len());
    let mut size = Vec::with_capacity(persons.len());
    let (mut values, mut refs) = (Vec::new(), Vec::new());
    let (mut counts, mut firsts, mut lasts) = (Vec::new(), Vec::new(), Vec::new());
    for sp in persons {
        let p = &sp.profile;
        assert!(p.counters.len() == counters && p.types.len() == types);
        person.push(sp.person);
        master.push(p.master.as_str());
        size.push(p.size as i32);
        values.extend(p.counters.iter().map(|c| c.value));
        refs.extend(p.counters.iter().map(|c| c.reference));
        counts.extend(p.types.iter().map(|t| t.count));
        firsts.extend(p.types.iter().map(|t| t.first));
        lasts.extend(p.types.iter().map(|t| t.last));
    }
    let (k, t) = (counters as i64, types as i64);
    tx.execute(
        "INSERT INTO tidemark.profiles AS p
             (person, master, size, counter_values, counter_refs, counts, firsts, lasts)
         SELECT u.person, u.master, u.size,
                ($4::float8[])[(u.n - 1) * $9 + 1 : u.n * $9],
                ($5::bigint[])[(u.n - 1) * $9 + 1 : u.n * $9],
                ($6::bigint[])[(u.n - 1) * $10 + 1 : u.n * $10],
                ($7::bigint[])[(u.n - 1) * $10 + 1 : u.n * $10],
                ($8::bigint[])[(u.n - 1) * $10 + 1 : u.n * $10]
         FROM unnest($1::bigint[], $2::text[], $3::int[]) WITH ORDINALITY AS u(person, master, size, n)
         ON CONFLICT (person) DO UPDATE SET master = EXCLUDED.master, size = EXCLUDED.size,
             counter_values = EXCLUDED.counter_values, counter_refs = EXCLUDED.counter_refs,
             counts = EXCLUDED.counts, firsts = EXCLUDED.firsts, lasts = EXCLUDED.lasts",
        &[
            &person, &master, &size, &values, &refs, &counts, &firsts, &lasts, &k, &t,
        ],
    )
    .await?;
    Ok(())
}

/// Appends trail entries (their days' partitions exist) as chunks
/// (sql/V0015): one row per identifier, day and identifier list for the
/// whole call. An event whose list is too long for an index entry (or whose
/// txid is not 32 hex digits, which intake never lets through) is a row,
/// compact as migration 13 says: the type's position, the txid as a uuid,
/// `ids` empty when the list is written to `profile_trail_wide`.
pub async fn insert_trail(tx: &Transaction<'_>, rows: &[TrailRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut chunked: Vec<Chunked> = Vec::with_capacity(rows.len());
    let mut other = Vec::new();
    for r in rows {
        match PgUuid::from_hex(&r.txid) {
            Some(txid) if !is_wide(&r.ids) => {
                let alone = r.ids.len() == 1 && r.ids[0] == r.id;
                let ids = (!alone).then_some(r.ids.as_slice());
                chunked.push(Chunked {
                    r,
                    day: day_of(r.ts),
                    ids,
                    txid,
                });
            }
            _ => other.push(r),
        }
    }
    insert_chunks(tx, &mut chunked).await?;
    insert_rows(tx, &other).await
}

/// An event on its way into a chunk.
struct Chunked<'a> {
    r: &'a TrailRow,
    day: i64,
    /// `None`: the row's identifier alone.
    ids: Option<&'a [String]>,
    txid: PgUuid,
}

impl Chunked<'_> {
    /// Chunk first (identifier, day, list), then order within it.
    fn key(&self) -> (&str, i64, Option<&[String]>, i64, i16, [u8; 16]) {
        (
            &self.r.id,
            self.day,
            self.ids,
            self.r.ts,
            self.r.type_pos,
            self.txid.0,
        )
    }
}

/// Writes chunks: events sorted by [`Chunked::key`], one row per run of
/// equal (identifier, day, list), its arrays sliced server-side from flat
/// ones (elements of fixed width, so a slice costs what it holds).
async fn insert_chunks(tx: &Transaction<'_>, events: &mut [Chunked<'_>]) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    events.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
    let (mut id, mut base, mut lists) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    let mut off = Vec::with_capacity(events.len());
    let mut ty = Vec::with_capacity(events.len());
    let mut txid = Vec::with_capacity(events.len());
    let mut last: Option<(&str, i64, Option<&[String]>)> = None;
    for (i, e) in events.iter().enumerate() {
        let chunk = (e.r.id.as_str(), e.day, e.ids);
        if last != Some(chunk) {
            last = Some(chunk);
            id.push(chunk.0);
            base.push(chunk.1);
            lists.push(chunk.2.map(array_literal));
            // 1-based, inclusive: PostgreSQL's array slices.
            lo.push(i as i32 + 1);
            hi.push(i as i32);
        }
        *hi.last_mut().expect("pushed above") += 1;
        // Within a day: fits an integer.
        off.push((e.r.ts - e.day) as i32);
        ty.push(e.r.type_pos);
        txid.push(e.txid);
    }
    tx.execute(
        "INSERT INTO tidemark.profile_trail_chunks (id, base, ids, off, type, txid)
         SELECT g.id, g.base, g.ids::text[], ($6::integer[])[g.lo:g.hi],
                ($7::smallint[])[g.lo:g.hi], ($8::uuid[])[g.lo:g.hi]
         FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[], $5::integer[])
              AS g(id, base, ids, lo, hi)",
        &[&id, &base, &lists, &lo, &hi, &off, &ty, &txid],
    )
    .await?;
    Ok(())
}

/// Writes trail rows (events that carried other identifiers).
async fn insert_rows(tx: &Transaction<'_>, rows: &[&TrailRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    // Each row's identifiers as one array literal, cast per row: slicing one
    // flattened text[] instead costs a scan from its start per row (text
    // elements have no fixed width), seconds for a 25,000-row statement.
    let mut id = Vec::with_capacity(rows.len());
    let mut ts = Vec::with_capacity(rows.len());
    let mut ty = Vec::with_capacity(rows.len());
    let mut txid = Vec::with_capacity(rows.len());
    let mut ids: Vec<Option<String>> = Vec::with_capacity(rows.len());
    let mut wide = Vec::new();
    for &r in rows {
        id.push(r.id.as_str());
        ts.push(r.ts);
        ty.push(r.type_pos);
        txid.push(r.txid.as_str());
        ids.push(if r.ids.len() == 1 && r.ids[0] == r.id {
            None
        } else if is_wide(&r.ids) {
            wide.push(r);
            Some("{}".to_string())
        } else {
            Some(array_literal(&r.ids))
        });
    }
    tx.execute(
        "INSERT INTO tidemark.profile_trail (id, ts, type, txid, ids)
         SELECT u.id, u.ts, u.ty, u.txid::uuid, u.ids::text[]
         FROM unnest($1::text[], $2::bigint[], $3::smallint[], $4::text[], $5::text[])
              AS u(id, ts, ty, txid, ids)",
        &[&id, &ts, &ty, &txid, &ids],
    )
    .await?;
    for r in wide {
        tx.execute(
            "INSERT INTO tidemark.profile_trail_wide (id, ts, type, txid, ids)
             VALUES ($1, $2, $3, $4::text::uuid, $5) ON CONFLICT DO NOTHING",
            &[&r.id, &r.ts, &r.type_pos, &r.txid, &r.ids],
        )
        .await?;
    }
    Ok(())
}

/// A PostgreSQL array literal of `items`, each quoted (`{"a","b"}`), with
/// `"` and `\` escaped as the array input syntax wants.
fn array_literal(items: &[String]) -> String {
    let mut out = String::with_capacity(2 + items.iter().map(|i| i.len() + 3).sum::<usize>());
    out.push('{');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_read_back_as_the_partitions_they_name() {
        let cases = [
            (Daily::Seen(3), Part::Span(7_200_000, 10_800_000)),
            (Daily::Seen(12), Part::Before(DAY_MS)),
            (Daily::Trail, Part::Span(20_000 * DAY_MS, 20_001 * DAY_MS)),
            (Daily::Trail, Part::Span(DAY_MS + 5, 2 * DAY_MS)),
            (Daily::Trail, Part::Before(3 * DAY_MS)),
        ];
        for (which, p) in cases {
            let name = which.name(p);
            assert_eq!(
                Daily::parse(which.table(), &name),
                Some((which, p)),
                "{name}"
            );
        }
        assert_eq!(
            Daily::Trail.name(Part::Before(3 * DAY_MS)),
            "profile_trail_before_3"
        );
        assert_eq!(Daily::parse("profile_seen", "profile_seen_wide_1_2"), None);
    }

    #[test]
    fn array_literals_quote_and_escape_every_item() {
        let items = ["user:a".to_string(), r#"k:{x, "y"} \ z"#.to_string()];
        assert_eq!(array_literal(&items), r#"{"user:a","k:{x, \"y\"} \\ z"}"#);
        assert_eq!(array_literal(&[]), "{}");
    }

    #[test]
    fn seen_keys_put_creation_time_first_as_postgresql_prints_a_uuid() {
        let txid = "0123456789abcdef0123456789abcdef";
        assert_eq!(seen_key(txid), "456789ab-cdef-0123-4567-89abcdef0123");
        assert_eq!(
            seen_key_prefix(0x18b_cafe_0000),
            "018bcafe-0000-0000-0000-000000000000"
        );
    }
}
