//! A worker: applies the events of the persons that hash to it, one
//! transaction per batch (first-copy marks, identifiers, persons, trail rows
//! and counts together), on a connection of its own. No two workers ever
//! hold one person, so they never wait on each other's rows. What a
//! transaction decides is `core`'s ([`Share`]); this module runs it: the
//! first-copy marks, one load, the plan's statements, one commit.

use std::collections::BTreeMap;

use crate::core::{Layout, Share, Work};
use crate::store as profiles;
use tidemark_store::StoreError;
use tokio_postgres::Client;

/// One worker and its connection (`None` while the database is away).
pub struct Worker {
    /// Its number: its rows in `tidemark.profile_counts`.
    pub index: i16,
    /// Its connection.
    pub client: Option<Client>,
}

impl Worker {
    /// Applies `work` in one transaction; on error nothing of it is
    /// committed. Returns the counts it committed.
    pub async fn apply(
        &mut self,
        layout: &Layout,
        work: &Work,
    ) -> Result<BTreeMap<&'static str, i64>, StoreError> {
        let client = match &mut self.client {
            Some(c) if !c.is_closed() => c,
            _ => {
                self.client = None;
                return Err(StoreError::Pool("worker connection lost".into()));
            }
        };
        let tx = client.transaction().await?;
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
        let first = profiles::record_seen(&tx, &pairs).await?;
        let share = Share::new(layout, work, first);
        let stored = profiles::load(&tx, &share.identifiers()).await?;
        let plan = share.plan(stored);

        // New identifiers here are each a new person, in `persons` order.
        let numbers = profiles::insert_ids(&tx, &plan.new_ids, &plan.new_first).await?;
        let persons = plan.numbered(numbers);
        profiles::lower_first_ts(&tx, &plan.lowered, &plan.lowered_first).await?;
        profiles::upsert_persons(&tx, &persons, layout.counters.len(), layout.types).await?;
        profiles::insert_trail(&tx, &plan.trail).await?;
        profiles::add_counts(&tx, self.index, plan.counts.iter().map(|(k, v)| (*k, *v))).await?;
        tx.commit().await?;
        Ok(plan.counts)
    }
}
