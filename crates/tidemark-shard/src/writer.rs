//! The writer: the one task that talks to PostgreSQL for a shard. It writes
//! what intake hands it in batches and, every `period`, advances the phase
//! watermarks and emits observations.
//!
//! One task does both on one connection, so routing an event (by the
//! watermarks it sees) and moving the tiers (which changes where events
//! belong) can never interleave.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_store::buffer::{EventRow, Layout, MergeRow, Partition, TargetSql};
use tidemark_store::{state, StoreError};
use tidemark_wire::{EventType, Txid};
use tokio_postgres::Client;

use crate::config::{ClockKind, Config, Given};
use crate::counters::Counters;
use crate::intake::{wall_ms, Chunk};
use crate::phases::{route, Phases, Route, Watermarks};

/// The most creation time one phase transaction sweeps, so a shard far
/// behind catches up in bounded slices.
const SLICE_MS: i64 = 5 * 60_000;

pub struct Writer {
    pub(crate) config: Config,
    pub(crate) layout: Layout,
    pub(crate) phases: Phases,
    pub(crate) client: Client,
    pub(crate) counters: Arc<Counters>,
    /// `None` until the first clock is applied (event clock before any tick).
    pub(crate) wm: Option<Watermarks>,
    /// The clock up to which watermarks have been applied.
    pub(crate) applied: Option<i64>,
    /// The latest event-clock value intake reported.
    pub(crate) event_clock: Option<i64>,
    pub(crate) next_seq: i64,
    pub(crate) events_parts: BTreeMap<i64, Partition>,
    pub(crate) txns_parts: BTreeMap<i64, Partition>,
    pub(crate) pending: Vec<Chunk>,
    pub(crate) pending_events: usize,
    /// The event type each of `layout.event_columns` holds, in column order.
    pub(crate) columns: Vec<EventType>,
    /// When retention last ran.
    pub(crate) last_prune: Option<Instant>,
}

impl Writer {
    fn partition_ms(&self) -> i64 {
        self.config.partition.as_millis() as i64
    }

    /// Consolidated partitions span ten fresh ones: they live ~30 times longer.
    fn txns_partition_ms(&self) -> i64 {
        self.partition_ms() * 10
    }

    /// The column of consolidated rows that holds an event type's earliest time.
    fn column(&self, kind: EventType) -> usize {
        self.columns
            .iter()
            .position(|k| *k == kind)
            .expect("routed events and targets have a column")
    }

    /// Takes a chunk from intake.
    pub fn push(&mut self, chunk: Chunk) {
        if let Some(c) = chunk.clock {
            self.event_clock = Some(self.event_clock.map_or(c, |e| e.max(c)));
        }
        self.pending_events += chunk.events.len();
        self.pending.push(chunk);
    }

    /// The clock as it stands now; `None` before the first tick of an event clock.
    pub fn clock(&self) -> Option<i64> {
        let now = match self.config.clock {
            ClockKind::Wall => Some(wall_ms()),
            ClockKind::Event => self.event_clock,
        };
        match (now, self.applied) {
            (Some(n), Some(a)) => Some(n.max(a)),
            (n, a) => n.or(a),
        }
    }

    /// Writes every pending event in one transaction: fresh ones appended with
    /// `COPY`, later ones merged into consolidated rows. On error nothing is
    /// written and the events stay pending.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let wm = self
            .wm
            .clone()
            .unwrap_or_else(|| Watermarks::at(&self.phases, i64::MIN / 4));
        let p = self.partition_ms();
        // Decide every event's place first; partitions must exist before the COPY.
        let mut routes = Vec::with_capacity(self.pending_events);
        let mut starts = BTreeSet::new();
        for chunk in &self.pending {
            for e in &chunk.events {
                let r = route(&self.phases, &wm, e.kind, e.created, e.ts);
                if r == Route::Fresh {
                    starts.insert(e.created.div_euclid(p) * p);
                }
                routes.push(r);
            }
        }
        for from in starts {
            self.ensure_partition(false, from).await?;
        }
        let mut fresh: Vec<EventRow<'_>> = Vec::with_capacity(routes.len());
        // Per tier (txns, long): one row per txid, found through `index`.
        let mut merges: [(HashMap<Txid, usize>, Vec<MergeRow>); 2] = Default::default();
        let mut late: Vec<EventType> = Vec::new();
        let mut routes = routes.into_iter();
        for chunk in &self.pending {
            for e in &chunk.events {
                match routes.next().expect("one route per event") {
                    Route::Fresh => fresh.push(EventRow {
                        txid: e.txid.as_str(),
                        created_ms: e.created,
                        type_name: self.config.types.name(e.kind),
                        ts_ms: e.ts,
                        arrival: e.arrival,
                        features: chunk.features(e),
                        price: e.price,
                        user: chunk.user(e),
                    }),
                    r @ (Route::Consolidated | Route::LongWait) => {
                        let col = self.column(e.kind);
                        let (index, rows) = &mut merges[usize::from(r == Route::LongWait)];
                        let i = *index.entry(e.txid).or_insert_with(|| {
                            rows.push(MergeRow {
                                txid: e.txid.as_str().to_owned(),
                                created_ms: e.created,
                                ts: Vec::new(),
                            });
                            rows.len() - 1
                        });
                        rows[i].ts.push((col, e.ts));
                    }
                    Route::Late => late.push(e.kind),
                    Route::OutsideWindows => self.counters.per_type("outside_windows", e.kind, 1),
                }
            }
        }
        self.client.batch_execute("BEGIN").await?;
        let result = async {
            let written = self.layout.copy_events(&self.client, &fresh).await?;
            let mut unmatched = Vec::new();
            for (tier, (_, rows)) in merges.iter().enumerate() {
                for i in self.layout.merge(&self.client, tier == 1, rows).await? {
                    unmatched.push(&rows[i]);
                }
            }
            self.client.batch_execute("COMMIT").await?;
            Ok::<_, StoreError>((written, unmatched))
        }
        .await;
        let (written, unmatched) = match result {
            Ok(v) => v,
            Err(e) => {
                let _ = self.client.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        };
        for kind in late {
            self.counters.per_type("late", kind, 1);
        }
        // A merge without a row: its transaction got no impression (or no bid) in
        // time, so no population holds it.
        for row in &unmatched {
            for &(col, _) in &row.ts {
                self.counters.per_type("unmatched", self.columns[col], 1);
            }
        }
        let merged: usize = merges.iter().map(|(_, rows)| rows.len()).sum();
        self.counters
            .add("merged", (merged - unmatched.len()) as u64);
        self.counters.add("rows_written", written);
        self.counters.add("batches", 1);
        drop(fresh);
        self.pending.clear();
        self.pending_events = 0;
        Ok(())
    }

    /// Advances the watermarks to the current clock, in slices, each slice one
    /// transaction that emits, subsets and saves progress; then drops the
    /// partitions no phase needs. Call after `flush`.
    pub async fn sweep(&mut self) -> Result<(), StoreError> {
        let Some(clock) = self.clock() else {
            return Ok(());
        };
        if self.applied.is_none() {
            // The first sweep starts just before the oldest buffered creation time,
            // so even a buffer filled before the first tick is swept in slices.
            let oldest = self.events_parts.keys().next().copied().unwrap_or(clock);
            let start = (oldest - 1 + self.phases.impression_offset).min(clock);
            self.wm = Some(Watermarks::at(&self.phases, start));
            self.applied = Some(start);
        }
        while let Some(a) = self.applied.filter(|a| *a < clock) {
            self.sweep_to(clock.min(a + SLICE_MS)).await?;
        }
        self.drop_partitions().await?;
        self.create_ahead(clock).await?;
        self.retain().await?;
        Ok(())
    }

    /// Deletes observations past retention that every registered consumer has read.
    async fn retain(&mut self) -> Result<(), StoreError> {
        let Some(keep) = self.config.retention else {
            return Ok(());
        };
        if self
            .last_prune
            .is_some_and(|t| t.elapsed() < self.config.retention_check)
        {
            return Ok(());
        }
        self.last_prune = Some(Instant::now());
        let before = wall_ms() - keep.as_millis() as i64;
        let n =
            tidemark_store::observations::prune(&self.client, &self.layout.shard, before, 100_000)
                .await?;
        if n > 0 {
            self.counters.add("pruned", n);
            tracing::debug!(deleted = n, "retention");
        }
        Ok(())
    }

    async fn sweep_to(&mut self, clock: i64) -> Result<(), StoreError> {
        // Before the first sweep nothing was swept: start ranges at the epoch.
        let old = self
            .wm
            .clone()
            .unwrap_or_else(|| Watermarks::at(&self.phases, i64::MIN / 4));
        let floor = |v: i64| v.max(0);
        let new = Watermarks::at(&self.phases, clock).max(&old);
        self.ensure_txns_partitions(floor(old.impression), new.impression)
            .await?;
        let deltas = self.counters.take_deltas();
        let mut next_seq = self.next_seq;
        let mut extra: Vec<(String, i64)> = Vec::new();
        let started = Instant::now();
        let mut steps: Vec<(&'static str, u128)> = Vec::new();
        self.client.batch_execute("BEGIN").await?;
        let tx = &self.client;
        let result = async {
            // Observations are the durable product: wait for their commit record.
            tx.batch_execute("SET LOCAL synchronous_commit = on")
                .await?;
            if new.impression > old.impression {
                let c = self
                    .layout
                    .consolidate(tx, floor(old.impression), new.impression)
                    .await?;
                extra.extend([
                    ("transactions_swept".to_owned(), c.transactions),
                    ("kept_impressed".to_owned(), c.kept),
                    ("orphans".to_owned(), c.orphans),
                    ("unimpressed".to_owned(), c.unimpressed),
                    ("duplicates".to_owned(), c.duplicates),
                ]);
                steps.push(("consolidate", started.elapsed().as_millis()));
            }
            // Targets in offset order; the unclicked rows are let go after every
            // target that needs them has been emitted.
            let mut unclicked = floor(old.unclicked);
            let mut moved = false;
            for (i, t) in self.phases.targets.iter().enumerate() {
                if !moved && t.offset > self.phases.unclicked_offset {
                    extra.push((
                        "kept_clicked".into(),
                        self.keep_clicked(tx, &old, &new).await?,
                    ));
                    unclicked = new.unclicked;
                    moved = true;
                }
                if new.targets[i] > old.targets[i] {
                    let sql = TargetSql {
                        name: t.name.clone(),
                        given_click: t.given == Given::Click,
                        column: self.layout.event_columns[self.column(t.event)].clone(),
                        after_ms: t.after,
                        until_ms: t.until,
                    };
                    let (rows, positives) = self
                        .layout
                        .emit(
                            tx,
                            &sql,
                            floor(old.targets[i]),
                            new.targets[i],
                            unclicked,
                            next_seq,
                        )
                        .await?;
                    next_seq += rows;
                    steps.push(("emit", started.elapsed().as_millis()));
                    extra.push((format!("observations_{}", t.name), rows));
                    extra.push((format!("positives_{}", t.name), positives));
                }
            }
            if !moved {
                extra.push((
                    "kept_clicked".into(),
                    self.keep_clicked(tx, &old, &new).await?,
                ));
            }
            if new.last > old.last {
                extra.push((
                    "forgotten".into(),
                    self.layout.forget(tx, new.last).await? as i64,
                ));
            }
            extra.push(("sweeps".into(), 1));
            let marks = self.marks(&new);
            state::save_progress(tx, &self.layout.shard, clock, next_seq, &marks).await?;
            let mut all = deltas.clone();
            all.extend(extra.iter().cloned());
            state::add_counters(tx, &self.layout.shard, &all).await?;
            Ok::<_, StoreError>(())
        }
        .await;
        if let Err(e) = result {
            let _ = self.client.batch_execute("ROLLBACK").await;
            self.counters.unflush(&deltas);
            return Err(e);
        }
        if let Err(e) = self.client.batch_execute("COMMIT").await {
            self.counters.unflush(&deltas);
            return Err(e.into());
        }
        tracing::debug!(ms = started.elapsed().as_millis(), ?steps, "swept");
        self.next_seq = next_seq;
        self.wm = Some(new);
        self.applied = Some(clock);
        Ok(())
    }

    async fn keep_clicked(
        &self,
        tx: &Client,
        old: &Watermarks,
        new: &Watermarks,
    ) -> Result<i64, StoreError> {
        if new.unclicked <= old.unclicked {
            return Ok(0);
        }
        Ok(self
            .layout
            .keep_clicked(tx, old.unclicked.max(0), new.unclicked)
            .await? as i64)
    }

    /// `(phase, offset, watermark)` rows as saved in `tidemark.watermarks`.
    pub(crate) fn marks(&self, wm: &Watermarks) -> Vec<(String, i64, i64)> {
        let mut m = vec![(
            "impression".to_owned(),
            self.phases.impression_offset,
            wm.impression,
        )];
        for (t, w) in self.phases.targets.iter().zip(&wm.targets) {
            m.push((t.name.clone(), t.offset, *w));
        }
        m.push((
            "unclicked".into(),
            self.phases.unclicked_offset,
            wm.unclicked,
        ));
        m.push(("last".into(), self.phases.last_offset, wm.last));
        m
    }

    /// Consolidation writes rows of `(lo, hi]` into `txns`: make the partitions
    /// for the fresh partitions that hold them.
    async fn ensure_txns_partitions(&mut self, lo: i64, hi: i64) -> Result<(), StoreError> {
        let q = self.txns_partition_ms();
        let needed: BTreeSet<i64> = self
            .events_parts
            .values()
            .filter(|p| p.to_ms > lo && p.from_ms <= hi)
            .map(|p| p.from_ms.div_euclid(q) * q)
            .collect();
        for from in needed {
            self.ensure_partition(true, from).await?;
        }
        Ok(())
    }

    /// Creates the partition of `txns` (else `events`) starting at `from`,
    /// unless it exists.
    async fn ensure_partition(&mut self, txns: bool, from: i64) -> Result<(), StoreError> {
        let (parent, span) = if txns {
            ("txns", self.txns_partition_ms())
        } else {
            ("events", self.partition_ms())
        };
        let parts = if txns {
            &mut self.txns_parts
        } else {
            &mut self.events_parts
        };
        if parts.contains_key(&from) {
            return Ok(());
        }
        let table = self
            .layout
            .create_partition(&self.client, parent, from, from + span)
            .await?;
        parts.insert(
            from,
            Partition {
                from_ms: from,
                to_ms: from + span,
                table,
            },
        );
        Ok(())
    }

    /// Drops, each in its own transaction, the partitions wholly behind the
    /// watermarks that read them. Safe to repeat.
    async fn drop_partitions(&mut self) -> Result<(), StoreError> {
        let Some(wm) = self.wm.clone() else {
            return Ok(());
        };
        for (parts, mark) in [
            (&mut self.events_parts, wm.impression),
            (&mut self.txns_parts, wm.unclicked),
        ] {
            let done: Vec<i64> = parts
                .values()
                .filter(|p| p.to_ms - 1 <= mark)
                .map(|p| p.from_ms)
                .collect();
            for from in done {
                let p = parts.remove(&from).expect("listed");
                self.layout.drop_partition(&self.client, &p.table).await?;
                tracing::debug!(table = p.table, "dropped partition");
            }
        }
        Ok(())
    }

    /// Makes the fresh partitions the next minutes will need before events arrive.
    async fn create_ahead(&mut self, clock: i64) -> Result<(), StoreError> {
        let p = self.partition_ms();
        let first = clock.div_euclid(p) * p;
        for from in (0..3).map(|i| first + i * p) {
            self.ensure_partition(false, from).await?;
        }
        Ok(())
    }
}

/// Exponential backoff for retrying the database: 100 ms doubling to 10 s.
pub struct Backoff {
    next: Duration,
    pub since: Option<Instant>,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(100),
            since: None,
        }
    }

    pub fn reset(&mut self) {
        *self = Backoff::new();
    }

    /// The wait before the next try.
    pub fn fail(&mut self) -> Duration {
        self.since.get_or_insert_with(Instant::now);
        let d = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(10));
        d
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}
