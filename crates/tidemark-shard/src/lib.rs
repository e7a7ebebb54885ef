//! One shard (SPEC 4-7): subscribes to a set of txid prefixes over ZeroMQ,
//! keeps each transaction's events in its PostgreSQL buffer, advances the
//! phase watermarks and emits observations.
//!
//! Owns: the shard configuration, its side of intake (chunks, counts, loss;
//! the sockets, door and clock are `tidemark-intake`'s), phase arithmetic
//! (down to the plan of each sweep), its counters' names ([`telemetry`]),
//! the writer that owns the connection
//! and the buffer's state, its SQL ([`store`]: the buffer tables, its state
//! row and counters, the sweeps' statements; connections, migrations and
//! error classes are `tidemark-store`'s), and its [`Step`] of the shared
//! run loop. It knows nothing of the learner.

#![warn(missing_docs)]

pub mod config;
pub mod counters;
pub mod intake;
pub mod live;
pub mod liveness;
pub mod loss;
pub mod phases;
pub mod store;
pub mod telemetry;
mod writer;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use tidemark_intake::{drive, Failure, Step, Stopped};

use crate::store::state;
use tidemark_store::StoreError;
use tokio::sync::mpsc;
use tracing::Instrument;

pub use config::{ClockKind, Config, ConfigError};
use counters::Counters;
use writer::Writer;

/// Why a shard stopped other than cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The database failed in a way retrying cannot fix.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("shard {name:?} is already running (PostgreSQL backend pid {pid} holds its lock); stop it first")]
    /// Another process holds the shard's lock.
    AlreadyRunning {
        /// The shard.
        name: String,
        /// The PostgreSQL backend holding it.
        pid: i32,
    },
    /// Another process took the shard's lock while this one was reconnecting.
    #[error("another process took shard {0:?} while this one was reconnecting; stopping")]
    LockLost(String),
    /// Intake could not start.
    #[error(transparent)]
    Intake(#[from] tidemark_intake::IntakeError),
    /// Stopped without writing what it held, or intake panicked.
    #[error(transparent)]
    Stopped(#[from] Stopped),
    /// The metrics endpoint could not start (`metrics_addr`).
    #[error(transparent)]
    Metrics(#[from] tidemark_metrics::ServeError),
}

/// What a shard did in this run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Every nonzero counter of this run, by name.
    pub counters: Vec<(String, i64)>,
}

/// Runs a shard until `shutdown` completes, then stops reading, writes what it
/// holds, commits and returns. Transient database errors are retried
/// forever once started, for [`tidemark_store::Starting::LIMIT`] while starting.
pub async fn run(
    config: Config,
    database_url: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, ShardError> {
    let counters = Arc::new(Counters::new(&config.types));
    let _metrics = match &config.metrics_addr {
        Some(addr) => Some(counters::serve_metrics(
            addr,
            &config.name,
            counters.clone(),
        )?),
        None => None,
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let started = tidemark_store::Starting::run(
        shutdown.as_mut(),
        || Writer::open(config.clone(), database_url, counters.clone()),
        |e| match e {
            ShardError::Store(s) => Some(s),
            _ => None,
        },
        |e| counters.add(crate::telemetry::Counter::db_errors(e.class()), 1),
    )
    // Its retry lines name the shard, as the shard's other lines do.
    .instrument(tracing::info_span!("starting", shard = %config.name))
    .await;
    let Some(writer) = started else {
        tracing::info!(shard = config.name, "shard stopped before it started");
        return Ok(Summary {
            counters: counters.snapshot(),
        });
    };
    let writer = writer?;
    let stop = Arc::new(AtomicBool::new(false));
    let config = writer.config().clone();
    let capacity = (config.max_pending / 2048).max(4);
    let (tx, rx) = mpsc::channel(capacity);
    let (applied, reference) = writer.saved_clocks();
    let intake = intake::spawn(
        &config,
        counters.clone(),
        applied,
        reference,
        tx,
        stop.clone(),
    )?;
    let sub = &config.subscription;
    tracing::info!(
        shard = config.name,
        prefixes = ?sub.prefixes,
        rate = config.rate(),
        endpoints = ?sub.endpoints,
        clock = ?sub.clock,
        "shard started"
    );
    let mut step = ShardStep {
        next_sweep: Instant::now() + config.period,
        oldest_pending: None,
        writer,
        url: database_url,
        counters: counters.clone(),
    };
    drive(
        &mut step,
        intake,
        stop,
        rx,
        shutdown,
        config.shutdown_timeout,
    )
    .await?;
    tracing::info!(shard = config.name, "shard stopped cleanly");
    Ok(Summary {
        counters: counters.snapshot(),
    })
}

/// The shard's turn of the loop: write batches when full or old, sweep
/// every `period`, reconnect one attempt at a time (so a stop is heard
/// while the database is away).
struct ShardStep<'a> {
    writer: Writer,
    url: &'a str,
    counters: Arc<Counters>,
    next_sweep: Instant,
    oldest_pending: Option<Instant>,
}

impl Step for ShardStep<'_> {
    type Chunk = intake::Chunk;
    type Error = ShardError;

    fn take(&mut self, chunk: intake::Chunk, now: Instant) {
        self.oldest_pending.get_or_insert(now);
        self.writer.push(chunk);
    }

    fn room(&self) -> bool {
        // Hold at most `max_pending` events and `max_pending_bytes`; beyond
        // them intake holds back, then drops (counted).
        let config = self.writer.config();
        self.writer.pending_events() < config.max_pending
            && self.writer.pending_bytes() < config.max_pending_bytes
    }

    fn due(&self, _: Instant) -> Instant {
        let delay = self.writer.config().batch_delay;
        let flush = self.oldest_pending.map(|t| t + delay);
        flush.map_or(self.next_sweep, |f| f.min(self.next_sweep))
    }

    async fn work(&mut self, now: Instant) -> Result<(), Failure<ShardError>> {
        if self.writer.disconnected() {
            match self.writer.reconnect(self.url).await {
                Ok(()) => self.writer.record_error().await,
                Err(ShardError::Store(e)) => {
                    self.writer.note_error(&e);
                    return Err(Failure::Retry(ShardError::Store(e)));
                }
                Err(e) => return Err(Failure::Fatal(e)),
            }
        }
        let config = self.writer.config();
        let sweep_due = now >= self.next_sweep;
        let flush = sweep_due
            || self.writer.pending_events() >= config.batch_events
            || self
                .oldest_pending
                .is_some_and(|t| now >= t + config.batch_delay);
        if !flush {
            return Ok(());
        }
        let period = config.period;
        let result = match self.writer.flush().await {
            // (flush counts its own errors, batch by batch)
            Ok(()) if sweep_due => self.writer.sweep().await.inspect_err(|e| {
                self.counters
                    .add(crate::telemetry::Counter::db_errors(e.class()), 1);
            }),
            other => other,
        };
        match result {
            Ok(()) => {
                if self.writer.pending_events() == 0 {
                    self.oldest_pending = None;
                }
                if sweep_due {
                    self.next_sweep = now + period;
                }
                Ok(())
            }
            Err(e) => {
                self.writer.surface_error(&e).await;
                Err(Failure::Retry(ShardError::Store(e)))
            }
        }
    }

    fn held(&self) -> usize {
        self.writer.pending_events()
    }

    fn report(&mut self, queued: usize) {
        self.writer.report(queued);
    }

    async fn finish(&mut self) -> Result<(), Failure<ShardError>> {
        if self.writer.disconnected() {
            self.writer
                .reconnect(self.url)
                .await
                .map_err(Failure::Retry)?;
        }
        match self.writer.final_write().await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.writer.surface_error(&e).await;
                Err(Failure::Retry(ShardError::Store(e)))
            }
        }
    }
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
    let Some(r) = state::shard_info(client, shard).await? else {
        return Ok(serde_json::json!({"shard": shard, "known": false}));
    };
    let running = state::lock_holder(client, shard).await?.is_some();
    Ok(serde_json::json!({
        "shard": shard,
        "known": true,
        "running": running,
        "clock_ms": r.clock_ms,
        "next_seq": r.next_seq,
        "rate": r.rate,
        "prefixes": r.prefixes,
        "started_at": r.started_at,
        "updated_at": r.updated_at,
        "watermarks_ms": marks,
        "counters": counters,
    }))
}
