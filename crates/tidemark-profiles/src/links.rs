//! The link stage (SPEC 11 "Persons and links"): every event of a batch
//! that may link (it carries several identifiers not already in one
//! person), with its riders, is applied here before the workers run.
//!
//! This is how merges are kept apart: the entries are dealt into groups
//! that share no identifier and no person (`core::groups`), one per
//! connection (the coordinator's and each worker's, idle until the link
//! stage commits); the groups run concurrently, each in arrival order in
//! its own paced transactions ([`apply_group`]), and the workers start
//! only after every group committed, routed by the persons they left. What
//! a transaction decides is `core`'s ([`LinkStage`]: links, riders, caps,
//! refusals, blocklist, masters, merge log); this module runs it: the
//! first-copy marks, one load, fresh person numbers, the plan's
//! statements, one commit.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Instant;

use crate::core::{Caps, Entry, Event, Known, Layout, LinkPlan, LinkStage, Pace};
use crate::refusals::{refused, set_aside};
use crate::store as profiles;
use crate::tables::{Connection, ProfileTables};
use crate::Config;
use tidemark_store::StoreError;
use tidemark_wire::Txid;

/// A connection that applies one group, with what it keeps between batches.
pub struct Conn<'c, C> {
    /// The connection (`None` while it is away: the group waits for the retry).
    pub client: Option<&'c mut C>,
    /// How many entries its next link-stage transaction takes.
    pub pace: &'c mut Pace,
    /// How its next transaction takes first-copy marks.
    pub marking: &'c mut profiles::Marking,
}

/// What one group's run left.
pub struct GroupDone {
    /// Counts committed, by reason.
    pub counts: BTreeMap<&'static str, i64>,
    /// Riders the database refused and that were set aside: their worker
    /// part (same txid and type) would be refused alike.
    pub set_aside: Vec<(Txid, usize)>,
    /// Errors of no known class in a row, as it leaves them.
    pub unknown_failures: u32,
    /// The error that stopped it; what is left of the group stays in it.
    pub result: Result<(), StoreError>,
}

/// Applies `entries` (one group, arrival order) on `conn` in paced
/// transactions, each committed one leaving `entries`; a transaction the
/// database refuses for what it holds is halved until the refused entry is
/// alone and set aside. Any other error stops it and, between their
/// transactions, every other group (`stop`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn apply_group<C: Connection>(
    conn: Conn<'_, C>,
    config: &Config,
    layout: &Layout,
    stage: Stage,
    entries: &mut Vec<Entry>,
    known: &RefCell<Vec<&mut Known>>,
    stop: &Cell<bool>,
    mut unknown_failures: u32,
) -> GroupDone {
    let mut done = GroupDone {
        counts: BTreeMap::new(),
        set_aside: Vec::new(),
        unknown_failures,
        result: Ok(()),
    };
    let Some(client) = conn.client.filter(|c| !c.is_closed()) else {
        if !entries.is_empty() {
            done.result = Err(StoreError::Lost("the link stage's connection".into()));
        }
        return done;
    };
    let mut limit = conn.pace.events();
    while !entries.is_empty() {
        if stop.get() {
            // Another group failed (perhaps the coordinator's connection,
            // and the profile lock with it): the retry takes up the rest.
            done.result = Err(StoreError::Lost(
                "stopped: another link group's connection failed".into(),
            ));
            break;
        }
        let n = entries.len().min(limit);
        let started = Instant::now();
        let applied = apply(client, layout, stage, &entries[..n], conn.marking, known).await;
        match applied {
            Ok(plan) => {
                conn.pace.took(n, started.elapsed());
                unknown_failures = 0;
                for (k, v) in plan.counts {
                    *done.counts.entry(k).or_default() += v;
                }
                entries.drain(..n);
                limit = (limit * 2).min(conn.pace.events());
            }
            Err(e) if refused(&e, &mut unknown_failures, client.is_closed()) => {
                if n > 1 {
                    limit = n / 2;
                    continue;
                }
                let entry = &entries[0];
                match set_aside(client, config, &entry.event, &e, stage.counts_row).await {
                    Ok(reason) => {
                        *done.counts.entry(reason).or_default() += 1;
                        if entry.rider {
                            let e = &entry.event;
                            done.set_aside.push((e.txid, e.type_index));
                        }
                        entries.remove(0);
                    }
                    Err(e) => {
                        stop.set(true);
                        done.result = Err(e);
                        break;
                    }
                }
            }
            Err(e) => {
                stop.set(true);
                done.result = Err(e);
                break;
            }
        }
    }
    done.unknown_failures = unknown_failures;
    done
}

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

/// Applies `entries` (arrival order) in one transaction; returns its plan
/// (the counts by reason to report are its `counts`). What it changes is
/// forgotten in `known`, the workers' ([`Known::forget`]), before the
/// commit.
pub(crate) async fn apply<C: Connection>(
    client: &mut C,
    layout: &Layout,
    stage: Stage,
    entries: &[Entry],
    marking: &mut profiles::Marking,
    known: &RefCell<Vec<&mut Known>>,
) -> Result<LinkPlan, StoreError> {
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
        let tx = client.begin().await?;
        match tx.take_marks(&pairs, marking).await? {
            Some(first) => break (tx, first),
            None => tx.rollback().await?,
        }
    };
    // A rider that is a later copy changes nothing: looked at, not taken.
    let pairs: Vec<(String, i16)> = riders.iter().map(|e| key(&e.event)).collect();
    let old = tx.already_seen(&pairs).await?;
    let stage = LinkStage::new(layout, caps, entries, first, old, trail_from);
    let all = stage.identifiers();
    let loaded = tx.load(&all).await?;
    let fresh = tx.new_persons(all.len() - loaded.len()).await?;
    let plan = stage.plan(loaded, fresh);

    let (absorbed, survivors): (Vec<i64>, Vec<i64>) = plan.absorbed.iter().copied().unzip();
    tx.absorb(&absorbed, &survivors).await?;
    tx.upsert_ids(&plan.ids).await?;
    tx.upsert_persons(&plan.persons, layout.counters.len(), layout.types)
        .await?;
    tx.log_merges(&plan.merges).await?;
    tx.insert_trail(&plan.trail).await?;
    tx.add_counts(counts_row, &plan.counts).await?;
    // Forgotten before the commit: whether or not it is heard back.
    for k in known.borrow_mut().iter_mut() {
        k.forget(&plan);
    }
    tx.commit().await?;
    Ok(plan)
}
