//! The profile process (SPEC 11): `tidemark profiles --config FILE`.
//!
//! Owns: its configuration, its side of intake (identifiers judged, counts
//! by reason; the sockets, door and clock are `tidemark-intake`'s), its
//! decisions (`core`, pure: which copies a batch keeps, which events go to
//! the link stage and which ride along, how the rest is routed by person to
//! one of `workers` workers, and what each transaction writes, as plans of
//! plain data), the coordinator (its [`Step`](tidemark_intake::Step) of the
//! shared run loop, and the pipeline that takes a batch through the link
//! stage and the workers), the executors that run the plans in paced
//! transactions through one seam (`tables`), and its SQL ([`store`], by
//! statement group; the profile columns as read are `tidemark-reader`'s, so
//! the schema is spelled once). Batches are applied one after another: a
//! batch's first copies are committed before the next batch is judged, so
//! "the first copy received" holds across batches, restarts and `kill -9`.
//! Its profile maths is `tidemark-person`'s. This file keeps the error,
//! [`run`] and start-up.

#![warn(missing_docs)]

pub mod config;
mod coordinator;
mod core;
pub mod intake;
mod links;
pub mod metrics;
mod refusals;
#[cfg(test)]
mod sim;
pub mod store;
mod tables;
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use crate::core::days;
use days::Spans;
use tidemark_intake::{drive, Stopped};
use tidemark_store::StoreError;
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tracing::Instrument;

pub use crate::core::Event;
use crate::core::Layout;
pub use config::{Config, ConfigError, CounterDef};
use coordinator::{
    complete_trail_days, db_errors, define, describe, found, open_main, worker_name, Opened,
    Process,
};
use intake::{Chunk, Tally};
use worker::Worker;

/// Why the profile process stopped other than cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ProfilesError {
    /// The database failed in a way retrying cannot fix.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The metrics endpoint could not start (`metrics_addr`).
    #[error("{0}")]
    Metrics(String),
    /// Another process owns the profile database.
    #[error("a profile process already runs against this database (PostgreSQL backend pid {0} holds its lock); stop it first")]
    AlreadyRunning(i32),
    /// Another process took the lock while this one was reconnecting.
    #[error("another profile process took the database while this one was reconnecting; stopping")]
    LockLost,
    /// A counter's stored definition differs from the configuration.
    #[error("counters: {name:?} is stored with {stored}, configured with {configured}; a counter's definition cannot change (give it a new name)")]
    CounterChanged {
        /// The counter.
        name: String,
        /// What the database holds.
        stored: String,
        /// What the configuration says.
        configured: String,
    },
    /// Intake could not start.
    #[error(transparent)]
    Intake(#[from] tidemark_intake::IntakeError),
    /// Stopped without writing what it held, or intake panicked.
    #[error(transparent)]
    Stopped(#[from] Stopped),
}

/// What one run did, by reason (`applied`, `duplicate`, `stale`, ...).
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Counts of this run.
    pub counts: BTreeMap<String, i64>,
}

/// Runs the profile process until `shutdown` completes; then stops reading,
/// applies what it holds and returns.
pub async fn run(
    config: Config,
    url: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<Summary, ProfilesError> {
    let mut shutdown = std::pin::pin!(shutdown);
    // Retries while starting count as the database errors they are, by
    // class, with those of the run (`Process::work`).
    let mut run_counts: BTreeMap<String, i64> = BTreeMap::new();
    let started = tidemark_store::Starting::run(
        shutdown.as_mut(),
        || start(&config, url),
        |e| match e {
            ProfilesError::Store(s) => Some(s),
            _ => None,
        },
        |e| *run_counts.entry(db_errors(e)).or_default() += 1,
    )
    // Its retry lines name the process, as its other lines do.
    .instrument(tracing::info_span!("starting", name = %config.name))
    .await;
    let Some(started) = started else {
        tracing::info!("profile process stopped before it started");
        return Ok(Summary::default());
    };
    let Started {
        main,
        saved,
        layout,
        workers,
        marks,
        trail_days,
        packed,
    } = started?;
    let tally: Tally = Default::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Chunk>(16);
    let intake = intake::spawn(
        &config,
        saved.clock_ms,
        saved.reference_ms,
        tally.clone(),
        tx,
        stop.clone(),
    )?;
    tracing::info!(
        name = config.name,
        endpoints = ?config.subscription.endpoints,
        prefixes = ?config.subscription.prefixes,
        clock = ?config.subscription.clock,
        workers = config.workers,
        "profile process started"
    );
    let board = tidemark_metrics::Board::default();
    let _metrics = match &config.metrics_addr {
        Some(addr) => {
            let b = board.clone();
            let e = tidemark_metrics::serve(addr, "profiles", move || b.read())
                .map_err(|e| ProfilesError::Metrics(e.to_string()))?;
            tracing::info!(addr = e.addr, "serving metrics at /metrics");
            Some(e)
        }
        None => None,
    };
    let shutdown_timeout = config.shutdown_timeout;
    let mut p = Process::new(Opened {
        config,
        url,
        main,
        saved,
        layout,
        workers,
        marks,
        trail_days,
        packed,
        run_counts,
        tally,
        board,
    });
    let driven = drive(&mut p, intake, stop, rx, shutdown, shutdown_timeout).await;
    // A packing cut short rolls back whole; the next run packs that day.
    p.abort_packing();
    driven?;
    tracing::info!(counts = ?p.run_counts, "profile process stopped cleanly");
    Ok(Summary {
        counts: p.run_counts,
    })
}

/// What start-up reads and makes before intake begins.
struct Started {
    main: Client,
    saved: store::Saved,
    layout: Layout,
    workers: Vec<Worker>,
    marks: BTreeMap<i16, Spans>,
    trail_days: Spans,
    packed: BTreeSet<i64>,
}

/// Connects, migrates, takes the lock, registers and defines the process,
/// opens the workers' connections and reads the partitions; all of it again
/// if any of it fails on a connection cut.
async fn start(config: &Config, url: &str) -> Result<Started, ProfilesError> {
    let main = open_main(url, &config.name, config.lock_grace).await?;
    let saved = store::register(&main, &config.name, &describe(config)).await?;
    let layout = define(&main, config).await?;
    let mut workers = Vec::new();
    for i in 0..config.workers {
        let client = store::connect(url, &worker_name(&config.name, i)).await?;
        workers.push(coordinator::worker(config, i, client));
    }
    let parts = store::partitions(&main).await?;
    complete_trail_days(&main, &parts).await?;
    let (marks, trail_days) = found(config, &layout, parts);
    let packed = store::packed_parts(&main).await?.into_iter().collect();
    Ok(Started {
        main,
        saved,
        layout,
        workers,
        marks,
        trail_days,
        packed,
    })
}
