//! Sweeping: the watermarks advanced to the clock in slices sized by the
//! buffered rows they visit, each slice one transaction (planned by
//! `phases::plan`, run by the store); then partitions no phase needs are
//! dropped, the next ones made, and retention run.

use std::time::{Duration, Instant};

use crate::telemetry::Counter;
use tidemark_store::StoreError;

use super::Writer;
use crate::liveness::Change;
use crate::phases::{self, Watermarks};
use tidemark_intake::wall_ms;

/// How often a sweep also reads the buffer's rows per tier (metrics).
const TIER_ROWS_EVERY: Duration = Duration::from_secs(5);

impl Writer {
    /// Advances the watermarks to the current clock, in slices, each slice one
    /// transaction that emits, subsets and saves progress; then drops the
    /// partitions no phase needs. Call after `flush`.
    pub async fn sweep(&mut self) -> Result<(), StoreError> {
        let Some(clock) = self.clock() else {
            return Ok(());
        };
        let clock = self.gated(clock);
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

    /// The clock the liveness gate lets the sweep go to (all of it when the
    /// gate is off or open); says when it closes, reopens or gives up.
    fn gated(&mut self, clock: i64) -> i64 {
        let Some(gate) = self.gate.as_mut() else {
            return clock;
        };
        let now = wall_ms();
        let (low, high) = (
            self.counters.live.since_heard(true, now),
            self.counters.live.since_heard(false, now),
        );
        let (to, change) = gate.check(Instant::now(), clock, low, high);
        match change {
            Some(Change::Held) => {
                self.counters.add(Counter::LivenessHolds, 1);
                tracing::warn!(
                    silent_s = low.map_or(0, |d| d.as_secs()),
                    "no click, install or custom event for longer than liveness_silence while bids flow: \
                     holding every phase (a tracker may be down; nothing is emitted until it is heard or liveness_max_hold passes)"
                );
            }
            Some(Change::Resumed(held)) => tracing::info!(
                held_s = held.as_secs(),
                "the low-frequency socket is heard again: sweeping what was held"
            ),
            Some(Change::GaveUp) => {
                self.counters.add(Counter::LivenessGaveUp, 1);
                tracing::error!(
                    "held for liveness_max_hold and the low-frequency socket is still silent: \
                     sweeping anyway; transactions whose windows close now are labelled without the missing events"
                );
            }
            None => {}
        }
        to
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
        let kept = |offset: i64| {
            if offset > self.phases.unclicked_offset {
                clicked
            } else {
                impressed
            }
        };
        let mut phases: Vec<(i64, f64)> = self
            .phases
            .targets
            .iter()
            .flat_map(|t| std::iter::once(t.offset).chain(t.start))
            .map(|o| (o, kept(o)))
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
            self.counters.add(Counter::Pruned, n);
            tracing::debug!(deleted = n, "retention");
        }
        Ok(())
    }

    /// One sweep transaction, to `clock`: the counters counted since the last
    /// write commit with it, or are put back.
    async fn sweep_to(&mut self, clock: i64) -> Result<(), StoreError> {
        // Before the first sweep nothing was swept: start ranges at the epoch.
        let old = self
            .wm
            .clone()
            .unwrap_or_else(|| Watermarks::at(&self.phases, i64::MIN / 4));
        let (new, plan) = phases::plan(&self.phases, &self.config.types, &old, clock);
        if let Some((lo, hi)) = plan.consolidate {
            self.ensure_txns_partitions(lo, hi).await?;
        }
        let deltas = self.counters.take_deltas();
        let started = Instant::now();
        let done = match self
            .layout
            .sweep(
                &mut self.client,
                &plan,
                self.reference,
                self.next_seq,
                &deltas,
            )
            .await
        {
            Ok(done) => done,
            Err(e) => {
                self.counters.unflush(&deltas);
                return Err(e);
            }
        };
        tracing::debug!(ms = started.elapsed().as_millis(), steps = ?done.steps_ms, "swept");
        let c = done.consolidated.unwrap_or_default();
        for (total, n) in
            self.subsetting
                .iter_mut()
                .zip([c.transactions, c.kept, done.kept_clicked])
        {
            *total += n;
        }
        self.next_seq = done.next_seq;
        let watermarks = std::iter::once(("impression".to_owned(), new.impression))
            .chain(
                self.phases
                    .targets
                    .iter()
                    .zip(&new.targets)
                    .map(|(t, w)| (t.name.clone(), *w)),
            )
            .collect();
        self.counters
            .live
            .swept(started.elapsed(), clock, watermarks, &done.emitted);
        self.wm = Some(new);
        self.applied = Some(clock);
        if self
            .tiers_read
            .is_none_or(|t| t.elapsed() >= TIER_ROWS_EVERY)
        {
            // For the metrics endpoint only: a failure here is not the sweep's.
            if let Ok(tiers) = self.layout.tier_rows(&self.client).await {
                self.counters.live.buffer_rows(tiers);
            }
            self.tiers_read = Some(Instant::now());
        }
        Ok(())
    }
}
