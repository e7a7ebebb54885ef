//! What one worker's transaction decides (SPEC 11 "Events", "Counters",
//! "Trails"): its share's first copies counted, grouped by stored person,
//! each person folded once (new identifiers as new persons, earlier first
//! ts lowered, events counted), trail rows and counts by reason.
//!
//! Its events link nothing: each carries one identifier, or several that
//! already sat in one person when the batch was split (`batch::split`),
//! and the link stage committed before the workers start, so no two
//! workers ever hold one person.

use std::collections::{BTreeMap, HashMap};

use tidemark_person::Person;

use super::Event;
use super::{Counts, Layout, LinkPlan, StoredId, StoredPerson, TrailRow};

/// The events of one worker's share of a batch, plus counts the coordinator
/// decided for it to commit (duplicates within the batch, stale copies).
#[derive(Debug, Default)]
pub struct Work {
    /// Events, grouped by routing key (a person, else an identifier or
    /// txid), in arrival order within each group (`batch::route`).
    pub events: Vec<Event>,
    /// Counts to add in the same transaction.
    pub counts: Counts,
    /// Events whose `ts` is at or past this get a trail row (`None`: no trails).
    pub trail_from: Option<i64>,
}

/// A person to write: `new` ones take, in order, the numbers the insertion
/// of [`WorkPlan::new_ids`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// Whether it is new (its number is not known yet).
    pub new: bool,
    /// The person (number 0 while new).
    pub person: StoredPerson,
}

/// What one worker's transaction writes, in this order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkPlan<'a> {
    /// New identifiers, each a new person, in the order of the new persons
    /// in `persons` (`insert_ids`)...
    pub new_ids: Vec<&'a str>,
    /// ... with their first ts.
    pub new_first: Vec<i64>,
    /// Stored identifiers an earlier event carried (`lower_first_ts`)...
    pub lowered: Vec<&'a str>,
    /// ... with that earlier ts.
    pub lowered_first: Vec<i64>,
    /// Persons touched, whole (`upsert_persons`, once numbered).
    pub persons: Vec<Planned>,
    /// Trail rows of the events counted (`insert_trail`).
    pub trail: Vec<TrailRow>,
    /// Counts by reason (`add_counts`): the coordinator's, and
    /// `duplicate`, `bad_identifier`, `no_identifier`, `applied`.
    pub counts: Counts,
    /// Every identifier of a stored person, as the commit leaves it: its
    /// index in `persons`, first ts, refusals, blocklisted ([`Known::learn`]).
    pub held: Vec<(usize, &'a str, i64, i64, bool)>,
}

impl WorkPlan<'_> {
    /// The persons to write, new ones numbered by `numbers` (one per new
    /// identifier, in order, as `insert_ids` returns them).
    pub fn numbered(&self, numbers: Vec<i64>) -> Vec<StoredPerson> {
        let mut numbers = numbers.into_iter();
        self.persons
            .iter()
            .map(|p| {
                let mut sp = p.person.clone();
                if p.new {
                    sp.person = numbers.next().expect("one number per new identifier");
                }
                sp
            })
            .collect()
    }
}

/// What a worker's commits left of the stored persons it holds, so its
/// next transactions load only what it does not know: a Zipf-skewed
/// stream brings the same persons back batch after batch (about 70% of a
/// batch's persons were in earlier ones; docs/benchmarks.md).
///
/// Sound because a stored person is routed to one worker, by its number,
/// for the life of the process (`batch::route`), and only that worker and
/// the link stage write it: every link-stage plan is forgotten
/// ([`Known::forget`]) before its commit, heard back or not; a worker's
/// failed transaction forgets all it knows (a commit whose reply was lost
/// may have happened), as does every connection opened again (it may be
/// to a promoted standby that missed the last commits). A person new in a
/// transaction is not kept: it was routed by its identifier, and may
/// belong to another worker from the next batch. Holds at most `cap`
/// persons: when full, it keeps those used since it was last full, unless
/// they are more than half of `cap`, and drops the rest.
#[derive(Debug, Default)]
pub struct Known {
    /// Identifier -> (first ts, refusals, blocklisted, person number).
    ids: HashMap<String, (i64, i64, bool, i64)>,
    /// Person -> (person, used since the last eviction).
    persons: HashMap<i64, (StoredPerson, bool)>,
    cap: usize,
}

impl Known {
    /// Empty, holding at most `cap` persons.
    pub fn new(cap: usize) -> Known {
        Known {
            cap,
            ..Known::default()
        }
    }

    /// How many persons it holds.
    pub fn persons(&self) -> usize {
        self.persons.len()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.persons.clear();
    }

    /// Splits `ids` into what is known (as a load would find it) and what
    /// is to load.
    pub fn split<'i>(&mut self, ids: &[&'i str]) -> (Vec<StoredId>, Vec<&'i str>) {
        let (mut known, mut load) = (Vec::new(), Vec::new());
        for id in ids {
            let found = self
                .ids
                .get(*id)
                .and_then(|&(first_ts, refusals, blocklisted, n)| {
                    let (person, used) = self.persons.get_mut(&n)?;
                    *used = true;
                    Some(StoredId {
                        id: (*id).to_owned(),
                        first_ts,
                        refusals,
                        blocklisted,
                        person: person.clone(),
                    })
                });
            match found {
                Some(s) => known.push(s),
                None => load.push(*id),
            }
        }
        (known, load)
    }

    /// Takes in what a committed plan wrote: `persons`, the plan's persons
    /// numbered ([`WorkPlan::numbered`]); new ones are left out.
    pub fn learn(&mut self, plan: &WorkPlan, persons: &[StoredPerson]) {
        if self.persons.len() + persons.len() > self.cap {
            self.evict();
        }
        if self.persons.len() + persons.len() > self.cap {
            self.clear();
        }
        if persons.len() > self.cap {
            // None kept: and none of them left as they were before.
            return;
        }
        for &(index, id, first_ts, refusals, blocklisted) in &plan.held {
            let person = persons[index].person;
            self.ids
                .insert(id.to_owned(), (first_ts, refusals, blocklisted, person));
        }
        for (p, planned) in persons.iter().zip(&plan.persons) {
            if !planned.new {
                // Found here by this transaction: still used since the last eviction.
                let used = self.persons.get(&p.person).is_some_and(|(_, used)| *used);
                self.persons.insert(p.person, (p.clone(), used));
            }
        }
    }

    /// Keeps the persons used since the last eviction (if they are at
    /// most half of `cap`), marked unused; drops the rest and the
    /// identifiers of persons dropped.
    fn evict(&mut self) {
        self.persons.retain(|_, (_, used)| std::mem::take(used));
        if self.persons.len() > self.cap / 2 {
            self.persons.clear();
        }
        let persons = &self.persons;
        self.ids.retain(|_, v| persons.contains_key(&v.3));
    }

    /// Forgets what a committed link-stage plan changed: its identifiers,
    /// its persons, the persons it absorbed (their identifiers moved).
    pub fn forget(&mut self, plan: &LinkPlan) {
        for r in &plan.ids {
            self.ids.remove(&r.id);
        }
        for p in &plan.persons {
            self.persons.remove(&p.person);
        }
        for (absorbed, into) in &plan.absorbed {
            self.persons.remove(absorbed);
            self.persons.remove(into);
        }
    }
}

/// One worker's transaction between its first-copy marks and the plan:
/// [`Share::new`] takes the marks, [`Share::identifiers`] says what to
/// load, [`Share::plan`] decides.
#[derive(Debug)]
pub struct Share<'a> {
    layout: &'a Layout,
    trail_from: Option<i64>,
    counts: Counts,
    /// The primaries, in order of first appearance.
    order: Vec<&'a str>,
    /// The first copies counted for each primary, in arrival order.
    events: HashMap<&'a str, Vec<&'a Event>>,
    /// The earliest ts of every identifier carried by a first copy.
    earliest: BTreeMap<&'a str, i64>,
}

impl<'a> Share<'a> {
    /// `first`: per event of `work` in order, whether this transaction
    /// recorded its first copy.
    pub fn new(layout: &'a Layout, work: &'a Work, first: Vec<bool>) -> Share<'a> {
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
        // (`split`): its other identifiers can lower their first ts, never link.
        let mut earliest: BTreeMap<&str, i64> = BTreeMap::new();
        for e in events.values().flatten() {
            for id in &e.ids.ids {
                let t = earliest.entry(id.as_str()).or_insert(e.ts);
                *t = (*t).min(e.ts);
            }
        }
        Share {
            layout,
            trail_from: work.trail_from,
            counts,
            order,
            events,
            earliest,
        }
    }

    /// What to load: the primaries in order of first appearance, then the
    /// other identifiers carried, sorted.
    pub fn identifiers(&self) -> Vec<&'a str> {
        let others = self
            .earliest
            .keys()
            .copied()
            .filter(|id| !self.events.contains_key(id));
        self.order.iter().copied().chain(others).collect()
    }

    /// Decides the transaction: `stored`, the stored identifiers among
    /// [`Share::identifiers`] with their persons.
    pub fn plan(self, stored: Vec<StoredId>) -> WorkPlan<'a> {
        let layout = self.layout;
        let all = self.identifiers();
        let stored: HashMap<String, StoredId> =
            stored.into_iter().map(|s| (s.id.clone(), s)).collect();
        // Group by person: two identifiers of one (bridged) person share a
        // row, so they must be folded into one state, never written twice.
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
                None if self.events.contains_key(id) => groups.push((None, vec![id])),
                // Never: an event's other identifiers were all stored.
                None => {}
            }
        }
        let mut plan = WorkPlan {
            counts: self.counts,
            ..WorkPlan::default()
        };
        for (known, ids) in groups {
            let new = known.is_none();
            let mut p = known.unwrap_or_default();
            p.profile.fit(layout.counters.len(), layout.types);
            for id in &ids {
                let earliest = self.earliest[id];
                if let Some(s) = stored.get(*id) {
                    let first = s.first_ts.min(earliest);
                    let index = plan.persons.len();
                    plan.held
                        .push((index, id, first, s.refusals, s.blocklisted));
                }
                match stored.get(*id) {
                    Some(s) if earliest < s.first_ts => {
                        plan.lowered.push(*id);
                        plan.lowered_first.push(earliest);
                        p.profile.see(id, earliest);
                    }
                    Some(_) => {}
                    None => {
                        plan.new_ids.push(*id);
                        plan.new_first.push(earliest);
                        // A new identifier's group holds it alone, nothing counted yet.
                        p.profile = Person::new(id, earliest);
                        p.profile.fit(layout.counters.len(), layout.types);
                    }
                }
                for e in self.events.get(id).into_iter().flatten() {
                    layout.count(&mut p.profile, e);
                    if self.trail_from.is_some_and(|from| e.ts >= from) {
                        plan.trail.push(layout.trail_row(id, e));
                    }
                }
            }
            plan.persons.push(Planned { new, person: p });
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ev, layout, type_name, Sim, T0};

    fn work(events: Vec<Event>, trail_from: Option<i64>) -> Work {
        Work {
            events,
            counts: Counts::from([("stale", 2), ("duplicate", 1)]),
            trail_from,
        }
    }

    fn counts(plan: &WorkPlan) -> Vec<(&'static str, i64)> {
        plan.counts.iter().map(|(k, v)| (*k, *v)).collect()
    }

    #[test]
    fn first_copies_are_counted_and_later_ones_only_as_duplicates() {
        let layout = layout();
        let w = work(
            vec![
                ev(1, 1, T0, Some("a"), &[]),
                ev(1, 2, T0, Some("a"), &[]),
                ev(1, 3, T0, Some(""), &[]),
                ev(2, 4, T0, Some("b"), &[("Bad", "x")]),
            ],
            None,
        );
        let share = Share::new(&layout, &w, vec![true, false, true, true]);
        assert_eq!(share.identifiers(), ["user:a", "user:b"]);
        let plan = share.plan(Vec::new());
        assert_eq!(
            counts(&plan),
            [
                ("applied", 2),
                ("bad_identifier", 2),
                ("duplicate", 2),
                ("no_identifier", 1),
                ("stale", 2)
            ],
            "the coordinator's counts commit with them"
        );
        assert_eq!(plan.new_ids, ["user:a", "user:b"]);
        let persons = plan.numbered(vec![5, 6]);
        let got: Vec<(i64, &str, i64, i64)> = persons
            .iter()
            .map(|p| {
                let t = &p.profile.types;
                (p.person, p.profile.master.as_str(), t[1].count, t[2].count)
            })
            .collect();
        assert_eq!(got, [(5, "user:a", 1, 0), (6, "user:b", 0, 1)]);
        assert!(plan.trail.is_empty());
    }

    #[test]
    fn a_new_identifier_is_one_new_person_first_seen_at_its_earliest_event() {
        let layout = layout();
        let w = work(
            vec![
                ev(1, 1, T0 + 30, Some("a"), &[]),
                ev(1, 2, T0 + 10, Some("a"), &[]),
                ev(2, 3, T0 + 20, Some("a"), &[]),
            ],
            Some(T0 + 15),
        );
        let plan = Share::new(&layout, &w, vec![true; 3]).plan(Vec::new());
        assert_eq!(
            (plan.new_ids.as_slice(), plan.new_first.as_slice()),
            (&["user:a"][..], &[T0 + 10][..])
        );
        assert_eq!(plan.persons.len(), 1);
        let p = &plan.persons[0].person.profile;
        assert_eq!(
            (p.master.as_str(), p.master_first, p.size),
            ("user:a", T0 + 10, 1)
        );
        assert_eq!(
            (p.types[1].count, p.types[1].first, p.types[1].last),
            (2, T0 + 10, T0 + 30)
        );
        assert_eq!(p.types[2].count, 1);
        let trail: Vec<i64> = plan.trail.iter().map(|r| r.ts - T0).collect();
        assert_eq!(trail, [30, 20], "at or past trail_from, in arrival order");
        assert_eq!(type_name(&layout, plan.trail[1].type_pos), "install");
    }

    #[test]
    fn identifiers_of_one_person_fold_into_one_row_and_lower_first_ts() {
        let mut sim = Sim::new(10, 100);
        sim.batch(vec![ev(1, 1, T0 + 50, Some("a"), &[("d", "1")])]);
        let person = sim.db().ids["user:a"].person;
        let w = work(
            vec![
                ev(1, 2, T0 + 60, None, &[("d", "1")]),
                ev(1, 3, T0 + 40, Some("a"), &[("d", "1")]),
                ev(1, 4, T0 + 70, Some("a"), &[]),
            ],
            None,
        );
        let layout = layout();
        let share = Share::new(&layout, &w, vec![true; 3]);
        assert_eq!(share.identifiers(), ["d:1", "user:a"]);
        let plan = share.plan(sim.db().load(&["d:1", "user:a"]));
        assert!(plan.new_ids.is_empty());
        assert_eq!(plan.lowered, ["d:1", "user:a"]);
        assert_eq!(plan.lowered_first, [T0 + 40, T0 + 40]);
        assert_eq!(plan.persons.len(), 1, "one row per person");
        let p = &plan.persons[0];
        assert!(!p.new);
        assert_eq!(p.person.person, person);
        // A tie on first ts: bytewise.
        assert_eq!(p.person.profile.master, "d:1");
        assert_eq!(
            (p.person.profile.size, p.person.profile.types[1].count),
            (2, 4)
        );

        sim.work(&w);
        assert_eq!(sim.db().ids["user:a"].first_ts, T0 + 40);
        sim.check_rows();
    }

    #[test]
    fn when_full_it_keeps_the_persons_found_in_it_since_it_was_last_full() {
        let mut sim = Sim::new(10, 100);
        let users = ["a", "b", "c", "d", "e"];
        let one = |n: u128, u: &str| ev(1, n, T0 + n as i64, Some(u), &[]);
        sim.batch(users.iter().zip(1..).map(|(u, n)| one(n, u)).collect());
        let mut known = Known::new(4);
        let mut n = 10;
        for round in [&["a", "b", "c"][..], &["a"], &["d", "e"]] {
            let events = round.iter().map(|u| {
                n += 1;
                one(n, u)
            });
            sim.work_knowing(&work(events.collect(), None), &mut known);
        }
        // a was found in it (round 2), b and c were not: full at round 3,
        // it kept a and made room for d and e.
        let (got, load) = known.split(&["user:a", "user:b", "user:c", "user:d", "user:e"]);
        let got: Vec<&str> = got.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            (got, load),
            (vec!["user:a", "user:d", "user:e"], vec!["user:b", "user:c"])
        );
    }

    #[test]
    fn a_worker_knows_its_persons_as_a_load_would_find_them_when_full_too() {
        let mut sim = Sim::new(10, 100);
        let users = ["a", "b", "c", "d"];
        let one = |n: u128, u: &str| ev(1, n, T0 + n as i64, Some(u), &[]);
        sim.batch(users.iter().zip(1..).map(|(u, n)| one(n, u)).collect());
        let mut known = Known::new(3);
        let mut n = 10;
        // a alone, then a with three others (more than it holds), then a
        // again, then b and c: each time what it knows is what is stored.
        for round in [&["a"][..], &users[..], &["a"], &["b", "c"], &["a", "b"]] {
            let events = round.iter().map(|u| {
                n += 1;
                one(n, u)
            });
            let w = work(events.collect(), None);
            let ids: Vec<String> = round.iter().map(|u| format!("user:{u}")).collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            let (got, _) = known.split(&ids);
            for g in got {
                assert_eq!(
                    Some(&g),
                    sim.db().load(&[g.id.as_str()]).first(),
                    "{round:?}"
                );
            }
            sim.work_knowing(&w, &mut known);
        }
        let (got, load) = known.split(&["user:a", "user:b", "user:z"]);
        assert_eq!((got.len(), load.as_slice()), (2, &["user:z"][..]));
        assert_eq!(got, sim.db().load(&["user:a", "user:b"]));
    }
}
