//! One shard (SPEC 4-7): subscribes to a set of txid prefixes over ZeroMQ,
//! keeps each transaction's events in its PostgreSQL buffer, advances the
//! phase watermarks and emits observations.
//!
//! Owns: the shard configuration, the intake thread (the only ZeroMQ code on
//! the consuming side), clocks, phase arithmetic and the writer loop. All SQL
//! it runs lives in `tidemark-store`; it knows nothing of the learner.

pub mod clock;
pub mod config;
pub mod counters;
pub mod intake;
pub mod loss;
pub mod phases;
mod writer;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_store::buffer::Layout;
use tidemark_store::{state, StoreError};
use tidemark_wire::EventType;
use tokio::sync::mpsc;

pub use config::{ClockKind, Config, ConfigError};
use counters::Counters;
use phases::{Phases, Watermarks};
use writer::{Backoff, Writer};

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("shard {name:?} is already running (PostgreSQL backend pid {pid} holds its lock); stop it first")]
    AlreadyRunning { name: String, pid: i32 },
    #[error("another process took shard {0:?} while this one was reconnecting; stopping")]
    LockLost(String),
    #[error("{0}")]
    Intake(String),
    #[error("stopped without writing {unwritten} accepted events: the database stayed away for the whole shutdown_timeout ({waited:?}); last error: {error}")]
    ShutdownTimeout {
        unwritten: usize,
        waited: Duration,
        error: String,
    },
}

/// What a shard did in this run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub counters: Vec<(String, u64)>,
}

/// How long a starting shard waits for its name's lock before refusing.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How often the shard logs its counters.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Runs a shard until `shutdown` completes, then stops reading, writes what it
/// holds, commits and returns. Transient database errors are retried forever.
pub async fn run(
    config: Config,
    database_url: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, ShardError> {
    let phases = Phases::new(&config);
    let custom: Vec<&str> = config.types.custom().map(|(_, n)| n).collect();
    let layout = Layout::new(&config.name, &custom, phases.click_window, config.rate());
    let client = open(&config, &layout, database_url).await?;
    // In the order of `Layout::event_columns`: click, install, then custom types.
    let columns: Vec<EventType> = [EventType::Click, EventType::Install]
        .into_iter()
        .chain(config.types.custom().map(|(t, _)| t))
        .collect();
    let counters = Arc::new(Counters::new(&config.types));
    let mut writer = Writer {
        layout,
        phases,
        client,
        counters: counters.clone(),
        wm: None,
        applied: None,
        event_clock: None,
        next_seq: 1,
        events_parts: BTreeMap::new(),
        txns_parts: BTreeMap::new(),
        pending: Vec::new(),
        pending_events: 0,
        columns,
        last_prune: None,
        reference: None,
        rows_by_bucket: BTreeMap::new(),
        unknown_failures: 0,
        subsetting: [0; 3],
        unrecorded_error: None,
        config,
    };
    restore(&mut writer).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let capacity = (writer.config.max_pending / 2048).max(4);
    let (tx, mut rx) = mpsc::channel(capacity);
    let intake = intake::spawn(
        &writer.config,
        counters.clone(),
        writer.applied,
        writer.reference,
        tx,
        stop.clone(),
    )
    .map_err(ShardError::Intake)?;
    tracing::info!(
        shard = writer.config.name,
        prefixes = ?writer.config.prefixes,
        rate = writer.config.rate(),
        endpoints = ?writer.config.endpoints,
        clock = ?writer.config.clock,
        "shard started"
    );

    tokio::pin!(shutdown);
    let period = writer.config.period;
    let batch_delay = writer.config.batch_delay;
    let mut next_sweep = Instant::now() + period;
    let mut next_report = Instant::now() + REPORT_EVERY;
    let mut oldest_pending: Option<Instant> = None;
    let mut backoff = Backoff::new();
    let mut retry_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let flush_due = oldest_pending.map(|t| t + batch_delay);
        let wake = [Some(next_sweep), flush_due, retry_at, Some(next_report)]
            .into_iter()
            .flatten()
            .min()
            .expect("sweep is always scheduled");
        // Hold at most `max_pending` events; beyond it intake drops (counted).
        let room = writer.pending_events < writer.config.max_pending;
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            chunk = rx.recv(), if room => match chunk {
                Some(c) => {
                    oldest_pending.get_or_insert(now);
                    writer.push(c);
                }
                None => break,
            },
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        let now = Instant::now();
        if retry_at.is_some_and(|t| now < t) {
            continue;
        }
        // Reconnect one attempt at a time, so a stop request is heard while
        // the database is away.
        if writer.client.is_closed() {
            match reconnect(&mut writer, database_url).await {
                Ok(()) => {
                    retry_at = None;
                    record_error(&mut writer).await;
                }
                Err(ShardError::Store(e)) => {
                    writer.counters.add(writer::error_counter(e.class()), 1);
                    writer.unrecorded_error = Some(e.to_string());
                    let wait = backoff.fail();
                    tracing::warn!(
                        "cannot reach the database, holding {} events and retrying in {:.1}s: {e}",
                        writer.pending_events,
                        wait.as_secs_f64()
                    );
                    retry_at = Some(Instant::now() + wait);
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        let sweep_due = now >= next_sweep;
        let batch_full = writer.pending_events >= writer.config.batch_events;
        let flush =
            sweep_due || batch_full || oldest_pending.is_some_and(|t| now >= t + batch_delay);
        if flush {
            let result = match writer.flush().await {
                // (flush counts its own errors, batch by batch)
                Ok(()) if sweep_due => writer.sweep().await.inspect_err(|e| {
                    writer.counters.add(writer::error_counter(e.class()), 1);
                }),
                other => other,
            };
            match result {
                Ok(()) => {
                    if let Some(since) = backoff.since {
                        tracing::info!(
                            "database is back after {:.1}s",
                            since.elapsed().as_secs_f64()
                        );
                    }
                    backoff.reset();
                    retry_at = None;
                    if writer.pending.is_empty() {
                        oldest_pending = None;
                    }
                    if sweep_due {
                        next_sweep = now + period;
                    }
                }
                Err(e) => {
                    let wait = backoff.fail();
                    tracing::warn!(
                        "database error, holding {} events and retrying in {:.1}s: {e}",
                        writer.pending_events,
                        wait.as_secs_f64()
                    );
                    surface_error(&mut writer, &e).await;
                    retry_at = Some(Instant::now() + wait);
                }
            }
        }

        if now >= next_report {
            report(&writer, rx.len());
            next_report = now + REPORT_EVERY;
        }
    }

    // Clean stop: no more reading; write what intake and the writer hold,
    // trying for at most `shutdown_timeout`.
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + writer.config.shutdown_timeout;
    let intake_done = tokio::task::spawn_blocking(move || intake.join());
    while let Some(c) = rx.recv().await {
        writer.push(c);
    }
    let _ = intake_done.await;
    let mut backoff = Backoff::new();
    let mut last_error = None;
    loop {
        if writer.client.is_closed() {
            if let Err(e) = reconnect(&mut writer, database_url).await {
                last_error = Some(e.to_string());
            }
        }
        if !writer.client.is_closed() {
            match final_write(&mut writer, &counters).await {
                Ok(()) => break,
                Err(e) => {
                    surface_error(&mut writer, &e).await;
                    last_error = Some(e.to_string());
                }
            }
        }
        let wait = backoff.fail();
        if Instant::now() + wait >= deadline {
            return Err(ShardError::ShutdownTimeout {
                unwritten: writer.pending_events,
                waited: writer.config.shutdown_timeout,
                error: last_error.unwrap_or_default(),
            });
        }
        tracing::warn!(
            "stopping: cannot write {} events yet, retrying in {:.1}s: {}",
            writer.pending_events,
            wait.as_secs_f64(),
            last_error.as_deref().unwrap_or("")
        );
        tokio::time::sleep(wait).await;
    }
    report(&writer, 0);
    tracing::info!(shard = writer.layout.shard, "shard stopped cleanly");
    Ok(Summary {
        counters: counters.snapshot(),
    })
}

/// The last write of a stopping shard: pending events, then the counters.
async fn final_write(w: &mut Writer, counters: &Counters) -> Result<(), StoreError> {
    w.flush().await?;
    let deltas = counters.take_deltas();
    if let Err(e) = state::add_counters(&w.client, &w.layout.shard, &deltas).await {
        counters.unflush(&deltas);
        return Err(e);
    }
    Ok(())
}

/// Records a database error where operators look (`shard_status.last_error`):
/// now if the database takes it, else once it is back.
async fn surface_error(w: &mut Writer, e: &StoreError) {
    w.unrecorded_error = Some(e.to_string());
    record_error(w).await;
}

/// Writes the last error not yet recorded, if the database takes it.
async fn record_error(w: &mut Writer) {
    let Some(e) = &w.unrecorded_error else {
        return;
    };
    if !w.client.is_closed()
        && state::record_error(&w.client, &w.layout.shard, e)
            .await
            .is_ok()
    {
        w.unrecorded_error = None;
    }
}

/// Connects, migrates, takes the shard's lock and makes its tables.
async fn open(
    config: &Config,
    layout: &Layout,
    url: &str,
) -> Result<tokio_postgres::Client, ShardError> {
    let mut client = tidemark_store::connect(url).await?;
    tidemark_store::migrate(&mut client).await?;
    client
        .batch_execute(&format!(
            "SET application_name = 'tidemark shard {}'; SET synchronous_commit = off",
            config.name
        ))
        .await
        .map_err(StoreError::from)?;
    // A shard killed a moment ago may leave its backend finishing a statement:
    // give such a lock a few seconds to go before refusing.
    let deadline = Instant::now() + LOCK_WAIT;
    while !state::try_lock(&client, &config.name).await? {
        if Instant::now() >= deadline {
            let pid = state::lock_holder(&client, &config.name)
                .await?
                .map_or(0, |h| h.0);
            return Err(ShardError::AlreadyRunning {
                name: config.name.clone(),
                pid,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    layout.ensure_schema(&client).await?;
    Ok(client)
}

/// Loads saved state: clock, watermarks, sequence, partitions; detects a
/// buffer emptied by a PostgreSQL crash.
async fn restore(w: &mut Writer) -> Result<(), ShardError> {
    let c = &w.client;
    let config_json = serde_json::json!({
        "windows": format!("{:?}", w.config.windows),
        "grace": format!("{:?}", w.config.grace),
        "targets": w.phases.targets.iter().map(|t| &t.name).collect::<Vec<_>>(),
    });
    let kind = match w.config.clock {
        ClockKind::Wall => "wall",
        ClockKind::Event => "event",
    };
    let row = state::register(
        c,
        &w.config.name,
        &w.config.prefixes,
        w.config.rate(),
        kind,
        &config_json,
    )
    .await?;
    w.next_seq = row.next_seq;
    w.applied = row.clock_ms;
    w.reference = row.reference_ms;
    if let Some(clock) = row.clock_ms {
        let saved = state::watermarks(c, &w.config.name).await?;
        let mut wm = Watermarks::at(&w.phases, clock);
        let get = |name: &str, v: &mut i64| {
            if let Some(s) = saved.get(name) {
                *v = (*v).max(*s);
            }
        };
        get("impression", &mut wm.impression);
        for (t, v) in w.phases.targets.iter().zip(wm.targets.iter_mut()) {
            get(&t.name, v);
        }
        get("unclicked", &mut wm.unclicked);
        get("last", &mut wm.last);
        w.wm = Some(wm);
    }
    check_sentinel(w, row.existed).await?;
    load_partitions(w).await?;
    let p = w.config.partition.as_millis() as i64;
    w.rows_by_bucket = w
        .layout
        .rows_by_bucket(&w.client, p)
        .await?
        .into_iter()
        .map(|(b, n)| (b, n as u64))
        .collect();
    tracing::info!(
        shard = w.config.name,
        clock = ?w.applied,
        next_seq = w.next_seq,
        partitions = w.events_parts.len() + w.txns_parts.len(),
        "state restored"
    );
    Ok(())
}

/// Reads which buffer partitions exist from the catalog.
async fn load_partitions(w: &mut Writer) -> Result<(), StoreError> {
    w.events_parts.clear();
    w.txns_parts.clear();
    for p in w.layout.partitions(&w.client, "events").await? {
        w.events_parts.insert(p.from_ms, p);
    }
    for p in w.layout.partitions(&w.client, "txns").await? {
        w.txns_parts.insert(p.from_ms, p);
    }
    Ok(())
}

/// An empty sentinel on a shard that ran before: the unlogged buffer was
/// emptied (PostgreSQL crashed). Record what creation times were lost.
async fn check_sentinel(w: &mut Writer, existed: bool) -> Result<(), ShardError> {
    let was_there = w.layout.check_sentinel(&w.client).await?;
    if was_there || !existed {
        return Ok(());
    }
    let buffered = std::mem::take(&mut w.rows_by_bucket);
    let p = w.config.partition.as_millis() as i64;
    // What may have been buffered: from the last phase's watermark (or the
    // oldest bucket written, before any sweep) to the clock plus max_future.
    let (from, to) = match (&w.wm, w.applied) {
        (Some(wm), applied) => (
            wm.last,
            applied.unwrap_or(wm.impression) + w.config.max_future.as_millis() as i64,
        ),
        (None, _) => match (buffered.keys().next(), buffered.keys().next_back()) {
            (Some(first), Some(last)) => (first - 1, last + p),
            _ => return Ok(()),
        },
    };
    state::record_gap(
        &w.client,
        &w.config.name,
        from,
        to,
        "buffer emptied (PostgreSQL crash or restart after crash)",
    )
    .await?;
    state::add_counters(&w.client, &w.config.name, &[("gaps".into(), 1)]).await?;
    tracing::error!(
        shard = w.config.name,
        from_ms = from,
        to_ms = to,
        "the unlogged buffer was emptied (PostgreSQL crashed): observations of transactions created in this range may be missing; recorded in tidemark.gaps"
    );
    Ok(())
}

/// After the connection dropped: one attempt to reconnect, retake the lock,
/// and check whether the buffer survived. The caller retries with back-off.
async fn reconnect(w: &mut Writer, url: &str) -> Result<(), ShardError> {
    match open(&w.config, &w.layout, url).await {
        Ok(c) => {
            w.client = c;
            check_sentinel(w, true).await?;
            // A crash can lose partitions whose creation had not reached the WAL.
            load_partitions(w).await?;
            tracing::info!("reconnected to the database");
            Ok(())
        }
        Err(ShardError::AlreadyRunning { .. }) => Err(ShardError::LockLost(w.config.name.clone())),
        Err(e) => Err(e),
    }
}

fn report(w: &Writer, queued_chunks: usize) {
    let c = &w.counters;
    let snapshot = c.snapshot();
    let sum = |fam: &str| -> u64 {
        snapshot
            .iter()
            .filter(|(n, _)| n.starts_with(fam))
            .map(|(_, v)| v)
            .sum()
    };
    tracing::info!(
        shard = w.layout.shard,
        received = sum("received_"),
        rejected = sum("rejected_"),
        late = sum("late_"),
        future = sum("future_"),
        dropped = c.get("dropped_overflow"),
        rows_written = c.get("rows_written"),
        batches = c.get("batches"),
        pending = w.pending_events,
        queued_chunks,
        clock = ?w.applied,
        next_seq = w.next_seq,
        "shard status"
    );
}

/// Counters and watermarks of a shard, from the database (for `--status`).
pub async fn status(
    client: &tokio_postgres::Client,
    shard: &str,
) -> Result<serde_json::Value, StoreError> {
    let counters: serde_json::Map<String, serde_json::Value> = state::counters(client, shard)
        .await?
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let marks: serde_json::Map<String, serde_json::Value> = state::watermarks(client, shard)
        .await?
        .into_iter()
        .map(|(k, v)| (k, v.into()))
        .collect();
    let row = client
        .query_opt(
            "SELECT clock_ms, next_seq, rate, prefixes, started_at::text, updated_at::text FROM tidemark.shards WHERE name = $1",
            &[&shard],
        )
        .await?;
    let Some(r) = row else {
        return Ok(serde_json::json!({"shard": shard, "known": false}));
    };
    let running = state::lock_holder(client, shard).await?.is_some();
    Ok(serde_json::json!({
        "shard": shard,
        "known": true,
        "running": running,
        "clock_ms": r.get::<_, Option<i64>>(0),
        "next_seq": r.get::<_, i64>(1),
        "rate": r.get::<_, f64>(2),
        "prefixes": r.get::<_, Vec<String>>(3),
        "started_at": r.get::<_, String>(4),
        "updated_at": r.get::<_, String>(5),
        "watermarks_ms": marks,
        "counters": counters,
    }))
}
