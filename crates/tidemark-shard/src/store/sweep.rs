//! A shard's two kinds of transaction, whole: writing a batch of events,
//! and running one sweep. The shard decides *what* (its phases compute a
//! [`SweepPlan`], pure and unit-tested); this runs it in one
//! `tokio_postgres::Transaction`, which rolls back if dropped unfinished.

use std::time::Instant;

use tokio_postgres::Client;

use super::buffer::{Consolidated, EventRow, Layout, MergeRow};
use super::state;
use crate::phases::{Emission, SweepPlan, SweepStep, TargetSql};
use crate::telemetry::{Counter, Family};
use tidemark_store::{ErrorClass, StoreError};

/// What a committed sweep did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepOutcome {
    /// The impression phase's counts, if it ran.
    pub consolidated: Option<Consolidated>,
    /// Transactions copied to `long`.
    pub kept_clicked: i64,
    /// Per target emitted: `(name, rows, positives)`.
    pub emitted: Vec<(String, i64, i64)>,
    /// Observations the database refused, set aside in `tidemark.emission_gaps`.
    pub emission_gaps: i64,
    /// Long-wait transactions let go.
    pub forgotten: i64,
    /// The next observation number after this sweep.
    pub next_seq: i64,
    /// Milliseconds from the start at the end of each step, for the debug log.
    pub steps_ms: Vec<(&'static str, u128)>,
}

impl SweepOutcome {
    /// The counters this sweep adds, as stored.
    pub fn counters(&self) -> Vec<(String, i64)> {
        let name = |c: Counter| c.name().to_owned();
        let mut out = vec![(name(Counter::Sweeps), 1)];
        if let Some(c) = &self.consolidated {
            out.extend([
                (name(Counter::TransactionsSwept), c.transactions),
                (name(Counter::KeptImpressed), c.kept),
                (name(Counter::Orphans), c.orphans),
                (name(Counter::Unimpressed), c.unimpressed),
                (name(Counter::Duplicates), c.duplicates),
            ]);
        }
        out.push((name(Counter::KeptClicked), self.kept_clicked));
        out.push((name(Counter::EmissionGaps), self.emission_gaps));
        out.push((name(Counter::Forgotten), self.forgotten));
        // An early target emits up to three times a sweep: one counter each.
        let mut by_target: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
        for (t, rows, positives) in &self.emitted {
            let sum = by_target.entry(t).or_default();
            sum.0 += rows;
            sum.1 += positives;
        }
        for (t, (rows, positives)) in by_target {
            out.push((Family::Observations.name(t), rows));
            out.push((Family::Positives.name(t), positives));
        }
        out.retain(|(_, v)| *v != 0);
        out
    }
}

/// What a committed batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Fresh rows copied.
    pub written: u64,
    /// Indices of merges into `txns` that found no row.
    pub unmatched_txns: Vec<usize>,
    /// Indices of merges into `long` that found no row.
    pub unmatched_long: Vec<usize>,
}

impl Layout {
    /// Writes a batch in one transaction: fresh events appended with `COPY`,
    /// later ones merged into consolidated rows of `txns` or `long`.
    pub async fn write_batch(
        &self,
        c: &mut Client,
        fresh: &[EventRow<'_>],
        txns: &[MergeRow],
        long: &[MergeRow],
    ) -> Result<BatchOutcome, StoreError> {
        let tx = c.transaction().await?;
        let written = self.copy_events(&tx, fresh).await?;
        let unmatched_txns = self.merge(&tx, false, txns).await?;
        let unmatched_long = self.merge(&tx, true, long).await?;
        tx.commit().await?;
        Ok(BatchOutcome {
            written,
            unmatched_txns,
            unmatched_long,
        })
    }

    /// Runs one sweep in one transaction: the plan's steps, the progress
    /// (`clock`, `reference`, the next `seq`, watermarks) and the counters
    /// (`counters` plus the sweep's own) commit together or not at all, and
    /// the commit waits for its WAL record (observations are the durable
    /// product). A target's rows the database refuses as a set are emitted
    /// one by one, setting aside only those refused.
    pub async fn sweep(
        &self,
        c: &mut Client,
        plan: &SweepPlan,
        reference: Option<i64>,
        next_seq: i64,
        counters: &[(String, i64)],
    ) -> Result<SweepOutcome, StoreError> {
        let started = Instant::now();
        let mut out = SweepOutcome {
            next_seq,
            ..SweepOutcome::default()
        };
        let mut tx = c.transaction().await?;
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .await?;
        if let Some((lo, hi)) = plan.consolidate {
            out.consolidated = Some(self.consolidate(&tx, lo, hi).await?);
            out.steps_ms
                .push(("consolidate", started.elapsed().as_millis()));
        }
        for step in &plan.steps {
            match step {
                SweepStep::KeepClicked { lo, hi } => {
                    out.kept_clicked += self.keep_clicked(&tx, *lo, *hi).await? as i64;
                    out.steps_ms
                        .push(("keep_clicked", started.elapsed().as_millis()));
                }
                SweepStep::Emit {
                    target,
                    emission,
                    lo,
                    hi,
                    unclicked,
                } => {
                    let sp = tx.savepoint("emit").await?;
                    let range = (*lo, *hi, *unclicked);
                    let emitted = self
                        .emit(&sp, (target, *emission), range, (out.next_seq, plan.clock))
                        .await;
                    let (rows, positives) = match emitted {
                        Ok(v) => {
                            sp.commit().await?;
                            v
                        }
                        Err(e) if e.class() == ErrorClass::Data => {
                            sp.rollback().await?;
                            let (rows, positives, gaps) = self
                                .emit_row_by_row(
                                    &mut tx,
                                    (target, *emission),
                                    range,
                                    (out.next_seq, plan.clock),
                                    &e,
                                )
                                .await?;
                            out.emission_gaps += gaps;
                            (rows, positives)
                        }
                        Err(e) => return Err(e),
                    };
                    out.next_seq += rows;
                    out.emitted.push((target.name.clone(), rows, positives));
                    out.steps_ms.push(("emit", started.elapsed().as_millis()));
                }
            }
        }
        if let Some(hi) = plan.forget_through {
            out.forgotten = self.forget(&tx, hi).await? as i64;
        }
        state::save_progress(
            &tx,
            &self.shard,
            plan.clock,
            reference,
            out.next_seq,
            &plan.marks,
        )
        .await?;
        let mut all = counters.to_vec();
        all.extend(out.counters());
        state::add_counters(&tx, &self.shard, &all).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// The database refused a target's rows as a set: emit them one at a
    /// time, each under its own savepoint, setting aside (recorded by
    /// (target, txid) in `tidemark.emission_gaps`) only the rows refused.
    /// Returns `(rows, positives, set aside)`.
    async fn emit_row_by_row(
        &self,
        tx: &mut tokio_postgres::Transaction<'_>,
        (target, emission): (&TargetSql, Emission),
        (lo, hi, unclicked): (i64, i64, i64),
        (next_seq, clock): (i64, i64),
        first_error: &StoreError,
    ) -> Result<(i64, i64, i64), StoreError> {
        tracing::warn!(
            target = target.name,
            "the database refused a sweep's observations; emitting them one by one: {first_error}"
        );
        let (mut rows, mut positives, mut gaps) = (0, 0, 0);
        let selection = self
            .selection(&*tx, (target, emission), lo, hi, unclicked)
            .await?;
        for (txid, created) in selection {
            let sp = tx.savepoint("one").await?;
            match self
                .emit_one(
                    &sp,
                    (target, emission),
                    (&txid, created),
                    unclicked,
                    (next_seq + rows, clock),
                )
                .await
            {
                Ok((n, p)) => {
                    sp.commit().await?;
                    rows += n;
                    positives += p;
                }
                Err(e) if e.class() == ErrorClass::Data => {
                    sp.rollback().await?;
                    let reason = e.to_string();
                    state::record_emission_gap(
                        &*tx,
                        &self.shard,
                        &target.name,
                        &txid,
                        created,
                        &reason,
                    )
                    .await?;
                    if matches!(emission, Emission::Late | Emission::Provisional) {
                        // No later row of this target follows without it.
                        self.settle_early(&*tx, &target.name, (&txid, created))
                            .await?;
                    }
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
}
