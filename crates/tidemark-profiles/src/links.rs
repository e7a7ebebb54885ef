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

use crate::core::{Caps, Entry, Layout, LinkStage};
use crate::intake::Event;
use crate::store as profiles;
use tidemark_store::StoreError;
use tokio_postgres::Client;

/// Applies `entries` (arrival order) in one transaction; returns the counts
/// by reason to report.
pub async fn apply(
    client: &mut Client,
    layout: &Layout,
    caps: Caps,
    entries: &[Entry],
    trail_from: Option<i64>,
    counts_row: i16,
    marking: &mut profiles::Marking,
) -> Result<BTreeMap<&'static str, i64>, StoreError> {
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
    tx.commit().await?;
    Ok(plan.counts)
}
