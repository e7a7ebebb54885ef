//! A worker: applies the events of the persons that hash to it, in
//! transactions paced to a few tens of milliseconds each (first-copy
//! marks, identifiers, persons, trail rows and counts together), on a
//! connection of its own. No two workers ever
//! hold one person, so they never wait on each other's rows. What a
//! transaction decides is `core`'s ([`Share`]); this module runs it: the
//! first-copy marks, one load, the plan's statements, one commit.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::core::{Known, Layout, Pace, Share, Work};
use crate::store as profiles;
use crate::tables::{Connection, ProfileTables};
use tidemark_store::StoreError;
use tokio_postgres::Client;

/// One worker and its connection (`None` while the database is away).
pub(crate) struct Worker<C = Client> {
    /// Its number: its rows in `tidemark.profile_counts`.
    pub index: i16,
    /// Its connection.
    pub client: Option<C>,
    /// How many events its next transaction takes.
    pub pace: Pace,
    /// How many entries its next link-stage transaction takes (the link
    /// stage runs on its connection too, `crate::links`).
    pub link_pace: Pace,
    /// How its next transaction takes first-copy marks.
    pub marking: profiles::Marking,
    /// The persons its commits left ([`Known`]); the link stage's plans
    /// are forgotten in it.
    pub known: Known,
}

impl<C: Connection> Worker<C> {
    /// Applies `work` in transactions of [`Pace`]d size, in its order
    /// (grouped by routing key, `batch::route`; the counts ride with the first), each committed part leaving
    /// `work`; returns what committed and, on an error, leaves in `work`
    /// what did not. A person split over two transactions is loaded back by
    /// the second: its first-copy marks say what the first applied.
    pub async fn apply_paced(
        &mut self,
        layout: &Layout,
        work: &mut Work,
    ) -> (BTreeMap<&'static str, i64>, Result<(), StoreError>) {
        let mut done: BTreeMap<&'static str, i64> = BTreeMap::new();
        while !work.events.is_empty() || !work.counts.is_empty() {
            let n = work.events.len().min(self.pace.events());
            let piece = Work {
                events: work.events.drain(..n).collect(),
                counts: std::mem::take(&mut work.counts),
                trail_from: work.trail_from,
            };
            let started = Instant::now();
            let result = self.apply(layout, &piece).await;
            match result {
                Ok(counts) => {
                    self.pace.took(n, started.elapsed());
                    for (k, v) in counts {
                        *done.entry(k).or_default() += v;
                    }
                }
                Err(e) => {
                    let Work {
                        mut events, counts, ..
                    } = piece;
                    events.append(&mut work.events);
                    work.events = events;
                    work.counts = counts;
                    return (done, Err(e));
                }
            }
        }
        (done, Ok(()))
    }

    /// Applies `work` in one transaction; on error nothing of it is
    /// committed. Returns the counts it committed.
    pub async fn apply(
        &mut self,
        layout: &Layout,
        work: &Work,
    ) -> Result<BTreeMap<&'static str, i64>, StoreError> {
        let result = self.try_apply(layout, work).await;
        if result.is_err() {
            // A commit whose reply was lost may have happened.
            self.known.clear();
        }
        result
    }

    async fn try_apply(
        &mut self,
        layout: &Layout,
        work: &Work,
    ) -> Result<BTreeMap<&'static str, i64>, StoreError> {
        let client = match &mut self.client {
            Some(c) if !c.is_closed() => c,
            _ => {
                self.client = None;
                return Err(StoreError::Lost("a worker's connection".into()));
            }
        };
        let pairs: Vec<(String, i16)> = work
            .events
            .iter()
            .map(|e| {
                (
                    profiles::seen_key(e.txid.as_str()),
                    layout.type_pos[e.type_index],
                )
            })
            .collect();
        let (tx, first) = loop {
            let tx = client.begin().await?;
            match tx.take_marks(&pairs, &mut self.marking).await? {
                Some(first) => break (tx, first),
                None => tx.rollback().await?,
            }
        };
        let share = Share::new(layout, work, first);
        let (mut stored, load) = self.known.split(&share.identifiers());
        stored.extend(tx.load(&load).await?);
        let plan = share.plan(stored);

        // New identifiers here are each a new person, in `persons` order.
        let numbers = tx.insert_ids(&plan.new_ids, &plan.new_first).await?;
        let persons = plan.numbered(numbers);
        tx.lower_first_ts(&plan.lowered, &plan.lowered_first)
            .await?;
        tx.upsert_persons(&persons, layout.counters.len(), layout.types)
            .await?;
        tx.insert_trail(&plan.trail).await?;
        tx.add_counts(self.index, &plan.counts).await?;
        tx.commit().await?;
        self.known.learn(&plan, &persons);
        Ok(plan.counts)
    }
}
