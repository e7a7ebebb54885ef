//! What one link-stage transaction decides (SPEC 11 "Persons and links",
//! "Master"): its entries' first copies, then in arrival order each
//! event's identifiers placed (new ones, earlier first ts), its link steps
//! (merges within `max_ids`, refusals charged to the person at the cap,
//! blocklisting after `blocklist_after` refusals), and the event counted
//! for its person; the merge log, and what to write back.
//!
//! A merge absorbs the smaller side: its identifier rows (at most
//! `max_ids`) are re-pointed and its profile row deleted; the survivor's row
//! takes the sum. Riders (see `batch::split`) only place their identifiers
//! (new ones, an earlier first ts), so each merge sees the masters as they
//! stood in arrival order; a worker records and counts them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tidemark_person::Person;

use super::Event;
use super::{Counts, IdRow, Layout, Merge, StoredId, StoredPerson, TrailRow};

/// `max_ids` and `blocklist_after`.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Most identifiers one person may hold.
    pub max_ids: usize,
    /// Refusals after which an identifier is blocklisted.
    pub blocklist_after: i32,
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

/// What one link-stage transaction writes, in this order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkPlan {
    /// Persons stored before this transaction that were absorbed, each with
    /// the person it finally went into (chains resolved): their identifier
    /// rows are re-pointed and their profile rows deleted (`absorb`).
    pub absorbed: Vec<(i64, i64)>,
    /// Identifier rows new, changed (first ts, refusals, blocklisted) or
    /// moved by a merge, by identifier (`upsert_ids`).
    pub ids: Vec<IdRow>,
    /// Persons new or changed, whole, by number (`upsert_persons`).
    pub persons: Vec<StoredPerson>,
    /// Merges in the order they happened (`log_merges`).
    pub merges: Vec<Merge>,
    /// Trail rows of the events counted (`insert_trail`).
    pub trail: Vec<TrailRow>,
    /// Counts by reason (`add_counts`): `duplicate`, `bad_identifier`,
    /// `no_identifier`, `applied`, `blocklisted` when they happened;
    /// `links_refused` and `merges` always.
    pub counts: Counts,
}

struct IdState {
    person: i64,
    first_ts: i64,
    refusals: i64,
    blocklisted: bool,
    dirty: bool,
}

/// One link-stage transaction, between its first-copy marks and the plan:
/// [`LinkStage::new`] takes the marks, [`LinkStage::identifiers`] says
/// what to load, [`LinkStage::plan`] decides.
#[derive(Debug)]
pub struct LinkStage<'a> {
    layout: &'a Layout,
    caps: Caps,
    trail_from: Option<i64>,
    /// Entries that take effect, in arrival order: first copies of links
    /// and riders whose (type, txid) no first copy took yet.
    firsts: Vec<&'a Entry>,
    counts: Counts,
}

impl<'a> LinkStage<'a> {
    /// `entries` in arrival order; `first`, per link (non-rider) entry in
    /// order, whether this transaction recorded its first copy; `old`, per
    /// rider in order, whether a first copy was taken already (a rider that
    /// is a later copy changes nothing: looked at, not taken). Events at or
    /// past `trail_from` get trail rows (`None`: no trails).
    pub fn new(
        layout: &'a Layout,
        caps: Caps,
        entries: &'a [Entry],
        first: Vec<bool>,
        old: Vec<bool>,
        trail_from: Option<i64>,
    ) -> LinkStage<'a> {
        let (mut first, mut old) = (first.into_iter(), old.into_iter());
        let mut counts = Counts::new();
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
        LinkStage {
            layout,
            caps,
            trail_from,
            firsts,
            counts,
        }
    }

    /// The identifiers the entries that take effect carry, each once,
    /// sorted: what to load. Those not stored each need a fresh person
    /// number.
    pub fn identifiers(&self) -> Vec<&'a str> {
        let all: BTreeSet<&str> = self
            .firsts
            .iter()
            .flat_map(|e| e.event.ids.ids.iter().map(|i| i.as_str()))
            .collect();
        all.into_iter().collect()
    }

    /// Decides the transaction: `loaded`, the stored identifiers among
    /// [`LinkStage::identifiers`] with their persons; `fresh`, one new
    /// person number per identifier not stored, taken in the order new
    /// identifiers appear.
    pub fn plan(self, loaded: Vec<StoredId>, fresh: Vec<i64>) -> LinkPlan {
        let LinkStage {
            layout,
            caps,
            trail_from,
            firsts,
            counts,
        } = self;
        let mut t = Rows::loaded(layout, loaded, counts);
        let mut fresh = fresh.into_iter();
        for entry in firsts {
            let e = &entry.event;
            let l: Vec<String> = e.ids.ids.iter().map(|i| i.as_str().to_owned()).collect();
            for id in &l {
                t.place(id, e.ts, &mut fresh);
            }
            if entry.rider {
                continue;
            }
            t.link(&l, e, caps);
            let primary = e.ids.primary().expect("not empty").as_str();
            let person = t.ids[primary].person;
            let p = t.persons.get_mut(&person).expect("alive");
            layout.count(&mut p.profile, e);
            t.dirty.insert(person);
            if trail_from.is_some_and(|from| e.ts >= from) {
                t.trail.push(layout.trail_row(primary, e));
            }
        }
        t.plan()
    }
}

/// The rows one link-stage transaction holds while it decides: those
/// loaded, and what it changed.
struct Rows<'a> {
    layout: &'a Layout,
    ids: BTreeMap<String, IdState>,
    persons: HashMap<i64, StoredPerson>,
    /// Identifiers in memory per person, so a merge can re-point them.
    members: HashMap<i64, Vec<String>>,
    /// The persons loaded (stored before this transaction).
    stored_before: BTreeSet<i64>,
    /// Absorbed person -> the person it went into (chains resolved at the end).
    into: BTreeMap<i64, i64>,
    merges: Vec<Merge>,
    trail: Vec<TrailRow>,
    /// Persons to write back.
    dirty: BTreeSet<i64>,
    refused: i64,
    counts: Counts,
}

impl<'a> Rows<'a> {
    /// The stored identifiers and their persons, as loaded.
    fn loaded(layout: &'a Layout, loaded: Vec<StoredId>, counts: Counts) -> Self {
        let mut t = Rows {
            layout,
            ids: BTreeMap::new(),
            persons: HashMap::new(),
            members: HashMap::new(),
            stored_before: BTreeSet::new(),
            into: BTreeMap::new(),
            merges: Vec::new(),
            trail: Vec::new(),
            dirty: BTreeSet::new(),
            refused: 0,
            counts,
        };
        for s in loaded {
            let person = s.person.person;
            t.members.entry(person).or_default().push(s.id.clone());
            let row = IdState {
                person,
                first_ts: s.first_ts,
                refusals: s.refusals,
                blocklisted: s.blocklisted,
                dirty: false,
            };
            t.ids.insert(s.id, row);
            t.persons.entry(person).or_insert_with(|| {
                let mut p = s.person;
                p.profile.fit(layout.counters.len(), layout.types);
                p
            });
        }
        t.stored_before = t.persons.keys().copied().collect();
        t
    }

    /// Places `id`, seen at `ts`: a new one is a new person (numbered from
    /// `fresh`), a stored one's first ts lowered if `ts` is earlier.
    fn place(&mut self, id: &str, ts: i64, fresh: &mut impl Iterator<Item = i64>) {
        if let Some(s) = self.ids.get_mut(id) {
            if ts < s.first_ts {
                s.first_ts = ts;
                s.dirty = true;
                let p = self.persons.get_mut(&s.person).expect("loaded");
                p.profile.see(id, ts);
                self.dirty.insert(s.person);
            }
            return;
        }
        let person = fresh.next().expect("a number per new identifier");
        let mut p = StoredPerson {
            person,
            profile: Person::new(id, ts),
        };
        let layout = self.layout;
        p.profile.fit(layout.counters.len(), layout.types);
        self.persons.insert(person, p);
        self.members.insert(person, vec![id.to_owned()]);
        self.dirty.insert(person);
        let row = IdState {
            person,
            first_ts: ts,
            refusals: 0,
            blocklisted: false,
            dirty: true,
        };
        self.ids.insert(id.to_owned(), row);
    }

    /// The link steps of `e`, whose identifiers are `l` (in link order:
    /// user, then ids by kind): each identifier to the first one before it
    /// that is not blocklisted; merged within `max_ids`, else refused.
    fn link(&mut self, l: &[String], e: &Event, caps: Caps) {
        let mut charged: BTreeSet<(String, i64)> = BTreeSet::new();
        // Who a person is to this event's charges: the anchor's person stays
        // one person as it grows, though a larger side that absorbs it gives
        // it its number (SPEC 11 "once per distinct other person").
        let mut name: HashMap<i64, i64> = HashMap::new();
        let named = |name: &HashMap<i64, i64>, p: i64| name.get(&p).copied().unwrap_or(p);
        for i in 1..l.len() {
            if self.ids[&l[i]].blocklisted {
                continue;
            }
            let Some(anchor) = (0..i).find(|&j| !self.ids[&l[j]].blocklisted) else {
                continue;
            };
            let (p, q) = (self.ids[&l[anchor]].person, self.ids[&l[i]].person);
            if p == q {
                continue;
            }
            let size = |p: i64| self.persons[&p].profile.size as usize;
            let (size_p, size_q) = (size(p), size(q));
            if size_p + size_q <= caps.max_ids {
                // The smaller side is absorbed: fewer identifier rows to move.
                let (keep, gone) = if size_q > size_p { (q, p) } else { (p, q) };
                self.merge(keep, gone, e);
                name.insert(keep, named(&name, p));
                continue;
            }
            self.refused += 1;
            // The person at the cap is the larger side, both when equal;
            // each of the event's identifiers in it is charged once per
            // distinct other person.
            if size_p >= size_q {
                self.charge(l, p, named(&name, q), caps, &mut charged);
            }
            if size_q >= size_p {
                self.charge(l, q, named(&name, p), caps, &mut charged);
            }
        }
    }

    /// Merges person `gone` into `keep` at `e`, logging both masters.
    fn merge(&mut self, keep: i64, gone: i64, e: &Event) {
        let g = self.persons.remove(&gone).expect("alive");
        let k = self.persons.get_mut(&keep).expect("alive");
        let kept_master = k.profile.master.clone();
        k.profile.merge(&g.profile, &self.layout.counters);
        // The log names both sides by their masters as they stood: the
        // merged person's master first, whichever side it came from.
        let absorbed = if k.profile.master == kept_master {
            g.profile.master.clone()
        } else {
            kept_master
        };
        self.merges.push(Merge {
            ts: e.ts,
            txid: e.txid.as_str().to_owned(),
            master: k.profile.master.clone(),
            absorbed,
        });
        for id in self.members.remove(&gone).unwrap_or_default() {
            self.ids.get_mut(&id).expect("member").person = keep;
            self.members.entry(keep).or_default().push(id);
        }
        self.into.insert(gone, keep);
        self.dirty.remove(&gone);
        self.dirty.insert(keep);
    }

    /// Charges a refusal against `other` (as the event names it) to each of
    /// `l` in person `cap`, once per (identifier, other person); blocklists
    /// past the limit.
    fn charge(
        &mut self,
        l: &[String],
        cap: i64,
        other: i64,
        caps: Caps,
        charged: &mut BTreeSet<(String, i64)>,
    ) {
        for id in l {
            let s = self.ids.get_mut(id).expect("present");
            if s.person == cap && charged.insert((id.clone(), other)) {
                s.refusals = s.refusals.saturating_add(1);
                s.dirty = true;
                if s.refusals > i64::from(caps.blocklist_after) && !s.blocklisted {
                    s.blocklisted = true;
                    *self.counts.entry("blocklisted").or_default() += 1;
                }
            }
        }
    }

    /// What to write back: persons that existed before this transaction and
    /// were absorbed re-pointed to where they finally went (and deleted),
    /// identifier rows changed, persons changed, the log, trails, counts.
    fn plan(mut self) -> LinkPlan {
        *self.counts.entry("links_refused").or_default() += self.refused;
        *self.counts.entry("merges").or_default() += self.merges.len() as i64;
        let into = &self.into;
        let finally = |mut p: i64| {
            while let Some(n) = into.get(&p) {
                p = *n;
            }
            p
        };
        let absorbed: Vec<(i64, i64)> = into
            .keys()
            .filter(|p| self.stored_before.contains(p))
            .map(|p| (*p, finally(*p)))
            .collect();
        let rows: Vec<IdRow> = (self.ids.iter())
            .filter(|(_, s)| s.dirty || into.contains_key(&s.person))
            .map(|(id, s)| IdRow {
                id: id.clone(),
                person: finally(s.person),
                first_ts: s.first_ts,
                refusals: s.refusals,
                blocklisted: s.blocklisted,
            })
            .collect();
        let written: Vec<StoredPerson> = (self.dirty.iter())
            .filter_map(|p| self.persons.get(p).cloned())
            .collect();
        LinkPlan {
            absorbed,
            ids: rows,
            persons: written,
            merges: self.merges,
            trail: self.trail,
            counts: self.counts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ev, Sim, T0};

    fn link(e: Event) -> Entry {
        Entry {
            event: e,
            rider: false,
        }
    }

    fn merges(plan: &LinkPlan) -> Vec<(i64, &str, &str)> {
        plan.merges
            .iter()
            .map(|m| (m.ts - T0, m.master.as_str(), m.absorbed.as_str()))
            .collect()
    }

    fn counts(plan: &LinkPlan) -> Vec<(&'static str, i64)> {
        plan.counts.iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn refusals(sim: &Sim) -> Vec<(String, i64, bool)> {
        sim.db()
            .ids
            .iter()
            .filter(|(_, s)| s.refusals > 0)
            .map(|(id, s)| (id.clone(), s.refusals, s.blocklisted))
            .collect()
    }

    fn owned<const N: usize>(rows: [(&str, i64, bool); N]) -> Vec<(String, i64, bool)> {
        rows.iter()
            .map(|(i, n, b)| (i.to_string(), *n, *b))
            .collect()
    }

    #[test]
    fn a_link_within_the_cap_merges_and_logs_both_masters() {
        let mut sim = Sim::new(3, 100);
        sim.batch(vec![
            ev(1, 1, T0 + 100, Some("a"), &[]),
            ev(1, 2, T0 + 50, Some("b"), &[]),
        ]);
        let (a, b) = (sim.db().ids["user:a"].person, sim.db().ids["user:b"].person);
        let plan = sim.links(&[link(ev(2, 3, T0 + 200, Some("a"), &[("member", "m")]))]);
        // A new identifier: a fresh person, absorbed at once (never stored).
        assert_eq!(merges(&plan), [(200, "user:a", "member:m")]);
        assert!(plan.absorbed.is_empty());
        let rows: Vec<(&str, i64)> = plan.ids.iter().map(|r| (r.id.as_str(), r.person)).collect();
        assert_eq!(
            rows,
            [("member:m", a)],
            "only the new row; user:a did not change"
        );
        assert_eq!(plan.persons.len(), 1);
        assert_eq!(plan.persons[0].person, a);
        assert_eq!(plan.persons[0].profile.size, 2);
        assert_eq!(
            plan.persons[0].profile.types[2].count, 1,
            "counted for user:a"
        );
        assert_eq!(plan.trail.len(), 1);
        assert_eq!(plan.trail[0].ids, ["member:m", "user:a"]);
        assert_eq!(
            counts(&plan),
            [
                ("applied", 1),
                ("bad_identifier", 0),
                ("links_refused", 0),
                ("merges", 1)
            ]
        );

        // user:b's person (1) joins user:a's (2): the larger survives, the
        // log names the merged master (user:b, first seen earlier) first.
        let plan = sim.links(&[link(ev(1, 4, T0 + 300, Some("b"), &[("member", "m")]))]);
        assert_eq!(merges(&plan), [(300, "user:b", "user:a")]);
        assert_eq!(plan.absorbed, [(b, a)]);
        let p = &sim.db().persons[&a];
        assert_eq!((p.master.as_str(), p.size), ("user:b", 3));
        assert!(
            !sim.db().persons.contains_key(&b),
            "the absorbed row is deleted"
        );
        assert_eq!(sim.person("user:b"), ["member:m", "user:a", "user:b"]);
        sim.check_rows();
    }

    #[test]
    fn equal_sizes_keep_the_anchors_person_and_chains_resolve() {
        let mut sim = Sim::new(10, 100);
        sim.batch(vec![
            ev(1, 1, T0 + 1, None, &[("a", "1")]),
            ev(1, 2, T0 + 2, None, &[("b", "1")]),
            ev(1, 3, T0 + 3, None, &[("d", "1"), ("e", "1"), ("f", "1")]),
        ]);
        let n = |sim: &Sim, id: &str| sim.db().ids[id].person;
        let (a, b, d) = (n(&sim, "a:1"), n(&sim, "b:1"), n(&sim, "d:1"));
        let plan = sim.links(&[
            // Sizes 1 and 1: the anchor's person (a:1's) absorbs b:1's.
            link(ev(1, 4, T0 + 10, None, &[("a", "1"), ("b", "1")])),
            // Sizes 2 and 3: d:1's absorbs them; b:1's went there through a:1's.
            link(ev(1, 5, T0 + 10, None, &[("a", "1"), ("d", "1")])),
        ]);
        assert_eq!(merges(&plan), [(10, "a:1", "b:1"), (10, "a:1", "d:1")]);
        // In person-number order, which follows routing, not arrival.
        let mut absorbed = plan.absorbed.clone();
        absorbed.sort();
        assert_eq!(
            absorbed,
            BTreeSet::from([(a, d), (b, d)])
                .into_iter()
                .collect::<Vec<_>>()
        );
        assert!(
            plan.ids.is_empty(),
            "rows of absorbed persons move by person"
        );
        assert_eq!(plan.persons.len(), 1);
        assert_eq!(plan.persons[0].person, d);
        assert_eq!(plan.persons[0].profile.size, 5);
        assert_eq!(sim.person("b:1"), ["a:1", "b:1", "d:1", "e:1", "f:1"]);
        sim.check_rows();
    }

    #[test]
    fn the_master_is_the_smallest_first_ts_then_the_smallest_identifier() {
        let mut sim = Sim::new(10, 100);
        sim.batch(vec![
            ev(1, 1, T0 + 5, Some("b"), &[]),
            ev(1, 2, T0 + 5, None, &[("c", "1")]),
        ]);
        let plan = sim.links(&[link(ev(1, 3, T0 + 9, Some("b"), &[("c", "1")]))]);
        // A tie on first ts: bytewise, "c:1" < "user:b".
        assert_eq!(merges(&plan), [(9, "c:1", "user:b")]);
        // An earlier event (a worker's) moves the master.
        sim.batch(vec![ev(1, 4, T0 + 1, Some("b"), &[])]);
        assert_eq!(
            sim.db().persons[&sim.db().ids["c:1"].person].master,
            "user:b"
        );
        assert_eq!(sim.db().ids["user:b"].first_ts, T0 + 1);
        // So does one in the link stage (c:1 at T0, before its link), and a
        // new identifier's first ts (a:9 at T0: the tie goes bytewise).
        let plan = sim.links(&[link(ev(1, 5, T0, None, &[("a", "9"), ("c", "1")]))]);
        assert_eq!(merges(&plan), [(0, "a:9", "c:1")]);
        assert_eq!(
            plan.ids.iter().find(|r| r.id == "c:1").unwrap().first_ts,
            T0
        );
        let p = &sim.db().persons[&sim.db().ids["c:1"].person];
        assert_eq!((p.master.as_str(), p.size), ("a:9", 3), "T0: a:9 < c:1");
        sim.check_rows();
    }

    #[test]
    fn a_refused_link_charges_the_person_at_the_cap_once_per_other_person() {
        let mut sim = Sim::new(3, 100);
        sim.batch(vec![ev(1, 1, T0, Some("s"), &[("member", "m1")])]);
        sim.batch(vec![ev(1, 2, T0, Some("s"), &[("member", "m2")])]);
        sim.batch(vec![ev(
            1,
            3,
            T0,
            None,
            &[("member", "m3"), ("idfa", "i3")],
        )]);
        // Sizes 3 and 2: two refused steps against one other person.
        let plan = sim.links(&[link(ev(
            1,
            4,
            T0,
            Some("s"),
            &[("member", "m3"), ("idfa", "i3")],
        ))]);
        assert!(plan.merges.is_empty());
        assert_eq!(
            counts(&plan),
            [
                ("applied", 1),
                ("bad_identifier", 0),
                ("links_refused", 2),
                ("merges", 0)
            ]
        );
        let rows: Vec<(&str, i64)> = plan
            .ids
            .iter()
            .map(|r| (r.id.as_str(), r.refusals))
            .collect();
        assert_eq!(rows, [("user:s", 1)]);
        assert_eq!(refusals(&sim), owned([("user:s", 1, false)]));
        assert_eq!(
            sim.db().persons[&sim.db().ids["user:s"].person].types[1].count,
            3
        );
        assert_eq!(
            sim.db().persons[&sim.db().ids["idfa:i3"].person].types[1].count,
            1
        );
    }

    #[test]
    fn a_refusal_between_persons_of_one_size_charges_both() {
        let mut sim = Sim::new(3, 100);
        sim.batch(vec![
            ev(1, 1, T0, None, &[("a", "1"), ("b", "1")]),
            ev(1, 2, T0, None, &[("c", "1"), ("d", "1")]),
        ]);
        let plan = sim.links(&[link(ev(1, 3, T0, None, &[("b", "1"), ("c", "1")]))]);
        assert_eq!(plan.counts["links_refused"], 1);
        assert_eq!(
            refusals(&sim),
            owned([("b:1", 1, false), ("c:1", 1, false)])
        );
        // Counted for its bytewise-smallest identifier's person.
        assert_eq!(
            sim.db().persons[&sim.db().ids["a:1"].person].types[1].count,
            2
        );
    }

    #[test]
    fn charged_past_blocklist_after_an_identifier_links_nothing_more() {
        let mut sim = Sim::new(2, 1);
        sim.batch(vec![ev(1, 1, T0, Some("s"), &[("m", "1")])]);
        let plan = sim.links(&[link(ev(1, 2, T0, Some("s"), &[("x", "1")]))]);
        assert!(!plan.counts.contains_key("blocklisted"));
        assert_eq!(refusals(&sim), owned([("user:s", 1, false)]));
        // A second refusal: more than blocklist_after (1).
        let plan = sim.links(&[link(ev(1, 3, T0, Some("s"), &[("x", "2")]))]);
        assert_eq!(plan.counts["blocklisted"], 1);
        let row = plan.ids.iter().find(|r| r.id == "user:s").unwrap();
        assert_eq!((row.refusals, row.blocklisted), (2, true));
        // Blocklisted: user:s anchors nothing; the others still link.
        let plan = sim.links(&[link(ev(1, 4, T0, Some("s"), &[("x", "3"), ("y", "3")]))]);
        assert_eq!(merges(&plan), [(0, "x:3", "y:3")]);
        assert_eq!(plan.counts["links_refused"], 0);
        assert_eq!(sim.person("x:3"), ["x:3", "y:3"]);
        assert_eq!(sim.person("user:s"), ["m:1", "user:s"]);
        // Still readable, and still counted for.
        let s = sim.db().persons[&sim.db().ids["user:s"].person].clone();
        assert_eq!((s.size, s.types[1].count), (2, 4));
        // Linking nothing, it meets no cap: no refusal.
        let plan = sim.links(&[link(ev(1, 5, T0, Some("s"), &[("z", "5")]))]);
        assert_eq!(plan.counts["links_refused"], 0);
        assert_eq!(refusals(&sim), owned([("user:s", 2, true)]));
        sim.check_rows();
    }

    #[test]
    fn riders_lower_a_first_ts_before_the_merge_sees_the_masters() {
        let mut sim = Sim::new(10, 100);
        sim.batch(vec![
            ev(1, 1, T0 + 100, Some("a"), &[]),
            ev(1, 2, T0 + 50, None, &[("d", "1")]),
        ]);
        // user:a is seen at 10 (a worker counts that), then linked with d:1:
        // at the merge user:a's first ts is 10, so it is the master.
        sim.batch(vec![
            ev(1, 3, T0 + 10, Some("a"), &[]),
            ev(1, 4, T0 + 200, Some("a"), &[("d", "1")]),
        ]);
        let db = sim.db();
        let log: Vec<(&str, &str)> = db
            .merges
            .iter()
            .map(|m| (m.master.as_str(), m.absorbed.as_str()))
            .collect();
        assert_eq!(log, [("user:a", "d:1")]);
        assert_eq!(sim.db().counts["applied"], 4, "the rider counted once");
        let p = &sim.db().persons[&sim.db().ids["d:1"].person];
        assert_eq!((p.types[1].count, p.types[1].first), (4, T0 + 10));

        // Without it the link stage would have seen d:1 as the master.
        let mut bare = Sim::new(10, 100);
        bare.batch(vec![
            ev(1, 1, T0 + 100, Some("a"), &[]),
            ev(1, 2, T0 + 50, None, &[("d", "1")]),
        ]);
        let plan = bare.links(&[link(ev(1, 4, T0 + 200, Some("a"), &[("d", "1")]))]);
        assert_eq!(merges(&plan), [(200, "d:1", "user:a")]);
    }

    #[test]
    fn a_rider_places_its_identifiers_and_counts_nothing() {
        let layout = crate::sim::layout();
        let caps = Caps {
            max_ids: 10,
            blocklist_after: 100,
        };
        let entries = [
            Entry {
                event: ev(1, 1, T0 + 10, None, &[("d", "1")]),
                rider: true,
            },
            // A rider whose first copy was taken: looked at, not taken.
            Entry {
                event: ev(1, 2, T0 + 5, None, &[("d", "1")]),
                rider: true,
            },
            link(ev(1, 3, T0 + 20, Some("a"), &[("d", "1"), ("Bad", "x")])),
            // A later copy of a link.
            link(ev(1, 4, T0, Some("a"), &[("e", "1")])),
        ];
        let stage = LinkStage::new(
            &layout,
            caps,
            &entries,
            vec![true, false],
            vec![false, true],
            None,
        );
        assert_eq!(stage.identifiers(), ["d:1", "user:a"]);
        let plan = stage.plan(Vec::new(), vec![7, 8]);
        let rows: Vec<(&str, i64, i64)> = plan
            .ids
            .iter()
            .map(|r| (r.id.as_str(), r.person, r.first_ts - T0))
            .collect();
        // One person each (7, then 8), of one size: the anchor's (8) stays.
        assert_eq!(
            rows,
            [("d:1", 8, 10), ("user:a", 8, 20)],
            "d:1 placed by the rider"
        );
        assert_eq!(merges(&plan), [(20, "d:1", "user:a")]);
        assert_eq!(plan.persons.len(), 1);
        assert_eq!(plan.persons[0].profile.types[1].count, 1, "the link only");
        assert!(plan.trail.is_empty(), "no trails");
        assert_eq!(
            counts(&plan),
            [
                ("applied", 1),
                ("bad_identifier", 1),
                ("duplicate", 1),
                ("links_refused", 0),
                ("merges", 1)
            ]
        );
    }
}
