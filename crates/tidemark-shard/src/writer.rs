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
use tidemark_store::{state, ErrorClass, StoreError};
use tidemark_wire::{EventType, Txid};
use tokio_postgres::Client;

use crate::config::{ClockKind, Config, Given};
use crate::counters::Counters;
use crate::intake::{wall_ms, Chunk};
use crate::phases::{route, Phases, Route, Watermarks};

/// The widest a buffer partition grows over sparse stretches.
const MAX_PARTITION_MS: i64 = 86_400_000;

pub(crate) fn error_counter(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::Transient => "db_errors_transient",
        ErrorClass::Resource => "db_errors_resource",
        ErrorClass::Data => "db_errors_data",
        ErrorClass::Unknown => "db_errors_unknown",
    }
}

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
    /// The newest tick intake heard (the `max_future` reference), saved with the clock.
    pub(crate) reference: Option<i64>,
    /// Buffered rows per creation-time bucket of `partition` width: what
    /// sizes sweeps and partitions by rows rather than by time.
    pub(crate) rows_by_bucket: BTreeMap<i64, u64>,
    /// Consecutive failures of an unclassified kind on a live connection.
    pub(crate) unknown_failures: u32,
    /// Transactions swept, kept impressed, kept clicked in this run: how
    /// much of a bucket later phases visit, for sizing sweeps.
    pub(crate) subsetting: [i64; 3],
    /// The last database error, until `tidemark.shards.last_error` holds it.
    pub(crate) unrecorded_error: Option<String>,
}

/// Bounds `[from, to)` of a new partition of buckets `p` wide holding
/// creation time `t`, after `prev` (`from, to, rows`: rows near `target` keep
/// its width, fewer double it up to about a day, more halve it) and before
/// the partition starting at `next`. Never overlaps either.
fn partition_bounds(
    t: i64,
    p: i64,
    prev: Option<(i64, i64, u64)>,
    next: i64,
    target: u64,
) -> (i64, i64) {
    let widest = (MAX_PARTITION_MS / p * p).max(p);
    let width = match prev {
        None => p,
        Some((from, to, rows)) => {
            let w = to - from;
            if rows < target / 2 {
                (w * 2).min(widest)
            } else if rows > target * 2 {
                (w / 2).max(p) / p * p
            } else {
                w
            }
        }
    };
    // Never before the end of the one before, whatever bounds it has.
    let from = (t.div_euclid(p) * p).max(prev.map_or(i64::MIN, |prev| prev.1));
    (from, (from + width).min(next))
}

/// The parts of `[from, to)` no partition in `parts` covers.
fn holes(from: i64, to: i64, parts: &BTreeMap<i64, Partition>) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = from;
    // The one starting before `from` may reach into the range.
    let before = parts.range(..from).next_back().map(|(_, p)| p);
    for p in before
        .into_iter()
        .chain(parts.range(from..to).map(|(_, p)| p))
    {
        if p.from_ms > at {
            out.push((at, p.from_ms.min(to)));
        }
        at = at.max(p.to_ms);
        if at >= to {
            return out;
        }
    }
    if at < to {
        out.push((at, to));
    }
    out
}

/// One pending event: its chunk, its index there, and where it goes.
#[derive(Debug, Clone, Copy)]
struct Item {
    chunk: usize,
    event: usize,
    route: Route,
}

/// An unclassified error repeating this many times on a healthy connection is
/// treated as a refusal of the data.
const UNKNOWN_REPEATS: u32 = 3;

impl Writer {
    fn partition_ms(&self) -> i64 {
        self.config.partition.as_millis() as i64
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
        if let Some(r) = chunk.reference {
            self.reference = Some(self.reference.map_or(r, |e| e.max(r)));
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

    /// Writes every pending event: fresh ones appended with `COPY`, later
    /// ones merged into consolidated rows, in one transaction. A batch the
    /// database refuses for what it holds is split until the refused events
    /// are found; those are quarantined and the rest written. On any other
    /// error what was not written stays pending and the error is returned.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let wm = self
            .wm
            .clone()
            .unwrap_or_else(|| Watermarks::at(&self.phases, i64::MIN / 4));
        // Decide every event's place first; partitions must exist before the COPY.
        let mut items = Vec::with_capacity(self.pending_events);
        let mut fresh_at = BTreeSet::new();
        for (ci, chunk) in self.pending.iter().enumerate() {
            for (ei, e) in chunk.events.iter().enumerate() {
                let route = route(&self.phases, &wm, e.kind, e.created, e.ts);
                if route == Route::Fresh {
                    fresh_at.insert(e.created.div_euclid(self.partition_ms()));
                }
                items.push(Item {
                    chunk: ci,
                    event: ei,
                    route,
                });
            }
        }
        let p = self.partition_ms();
        for bucket in fresh_at {
            self.ensure_events_partition(bucket * p).await?;
        }
        let mut written = vec![false; items.len()];
        let mut todo = Vec::new();
        todo.push(0..items.len());
        let mut result = Ok(());
        while let Some(range) = todo.pop() {
            let err = match self.write(&items[range.clone()]).await {
                Ok(()) => {
                    self.unknown_failures = 0;
                    let p = self.partition_ms();
                    for it in &items[range.clone()] {
                        if it.route == Route::Fresh {
                            let created = self.pending[it.chunk].events[it.event].created;
                            *self
                                .rows_by_bucket
                                .entry(created.div_euclid(p) * p)
                                .or_default() += 1;
                        }
                    }
                    written[range].fill(true);
                    continue;
                }
                Err(e) => e,
            };
            let class = err.class();
            self.counters.add(error_counter(class), 1);
            let isolate = match class {
                ErrorClass::Data => true,
                ErrorClass::Unknown if !self.client.is_closed() => {
                    self.unknown_failures += 1;
                    self.unknown_failures >= UNKNOWN_REPEATS
                }
                _ => false,
            };
            if !isolate {
                result = Err(err);
                break;
            }
            if range.len() == 1 {
                if let Err(e) = self.quarantine(items[range.start], &err).await {
                    result = Err(e);
                    break;
                }
                self.unknown_failures = 0;
                written[range.start] = true;
                continue;
            }
            let mid = range.start + range.len() / 2;
            todo.push(mid..range.end);
            todo.push(range.start..mid);
        }
        if written.iter().all(|w| *w) {
            self.pending.clear();
            self.pending_events = 0;
        } else {
            // Keep only what was not written, so a retry never writes twice.
            let mut keep = written.iter().map(|w| !w);
            for chunk in &mut self.pending {
                chunk
                    .events
                    .retain(|_| keep.next().expect("one flag per event"));
            }
            self.pending.retain(|c| !c.events.is_empty());
            self.pending_events = self.pending.iter().map(|c| c.events.len()).sum();
        }
        result
    }

    /// Writes some pending events in one transaction; counts them on commit.
    async fn write(&self, items: &[Item]) -> Result<(), StoreError> {
        let mut fresh: Vec<EventRow<'_>> = Vec::with_capacity(items.len());
        // Per tier (txns, long): one row per txid, found through `index`.
        let mut merges: [(HashMap<Txid, usize>, Vec<MergeRow>); 2] = Default::default();
        let mut late: Vec<EventType> = Vec::new();
        let mut outside: Vec<EventType> = Vec::new();
        for it in items {
            let chunk = &self.pending[it.chunk];
            let e = &chunk.events[it.event];
            match it.route {
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
                Route::OutsideWindows => outside.push(e.kind),
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
        for kind in outside {
            self.counters.per_type("outside_windows", kind, 1);
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
        Ok(())
    }

    /// Sets aside one event the database refused on its own.
    async fn quarantine(&mut self, it: Item, err: &StoreError) -> Result<(), StoreError> {
        let chunk = &self.pending[it.chunk];
        let e = &chunk.events[it.event];
        let topic = format!("{}-{}", self.config.types.name(e.kind), e.txid.as_str());
        let reason = err.to_string();
        let kept = state::quarantine(
            &self.client,
            &self.layout.shard,
            &state::Quarantined {
                topic: &topic,
                payload: chunk.raw(e).as_bytes(),
                reason: &reason,
                sqlstate: err.sqlstate(),
            },
            self.config.quarantine_max,
        )
        .await?;
        if kept {
            self.counters.add("quarantined", 1);
        } else {
            self.counters.add("quarantine_dropped", 1);
        }
        tracing::warn!(
            topic,
            kept,
            "the database refused one event; set aside in tidemark.quarantine: {reason}"
        );
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
            let end = self.slice_end(a, clock);
            self.sweep_to(end).await?;
        }
        self.forget_buckets();
        self.drop_partitions().await?;
        self.create_ahead(clock).await?;
        self.retain().await?;
        Ok(())
    }

    /// How far one sweep transaction from clock `a` should go towards `clock`:
    /// as far as keeps the buffered rows it visits, over every phase, near
    /// `sweep_rows`. An empty stretch costs nothing however long; a dense
    /// bucket is split in proportion.
    fn slice_end(&self, a: i64, clock: i64) -> i64 {
        let b = self.partition_ms();
        let budget = self.config.sweep_rows;
        // Later phases visit what subsetting kept: scale a bucket's events by
        // the shares kept so far in this run (all of them until known).
        let share = |k: i64, n: i64| {
            if n <= 0 {
                1.0
            } else {
                (k as f64 / n as f64).clamp(0.001, 1.0)
            }
        };
        let [swept, kept, clicked] = self.subsetting;
        let impressed = share(kept, swept);
        let clicked = impressed * share(clicked, kept);
        let mut phases: Vec<(i64, f64)> = self
            .phases
            .targets
            .iter()
            .map(|t| {
                let kept = if t.offset > self.phases.unclicked_offset {
                    clicked
                } else {
                    impressed
                };
                (t.offset, kept)
            })
            .collect();
        phases.push((self.phases.impression_offset, 1.0));
        // (clock at which a bucket starts being swept by a phase, its rows)
        let mut visits: Vec<(i64, u64)> = Vec::new();
        for (o, kept) in phases {
            let (lo, hi) = (a - o, clock - o);
            let first = lo.div_euclid(b) * b;
            for (&start, &rows) in self.rows_by_bucket.range(first..=hi) {
                if start + b > lo {
                    visits.push(((start + o).max(a + 1), (rows as f64 * kept).ceil() as u64));
                }
            }
        }
        visits.sort_unstable();
        let mut end = clock;
        let mut rows = 0;
        for (from, n) in visits {
            if from > a + 1 && rows + n > budget {
                end = from - 1;
                break;
            }
            rows += n;
        }
        if rows > budget {
            // Buckets already under way hold more than one slice: go part of a bucket.
            let step = (b as u128 * u128::from(budget) / u128::from(rows)).max(1) as i64;
            end = end.min(a + step);
        }
        end
    }

    /// Forgets the row counts of buckets no phase will visit again.
    fn forget_buckets(&mut self) {
        if let Some(wm) = &self.wm {
            let keep_from = wm.last.div_euclid(self.partition_ms()) * self.partition_ms();
            self.rows_by_bucket = self.rows_by_bucket.split_off(&keep_from);
        }
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
        // Swept, kept impressed, kept clicked: added to `subsetting` on commit.
        let mut subset = [0i64; 3];
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
                subset[0] = c.transactions;
                subset[1] = c.kept;
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
                    subset[2] = self.keep_clicked(tx, &old, &new).await?;
                    extra.push(("kept_clicked".into(), subset[2]));
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
                    let (lo, hi) = (floor(old.targets[i]), new.targets[i]);
                    tx.batch_execute("SAVEPOINT emit").await?;
                    let (rows, positives) = match self
                        .layout
                        .emit(tx, &sql, lo, hi, unclicked, next_seq)
                        .await
                    {
                        Ok(v) => {
                            tx.batch_execute("RELEASE SAVEPOINT emit").await?;
                            v
                        }
                        Err(e) if e.class() == ErrorClass::Data => {
                            tx.batch_execute("ROLLBACK TO SAVEPOINT emit").await?;
                            let (rows, positives, gaps) = self
                                .emit_row_by_row(tx, &sql, lo, hi, unclicked, next_seq, &e)
                                .await?;
                            extra.push(("emission_gaps".into(), gaps));
                            (rows, positives)
                        }
                        Err(e) => return Err(e),
                    };
                    next_seq += rows;
                    steps.push(("emit", started.elapsed().as_millis()));
                    extra.push((format!("observations_{}", t.name), rows));
                    extra.push((format!("positives_{}", t.name), positives));
                }
            }
            if !moved {
                subset[2] = self.keep_clicked(tx, &old, &new).await?;
                extra.push(("kept_clicked".into(), subset[2]));
            }
            if new.last > old.last {
                extra.push((
                    "forgotten".into(),
                    self.layout.forget(tx, new.last).await? as i64,
                ));
            }
            extra.push(("sweeps".into(), 1));
            let marks = self.marks(&new);
            state::save_progress(
                tx,
                &self.layout.shard,
                clock,
                self.reference,
                next_seq,
                &marks,
            )
            .await?;
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
        for (total, n) in self.subsetting.iter_mut().zip(subset) {
            *total += n;
        }
        self.next_seq = next_seq;
        self.wm = Some(new);
        self.applied = Some(clock);
        Ok(())
    }

    /// The database refused a target's rows as a set: emit them one at a
    /// time, each under its own savepoint, setting aside (recorded by
    /// (target, txid) in `tidemark.emission_gaps`) only the rows refused.
    /// Returns `(rows, positives, set aside)`.
    #[allow(clippy::too_many_arguments)]
    async fn emit_row_by_row(
        &self,
        tx: &Client,
        target: &TargetSql,
        lo: i64,
        hi: i64,
        unclicked: i64,
        next_seq: i64,
        first_error: &StoreError,
    ) -> Result<(i64, i64, i64), StoreError> {
        tracing::warn!(
            target = target.name,
            "the database refused a sweep's observations; emitting them one by one: {first_error}"
        );
        let (mut rows, mut positives, mut gaps) = (0, 0, 0);
        for (txid, created) in self
            .layout
            .population(tx, target, lo, hi, unclicked)
            .await?
        {
            tx.batch_execute("SAVEPOINT one").await?;
            match self
                .layout
                .emit_one(tx, target, &txid, created, unclicked, next_seq + rows)
                .await
            {
                Ok((n, p)) => {
                    tx.batch_execute("RELEASE SAVEPOINT one").await?;
                    rows += n;
                    positives += p;
                }
                Err(e) if e.class() == ErrorClass::Data => {
                    tx.batch_execute("ROLLBACK TO SAVEPOINT one").await?;
                    let reason = e.to_string();
                    state::record_emission_gap(
                        tx,
                        &self.layout.shard,
                        &target.name,
                        &txid,
                        created,
                        &reason,
                    )
                    .await?;
                    tracing::error!(
                        target = target.name,
                        txid,
                        "an observation was refused by the database and set aside (tidemark.emission_gaps): {reason}"
                    );
                    gaps += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok((rows, positives, gaps))
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

    /// Consolidation writes rows of `(lo, hi]` into `txns`: make the `txns`
    /// partitions mirroring the `events` partitions that hold them.
    async fn ensure_txns_partitions(&mut self, lo: i64, hi: i64) -> Result<(), StoreError> {
        // Only where no `txns` partition is yet: one made with other bounds
        // (another partition width, an earlier version) must not be overlapped.
        let needed: Vec<(i64, i64)> = self
            .events_parts
            .values()
            .filter(|p| p.to_ms > lo && p.from_ms <= hi)
            .flat_map(|p| holes(p.from_ms, p.to_ms, &self.txns_parts))
            .collect();
        for (from, to) in needed {
            let table = self
                .layout
                .create_partition(&self.client, "txns", from, to)
                .await?;
            self.txns_parts.insert(
                from,
                Partition {
                    from_ms: from,
                    to_ms: to,
                    table,
                },
            );
        }
        Ok(())
    }

    /// Makes sure an `events` partition covers creation time `t`. A new one
    /// starts at `t`'s bucket and is as wide as keeps it near
    /// `partition_rows`, judged by the partition before it: a sparse replay
    /// gets few wide partitions, a dense stream narrow ones.
    async fn ensure_events_partition(&mut self, t: i64) -> Result<(), StoreError> {
        let p = self.partition_ms();
        let prev = self.events_parts.range(..=t).next_back().map(|(_, v)| v);
        if prev.is_some_and(|prev| prev.to_ms > t) {
            return Ok(());
        }
        let prev = prev.map(|prev| {
            let rows = self
                .rows_by_bucket
                .range(prev.from_ms..prev.to_ms)
                .map(|(_, n)| n)
                .sum();
            (prev.from_ms, prev.to_ms, rows)
        });
        let next = self
            .events_parts
            .range(t + 1..)
            .next()
            .map_or(i64::MAX, |(k, _)| *k);
        let (from, to) = partition_bounds(t, p, prev, next, self.config.partition_rows);
        let table = self
            .layout
            .create_partition(&self.client, "events", from, to)
            .await?;
        self.events_parts.insert(
            from,
            Partition {
                from_ms: from,
                to_ms: to,
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
        for t in (0..3).map(|i| first + i * p) {
            self.ensure_events_partition(t).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(bounds: &[(i64, i64)]) -> BTreeMap<i64, Partition> {
        bounds
            .iter()
            .map(|&(from_ms, to_ms)| {
                (
                    from_ms,
                    Partition {
                        from_ms,
                        to_ms,
                        table: String::new(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn partitions_widen_over_sparse_stretches_and_never_overlap() {
        let p = 7_000;
        assert_eq!(
            partition_bounds(10_000, p, None, i64::MAX, 100),
            (7_000, 14_000)
        );
        // Sparse: twice as wide; dense: half; near the target: the same.
        assert_eq!(
            partition_bounds(15_000, p, Some((7_000, 14_000, 1)), i64::MAX, 100),
            (14_000, 28_000)
        );
        assert_eq!(
            partition_bounds(15_000, p, Some((0, 14_000, 900)), i64::MAX, 100),
            (14_000, 21_000)
        );
        assert_eq!(
            partition_bounds(15_000, p, Some((7_000, 14_000, 100)), i64::MAX, 100),
            (14_000, 21_000)
        );
        // At the cap: a day rounded down to whole buckets.
        let (f, t) = partition_bounds(200_000_000, p, Some((0, 86_394_000, 0)), i64::MAX, 100);
        assert_eq!(t - f, 86_394_000);
        // A previous partition ending inside `t`'s bucket (other bounds,
        // another version): the new one starts where it ends.
        assert_eq!(
            partition_bounds(86_406_500, p, Some((0, 86_406_000, 0)), i64::MAX, 100).0,
            86_406_000
        );
        // The next partition bounds the new one.
        assert_eq!(
            partition_bounds(15_000, p, Some((7_000, 14_000, 1)), 20_000, 100),
            (14_000, 20_000)
        );
    }

    #[test]
    fn holes_are_what_no_partition_covers() {
        assert_eq!(holes(0, 10, &parts(&[])), [(0, 10)]);
        assert_eq!(holes(0, 10, &parts(&[(0, 10)])), []);
        // A wide partition from before covers a narrow range whole.
        assert_eq!(holes(60, 120, &parts(&[(0, 600)])), []);
        assert_eq!(
            holes(0, 100, &parts(&[(-50, 20), (40, 60)])),
            [(20, 40), (60, 100)]
        );
        assert_eq!(holes(0, 100, &parts(&[(90, 200)])), [(0, 90)]);
        assert_eq!(holes(0, 100, &parts(&[(-10, 0), (100, 110)])), [(0, 100)]);
    }
}
