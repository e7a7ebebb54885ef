//! The profile process (SPEC 11): `tidemark profiles --config FILE`.
//!
//! Owns: its configuration, its side of intake (identifiers judged, counts
//! by reason; the sockets, door and clock are `tidemark-intake`'s), its
//! decisions (`core`, pure: which copies a batch keeps, which events go to
//! the link stage (in groups that share no identifier and no person, run
//! concurrently) and which ride along, how the rest is routed by
//! the person each counts for to one of `workers` workers, and what each
//! link-stage or worker transaction writes, as a plan of plain data), the
//! coordinator (its [`Step`] of the shared run loop) that batches events and
//! runs those decisions, and the link stage and the workers, which load
//! what a plan needs and write it, in transactions paced to a few tens of
//! milliseconds (`core::Pace`), each whole: marks, effects and counts. Batches are
//! applied one after another: a batch's first copies are committed before
//! the next batch is judged, so "the first copy received" holds across
//! batches, restarts and `kill -9`. Its SQL is in [`store`] (the profile
//! columns as read are `tidemark-reader`'s, so the schema is spelled once);
//! its profile maths is `tidemark-person`'s.

#![warn(missing_docs)]

pub mod config;
mod core;
pub mod intake;
mod links;
pub mod store;
mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::core::days;
use days::{day_of, mark_span, start_of, Spans, DAY_MS};
use store::{Daily, Saved};
use tidemark_intake::{drive, Failure, Step, Stopped};
use tidemark_person::CounterSlot;
use tidemark_store::StoreError;
use tokio::sync::mpsc;
use tokio_postgres::Client;
use tracing::Instrument;

pub use crate::core::Event;
use crate::core::{Caps, Counts, Entry, Layout, Pace, Placed, Work};
pub use config::{Config, ConfigError, CounterDef};
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

/// How often the clock and intake's counts are saved, and partitions behind
/// the clock retired (a check of small sets; DDL only when a span ends).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// Entries of the first link-stage transaction, and the fewest and most one
/// takes ([`Pace`] sizes the rest).
const LINK_START: usize = 500;
const LINK_MIN: usize = 20;
const LINK_MAX: usize = 5_000;
/// Events of a worker's first transaction, and the fewest one takes (the
/// most is a batch).
const WORK_START: usize = 2_000;
const PACE_MIN: usize = 100;
/// A trail day is packed this long after it ends (sql/V0014): late events
/// after that stay one row each.
const PACK_AFTER: i64 = days::HOUR_MS;
/// The first and the longest wait before a failed packing is tried again.
const PACK_RETRY: Duration = Duration::from_secs(5);
const PACK_RETRY_MAX: Duration = Duration::from_secs(600);
/// An error of no known class that repeats this many times on a healthy
/// connection is taken as the batch's own, as a shard takes it.
const UNKNOWN_REPEATS: u32 = 3;

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
    let mut p = Process {
        marks,
        trail_days,
        link_pace: link_pace(&config),
        link_marking: store::Marking::default(),
        config,
        layout,
        workers,
        pending: Vec::new(),
        pending_bytes: 0,
        inflight: None,
        ahead: None,
        saved,
        tally,
        run_counts,
        hasher: std::collections::hash_map::RandomState::new(),
        main,
        url,
        lock_grace: tidemark_store::LockGrace::default(),
        oldest: None,
        next_status: Instant::now(),
        board,
        unknown_failures: 0,
        lock_waits: Default::default(),
        newest_created: None,
        packed,
        packing: None,
        pack_retry: BTreeMap::new(),
        reread: false,
        arrivals: 0,
    };
    let driven = drive(&mut p, intake, stop, rx, shutdown, shutdown_timeout).await;
    // A packing cut short rolls back whole; the next run packs that day.
    if let Some((_, h)) = p.packing.take() {
        h.abort();
    }
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
        workers.push(Worker {
            index: i as i16,
            client: Some(store::connect(url, &worker_name(&config.name, i)).await?),
            pace: Pace::new(
                WORK_START,
                PACE_MIN.min(config.transaction_events),
                config.batch_events.min(config.transaction_events),
            ),
            link_pace: link_pace(config),
            marking: store::Marking::default(),
            known: core::Known::new(config.worker_cache),
        });
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

/// Whether the database refused a transaction for what it holds (a data
/// error, or one of no known class repeating on a healthy connection), so
/// splitting it finds the refused events; every other error is retried
/// whole.
fn refused(e: &StoreError, unknown_failures: &mut u32, closed: bool) -> bool {
    use tidemark_store::ErrorClass;
    match e.class() {
        ErrorClass::Data => true,
        ErrorClass::Unknown if !closed => {
            *unknown_failures += 1;
            *unknown_failures >= UNKNOWN_REPEATS
        }
        _ => false,
    }
}

/// Sets aside one event the database refused on its own: kept in
/// `tidemark.profile_quarantine` (while it holds fewer than
/// `quarantine_max` rows) and counted, in one transaction; returns the
/// reason counted.
async fn set_aside(
    client: &mut Client,
    config: &Config,
    e: &Event,
    error: &StoreError,
    row: i16,
) -> Result<&'static str, StoreError> {
    let topic = format!("{}-{}", config.types[e.type_index], e.txid.as_str());
    let why = error.to_string();
    let tx = client.transaction().await?;
    let kept = store::quarantine(
        &tx,
        &topic,
        &e.raw,
        &why,
        error.sqlstate(),
        config.quarantine_max,
    )
    .await?;
    let reason = if kept {
        "quarantined"
    } else {
        "quarantine_dropped"
    };
    store::add_counts(&tx, row, [(reason, 1)]).await?;
    tx.commit().await?;
    tracing::warn!(
        topic,
        kept,
        "the database refused one event; set aside in tidemark.profile_quarantine: {why}"
    );
    Ok(reason)
}

/// Applies a worker's part the database refused, in pieces (halved on
/// each refusal, doubled again after each success up to the worker's pace,
/// in the part's order, as
/// smaller batches would be) until the refused events are alone and set
/// aside. Returns the counts committed; on an error splitting cannot help
/// with, the error and what is left of the part.
async fn isolate(
    worker: &mut Worker,
    main: &mut Client,
    config: &Config,
    layout: &Layout,
    work: Work,
    unknown_failures: &mut u32,
) -> Result<BTreeMap<String, i64>, (StoreError, Work)> {
    let Work {
        mut events,
        mut counts,
        trail_from,
    } = work;
    let mut done: BTreeMap<String, i64> = BTreeMap::new();
    let mut limit = (events.len() / 2).clamp(1, worker.pace.events());
    while !events.is_empty() {
        let n = events.len().min(limit);
        let piece = Work {
            events: events.drain(..n).collect(),
            counts: std::mem::take(&mut counts),
            trail_from,
        };
        let result = worker.apply(layout, &piece).await;
        let Work {
            events: mut back,
            counts: piece_counts,
            ..
        } = piece;
        match result {
            Ok(c) => {
                *unknown_failures = 0;
                for (k, v) in c {
                    *done.entry(k.to_owned()).or_default() += v;
                }
                limit = (limit * 2)
                    .min(events.len().max(1))
                    .min(worker.pace.events());
                continue;
            }
            Err(e) => {
                // Not committed: the counts go with the next piece.
                counts = piece_counts;
                let closed = worker.client.as_ref().is_none_or(|c| c.is_closed());
                let alone = n == 1 && refused(&e, unknown_failures, closed);
                let outcome = if alone {
                    set_aside(main, config, &back[0], &e, worker.index).await
                } else {
                    Err(e)
                };
                match outcome {
                    Ok(reason) => *done.entry(reason.to_owned()).or_default() += 1,
                    Err(e) => {
                        back.append(&mut events);
                        if n > 1 && refused(&e, unknown_failures, closed) {
                            events = back;
                            limit = (n / 2).max(1);
                            continue;
                        }
                        let left = Work {
                            events: back,
                            counts,
                            trail_from,
                        };
                        return Err((e, left));
                    }
                }
            }
        }
    }
    Ok(done)
}

/// The count a database error adds to: `db_errors_` and its class.
fn db_errors(e: &StoreError) -> String {
    format!("db_errors_{:?}", e.class()).to_lowercase()
}

/// A database error is retried; anything else ends the process.
fn failure(e: ProfilesError) -> Failure<ProfilesError> {
    match e {
        ProfilesError::Store(_) => Failure::Retry(e),
        other => Failure::Fatal(other),
    }
}

impl Step for Process<'_> {
    type Chunk = Chunk;
    type Error = ProfilesError;

    fn take(&mut self, c: Chunk, now: Instant) {
        if !c.events.is_empty() {
            self.oldest.get_or_insert(now);
        }
        self.pending.extend(c.events.into_iter().map(|mut e| {
            e.seq = self.arrivals;
            self.arrivals += 1;
            e
        }));
        self.pending_bytes += c.bytes;
        if let Some(v) = c.clock {
            self.saved.clock_ms = Some(self.saved.clock_ms.map_or(v, |o| o.max(v)));
        }
        if let Some(v) = c.reference {
            self.saved.reference_ms = Some(self.saved.reference_ms.map_or(v, |o| o.max(v)));
        }
    }

    fn room(&self) -> bool {
        self.pending.len() < 2 * self.config.batch_events
            && self.pending_bytes < self.config.max_pending_bytes
    }

    /// A full batch goes at once, a partial one waits up to `batch_delay`;
    /// the status is saved every `STATUS_EVERY`.
    fn due(&self, now: Instant) -> Instant {
        if self.batch_full() {
            return now;
        }
        let batch = self.oldest.map(|t| t + self.config.batch_delay);
        batch.map_or(self.next_status, |b| b.min(self.next_status))
    }

    fn due_while_waiting(&self) -> Option<Instant> {
        Some(self.next_status)
    }

    /// Backing off: only what a scrape shows is posted.
    fn wait(&mut self, now: Instant) {
        self.board.post(self.samples());
        self.next_status = now + STATUS_EVERY;
    }

    async fn work(&mut self, now: Instant) -> Result<(), Failure<ProfilesError>> {
        let full = self.batch_full();
        let old = self
            .oldest
            .is_some_and(|t| now >= t + self.config.batch_delay);
        let apply = full || old || self.inflight.is_some();
        let status = now >= self.next_status;
        let mut result = Ok(());
        // Reconnect when the connection is needed, not when it was lost: one
        // opened then would have the whole back-off to be cut again.
        if (apply || status) && self.main.is_closed() {
            match reopen_main(self.url, &self.config.name, &mut self.lock_grace).await {
                Ok(c) => {
                    self.main = c;
                    // As for a worker's connection opened again (`step`).
                    self.forget_all();
                }
                Err(e) => result = Err(e),
            }
        }
        if result.is_ok() && (apply || status) && self.reread {
            result = self.reread().await;
        }
        if result.is_ok() && apply {
            result = self.step().await;
            if result.is_ok() {
                self.oldest = (!self.pending.is_empty()).then_some(now);
            }
        }
        if status {
            // Once a second, the database there or not: the loop turns per
            // chunk, a scrape needs no more.
            self.board.post(self.samples());
            if result.is_ok() {
                result = self.save_status().await;
            }
            if result.is_ok() && self.inflight.is_none() {
                result = self.retire().await;
            }
            self.next_status = now + STATUS_EVERY;
        }
        if let Err(ProfilesError::Store(e)) = &result {
            *self.run_counts.entry(db_errors(e)).or_default() += 1;
        }
        result.map_err(failure)
    }

    fn held(&self) -> usize {
        self.pending.len() + self.inflight.as_ref().map_or(0, |i| i.events().count())
    }

    fn report(&mut self, queued: usize) {
        tracing::info!(
            held = self.held(),
            queued,
            counts = ?self.run_counts,
            clock = ?self.saved.clock_ms,
            "profile process"
        );
    }

    async fn finish(&mut self) -> Result<(), Failure<ProfilesError>> {
        if self.main.is_closed() {
            self.main = reopen_main(self.url, &self.config.name, &mut self.lock_grace)
                .await
                .map_err(failure)?;
            self.forget_all();
        }
        if self.reread {
            self.reread().await.map_err(failure)?;
        }
        while self.held() > 0 {
            self.step().await.map_err(failure)?;
        }
        self.save_status().await.map_err(failure)
    }
}

/// How link-stage transactions are paced at first, on any connection.
fn link_pace(config: &Config) -> Pace {
    Pace::new(
        LINK_START,
        LINK_MIN.min(config.transaction_events),
        LINK_MAX.min(config.transaction_events),
    )
}

/// A worker connection's `application_name`.
fn worker_name(process: &str, index: usize) -> String {
    format!("tidemark profiles {process}: worker {index}")
}

/// Connects (as `tidemark profiles NAME: links`), migrates and takes the
/// database's profile lock, waiting up to `grace` for a predecessor's
/// session to let go of it (SPEC 12): a process killed a moment ago leaves
/// its session behind until the server notices.
async fn open_main(url: &str, name: &str, grace: Duration) -> Result<Client, ProfilesError> {
    let mut c = store::connect(url, &format!("tidemark profiles {name}: links")).await?;
    tidemark_store::migrate(&mut c).await?;
    let deadline = Instant::now() + grace;
    let mut said = false;
    while !store::try_lock(&c).await? {
        let holder = store::lock_holder(&c).await?;
        let pid = holder.as_ref().map_or(0, |h| h.0);
        if Instant::now() >= deadline {
            return Err(ProfilesError::AlreadyRunning(pid));
        }
        if !said {
            said = true;
            tracing::warn!(
                pid,
                holder = holder.and_then(|h| h.1).unwrap_or_default(),
                "the profile lock is held, perhaps by the session of a predecessor that was \
                 killed: waiting up to lock_grace ({grace:?}) for it to go"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(c)
}

/// Reconnects after the connection was lost; a lock found held is retried
/// for a while ([`tidemark_store::LockGrace`]), the loop hearing a stop.
async fn reopen_main(
    url: &str,
    name: &str,
    grace: &mut tidemark_store::LockGrace,
) -> Result<Client, ProfilesError> {
    match open_main(url, name, Duration::ZERO).await {
        Err(ProfilesError::AlreadyRunning(pid)) => match grace.refused("the profile lock", pid) {
            Some(e) => Err(ProfilesError::Store(e)),
            None => Err(ProfilesError::LockLost),
        },
        Ok(c) => {
            grace.taken();
            // Said once per loss: with a host list this may be another
            // server (docs/operations.md, failover).
            tracing::warn!(
                "the database connection was lost; reconnected, forgetting what was read"
            );
            Ok(c)
        }
        other => other,
    }
}

/// The configuration as registered in `tidemark.profile_process.config`.
fn describe(c: &Config) -> serde_json::Value {
    serde_json::json!({
        "endpoints": c.subscription.endpoints,
        "prefixes": c.subscription.prefixes,
        "rate": c.rate(),
        "clock": if c.subscription.clock == tidemark_intake::ClockKind::Event { "event" } else { "wall" },
        "types": c.types,
        "dedup_ms": c.types.iter().zip(&c.dedup)
            .map(|(t, d)| (t.clone(), serde_json::json!(d.as_millis() as i64)))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
        "trail_ms": c.trail.map(|t| t.as_millis() as i64),
        "workers": c.workers,
        "counters": c.counters.iter().map(|d| serde_json::json!({
            "name": d.name, "event": d.event, "half_life_ms": d.half_life_ms
        })).collect::<Vec<_>>(),
    })
}

/// Checks the configured counters against the stored ones and appends new
/// types and counters; returns where each lives in the arrays.
async fn define(c: &Client, config: &Config) -> Result<Layout, ProfilesError> {
    let (mut types, mut counters) = tidemark_reader::store::definitions(c)
        .await
        .map_err(StoreError::from)?;
    for t in &config.types {
        if !types.iter().any(|(_, n)| n == t) {
            let pos = store::add_type(c, t).await?;
            types.push((pos, t.clone()));
        }
    }
    for d in &config.counters {
        match counters.iter().find(|s| s.1 == d.name) {
            Some((_, _, event, half_life)) => {
                if *event != d.event || *half_life != d.half_life_ms {
                    return Err(ProfilesError::CounterChanged {
                        name: d.name.clone(),
                        stored: format!("event {event:?}, half_life {half_life} ms"),
                        configured: format!("event {:?}, half_life {} ms", d.event, d.half_life_ms),
                    });
                }
            }
            None => {
                let pos = store::add_counter(c, &d.name, &d.event, d.half_life_ms).await?;
                counters.push((pos, d.name.clone(), d.event.clone(), d.half_life_ms));
            }
        }
    }
    let type_pos = config
        .types
        .iter()
        .map(|t| types.iter().find(|(_, n)| n == t).expect("defined above").0)
        .collect();
    counters.sort_by_key(|c| c.0);
    let counters = counters
        .iter()
        .map(|(_, name, event, half_life)| {
            let configured = config.counters.iter().any(|d| &d.name == name);
            let fed_by = types
                .iter()
                .find(|(_, n)| n == event)
                .map(|(pos, _)| *pos as usize - 1);
            CounterSlot {
                type_slot: fed_by.filter(|_| configured),
                half_life_ms: *half_life,
            }
        })
        .collect();
    Ok(Layout {
        type_pos,
        types: types.len(),
        counters,
        weight: config.weight(),
    })
}

/// Where identifiers sat, looked up ahead of the batch that carries them
/// (while the workers apply the one before): the identifiers asked for
/// and those found.
///
/// Looked up early on the same server (forgotten when a connection is
/// opened again), a placement can only be behind, and only in ways that
/// send more to the link stage, never less: between the link stage that
/// ran before the look-up and the next, only workers write, and a worker
/// never moves an identifier to another person; it adds identifiers of
/// one-identifier events (an event carrying one not found goes to the link
/// stage, which loads it in its own transaction) and lowers first ts (a
/// first ts found too high makes more riders, `core::split`).
struct Ahead {
    asked: HashSet<String>,
    placed: Placed,
}

/// The placements of `ids`.
async fn place(main: &Client, ids: &[&str]) -> Result<Placed, StoreError> {
    Ok(store::placed(main, ids)
        .await?
        .into_iter()
        .map(|(id, person, first_ts, blocklisted)| (id, (person, first_ts, blocklisted)))
        .collect())
}

/// Splits a batch (arrival order, in `rest`) between the link stage and
/// the workers (`core::split` decides, from where its identifiers sit:
/// looked up now, but for those `ahead` has).
async fn settle(
    main: &Client,
    inflight: &mut Inflight,
    ahead: Option<Ahead>,
    groups: usize,
) -> Result<(), StoreError> {
    if !core::has_links(&inflight.rest) {
        inflight.settled = true;
        return Ok(());
    }
    let carried = core::carried(&inflight.rest);
    let placed: Placed = match ahead {
        None => place(main, &carried).await?,
        Some(Ahead { asked, mut placed }) => {
            let rest: Vec<&str> = carried
                .into_iter()
                .filter(|id| !asked.contains(*id))
                .collect();
            if !rest.is_empty() {
                placed.extend(place(main, &rest).await?);
            }
            placed
        }
    };
    // Only now, with nothing left to fail, does the batch leave `rest`: an
    // error above keeps it whole for the retry.
    inflight.settled = true;
    let events = std::mem::take(&mut inflight.rest);
    let (links, rest) = core::split(events, &placed);
    inflight.links = core::groups(links, &placed, groups);
    inflight.touched = core::touched(&inflight.links, &placed);
    inflight.placed = Some(placed);
    inflight.rest.extend(rest);
    Ok(())
}

/// A batch in flight: first its link-carrying events (in groups, one per
/// connection), then the rest, routed by person once the links are
/// committed, per worker until each part commits.
struct Inflight {
    /// The link stage's entries not yet committed, in groups that share no
    /// identifier and no person (`core::groups`), one per connection (the
    /// coordinator's first), each in arrival order.
    links: Vec<Vec<Entry>>,
    /// Whether the batch was split (`settle`); until then `rest` holds it
    /// all in arrival order.
    settled: bool,
    rest: Vec<Event>,
    /// Where the batch's identifiers sat before its link stage (`settle`),
    /// and what the link stage may move: routing looks up only the rest
    /// (`core::unmoved`). `None` when no link was looked for, or once a
    /// connection was opened again (maybe to another server).
    placed: Option<Placed>,
    touched: core::Touched,
    /// Duplicates within the batch and stale copies, committed with part 0.
    judged: Counts,
    parts: Option<Vec<Option<Work>>>,
    trail_from: Option<i64>,
}

impl Inflight {
    fn events(&self) -> impl Iterator<Item = &Event> {
        let parts = self
            .parts
            .iter()
            .flatten()
            .flatten()
            .flat_map(|w| &w.events);
        let links = self.links.iter().flatten();
        let links = links.filter(|e| !e.rider).map(|e| &e.event);
        links.chain(&self.rest).chain(parts)
    }
}

struct Process<'a> {
    config: Config,
    layout: Layout,
    workers: Vec<Worker>,
    /// Accepted events not yet in a batch, in arrival order.
    pending: Vec<Event>,
    /// What they hold ([`Event::bytes`]).
    pending_bytes: usize,
    /// The batch being applied.
    inflight: Option<Inflight>,
    /// Placements looked up for the next batch ([`Ahead`]).
    ahead: Option<Ahead>,
    /// Clock and reference as they stand (saved every STATUS_EVERY).
    saved: Saved,
    tally: Tally,
    run_counts: BTreeMap<String, i64>,
    /// How many entries the coordinator's next link-stage transaction
    /// takes (each worker keeps its own).
    link_pace: Pace,
    /// How the coordinator's next link-stage transaction takes first-copy
    /// marks (a worker's link group shares its worker's).
    link_marking: store::Marking,
    /// `profile_seen`'s partitions, per type position.
    marks: BTreeMap<i16, Spans>,
    trail_days: Spans,
    hasher: std::collections::hash_map::RandomState,
    /// The coordinator's connection: the lock, the link stage, status.
    main: Client,
    url: &'a str,
    lock_grace: tidemark_store::LockGrace,
    /// When the oldest event not yet in a batch arrived.
    oldest: Option<Instant>,
    next_status: Instant,
    board: tidemark_metrics::Board,
    /// Errors of no known class in a row (see [`refused`]).
    unknown_failures: u32,
    lock_waits: tidemark_store::LockWaits,
    /// The newest txid creation time accepted, standing in for the clock
    /// until there is one (see [`Process::now_ms`]).
    newest_created: Option<i64>,
    /// The starts of the trail partitions packed and tidied (sql/V0014).
    packed: BTreeSet<i64>,
    /// The packing under way, of this partition, on a connection of its own.
    packing: Option<(days::Part, tokio::task::JoinHandle<Packed>)>,
    /// Days whose packing failed: when to try again, and the back-off.
    pack_retry: BTreeMap<i64, (Instant, Duration)>,
    /// Whether the definitions and partitions are to be read again before
    /// the next write ([`Process::reread`]).
    reread: bool,
    /// Events received so far ([`Event::seq`]).
    arrivals: u64,
}

/// A packing's outcome and duration.
type Packed = (Result<Option<i64>, StoreError>, Duration);

impl Process<'_> {
    /// Forgets what was read on connections now closed: the next may be to
    /// another server (a promoted standby that missed the last commits).
    fn forget_all(&mut self) {
        for w in &mut self.workers {
            w.known.clear();
        }
        self.ahead = None;
        self.rejudge();
        // Its outcome was on the old server: the next run packs that day
        // where it is now, if it is not packed there.
        if let Some((_, h)) = self.packing.take() {
            h.abort();
        }
        self.pack_retry.clear();
        self.reread = true;
    }

    /// Takes the batch in flight apart and judges what of it is not yet
    /// committed again, in arrival order, as a new batch: its links were
    /// settled, and its parts routed, on what the lost connection's server
    /// held, and a promoted standby may hold less (persons a lost merge had
    /// joined stand apart there). What did commit there is a first copy
    /// already, so judging again counts nothing twice.
    fn rejudge(&mut self) {
        let Some(old) = self.inflight.take() else {
            return;
        };
        let parts = old.parts.into_iter().flatten().flatten();
        let (events, judged) = core::reassemble(old.links, old.rest, parts, old.judged);
        self.inflight = Some(self.judge(events, judged));
    }

    /// Reads again what the process learnt at its start and keeps up to
    /// date itself: the types' and counters' positions and which partitions
    /// exist. On another server, one made on the old one would be missing
    /// and its rows refused (SQLSTATE 23514) as if they were bad. Writes its
    /// registration again, which that server may never have received.
    async fn reread(&mut self) -> Result<(), ProfilesError> {
        self.layout = define(&self.main, &self.config).await?;
        let parts = store::partitions(&self.main).await?;
        complete_trail_days(&self.main, &parts).await?;
        (self.marks, self.trail_days) = found(&self.config, &self.layout, parts);
        self.packed = store::packed_parts(&self.main).await?.into_iter().collect();
        store::rejoin(
            &self.main,
            &self.config.name,
            &describe(&self.config),
            self.saved,
        )
        .await?;
        self.reread = false;
        Ok(())
    }

    /// Enough pending for a whole batch, by count or by bytes.
    fn batch_full(&self) -> bool {
        self.pending.len() >= self.config.batch_events
            || self.pending_bytes >= self.config.max_pending_bytes / 2
    }

    /// Forms the next batch if none is in flight; applies its links, then
    /// routes the rest by person and applies every part not yet committed,
    /// concurrently. What fails stays for the retry; what committed stays so.
    async fn step(&mut self) -> Result<(), ProfilesError> {
        if self.inflight.is_none() {
            // At most batch_events, and half of max_pending_bytes (one event at least).
            let (mut n, mut bytes) = (0, 0);
            for e in self.pending.iter().take(self.config.batch_events) {
                if n > 0 && bytes + e.bytes() > self.config.max_pending_bytes / 2 {
                    break;
                }
                (n, bytes) = (n + 1, bytes + e.bytes());
            }
            self.pending_bytes -= bytes;
            let events: Vec<Event> = self.pending.drain(..n).collect();
            self.inflight = Some(self.judge(events, Counts::new()));
        }
        let (main, url) = (&mut self.main, self.url);
        let saved = &self.saved;
        let now = saved
            .clock_ms
            .or(saved.reference_ms)
            .or(self.newest_created);
        ensure_partitions(
            main,
            &self.config,
            &self.layout,
            self.inflight.as_ref(),
            now,
            &mut self.marks,
            &mut self.trail_days,
        )
        .await?;
        let inflight = self.inflight.as_mut().expect("formed above");
        let caps = Caps {
            max_ids: self.config.max_ids,
            blocklist_after: self.config.blocklist_after.min(i32::MAX as u64) as i32,
        };
        let t0 = Instant::now();
        if !inflight.settled {
            settle(main, inflight, self.ahead.take(), self.workers.len() + 1).await?;
        }
        // The link stage runs on the workers' connections too.
        for w in &mut self.workers {
            if w.client.as_ref().is_none_or(|c| c.is_closed()) {
                let name = worker_name(&self.config.name, w.index as usize);
                w.client = match store::connect(url, &name).await {
                    Ok(c) => Some(c),
                    Err(e) => {
                        // The step fails on it; the retry backs off.
                        tracing::warn!(
                            worker = w.index,
                            "could not reopen a worker's connection: {e}"
                        );
                        None
                    }
                };
                // Maybe another server now (a promoted standby that missed
                // the last commits): what was read before may not be there.
                w.known.clear();
                self.ahead = None;
                inflight.placed = None;
            }
        }
        let link_entries: usize = inflight.links.iter().map(Vec::len).sum();
        let t1 = Instant::now();
        if link_entries > 0 {
            // One group per connection, concurrently (`core::groups`):
            // each in transactions of its own pace, so no row lock is held
            // long however many persons merge; a transaction the database
            // refuses for what it holds is halved until the refused entry
            // is alone and set aside.
            let mut conns = vec![(
                links::Conn {
                    client: Some(&mut *main),
                    pace: &mut self.link_pace,
                    marking: &mut self.link_marking,
                },
                self.workers.len() as i16,
            )];
            let mut known = Vec::new();
            for w in &mut self.workers {
                let conn = links::Conn {
                    client: w.client.as_mut(),
                    pace: &mut w.link_pace,
                    marking: &mut w.marking,
                };
                conns.push((conn, w.index));
                known.push(&mut w.known);
            }
            let known = std::cell::RefCell::new(known);
            let stop = std::cell::Cell::new(false);
            let (config, layout, failures) = (&self.config, &self.layout, self.unknown_failures);
            let trail_from = inflight.trail_from;
            let done = futures_util::future::join_all(
                conns
                    .into_iter()
                    .zip(inflight.links.iter_mut())
                    .filter(|(_, group)| !group.is_empty())
                    .map(|((conn, row), group)| {
                        let stage = links::Stage {
                            caps,
                            trail_from,
                            counts_row: row,
                        };
                        let (known, stop) = (&known, &stop);
                        links::apply_group(
                            conn, config, layout, stage, group, known, stop, failures,
                        )
                    }),
            )
            .await;
            let mut error = None;
            self.unknown_failures = 0;
            for d in done {
                for (k, v) in d.counts {
                    *self.run_counts.entry(k.to_owned()).or_default() += v;
                }
                // Its worker part would be refused alike.
                let aside: HashSet<(tidemark_wire::Txid, usize)> =
                    d.set_aside.into_iter().collect();
                if !aside.is_empty() {
                    inflight
                        .rest
                        .retain(|r| !aside.contains(&(r.txid, r.type_index)));
                }
                self.unknown_failures = self.unknown_failures.max(d.unknown_failures);
                if let Err(e) = d.result {
                    error.get_or_insert(e);
                }
            }
            if let Some(e) = error {
                return Err(e.into());
            }
            inflight.links.clear();
        }
        let t2 = Instant::now();
        if inflight.parts.is_none() {
            let primaries = core::primaries(&inflight.rest);
            let (mut person, ask) = match &inflight.placed {
                Some(placed) => core::unmoved(primaries, placed, &inflight.touched),
                None => (HashMap::new(), primaries),
            };
            if !ask.is_empty() {
                person.extend(store::persons_of(&*main, &ask).await?);
            }
            // Taken only after the query: an error there keeps the batch.
            let rest = std::mem::take(&mut inflight.rest);
            let judged = std::mem::take(&mut inflight.judged);
            let works = core::route(
                rest,
                &person,
                &self.hasher,
                self.workers.len(),
                inflight.trail_from,
                judged,
            );
            inflight.parts = Some(works.into_iter().map(Some).collect());
            inflight.placed = None;
        }
        let t3 = Instant::now();
        let works = inflight.parts.as_mut().expect("routed above");
        let layout = &self.layout;
        // The next batch's placements, looked up on the coordinator's
        // connection, idle while the workers run ([`Ahead`]).
        let next = &self.pending[..self.pending.len().min(self.config.batch_events)];
        let look = (self.ahead.is_none() && core::has_links(next)).then(|| core::carried(next));
        let main_ro = &*main;
        let (results, looked) = tokio::join!(
            futures_util::future::join_all(
                self.workers
                    .iter_mut()
                    .zip(works.iter_mut())
                    .filter_map(|(w, work)| work.as_mut().map(|work| (w, work)))
                    .map(|(w, work)| async move {
                        (w.index as usize, w.apply_paced(layout, work).await)
                    }),
            ),
            async {
                match look {
                    Some(ids) => Some((place(main_ro, &ids).await, ids)),
                    None => None,
                }
            }
        );
        if let Some((Ok(placed), ids)) = looked {
            let asked = ids.into_iter().map(str::to_owned).collect();
            self.ahead = Some(Ahead { asked, placed });
        }
        let mut error = None;
        let mut refusals = Vec::new();
        for (i, (counts, r)) in results {
            for (k, v) in counts {
                *self.run_counts.entry(k.to_owned()).or_default() += v;
            }
            match r {
                Ok(()) => {
                    self.unknown_failures = 0;
                    works[i] = None;
                }
                Err(e) => {
                    let closed = self.workers[i]
                        .client
                        .as_ref()
                        .is_none_or(|c| c.is_closed());
                    if refused(&e, &mut self.unknown_failures, closed) {
                        refusals.push(i);
                    } else {
                        error = Some(e);
                    }
                }
            }
        }
        if let Some(e) = error {
            return Err(e.into());
        }
        for i in refusals {
            let work = works[i].take().expect("a part that failed");
            let counts = isolate(
                &mut self.workers[i],
                main,
                &self.config,
                layout,
                work,
                &mut self.unknown_failures,
            )
            .await
            .map_err(|(e, left)| {
                works[i] = Some(left);
                e
            })?;
            for (k, v) in counts {
                *self.run_counts.entry(k).or_default() += v;
            }
        }
        // Where a batch's time goes, phase by phase (a retried step reports
        // only its last attempt): `RUST_LOG=tidemark_profiles=debug`.
        tracing::debug!(
            link_entries,
            settle = ?(t1 - t0),
            links = ?(t2 - t1),
            route = ?(t3 - t2),
            workers = ?t3.elapsed(),
            "batch applied"
        );
        self.inflight = None;
        Ok(())
    }

    /// Drops later copies within the batch and stale copies
    /// (`core::judge`: older than each type's `dedup` behind the clock;
    /// before the event clock's first tick nothing is stale, SPEC 11); the
    /// rest stays in arrival order for `settle`. `uncommitted`: counts of
    /// an earlier judging of these events not committed yet ([`Self::rejudge`]).
    fn judge(&mut self, events: Vec<Event>, uncommitted: Counts) -> Inflight {
        if let Some(m) = events.iter().map(|e| e.created).max() {
            self.newest_created = Some(self.newest_created.map_or(m, |o| o.max(m)));
        }
        let dedup: Vec<i64> = (self.config.dedup.iter())
            .map(|d| d.as_millis() as i64)
            .collect();
        let oldest = events.iter().filter_map(|e| e.accepted).min();
        let (rest, judged) = core::judge(events, &dedup, uncommitted);
        Inflight {
            links: Vec::new(),
            settled: false,
            rest,
            placed: None,
            touched: Default::default(),
            judged,
            parts: None,
            trail_from: self.trail_from(oldest),
        }
    }

    /// Events at or after this get trail rows: their day is kept. Counted
    /// from the batch's oldest acceptance clock when older than the clock,
    /// so an event held by the database keeps the trail its day had then.
    fn trail_from(&self, oldest_accepted: Option<i64>) -> Option<i64> {
        let trail = self.config.trail?.as_millis() as i64;
        let now = self.saved.clock_ms.or(self.saved.reference_ms).unwrap_or(0);
        let now = oldest_accepted.map_or(now, |o| o.min(now));
        Some(day_of(now - trail))
    }

    /// Drops whole partitions no copy or trail can need any more.
    async fn retire(&mut self) -> Result<(), ProfilesError> {
        let main = &self.main;
        let Some(clock) = self.saved.clock_ms else {
            return Ok(());
        };
        // Nothing an event still held may need goes: retired from the
        // oldest clock an event waiting was accepted at (SPEC 11, v1.3).
        let clock = (self.pending.iter().filter_map(|e| e.accepted)).fold(clock, i64::min);
        if !self.lock_waits.ready() {
            return Ok(());
        }
        // Each type's marks go at its own horizon.
        for (&t, spans) in &mut self.marks {
            let dedup = mark_dedup(&self.config, &self.layout, t);
            for p in spans.retired(clock - dedup) {
                match store::drop_partition(main, Daily::Seen(t), p).await {
                    Ok(()) => spans.dropped(p),
                    Err(e) if e.is_lock_timeout() => {
                        self.lock_waits.put_off("dropping first-copy marks");
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                };
            }
        }
        if let Some(trail) = self.config.trail {
            let horizon = clock - trail.as_millis() as i64;
            for p in self.trail_days.retired(horizon) {
                // Dropped once its packing ends (which would fail, or make
                // the packed partition again).
                if self.packing.as_ref().is_some_and(|(q, _)| *q == p) {
                    continue;
                }
                match store::drop_partition(main, Daily::Trail, p).await {
                    Ok(()) => {
                        self.trail_days.dropped(p);
                        if let days::Part::Span(from, _) = p {
                            self.packed.remove(&from);
                            self.pack_retry.remove(&from);
                        }
                    }
                    Err(e) if e.is_lock_timeout() => {
                        self.lock_waits.put_off("dropping a day of trails");
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                };
            }
            self.pack(clock, horizon).await;
        }
        self.lock_waits.done();
        Ok(())
    }

    /// Hears how the packing under way ended, and starts the next: the
    /// oldest trail day `PACK_AFTER` past its end (late events written after
    /// it stay unpacked, and are read all the same), while no batch is
    /// waiting. One at a time, on its own connection, so batches never wait
    /// for it; a day that fails is tried again after a back-off (5 s,
    /// doubling to 10 min) while later days go on.
    async fn pack(&mut self, clock: i64, horizon: i64) {
        if self.packing.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            let (p, h) = self.packing.take().expect("checked");
            let days::Part::Span(from, to) = p else {
                return;
            };
            let failed = match h.await {
                Ok((Ok(events), took)) => {
                    self.packed.insert(from);
                    self.pack_retry.remove(&from);
                    tracing::info!(from, to, ?events, ?took, "trail day packed");
                    None
                }
                Ok((Err(e), _)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(error) = failed {
                let now = Instant::now();
                let wait = self
                    .pack_retry
                    .get(&from)
                    .map_or(PACK_RETRY, |(_, w)| (*w * 2).min(PACK_RETRY_MAX));
                self.pack_retry.insert(from, (now + wait, wait));
                tracing::warn!(
                    from,
                    to,
                    error,
                    ?wait,
                    "packing a trail day failed; tried again later"
                );
            }
        }
        if self.packing.is_some() || self.batch_full() {
            return;
        }
        let now = Instant::now();
        let (packed, retry) = (&self.packed, &self.pack_retry);
        let skip =
            |from: i64| packed.contains(&from) || retry.get(&from).is_some_and(|(at, _)| *at > now);
        let Some(p) = self.trail_days.to_pack(clock, PACK_AFTER, horizon, skip) else {
            return;
        };
        let url = self.url.to_owned();
        let name = format!("tidemark profiles {}: packer", self.config.name);
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let r = async {
                let mut c = store::packer(&url, &name).await?;
                let events = store::pack_trail(&mut c, p).await?;
                store::tidy_trail(&c, p).await?;
                Ok(events)
            };
            (r.await, started.elapsed())
        });
        self.packing = Some((p, task));
    }

    /// What the metrics endpoint shows: this run's counts by reason
    /// (`applied`, `merges`, `links_refused`, `blocklisted`, `stale`, …, as
    /// in `tidemark.profile_counts`) and the events waiting for a batch.
    fn samples(&self) -> Vec<tidemark_metrics::Sample> {
        use tidemark_metrics::{counter, gauge};
        let name = self.config.name.as_str();
        let mut v: Vec<_> = self
            .run_counts
            .iter()
            .map(|(reason, n)| {
                let labels = [("profiles", name), ("reason", reason.as_str())];
                counter(
                    "events",
                    "events and links counted by reason, this run",
                    &labels,
                    *n as f64,
                )
            })
            .collect();
        let pending = self.pending.len() as f64;
        v.push(gauge(
            "pending_events",
            "events received, not yet applied",
            &[("profiles", name)],
            pending,
        ));
        let remembered: usize = self.workers.iter().map(|w| w.known.persons()).sum();
        v.push(gauge(
            "worker_cache_persons",
            "stored persons the workers remember (at most workers x worker_cache)",
            &[("profiles", name)],
            remembered as f64,
        ));
        v
    }

    async fn save_status(&mut self) -> Result<(), ProfilesError> {
        let main = &self.main;
        let counts: Vec<(String, i64)> =
            std::mem::take(&mut *self.tally.lock().expect("tally lock"))
                .into_iter()
                .collect();
        match store::save_status(main, &self.config.name, self.saved, &counts).await {
            Ok(()) => {
                for (k, v) in counts {
                    *self.run_counts.entry(k).or_default() += v;
                }
                Ok(())
            }
            Err(e) => {
                let mut t = self.tally.lock().expect("tally lock");
                for (k, v) in counts {
                    *t.entry(k).or_default() += v;
                }
                Err(e.into())
            }
        }
    }
}

/// The `dedup` horizon of the type at position `t` (ms); a type this run
/// does not read keeps its marks as long as the longest.
fn mark_dedup(config: &Config, layout: &Layout, t: i16) -> i64 {
    let longest = config.dedup.iter().max().copied().unwrap_or_default();
    let i = layout.type_pos.iter().position(|p| *p == t);
    i.map_or(longest, |i| config.dedup[i]).as_millis() as i64
}

/// A new [`Spans`] for the marks of the type at position `t`.
fn mark_spans(config: &Config, layout: &Layout, t: i16) -> Spans {
    Spans::new(mark_span(mark_dedup(config, layout, t)))
}

/// Completes trail days that have one of their two partitions: made by a
/// build before sql/V0015 after that migration ran (an older process still
/// running meanwhile), or cut between the two commits that make a day
/// (`store::create_partition`, then a failover to a server that got the
/// first). Made again whole; what exists is kept.
async fn complete_trail_days(
    main: &Client,
    parts: &[(Daily, days::Part)],
) -> Result<(), ProfilesError> {
    let mut made: Vec<days::Part> = Vec::new();
    for (which, part) in parts {
        // A day is listed once per parent it has a partition of.
        if *which == Daily::Trail && !made.contains(part) {
            store::create_partition(main, Daily::Trail, *part).await?;
            made.push(*part);
        }
    }
    Ok(())
}

/// The partitions found in the database: `profile_seen`'s per type
/// position (new ones split by each type's [`mark_span`]) and
/// `profile_trail`'s.
fn found(
    config: &Config,
    layout: &Layout,
    parts: Vec<(Daily, days::Part)>,
) -> (BTreeMap<i16, Spans>, Spans) {
    let (mut marks, mut trail) = (BTreeMap::new(), Spans::new(DAY_MS));
    for (which, part) in parts {
        match which {
            Daily::Seen(t) => marks
                .entry(t)
                .or_insert_with(|| mark_spans(config, layout, t))
                .made(part),
            Daily::Trail => trail.made(part),
        }
    }
    (marks, trail)
}

/// Creates the partitions a batch's first-copy marks and trail rows need:
/// a span's own while it is within reach of `now` (the clock, else the
/// newest tick, else the newest txid), the catch-all before that.
async fn ensure_partitions(
    main: &Client,
    config: &Config,
    layout: &Layout,
    inflight: Option<&Inflight>,
    now: Option<i64>,
    marks: &mut BTreeMap<i16, Spans>,
    trail_days: &mut Spans,
) -> Result<(), ProfilesError> {
    let Some(inflight) = inflight else {
        return Ok(());
    };
    let mut seen: BTreeMap<i16, BTreeSet<i64>> = BTreeMap::new();
    let mut trail = BTreeSet::new();
    // The batch's own horizon: the clock may have moved since it was judged.
    let trail_from = inflight.trail_from.unwrap_or(i64::MAX);
    for e in inflight.events() {
        let t = layout.type_pos[e.type_index];
        let spans = marks
            .entry(t)
            .or_insert_with(|| mark_spans(config, layout, t));
        if !spans.covered(e.created) {
            seen.entry(t).or_default().insert(e.created);
        }
        if config.trail.is_some() && e.ts >= trail_from && !trail_days.covered(e.ts) {
            trail.insert(e.ts);
        }
    }
    let now = now.unwrap_or(i64::MIN / 2);
    for (t, needed) in seen {
        let spans = marks.get_mut(&t).expect("entered above");
        let dedup = mark_dedup(config, layout, t);
        let floor = start_of(now - dedup, spans.span) - spans.span;
        for p in spans.plan(&needed, floor) {
            store::create_partition(main, Daily::Seen(t), p).await?;
            spans.made(p);
        }
    }
    if let Some(t) = config.trail {
        for p in trail_days.plan(&trail, day_of(now - t.as_millis() as i64) - DAY_MS) {
            store::create_partition(main, Daily::Trail, p).await?;
            trail_days.made(p);
        }
    }
    Ok(())
}
