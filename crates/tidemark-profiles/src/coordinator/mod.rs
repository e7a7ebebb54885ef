//! The coordinator: the profile process's [`Step`] of the shared run loop
//! (`tidemark-intake`). It gathers accepted events into batches, makes the
//! partitions a batch needs, hands it to the [`Pipeline`] (link stage, then
//! workers), saves the clock and intake's counts every second, retires
//! partitions behind the clock and packs past trail days; on a lost
//! connection it reconnects and forgets what it read there.

mod packing;
mod partitions;
pub(crate) mod pipeline;
pub(crate) mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tidemark_intake::{Failure, Step};
use tidemark_store::StoreError;
use tokio_postgres::Client;

use crate::core::days::{self, day_of, Spans};
use crate::core::{Counts, Event, Layout, Pace};
use crate::intake::{Chunk, Tally};
use crate::metrics;
use crate::store::{self, Saved};
use crate::worker::Worker;
use crate::{Config, ProfilesError};
pub(crate) use partitions::{complete_trail_days, found};
use pipeline::Pipeline;
pub(crate) use session::{define, describe, link_pace, open_main, worker_name};

/// How often the clock and intake's counts are saved, and partitions behind
/// the clock retired (a check of small sets; DDL only when a span ends).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// Events of a worker's first transaction, and the fewest one takes (the
/// most is a batch).
const WORK_START: usize = 2_000;
const PACE_MIN: usize = 100;

/// What start-up read and made, for the coordinator to go on from.
pub(crate) struct Opened<'a> {
    pub config: Config,
    pub url: &'a str,
    pub main: Client,
    pub saved: Saved,
    pub layout: Layout,
    pub workers: Vec<Worker>,
    pub marks: BTreeMap<i16, Spans>,
    pub trail_days: Spans,
    pub packed: BTreeSet<i64>,
    /// Counts of the retries while starting.
    pub run_counts: BTreeMap<String, i64>,
    pub tally: Tally,
    pub board: tidemark_metrics::Board,
}

/// A worker as start-up opens it, on connection `client`.
pub(crate) fn worker(config: &Config, index: usize, client: Client) -> Worker {
    Worker {
        index: index as i16,
        client: Some(client),
        pace: Pace::new(
            WORK_START,
            PACE_MIN.min(config.transaction_events),
            config.batch_events.min(config.transaction_events),
        ),
        link_pace: link_pace(config),
        marking: store::Marking::default(),
        known: crate::core::Known::new(config.worker_cache),
    }
}

pub(crate) struct Process<'a> {
    config: Config,
    layout: Layout,
    /// The workers and the batch in flight.
    pipeline: Pipeline<Client>,
    /// Accepted events not yet in a batch, in arrival order.
    pending: Vec<Event>,
    /// What they hold ([`Event::bytes`]).
    pending_bytes: usize,
    /// Clock and reference as they stand (saved every STATUS_EVERY).
    saved: Saved,
    tally: Tally,
    /// This run's counts by reason.
    pub run_counts: BTreeMap<String, i64>,
    /// `profile_seen`'s partitions, per type position.
    marks: BTreeMap<i16, Spans>,
    trail_days: Spans,
    /// The coordinator's connection: the lock, the link stage, status.
    main: Client,
    url: &'a str,
    lock_grace: tidemark_store::LockGrace,
    /// When the oldest event not yet in a batch arrived.
    oldest: Option<Instant>,
    next_status: Instant,
    board: tidemark_metrics::Board,
    lock_waits: tidemark_store::LockWaits,
    /// The newest txid creation time accepted, standing in for the clock
    /// until there is one (see [`Process::step`]).
    newest_created: Option<i64>,
    /// The starts of the trail partitions packed and tidied (sql/V0014).
    packed: BTreeSet<i64>,
    /// The packing under way, of this partition, on a connection of its own.
    packing: Option<(days::Part, tokio::task::JoinHandle<packing::Packed>)>,
    /// Days whose packing failed: when to try again, and the back-off.
    pack_retry: BTreeMap<i64, (Instant, Duration)>,
    /// Whether the definitions and partitions are to be read again before
    /// the next write ([`Process::reread`]).
    reread: bool,
    /// Events received so far ([`Event::seq`]).
    arrivals: u64,
}

impl<'a> Process<'a> {
    /// The coordinator over what start-up opened.
    pub fn new(o: Opened<'a>) -> Self {
        let link_pace = link_pace(&o.config);
        Process {
            pipeline: Pipeline::new(o.workers, link_pace, Default::default()),
            config: o.config,
            layout: o.layout,
            pending: Vec::new(),
            pending_bytes: 0,
            saved: o.saved,
            tally: o.tally,
            run_counts: o.run_counts,
            marks: o.marks,
            trail_days: o.trail_days,
            main: o.main,
            url: o.url,
            lock_grace: tidemark_store::LockGrace::default(),
            oldest: None,
            next_status: Instant::now(),
            board: o.board,
            lock_waits: Default::default(),
            newest_created: None,
            packed: o.packed,
            packing: None,
            pack_retry: BTreeMap::new(),
            reread: false,
            arrivals: 0,
        }
    }

    /// Ends a packing under way: cut short, it rolls back whole, and the
    /// next run packs that day.
    pub fn abort_packing(&mut self) {
        if let Some((_, h)) = self.packing.take() {
            h.abort();
        }
    }

    /// Forgets what was read on connections now closed: the next may be to
    /// another server (a promoted standby that missed the last commits).
    fn forget_all(&mut self) {
        self.pipeline.forget();
        if let Some((events, judged)) = self.pipeline.take_back() {
            self.judge(events, judged);
        }
        // Its outcome was on the old server: the next run packs that day
        // where it is now, if it is not packed there.
        self.abort_packing();
        self.pack_retry.clear();
        self.reread = true;
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

    /// Forms the next batch if none is in flight, makes the partitions it
    /// needs, opens again the workers' connections that were lost, and
    /// applies it ([`Pipeline::apply`]).
    async fn step(&mut self) -> Result<(), ProfilesError> {
        if self.pipeline.inflight.is_none() {
            self.form_batch();
        }
        let saved = &self.saved;
        // The clock, else the newest tick, else the newest txid.
        let now = saved
            .clock_ms
            .or(saved.reference_ms)
            .or(self.newest_created);
        partitions::ensure_partitions(
            &self.main,
            &self.config,
            &self.layout,
            self.pipeline.inflight.as_ref(),
            now,
            &mut self.marks,
            &mut self.trail_days,
        )
        .await?;
        // The link stage runs on the workers' connections too.
        self.reopen_workers().await;
        let next = &self.pending[..self.pending.len().min(self.config.batch_events)];
        let (config, layout) = (&self.config, &self.layout);
        (self.pipeline)
            .apply(&mut self.main, config, layout, next, &mut self.run_counts)
            .await?;
        Ok(())
    }

    /// Judges the next batch: at most batch_events, and half of
    /// max_pending_bytes (one event at least).
    fn form_batch(&mut self) {
        let (mut n, mut bytes) = (0, 0);
        for e in self.pending.iter().take(self.config.batch_events) {
            if n > 0 && bytes + e.bytes() > self.config.max_pending_bytes / 2 {
                break;
            }
            (n, bytes) = (n + 1, bytes + e.bytes());
        }
        self.pending_bytes -= bytes;
        let events: Vec<Event> = self.pending.drain(..n).collect();
        self.judge(events, Counts::new());
    }

    /// Opens again each worker connection that was lost; one that cannot be
    /// opened fails the step on it, and the retry backs off.
    async fn reopen_workers(&mut self) {
        for i in 0..self.pipeline.workers.len() {
            let w = &mut self.pipeline.workers[i];
            if w.client.as_ref().is_some_and(|c| !c.is_closed()) {
                continue;
            }
            let name = worker_name(&self.config.name, i);
            w.client = match store::connect(self.url, &name).await {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(worker = i, "could not reopen a worker's connection: {e}");
                    None
                }
            };
            self.pipeline.reopened(i);
        }
    }

    /// Judges `events` as the batch in flight (`Pipeline::judge`: later
    /// copies within it and stale copies dropped; before the event clock's
    /// first tick nothing is stale, SPEC 11). `uncommitted`: counts of an
    /// earlier judging of these events not committed yet.
    fn judge(&mut self, events: Vec<Event>, uncommitted: Counts) {
        if let Some(m) = events.iter().map(|e| e.created).max() {
            self.newest_created = Some(self.newest_created.map_or(m, |o| o.max(m)));
        }
        let dedup: Vec<i64> = (self.config.dedup.iter())
            .map(|d| d.as_millis() as i64)
            .collect();
        let oldest = events.iter().filter_map(|e| e.accepted).min();
        let trail_from = self.trail_from(oldest);
        self.pipeline.judge(events, &dedup, trail_from, uncommitted);
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

    /// What the metrics endpoint shows: this run's counts by reason
    /// (`applied`, `merges`, `links_refused`, `blocklisted`, `stale`, …, as
    /// in `tidemark.profile_counts`) and the events waiting for a batch.
    fn samples(&self) -> Vec<tidemark_metrics::Sample> {
        let name = self.config.name.as_str();
        let mut v: Vec<_> = (self.run_counts.iter())
            .map(|(reason, n)| {
                let labels = [("profiles", name), ("reason", reason.as_str())];
                metrics::EVENTS.sample(&labels, *n as f64)
            })
            .collect();
        let pending = self.pending.len() as f64;
        v.push(metrics::PENDING_EVENTS.sample(&[("profiles", name)], pending));
        let workers = &self.pipeline.workers;
        let remembered: usize = workers.iter().map(|w| w.known.persons()).sum();
        let remembered = remembered as f64;
        v.push(metrics::WORKER_CACHE_PERSONS.sample(&[("profiles", name)], remembered));
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
        let apply = full || old || self.pipeline.inflight.is_some();
        let status = now >= self.next_status;
        let mut result = Ok(());
        // Reconnect when the connection is needed, not when it was lost: one
        // opened then would have the whole back-off to be cut again.
        if (apply || status) && self.main.is_closed() {
            match session::reopen_main(self.url, &self.config.name, &mut self.lock_grace).await {
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
            if result.is_ok() && self.pipeline.inflight.is_none() {
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
        self.pending.len()
            + self
                .pipeline
                .inflight
                .as_ref()
                .map_or(0, |i| i.events().count())
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
            self.main = session::reopen_main(self.url, &self.config.name, &mut self.lock_grace)
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

/// The count a database error adds to: `db_errors_` and its class.
pub(crate) fn db_errors(e: &StoreError) -> String {
    format!("db_errors_{:?}", e.class()).to_lowercase()
}

/// A database error is retried; anything else ends the process.
fn failure(e: ProfilesError) -> Failure<ProfilesError> {
    match e {
        ProfilesError::Store(_) => Failure::Retry(e),
        other => Failure::Fatal(other),
    }
}
