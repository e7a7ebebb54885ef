//! A worker: applies the events of the persons that hash to it, one
//! transaction per batch (first-copy marks, identifiers, persons, trail rows
//! and counts together), on a connection of its own. No two workers ever
//! hold one person, so they never wait on each other's rows.

use std::collections::{BTreeMap, HashMap};

use tidemark_profile::Decayed;
use tidemark_store::profiles::{self, StoredPerson, TrailRow};
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
    /// Per stored counter position - 1: `(configured type index, half-life)`,
    /// or `None` for a stored counter this run does not configure.
    pub counters: Vec<Option<(usize, i64)>>,
    /// `1/rate` (SPEC 11).
    pub weight: f64,
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
    /// Applies `work` in one transaction; on error nothing of it is committed.
    pub async fn apply(&mut self, layout: &Layout, work: &Work) -> Result<(), StoreError> {
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

        let stored: HashMap<String, (i64, StoredPerson)> = profiles::load(&tx, &order)
            .await?
            .into_iter()
            .map(|s| (s.id, (s.first_ts, s.person)))
            .collect();
        let (mut new_ids, mut new_first) = (Vec::new(), Vec::new());
        let (mut lowered, mut lowered_first) = (Vec::new(), Vec::new());
        let mut persons = Vec::with_capacity(order.len());
        let mut trail = Vec::new();
        for id in &order {
            let evs = &events[id];
            let earliest = evs.iter().map(|e| e.ts).min().expect("one event at least");
            let mut p = match stored.get(*id) {
                Some((first_ts, p)) => {
                    if earliest < *first_ts {
                        lowered.push(*id);
                        lowered_first.push(earliest);
                    }
                    p.clone()
                }
                None => {
                    new_ids.push(*id);
                    new_first.push(earliest);
                    StoredPerson {
                        master: id.to_string(),
                        size: 1,
                        ..StoredPerson::default()
                    }
                }
            };
            fit(&mut p, layout);
            for e in evs {
                count(&mut p, layout, e);
                if work.trail_from.is_some_and(|from| e.ts >= from) {
                    trail.push(TrailRow {
                        id: id.to_string(),
                        ts: e.ts,
                        type_name: layout.type_names[e.type_index].clone(),
                        txid: e.txid.as_str().to_owned(),
                        ids: e
                            .ids
                            .sorted()
                            .iter()
                            .map(|i| i.as_str().to_owned())
                            .collect(),
                    });
                }
            }
            persons.push(p);
        }
        let numbers = profiles::insert_ids(&tx, &new_ids, &new_first).await?;
        let mut numbers = numbers.into_iter();
        for (id, p) in order.iter().zip(persons.iter_mut()) {
            if !stored.contains_key(*id) {
                p.person = numbers.next().expect("one number per new identifier");
            }
        }
        profiles::lower_first_ts(&tx, &lowered, &lowered_first).await?;
        profiles::upsert_persons(&tx, &persons, layout.counters.len(), layout.types).await?;
        profiles::insert_trail(&tx, &trail).await?;
        let counts: Vec<(String, i64)> =
            counts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        profiles::add_counts(&tx, self.index, &counts).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Pads a stored person's arrays to the current definitions.
fn fit(p: &mut StoredPerson, layout: &Layout) {
    let k = layout.counters.len();
    p.values.resize(k, 0.0);
    p.refs.resize(k, 0);
    p.counts.resize(layout.types, 0);
    p.firsts.resize(layout.types, 0);
    p.lasts.resize(layout.types, 0);
}

/// Counts one event for a person: its type's count, first and last, and
/// every counter of its type (SPEC 11).
fn count(p: &mut StoredPerson, layout: &Layout, e: &Event) {
    let j = layout.type_pos[e.type_index] as usize - 1;
    if p.counts[j] == 0 {
        p.firsts[j] = e.ts;
        p.lasts[j] = e.ts;
    } else {
        p.firsts[j] = p.firsts[j].min(e.ts);
        p.lasts[j] = p.lasts[j].max(e.ts);
    }
    p.counts[j] += 1;
    for (i, def) in layout.counters.iter().enumerate() {
        if let Some((type_index, half_life)) = def {
            if *type_index == e.type_index {
                let mut c = Decayed {
                    value: p.values[i],
                    reference: p.refs[i],
                };
                c.add(e.ts, layout.weight, *half_life);
                p.values[i] = c.value;
                p.refs[i] = c.reference;
            }
        }
    }
}
