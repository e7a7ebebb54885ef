//! The link stage (SPEC 11 "Persons and links"): every event of a batch
//! that carries several identifiers is applied here, in arrival order, in one
//! transaction on the coordinator's connection, before the workers run.
//!
//! This is how merges are serialised: links are decided by one stage that
//! sees them in order, and the workers, which count single-identifier events
//! in parallel, start only after it committed and are routed by the persons
//! it left. A merge rewrites the absorbed person's identifier rows (at most
//! `max_ids`) and deletes its profile row; the survivor's row takes the sum.
//!
//! Riders make the merge log exact: an event counted by a worker that
//! arrived before a link and lowers the first ts of an identifier in a
//! person about to merge is placed here first (its first ts, not its count),
//! so each merge sees the masters as they stood in arrival order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tidemark_person::Person;
use tidemark_store::profiles::{self, IdRow, Merge, StoredPerson, TrailRow};
use tidemark_store::StoreError;
use tokio_postgres::Client;

use crate::intake::Event;
use crate::worker::{trail_row, Layout};

/// `max_ids` and `blocklist_after`.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Most identifiers one person may hold.
    pub max_ids: usize,
    /// Refusals after which an identifier is blocklisted.
    pub blocklist_after: i32,
}

struct IdState {
    person: i64,
    first_ts: i64,
    refusals: i32,
    blocklisted: bool,
    dirty: bool,
}

/// An event for the link stage, in arrival order.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The event.
    pub event: Event,
    /// Only places its identifiers (new ones, earlier first ts); a worker
    /// records and counts it.
    pub rider: bool,
}

/// Applies `entries` (arrival order) in one transaction; returns the counts
/// by reason to report.
pub async fn apply(
    client: &mut Client,
    layout: &Layout,
    caps: Caps,
    entries: &[Entry],
    trail_from: Option<i64>,
    counts_row: i16,
) -> Result<BTreeMap<&'static str, i64>, StoreError> {
    let tx = client.transaction().await?;
    let key = |e: &Event| {
        (
            profiles::seen_key(e.txid.as_str()),
            layout.type_pos[e.type_index],
        )
    };
    let (riders, links): (Vec<&Entry>, Vec<&Entry>) = entries.iter().partition(|e| e.rider);
    let pairs: Vec<(String, i16)> = links.iter().map(|e| key(&e.event)).collect();
    let mut first = profiles::record_seen(&tx, &pairs).await?.into_iter();
    // A rider that is a later copy changes nothing: looked at, not taken.
    let pairs: Vec<(String, i16)> = riders.iter().map(|e| key(&e.event)).collect();
    let mut old = profiles::already_seen(&tx, &pairs).await?.into_iter();
    let mut counts: BTreeMap<&'static str, i64> = BTreeMap::new();
    let mut firsts: Vec<&Entry> = Vec::new();
    for entry in entries {
        let e = &entry.event;
        if entry.rider {
            if !old.next().expect("one answer per rider") {
                firsts.push(entry);
            }
            continue;
        }
        if !first.next().expect("one answer per link") {
            *counts.entry("duplicate").or_default() += 1;
            continue;
        }
        *counts.entry("bad_identifier").or_default() += i64::from(e.ids.bad);
        if e.ids.ids.is_empty() {
            *counts.entry("no_identifier").or_default() += 1;
            continue;
        }
        *counts.entry("applied").or_default() += 1;
        firsts.push(entry);
    }

    let all: BTreeSet<&str> = firsts
        .iter()
        .flat_map(|e| e.event.ids.ids.iter().map(|i| i.as_str()))
        .collect();
    let all: Vec<&str> = all.into_iter().collect();
    let mut ids: HashMap<String, IdState> = HashMap::new();
    let mut persons: HashMap<i64, StoredPerson> = HashMap::new();
    // Identifiers in memory per person, so a merge can re-point them.
    let mut members: HashMap<i64, Vec<String>> = HashMap::new();
    for s in profiles::load(&tx, &all).await? {
        members
            .entry(s.person.person)
            .or_default()
            .push(s.id.clone());
        ids.insert(
            s.id,
            IdState {
                person: s.person.person,
                first_ts: s.first_ts,
                refusals: s.refusals,
                blocklisted: s.blocklisted,
                dirty: false,
            },
        );
        persons.entry(s.person.person).or_insert_with(|| {
            let mut p = s.person;
            p.profile.fit(layout.counters.len(), layout.types);
            p
        });
    }
    let stored_before: BTreeSet<i64> = persons.keys().copied().collect();
    let mut fresh = profiles::new_persons(&tx, all.len() - ids.len())
        .await?
        .into_iter();
    // Absorbed person -> the person it went into (chains resolved at the end).
    let mut into: HashMap<i64, i64> = HashMap::new();
    let mut merges: Vec<Merge> = Vec::new();
    let mut trail: Vec<TrailRow> = Vec::new();
    let mut dirty: BTreeSet<i64> = BTreeSet::new();
    let mut refused = 0;

    for entry in firsts {
        let e = &entry.event;
        let l: Vec<String> = e.ids.ids.iter().map(|i| i.as_str().to_owned()).collect();
        for id in &l {
            match ids.get_mut(id) {
                Some(s) => {
                    if e.ts < s.first_ts {
                        s.first_ts = e.ts;
                        s.dirty = true;
                        let p = persons.get_mut(&s.person).expect("loaded");
                        p.profile.see(id, e.ts);
                        dirty.insert(s.person);
                    }
                }
                None => {
                    let person = fresh.next().expect("a number per new identifier");
                    let mut p = StoredPerson {
                        person,
                        profile: Person::new(id, e.ts),
                    };
                    p.profile.fit(layout.counters.len(), layout.types);
                    persons.insert(person, p);
                    members.insert(person, vec![id.clone()]);
                    dirty.insert(person);
                    ids.insert(
                        id.clone(),
                        IdState {
                            person,
                            first_ts: e.ts,
                            refusals: 0,
                            blocklisted: false,
                            dirty: true,
                        },
                    );
                }
            }
        }
        if entry.rider {
            continue;
        }
        // Link steps: each identifier to the first one before it that is
        // not blocklisted, in link order (user, then ids by kind).
        let mut charged: BTreeSet<(String, i64)> = BTreeSet::new();
        for i in 1..l.len() {
            if ids[&l[i]].blocklisted {
                continue;
            }
            let Some(anchor) = (0..i).find(|&j| !ids[&l[j]].blocklisted) else {
                continue;
            };
            let (p, q) = (ids[&l[anchor]].person, ids[&l[i]].person);
            if p == q {
                continue;
            }
            let (size_p, size_q) = (
                persons[&p].profile.size as usize,
                persons[&q].profile.size as usize,
            );
            if size_p + size_q <= caps.max_ids {
                // The smaller side is absorbed: fewer identifier rows to move.
                let (keep, gone) = if size_q > size_p { (q, p) } else { (p, q) };
                let g = persons.remove(&gone).expect("alive");
                let k = persons.get_mut(&keep).expect("alive");
                let kept_master = k.profile.master.clone();
                k.profile.merge(&g.profile, &layout.counters);
                // The log names both sides by their masters as they stood:
                // the merged person's master first, whichever side it came from.
                let absorbed = if k.profile.master == kept_master {
                    g.profile.master.clone()
                } else {
                    kept_master
                };
                merges.push(Merge {
                    ts: e.ts,
                    txid: e.txid.as_str().to_owned(),
                    master: k.profile.master.clone(),
                    absorbed,
                });
                for id in members.remove(&gone).unwrap_or_default() {
                    ids.get_mut(&id).expect("member").person = keep;
                    members.entry(keep).or_default().push(id);
                }
                into.insert(gone, keep);
                dirty.remove(&gone);
                dirty.insert(keep);
                continue;
            }
            refused += 1;
            let mut capped = Vec::new();
            if size_p >= size_q {
                capped.push((p, q));
            }
            if size_q >= size_p {
                capped.push((q, p));
            }
            for (cap, other) in capped {
                for id in &l {
                    let s = ids.get_mut(id).expect("present");
                    if s.person == cap && charged.insert((id.clone(), other)) {
                        s.refusals += 1;
                        s.dirty = true;
                        if s.refusals > caps.blocklist_after && !s.blocklisted {
                            s.blocklisted = true;
                            *counts.entry("blocklisted").or_default() += 1;
                        }
                    }
                }
            }
        }
        let primary = e.ids.primary().expect("not empty").as_str();
        let person = ids[primary].person;
        layout.count(&mut persons.get_mut(&person).expect("alive").profile, e);
        dirty.insert(person);
        if trail_from.is_some_and(|from| e.ts >= from) {
            trail.push(trail_row(layout, primary, e));
        }
    }
    *counts.entry("links_refused").or_default() += refused;
    *counts.entry("merges").or_default() += merges.len() as i64;

    // Persons that existed before this batch and were absorbed: their rows
    // are re-pointed to where they finally went, and deleted.
    let finally = |mut p: i64| {
        while let Some(n) = into.get(&p) {
            p = *n;
        }
        p
    };
    let (absorbed, survivors): (Vec<i64>, Vec<i64>) = into
        .keys()
        .filter(|p| stored_before.contains(p))
        .map(|p| (*p, finally(*p)))
        .unzip();
    profiles::absorb(&tx, &absorbed, &survivors).await?;
    let rows: Vec<IdRow> = ids
        .iter()
        .filter(|(_, s)| s.dirty || into.contains_key(&s.person))
        .map(|(id, s)| IdRow {
            id: id.clone(),
            person: finally(s.person),
            first_ts: s.first_ts,
            refusals: s.refusals,
            blocklisted: s.blocklisted,
        })
        .collect();
    profiles::upsert_ids(&tx, &rows).await?;
    let written: Vec<StoredPerson> = dirty
        .iter()
        .filter_map(|p| persons.get(p).cloned())
        .collect();
    profiles::upsert_persons(&tx, &written, layout.counters.len(), layout.types).await?;
    profiles::log_merges(&tx, &merges).await?;
    profiles::insert_trail(&tx, &trail).await?;
    let rows: Vec<(String, i64)> = counts.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    profiles::add_counts(&tx, counts_row, &rows).await?;
    tx.commit().await?;
    Ok(counts)
}
