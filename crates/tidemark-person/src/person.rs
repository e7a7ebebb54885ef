//! A person (SPEC 11) as the profile process keeps and bidders read it:
//! decayed counters and per-type count, first and last `ts`, by position
//! (the stored arrays' order), with its size and master. Counting and
//! merging are exact, whatever the order.

use crate::Decayed;

/// Count, first and last `ts` of one event type (`count` 0: none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TypeStats {
    /// Events counted (unweighted).
    pub count: i64,
    /// The earliest `ts`, ms.
    pub first: i64,
    /// The latest `ts`, ms.
    pub last: i64,
}

/// What feeds one counter position and how fast it decays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterSlot {
    /// The type position it counts (`None`: a counter no longer configured,
    /// kept and merged but fed no more).
    pub type_slot: Option<usize>,
    /// Its half-life, ms.
    pub half_life_ms: i64,
}

/// What is known of one person.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Person {
    /// Its identifier with the smallest (first ts, identifier).
    pub master: String,
    /// The master's first `ts`.
    pub master_first: i64,
    /// Identifiers it holds.
    pub size: i64,
    /// One counter per position.
    pub counters: Vec<Decayed>,
    /// One entry per type position.
    pub types: Vec<TypeStats>,
}

impl Person {
    /// A person of one identifier, first seen at `first`.
    pub fn new(id: &str, first: i64) -> Person {
        Person {
            master: id.to_owned(),
            master_first: first,
            size: 1,
            ..Person::default()
        }
    }

    /// Pads to `counters` counter and `types` type positions (new ones empty).
    pub fn fit(&mut self, counters: usize, types: usize) {
        self.counters.resize(counters, Decayed::default());
        self.types.resize(types, TypeStats::default());
    }

    /// Notes that identifier `id` of this person was first seen at `first`:
    /// it becomes the master if (first, id) is the smallest.
    pub fn see(&mut self, id: &str, first: i64) {
        if (first, id) < (self.master_first, self.master.as_str()) {
            self.master = id.to_owned();
            self.master_first = first;
        }
    }

    /// Counts an event of type position `type_slot` at `ts` with weight `w`
    /// (`1/rate`): its type's count, first and last, and every counter fed
    /// by that type.
    pub fn count(&mut self, slots: &[CounterSlot], type_slot: usize, ts: i64, w: f64) {
        let t = &mut self.types[type_slot];
        if t.count == 0 {
            (t.first, t.last) = (ts, ts);
        } else {
            (t.first, t.last) = (t.first.min(ts), t.last.max(ts));
        }
        t.count += 1;
        for (c, s) in self.counters.iter_mut().zip(slots) {
            if s.type_slot == Some(type_slot) {
                c.add(ts, w, s.half_life_ms);
            }
        }
    }

    /// Absorbs `other` exactly: counters decayed to a common reference and
    /// summed, counts summed, first and last widened, sizes added, the master
    /// by the rule (it may come from either side).
    pub fn merge(&mut self, other: &Person, slots: &[CounterSlot]) {
        for ((c, o), s) in self.counters.iter_mut().zip(&other.counters).zip(slots) {
            *c = c.merge(o, s.half_life_ms);
        }
        for (t, o) in self.types.iter_mut().zip(&other.types) {
            if o.count == 0 {
                continue;
            }
            if t.count == 0 {
                *t = *o;
            } else {
                (t.first, t.last) = (t.first.min(o.first), t.last.max(o.last));
                t.count += o.count;
            }
        }
        self.size += other.size;
        self.see(&other.master, other.master_first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: i64 = 86_400_000;

    /// Type positions: click 0, impression 1, install 2.
    fn slots() -> Vec<CounterSlot> {
        vec![
            CounterSlot {
                type_slot: Some(0),
                half_life_ms: 7 * DAY,
            },
            CounterSlot {
                type_slot: Some(1),
                half_life_ms: 3_600_000,
            },
        ]
    }

    fn empty(id: &str, first: i64) -> Person {
        let mut p = Person::new(id, first);
        p.fit(2, 3);
        p
    }

    #[test]
    fn the_master_is_the_earliest_then_the_smallest() {
        let mut p = empty("user:b", 100);
        p.see("device:z", 50);
        assert_eq!(p.master, "device:z");
        p.see("user:a", 50);
        assert_eq!(p.master, "device:z", "tie on ts: bytewise smaller");
        p.see("user:b", 10);
        assert_eq!(p.master, "user:b", "an earlier event moves it");
        let q = empty("email:x", 5);
        p.merge(&q, &slots());
        assert_eq!(
            (p.master.as_str(), p.size),
            ("email:x", 2),
            "from the absorbed side"
        );
    }

    proptest! {
        /// Two persons built from any split of a stream, merged, equal one
        /// built from the whole stream (counters to 1e-12 relative).
        #[test]
        fn a_merge_equals_one_person_from_both_streams(
            events in prop::collection::vec((0usize..3, 0i64..20 * DAY, any::<bool>()), 1..100),
        ) {
            let slots = slots();
            let (mut a, mut b, mut whole) = (empty("a:1", 0), empty("b:1", 0), empty("a:1", 0));
            for (t, ts, side) in &events {
                let part = if *side { &mut a } else { &mut b };
                part.count(&slots, *t, *ts, 2.0);
                whole.count(&slots, *t, *ts, 2.0);
            }
            a.merge(&b, &slots);
            prop_assert_eq!(&a.types, &whole.types);
            let t = events.iter().map(|e| e.1).max().unwrap();
            for ((x, y), s) in a.counters.iter().zip(&whole.counters).zip(&slots) {
                let (x, y) = (x.at(t, s.half_life_ms), y.at(t, s.half_life_ms));
                prop_assert!((x - y).abs() <= 1e-12 * x.abs().max(y.abs()), "{} vs {}", x, y);
            }
        }
    }
}
