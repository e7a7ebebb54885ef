//! A person (SPEC 11): identifiers with the first `ts` of an event carrying
//! each, decayed counters, and per event type the count and first and last
//! `ts`; merged exactly, with the master recomputed.

use std::collections::BTreeMap;

use crate::{CounterDef, Decayed, Identifier};

/// Count, first and last `ts` of one event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeStats {
    /// Events counted (unweighted).
    pub count: u64,
    /// The earliest `ts`, ms.
    pub first: i64,
    /// The latest `ts`, ms.
    pub last: i64,
}

/// What is known of one person.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Person {
    /// Its identifiers, each with the earliest `ts` of an event carrying it.
    pub ids: BTreeMap<Identifier, i64>,
    /// One counter per definition, in configuration order.
    pub counters: Vec<Decayed>,
    /// Per event type name.
    pub types: BTreeMap<String, TypeStats>,
}

impl Person {
    /// Notes that an event at `ts` carried `id` (which belongs to this person).
    pub fn see(&mut self, id: &Identifier, ts: i64) {
        self.ids
            .entry(id.clone())
            .and_modify(|first| *first = (*first).min(ts))
            .or_insert(ts);
    }

    /// Counts an event of `type_name` at `ts` with weight `w` (`1/rate`).
    pub fn count(&mut self, defs: &[CounterDef], type_name: &str, ts: i64, w: f64) {
        self.counters.resize(defs.len(), Decayed::default());
        for (c, d) in self.counters.iter_mut().zip(defs) {
            if d.event == type_name {
                c.add(ts, w, d.half_life_ms);
            }
        }
        self.types
            .entry(type_name.to_owned())
            .and_modify(|s| {
                s.count += 1;
                s.first = s.first.min(ts);
                s.last = s.last.max(ts);
            })
            .or_insert(TypeStats {
                count: 1,
                first: ts,
                last: ts,
            });
    }

    /// Absorbs `other`: identifiers, counters (exactly), counts, first and last.
    pub fn merge(&mut self, other: &Person, defs: &[CounterDef]) {
        for (id, ts) in &other.ids {
            self.see(id, *ts);
        }
        self.counters.resize(defs.len(), Decayed::default());
        for (i, d) in defs.iter().enumerate() {
            let theirs = other.counters.get(i).copied().unwrap_or_default();
            self.counters[i] = self.counters[i].merge(&theirs, d.half_life_ms);
        }
        for (t, s) in &other.types {
            self.types
                .entry(t.clone())
                .and_modify(|m| {
                    m.count += s.count;
                    m.first = m.first.min(s.first);
                    m.last = m.last.max(s.last);
                })
                .or_insert(*s);
        }
    }

    /// The master: the identifier with the smallest (first ts, identifier).
    pub fn master(&self) -> Option<&Identifier> {
        self.ids
            .iter()
            .min_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)))
            .map(|(id, _)| id)
    }

    /// Each counter's value at `t`, by name.
    pub fn counters_at<'a>(&self, defs: &'a [CounterDef], t: i64) -> Vec<(&'a str, f64)> {
        defs.iter()
            .enumerate()
            .map(|(i, d)| {
                let c = self.counters.get(i).copied().unwrap_or_default();
                (d.name.as_str(), c.at(t, d.half_life_ms))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: i64 = 86_400_000;

    fn defs() -> Vec<CounterDef> {
        vec![
            CounterDef {
                name: "clk_7d".into(),
                event: "click".into(),
                half_life_ms: 7 * DAY,
            },
            CounterDef {
                name: "imp_1h".into(),
                event: "impression".into(),
                half_life_ms: 3_600_000,
            },
        ]
    }

    fn id(s: &str) -> Identifier {
        Identifier::parse(s).unwrap()
    }

    #[test]
    fn the_master_is_the_earliest_then_the_smallest() {
        let mut p = Person::default();
        p.see(&id("user:b"), 100);
        p.see(&id("device:z"), 50);
        assert_eq!(p.master(), Some(&id("device:z")));
        p.see(&id("user:a"), 50);
        assert_eq!(
            p.master(),
            Some(&id("device:z")),
            "tie on ts: bytewise smaller"
        );
        p.see(&id("user:b"), 10);
        assert_eq!(p.master(), Some(&id("user:b")), "an earlier event moves it");
        let mut q = Person::default();
        q.see(&id("email:x"), 5);
        p.merge(&q, &defs());
        assert_eq!(p.master(), Some(&id("email:x")), "from the absorbed side");
    }

    proptest! {
        /// Two persons built from any split of a stream, merged, equal one
        /// built from the whole stream (counters to 1e-12 relative).
        #[test]
        fn a_merge_equals_one_person_from_both_streams(
            events in prop::collection::vec(
                (prop::sample::select(vec!["click", "impression", "install"]), 0i64..20 * DAY, any::<bool>()),
                1..100,
            ),
        ) {
            let defs = defs();
            let (mut a, mut b, mut whole) = (Person::default(), Person::default(), Person::default());
            for (t, ts, side) in &events {
                let part = if *side { &mut a } else { &mut b };
                part.count(&defs, t, *ts, 2.0);
                whole.count(&defs, t, *ts, 2.0);
            }
            a.merge(&b, &defs);
            prop_assert_eq!(&a.types, &whole.types);
            let t = events.iter().map(|e| e.1).max().unwrap();
            for ((_, x), (_, y)) in a.counters_at(&defs, t).iter().zip(whole.counters_at(&defs, t)) {
                prop_assert!((x - y).abs() <= 1e-12 * x.abs().max(y.abs()), "{} vs {}", x, y);
            }
        }
    }
}
