//! The writer: the one task that talks to PostgreSQL for a shard. It owns
//! the connection and everything the shard knows about its buffer (clock,
//! watermarks, sequence, partitions, buffered rows per bucket), writes what
//! intake hands it in batches (`flush`) and, every `period`, advances the
//! phase watermarks and emits observations (`sweep`). Every statement it
//! runs is `tidemark-store`'s.
//!
//! One task does both on one connection, so routing an event (by the
//! watermarks it sees) and moving the tiers (which changes where events
//! belong) can never interleave.

mod flush;
mod partitions;
mod sweep;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::buffer::{Layout, Partition};
use crate::store::state;
use crate::telemetry::Counter;
use tidemark_store::StoreError;
use tokio_postgres::Client;

use tidemark_wire::EventType;

use crate::config::{ClockKind, Config};
use crate::counters::Counters;
use crate::intake::Chunk;
use crate::phases::{Phases, Watermarks};
use crate::ShardError;
use tidemark_intake::wall_ms;

/// How far `seq` jumps when the buffer was emptied (SPEC 5, 12): past any
/// number an earlier primary (or the last commits a crash lost) may have
/// given and a learner read. No primary emits 2^32 observations its standby
/// never receives; 2^31 such jumps fit in a bigint.
pub const SEQ_JUMP: i64 = 1 << 32;

/// A shard's connection and buffer state.
pub struct Writer {
    config: Config,
    layout: Layout,
    phases: Phases,
    client: Client,
    counters: Arc<Counters>,
    /// `None` until the first clock is applied (event clock before any tick).
    wm: Option<Watermarks>,
    /// The clock up to which watermarks have been applied.
    applied: Option<i64>,
    /// The latest event-clock value intake reported.
    event_clock: Option<i64>,
    next_seq: i64,
    events_parts: BTreeMap<i64, Partition>,
    txns_parts: BTreeMap<i64, Partition>,
    pending: Vec<Chunk>,
    pending_events: usize,
    /// Bytes those events hold (`Chunk::bytes`).
    pending_bytes: usize,
    /// When retention last ran.
    last_prune: Option<Instant>,
    /// The newest tick intake heard (the `max_future` reference), saved with the clock.
    reference: Option<i64>,
    /// Buffered rows per creation-time bucket of `partition` width: what
    /// sizes sweeps and partitions by rows rather than by time.
    rows_by_bucket: BTreeMap<i64, u64>,
    /// Consecutive failures of an unclassified kind on a live connection.
    unknown_failures: u32,
    /// Partition drops put off behind another session's lock.
    lock_waits: tidemark_store::LockWaits,
    /// Transactions swept, kept impressed, kept clicked in this run: how
    /// much of a bucket later phases visit, for sizing sweeps.
    subsetting: [i64; 3],
    /// The last database error, until `tidemark.shards.last_error` holds it.
    unrecorded_error: Option<String>,
    /// The liveness gate, if configured.
    gate: Option<crate::liveness::Gate>,
    /// When buffer rows per tier were last read for the metrics endpoint.
    tiers_read: Option<Instant>,
    /// A reconnection whose buffer checks have not all passed yet.
    unchecked: bool,
    /// Reconnecting finds the lock held: whose it may be.
    lock_grace: tidemark_store::LockGrace,
}

/// Connects, migrates, takes the shard's lock and makes its tables.
async fn connect(config: &Config, layout: &Layout, url: &str) -> Result<Client, ShardError> {
    let mut client = tidemark_store::connect(url).await?;
    tidemark_store::migrate(&mut client).await?;
    state::configure_session(&client, &config.name).await?;
    // A shard killed a moment ago leaves its session behind until the server
    // notices (at once when idle; a statement in progress runs until it checks
    // its client): wait for it within `lock_grace` before refusing (SPEC 12).
    let deadline = Instant::now() + config.lock_grace;
    let mut said = false;
    while !state::try_lock(&client, &config.name).await? {
        let holder = state::lock_holder(&client, &config.name).await?;
        let pid = holder.as_ref().map_or(0, |h| h.0);
        if Instant::now() >= deadline {
            return Err(ShardError::AlreadyRunning {
                name: config.name.clone(),
                pid,
            });
        }
        if !said {
            said = true;
            tracing::warn!(
                pid,
                holder = holder.and_then(|h| h.1).unwrap_or_default(),
                "the shard's lock is held, perhaps by the session of a predecessor that was \
                 killed: waiting up to lock_grace ({:?}) for it to go",
                config.lock_grace
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    layout.ensure_schema(&client).await?;
    Ok(client)
}

impl Writer {
    /// Connects, takes the shard's lock, makes its tables and loads its saved
    /// state (clock, watermarks, sequence, partitions, buffered rows); records
    /// a gap if the buffer was emptied by a PostgreSQL crash.
    pub async fn open(
        config: Config,
        url: &str,
        counters: Arc<Counters>,
    ) -> Result<Writer, ShardError> {
        let phases = Phases::new(&config);
        let custom: Vec<&str> = config.types.custom().map(|(_, n)| n).collect();
        let mut layout = Layout::new(&config.name, &custom, phases.click_window, config.rate());
        for t in phases.targets.iter().filter(|t| t.start.is_some()) {
            let col = &layout.event_columns[layout
                .column(config.types.name(t.event))
                .expect("a buffered event type")];
            if !layout.early_columns.contains(col) {
                layout.early_columns.push(col.clone());
            }
        }
        let client = connect(&config, &layout, url).await?;
        let gate = config
            .liveness
            .map(|(silence, max_hold)| crate::liveness::Gate::new(silence, max_hold));
        let mut w = Writer {
            gate,
            config,
            layout,
            phases,
            client,
            counters,
            wm: None,
            applied: None,
            event_clock: None,
            next_seq: 1,
            events_parts: BTreeMap::new(),
            txns_parts: BTreeMap::new(),
            pending: Vec::new(),
            pending_events: 0,
            pending_bytes: 0,
            last_prune: None,
            reference: None,
            rows_by_bucket: BTreeMap::new(),
            unknown_failures: 0,
            lock_waits: Default::default(),
            subsetting: [0; 3],
            tiers_read: None,
            unchecked: false,
            lock_grace: Default::default(),
            unrecorded_error: None,
        };
        w.restore().await?;
        Ok(w)
    }

    /// Loads saved state: clock, watermarks, sequence, partitions; detects a
    /// buffer emptied by a PostgreSQL crash.
    async fn restore(&mut self) -> Result<(), ShardError> {
        let config_json = serde_json::json!({
            "windows": format!("{:?}", self.config.windows),
            "grace": format!("{:?}", self.config.grace),
            "targets": self.phases.targets.iter().map(|t| &t.name).collect::<Vec<_>>(),
        });
        let kind = match self.config.subscription.clock {
            ClockKind::Wall => "wall",
            ClockKind::Event => "event",
        };
        let row = state::register(
            &self.client,
            &self.config.name,
            &self.config.subscription.prefixes,
            self.config.rate(),
            kind,
            &config_json,
        )
        .await?;
        self.next_seq = row.next_seq;
        self.applied = row.clock_ms;
        self.reference = row.reference_ms;
        if let Some(clock) = row.clock_ms {
            let saved = state::watermarks(&self.client, &self.config.name).await?;
            let mut wm = Watermarks::at(&self.phases, clock);
            let get = |name: &str, v: &mut i64| {
                if let Some(s) = saved.get(name) {
                    *v = (*v).max(*s);
                }
            };
            get("impression", &mut wm.impression);
            for (t, v) in self.phases.targets.iter().zip(wm.targets.iter_mut()) {
                get(&t.name, v);
            }
            for (i, t) in self.phases.targets.iter().enumerate() {
                match saved.get(&crate::phases::provisional_phase(&t.name)) {
                    Some(s) => wm.starts[i] = wm.starts[i].max(*s),
                    // Learned early from this run on: every member still
                    // before its final sweep gets its provisional row (and
                    // its late one, if labelled) at the first sweep, so none
                    // has a late or final row without one.
                    None if t.start.is_some() && saved.contains_key(&t.name) => {
                        wm.starts[i] = wm.targets[i];
                    }
                    None => {}
                }
            }
            get("unclicked", &mut wm.unclicked);
            get("last", &mut wm.last);
            self.wm = Some(wm);
        }
        self.check_sentinel(row.existed).await?;
        self.load_partitions().await?;
        let p = self.partition_ms();
        self.rows_by_bucket = self
            .layout
            .rows_by_bucket(&self.client, p)
            .await?
            .into_iter()
            .map(|(b, n)| (b, n as u64))
            .collect();
        tracing::info!(
            shard = self.config.name,
            clock = ?self.applied,
            next_seq = self.next_seq,
            partitions = self.events_parts.len() + self.txns_parts.len(),
            "state restored"
        );
        Ok(())
    }

    /// An empty sentinel on a shard that ran before: the unlogged buffer was
    /// emptied (PostgreSQL crashed, or a standby was promoted: SPEC 12).
    /// Record what creation times were lost, and move `seq` past any number
    /// an earlier primary may have given, in the transaction that puts the
    /// sentinel back, so a retry after an error still sees the loss.
    ///
    /// What the server holds is read back from it, not taken from memory: a
    /// promoted standby (or a crash with `synchronous_commit = off`) may
    /// miss the last sweeps this process made, whose observations it never
    /// received, so the gap starts at the watermarks the server holds.
    async fn check_sentinel(&mut self, existed: bool) -> Result<(), ShardError> {
        let p = self.partition_ms();
        let held = state::watermarks(&self.client, &self.config.name).await?;
        let tx = self.client.transaction().await.map_err(StoreError::from)?;
        let was_there = self.layout.check_sentinel(&tx).await?;
        if was_there || !existed {
            tx.commit().await.map_err(StoreError::from)?;
            return Ok(());
        }
        let buffered = &self.rows_by_bucket;
        // What may have been buffered: from the oldest watermark the server
        // holds (or the memory's, or the oldest bucket written, before any
        // sweep) to the clock plus max_future.
        let oldest_held = held.values().copied().min();
        let max_future = self.config.subscription.max_future.as_millis() as i64;
        let (from, to) = match (&self.wm, self.applied) {
            (Some(wm), applied) => (
                oldest_held.map_or(wm.last, |h| h.min(wm.last)),
                applied.unwrap_or(wm.impression) + max_future,
            ),
            (None, _) => match (buffered.keys().next(), buffered.keys().next_back()) {
                (Some(first), Some(last)) => (first - 1, last + p),
                _ => match oldest_held {
                    Some(h) => (h, h + max_future),
                    // Never swept, nothing buffered: nothing was emitted.
                    None => {
                        tx.commit().await.map_err(StoreError::from)?;
                        return Ok(());
                    }
                },
            },
        };
        let reason = "buffer emptied (PostgreSQL crash, or a standby promoted)";
        state::record_gap(&tx, &self.config.name, from, to, reason).await?;
        let gaps = [(Counter::Gaps.name().to_owned(), 1)];
        state::add_counters(&tx, &self.config.name, &gaps).await?;
        let held_seq = state::next_seq(&tx, &self.config.name).await?;
        let next_seq = self.next_seq.max(held_seq).saturating_add(SEQ_JUMP);
        state::set_next_seq(&tx, &self.config.name, next_seq).await?;
        tx.commit().await.map_err(StoreError::from)?;
        tracing::error!(
            shard = self.config.name,
            from_ms = from,
            to_ms = to,
            seq_from = self.next_seq.max(held_seq),
            seq_to = next_seq,
            "the unlogged buffer was emptied (PostgreSQL crashed, or a standby was promoted): \
             observations of transactions created in this range may be missing, recorded in \
             tidemark.gaps; seq jumps past any number an earlier primary may have given"
        );
        self.next_seq = next_seq;
        self.rows_by_bucket.clear();
        Ok(())
    }

    /// After the connection dropped: one attempt to reconnect, retake the lock,
    /// and check whether the buffer survived. The caller retries with back-off.
    ///
    /// A lock found held is retried for a while ([`tidemark_store::LockGrace`]).
    pub async fn reconnect(&mut self, url: &str) -> Result<(), ShardError> {
        self.unchecked = true;
        match connect(&self.config, &self.layout, url).await {
            Ok(c) => {
                self.client = c;
                self.lock_grace.taken();
                self.check_sentinel(true).await?;
                // A crash can lose partitions whose creation had not reached the WAL.
                self.load_partitions().await?;
                self.unchecked = false;
                tracing::info!("reconnected to the database");
                Ok(())
            }
            Err(ShardError::AlreadyRunning { pid, .. }) => {
                match self.lock_grace.refused("the shard's lock", pid) {
                    Some(e) => Err(ShardError::Store(e)),
                    None => Err(ShardError::LockLost(self.config.name.clone())),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the connection is gone (then `reconnect` before anything else).
    pub fn disconnected(&self) -> bool {
        // Also until a reconnection's checks have passed: they must run again.
        self.client.is_closed() || self.unchecked
    }

    /// Events received and not yet written.
    pub fn pending_events(&self) -> usize {
        self.pending_events
    }

    /// Bytes the events held in memory take.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// The clock saved by the last sweep, and the newest tick heard: where
    /// intake starts.
    pub fn saved_clocks(&self) -> (Option<i64>, Option<i64>) {
        (self.applied, self.reference)
    }

    /// Takes a chunk from intake.
    pub fn push(&mut self, chunk: Chunk) {
        if let Some(c) = chunk.clock {
            self.event_clock = Some(self.event_clock.map_or(c, |e| e.max(c)));
        }
        if let Some(r) = chunk.reference {
            self.reference = Some(self.reference.map_or(r, |e| e.max(r)));
        }
        self.pending_events += chunk.events.len();
        self.pending_bytes += chunk.bytes();
        if self.gate.is_some() {
            self.note_heard(&chunk);
        }
        self.pending.push(chunk);
    }

    /// For the liveness gate: which sockets a chunk's events came on, noted
    /// when the writer holds them (not when intake reads them), so a sweep
    /// the gate lets go has them.
    fn note_heard(&self, chunk: &Chunk) {
        let now = wall_ms();
        let (mut high, mut low) = (false, false);
        for e in &chunk.events {
            match e.kind {
                EventType::Bid | EventType::Impression => high = true,
                EventType::Auction => {}
                _ => low = true,
            }
            if high && low {
                break;
            }
        }
        if high {
            self.counters.live.heard(false, now);
        }
        if low {
            self.counters.live.heard(true, now);
        }
    }

    /// The clock as it stands now; `None` before the first tick of an event clock.
    pub fn clock(&self) -> Option<i64> {
        let now = match self.config.subscription.clock {
            ClockKind::Wall => Some(wall_ms()),
            ClockKind::Event => self.event_clock,
        };
        match (now, self.applied) {
            (Some(n), Some(a)) => Some(n.max(a)),
            (n, a) => n.or(a),
        }
    }

    /// Counts a database error and keeps it to show operators
    /// (`shard_status.last_error`): now if the database takes it, else once
    /// it is back.
    pub async fn surface_error(&mut self, e: &StoreError) {
        self.unrecorded_error = Some(e.to_string());
        self.record_error().await;
    }

    /// Writes the last error not yet recorded, if the database takes it.
    pub async fn record_error(&mut self) {
        let Some(e) = &self.unrecorded_error else {
            return;
        };
        if !self.client.is_closed()
            && state::record_error(&self.client, &self.layout.shard, e)
                .await
                .is_ok()
        {
            self.unrecorded_error = None;
        }
    }

    /// Keeps an error to record once the database is back.
    pub fn note_error(&mut self, e: &StoreError) {
        self.counters.add(Counter::db_errors(e.class()), 1);
        self.unrecorded_error = Some(e.to_string());
    }

    /// The last write of a stopping shard: pending events, then the counters.
    pub async fn final_write(&mut self) -> Result<(), StoreError> {
        self.flush().await?;
        let deltas = self.counters.take_deltas();
        if let Err(e) = state::add_counters(&self.client, &self.layout.shard, &deltas).await {
            self.counters.unflush(&deltas);
            return Err(e);
        }
        Ok(())
    }

    /// Logs the counters of this run and where the writer stands.
    pub fn report(&self, queued_chunks: usize) {
        use crate::telemetry::Family;
        let c = &self.counters;
        let snapshot = c.snapshot();
        tracing::info!(
            shard = self.layout.shard,
            received = Family::Received.sum(&snapshot),
            rejected = Family::Rejected.sum(&snapshot),
            late = Family::Late.sum(&snapshot),
            future = Family::Future.sum(&snapshot),
            dropped = c.get(Counter::DroppedOverflow),
            rows_written = c.get(Counter::RowsWritten),
            batches = c.get(Counter::Batches),
            pending = self.pending_events,
            queued_chunks,
            clock = ?self.applied,
            next_seq = self.next_seq,
            "shard status"
        );
    }

    fn partition_ms(&self) -> i64 {
        self.config.partition.as_millis() as i64
    }
}
