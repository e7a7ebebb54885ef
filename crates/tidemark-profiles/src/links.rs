//! The link stage (SPEC 11 "Persons and links"): every event of a batch
//! that carries several identifiers is applied here, in arrival order, in one
//! transaction on the coordinator's connection, before the workers run.
//!
//! This is how merges are serialised: links are decided by one stage that
//! sees them in order, and the workers, which count single-identifier events
//! in parallel, start only after it committed and are routed by the persons
//! it left. What a transaction decides is `core`'s ([`LinkStage`]: links,
//! riders, caps, refusals, blocklist, masters, merge log); this module runs
//! it: the first-copy marks, one load, fresh person numbers, the plan's
//! statements, one commit.

use std::collections::BTreeMap;

use crate::core::{Caps, Entry, Known, Layout, LinkStage};
use crate::intake::Event;
use crate::store as profiles;
use tidemark_store::StoreError;
use tokio_postgres::Client;

/// What every link-stage transaction of a batch shares.
#[derive(Debug, Clone, Copy)]
pub struct Stage {
    /// `max_ids`, `blocklist_after`.
    pub caps: Caps,
    /// Events at or past this get trail rows (`None`: no trails).
    pub trail_from: Option<i64>,
    /// The stage's rows in `tidemark.profile_counts`.
    pub counts_row: i16,
}

/// Applies `entries` (arrival order) in one transaction; returns the counts
/// by reason to report. What it changes is forgotten in `known`, the
/// workers' ([`Known::forget`]).
pub async fn apply(
    client: &mut Client,
    layout: &Layout,
    stage: Stage,
    entries: &[Entry],
    marking: &mut profiles::Marking,
    known: &mut [&mut Known],
) -> Result<BTreeMap<&'static str, i64>, StoreError> {
    let Stage {
        caps,
        trail_from,
        counts_row,
    } = stage;
    let key = |e: &Event| {
        (
            profiles::seen_key(e.txid.as_str()),
            layout.type_pos[e.type_index],
        )
    };
    let (riders, links): (Vec<&Entry>, Vec<&Entry>) = entries.iter().partition(|e| e.rider);
    let pairs: Vec<(String, i16)> = links.iter().map(|e| key(&e.event)).collect();
    let (tx, first) = loop {
        let tx = client.transaction().await?;
        match profiles::take_marks(&tx, &pairs, marking).await? {
            Some(first) => break (tx, first),
            None => tx.rollback().await?,
        }
    };
    // A rider that is a later copy changes nothing: looked at, not taken.
    let pairs: Vec<(String, i16)> = riders.iter().map(|e| key(&e.event)).collect();
    let old = profiles::already_seen(&tx, &pairs).await?;
    let stage = LinkStage::new(layout, caps, entries, first, old, trail_from);
    let all = stage.identifiers();
    let loaded = profiles::load(&tx, &all).await?;
    let fresh = profiles::new_persons(&tx, all.len() - loaded.len()).await?;
    let plan = stage.plan(loaded, fresh);

    let (absorbed, survivors): (Vec<i64>, Vec<i64>) = plan.absorbed.iter().copied().unzip();
    profiles::absorb(&tx, &absorbed, &survivors).await?;
    profiles::upsert_ids(&tx, &plan.ids).await?;
    profiles::upsert_persons(&tx, &plan.persons, layout.counters.len(), layout.types).await?;
    profiles::log_merges(&tx, &plan.merges).await?;
    profiles::insert_trail(&tx, &plan.trail).await?;
    profiles::add_counts(&tx, counts_row, plan.counts.iter().map(|(k, v)| (*k, *v))).await?;
    // Forgotten before the commit: whether or not it is heard back.
    for k in known.iter_mut() {
        k.forget(&plan);
    }
    tx.commit().await?;
    Ok(plan.counts)
}
