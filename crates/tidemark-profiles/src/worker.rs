//! A worker: applies the events of the persons that hash to it, one
//! transaction per batch (first-copy marks, identifiers, persons, trail rows
//! and counts together), on a connection of its own. No two workers ever
//! hold one person, so they never wait on each other's rows.

use std::collections::{BTreeMap, HashMap};

use tidemark_person::{CounterSlot, Person};
use tidemark_store::profiles::{self, StoredId, StoredPerson, TrailRow};
use tidemark_store::StoreError;
use tokio_postgres::Client;

use crate::intake::Event;

/// Where each configured type and counter lives in the stored arrays.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Per configured type (by index in `types`): its stored position.
    pub type_pos: Vec<i16>,
    /// Per configured type: its name.
    pub type_names: Vec<String>,
    /// Stored types in all (array length).
    pub types: usize,
    /// Per stored counter position - 1: the type position - 1 feeding it
    /// (`None` for a stored counter this run does not configure) and its half-life.
    pub counters: Vec<CounterSlot>,
    /// `1/rate` (SPEC 11).
    pub weight: f64,
}

impl Layout {
    /// Counts one event for a person (SPEC 11).
    pub fn count(&self, p: &mut Person, e: &Event) {
        let slot = self.type_pos[e.type_index] as usize - 1;
        p.count(&self.counters, slot, e.ts, self.weight);
    }
}

/// The events of one worker's share of a batch, plus counts the coordinator
/// decided for it to commit (duplicates within the batch, stale copies).
#[derive(Debug, Default)]
pub struct Work {
    /// Events in arrival order.
    pub events: Vec<Event>,
    /// Counts to add in the same transaction.
    pub counts: BTreeMap<&'static str, i64>,
    /// Events whose `ts` is at or past this get a trail row (`None`: no trails).
    pub trail_from: Option<i64>,
}

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

        let mut counts = work.counts.clone();
        // The persons touched, in order of first appearance, with their events.
        let mut order: Vec<&str> = Vec::new();
        let mut events: HashMap<&str, Vec<&Event>> = HashMap::new();
        for (e, first) in work.events.iter().zip(first) {
            if !first {
                *counts.entry("duplicate").or_default() += 1;
                continue;
            }
            *counts.entry("bad_identifier").or_default() += i64::from(e.ids.bad);
            let Some(id) = e.ids.primary() else {
                *counts.entry("no_identifier").or_default() += 1;
                continue;
            };
            *counts.entry("applied").or_default() += 1;
            events
                .entry(id.as_str())
                .or_insert_with(|| {
                    order.push(id.as_str());
                    Vec::new()
                })
                .push(e);
        }

        // The earliest ts of every identifier carried. An event with several
        // reaches a worker only when they all sat in one person already
        // (`settle`): its other identifiers can lower their first ts, never link.
        let mut earliest: HashMap<&str, i64> = HashMap::new();
        for e in events.values().flatten() {
            for id in &e.ids.ids {
                let t = earliest.entry(id.as_str()).or_insert(e.ts);
                *t = (*t).min(e.ts);
            }
        }
        let others: Vec<&str> = earliest
            .keys()
            .copied()
            .filter(|id| !events.contains_key(id))
            .collect();
        let all: Vec<&str> = order.iter().chain(&others).copied().collect();
        // Group by person: two identifiers of one (bridged) person share a
        // row, so they must be folded into one state, never written twice.
        let stored: HashMap<String, StoredId> = profiles::load(&tx, &all)
            .await?
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let mut groups: Vec<(Option<StoredPerson>, Vec<&str>)> = Vec::new();
        let mut group_of_person: HashMap<i64, usize> = HashMap::new();
        for id in &all {
            match stored.get(*id) {
                Some(s) => {
                    let g = *group_of_person.entry(s.person.person).or_insert_with(|| {
                        groups.push((Some(s.person.clone()), Vec::new()));
                        groups.len() - 1
                    });
                    groups[g].1.push(id);
                }
                None if events.contains_key(id) => groups.push((None, vec![id])),
                // Never: an event's other identifiers were all stored.
                None => {}
            }
        }
        let (mut new_ids, mut new_first) = (Vec::new(), Vec::new());
        let (mut lowered, mut lowered_first) = (Vec::new(), Vec::new());
        let mut persons = Vec::with_capacity(groups.len());
        let mut trail = Vec::new();
        for (known, ids) in groups {
            let new = known.is_none();
            let mut p = known.unwrap_or_default();
            p.profile.fit(layout.counters.len(), layout.types);
            for id in &ids {
                let earliest = earliest[id];
                match stored.get(*id) {
                    Some(s) if earliest < s.first_ts => {
                        lowered.push(*id);
                        lowered_first.push(earliest);
                        p.profile.see(id, earliest);
                    }
                    Some(_) => {}
                    None => {
                        new_ids.push(*id);
                        new_first.push(earliest);
                        // A new identifier's group holds it alone, nothing counted yet.
                        p.profile = Person::new(id, earliest);
                        p.profile.fit(layout.counters.len(), layout.types);
                    }
                }
                for e in events.get(id).into_iter().flatten() {
                    layout.count(&mut p.profile, e);
                    if work.trail_from.is_some_and(|from| e.ts >= from) {
                        trail.push(trail_row(layout, id, e));
                    }
                }
            }
            persons.push((new, p));
        }
        // New identifiers here are each a new person, in `persons` order.
        let numbers = profiles::insert_ids(&tx, &new_ids, &new_first).await?;
        let mut numbers = numbers.into_iter();
        for (new, p) in persons.iter_mut() {
            if *new {
                p.person = numbers.next().expect("one number per new identifier");
            }
        }
        let persons: Vec<StoredPerson> = persons.into_iter().map(|(_, p)| p).collect();
        profiles::lower_first_ts(&tx, &lowered, &lowered_first).await?;
        profiles::upsert_persons(&tx, &persons, layout.counters.len(), layout.types).await?;
        profiles::insert_trail(&tx, &trail).await?;
        let rows: Vec<(String, i64)> = counts.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        profiles::add_counts(&tx, self.index, &rows).await?;
        tx.commit().await?;
        Ok(counts)
    }
}

/// A trail row: the event under the identifier it counted for.
pub(crate) fn trail_row(layout: &Layout, id: &str, e: &Event) -> TrailRow {
    TrailRow {
        id: id.to_owned(),
        ts: e.ts,
        type_name: layout.type_names[e.type_index].clone(),
        txid: e.txid.as_str().to_owned(),
        ids: e
            .ids
            .sorted()
            .iter()
            .map(|i| i.as_str().to_owned())
            .collect(),
    }
}
