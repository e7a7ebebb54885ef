//! Which partitions a table split by time needs, and which it can drop
//! (pure: `store` makes and drops them). A partition holds one span of
//! time (a UTC day for trails; an hour or a day for a type's first-copy
//! marks, after its `dedup`); times further behind the clock than the
//! table keeps anything share one catch-all partition, "everything before
//! T". Only a first run on the event clock sees such times (before the
//! first tick nothing is stale, SPEC 11): one partition each would be
//! thousands for txids spread over years, and a read of the parent then
//! locks every one of them.
//!
//! Partitions are ranges, not slots of a fixed grid: a new one is clipped
//! to the ranges beside it, so partitions made under another span (a
//! type's `dedup` changed between runs) stay usable and nothing overlaps.

use std::collections::{BTreeMap, BTreeSet};

/// An hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;
/// A day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// One partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Times `from ≤ t < to`.
    Span(i64, i64),
    /// Everything before this time.
    Before(i64),
}

/// The start of the UTC day holding `ms`.
pub fn day_of(ms: i64) -> i64 {
    start_of(ms, DAY_MS)
}

/// The start of the span of length `span` (from the epoch) holding `ms`.
pub fn start_of(ms: i64, span: i64) -> i64 {
    ms.div_euclid(span) * span
}

/// The span a type's marks are split by: an hour when its `dedup` is under a
/// day (each then goes within an hour of its horizon), else a day.
pub fn mark_span(dedup_ms: i64) -> i64 {
    if dedup_ms < DAY_MS {
        HOUR_MS
    } else {
        DAY_MS
    }
}

/// The partitions one table (or one type's part of it) has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spans {
    /// The length of the partitions this run makes.
    pub span: i64,
    /// Partitions of their own: `from -> to`.
    pub parts: BTreeMap<i64, i64>,
    /// The catch-all's bound, if it exists.
    pub before: Option<i64>,
}

impl Spans {
    /// No partition yet.
    pub fn new(span: i64) -> Spans {
        assert!(span > 0);
        Spans {
            span,
            parts: BTreeMap::new(),
            before: None,
        }
    }

    /// From the partitions found in the database.
    pub fn from_parts(span: i64, parts: impl IntoIterator<Item = Part>) -> Spans {
        let mut s = Spans::new(span);
        for p in parts {
            s.made(p);
        }
        s
    }

    /// Whether a row at `t` has a partition.
    pub fn covered(&self, t: i64) -> bool {
        self.before.is_some_and(|b| t < b)
            || self
                .parts
                .range(..=t)
                .next_back()
                .is_some_and(|(_, to)| t < *to)
    }

    /// The partitions rows at the times `needed` lack, to be made in this
    /// order: a time at or after `floor` (the oldest the table keeps,
    /// judged from the clock or, before there is one, the newest txid) gets
    /// its span's own, clipped to its neighbours; older times go to the
    /// catch-all, made when first needed with a bound no partition lies under.
    pub fn plan(&self, needed: &BTreeSet<i64>, floor: i64) -> Vec<Part> {
        let mut after = self.clone();
        let mut plan = Vec::new();
        for &t in needed {
            // At most twice: a catch-all may not reach `t`, its span will.
            while !after.covered(t) {
                let p = if t < floor && after.before.is_none() {
                    let lowest = after.parts.keys().next().copied().unwrap_or(i64::MAX);
                    Part::Before(floor.min(lowest))
                } else {
                    let start = start_of(t, after.span);
                    let below = after.parts.range(..=t).next_back().map(|(_, to)| *to);
                    let from = [Some(start), below, after.before]
                        .into_iter()
                        .flatten()
                        .max()
                        .expect("start is one");
                    let above = after.parts.range(t..).next().map(|(from, _)| *from);
                    let to = above.map_or(start + after.span, |a| a.min(start + after.span));
                    Part::Span(from, to)
                };
                after.made(p);
                plan.push(p);
            }
        }
        plan
    }

    /// A partition was made.
    pub fn made(&mut self, p: Part) {
        match p {
            Part::Span(from, to) => {
                self.parts.insert(from, to);
            }
            Part::Before(b) => self.before = Some(b),
        }
    }

    /// The partitions holding only rows before `horizon`, oldest first.
    pub fn retired(&self, horizon: i64) -> Vec<Part> {
        let before = self.before.filter(|b| *b <= horizon).map(Part::Before);
        let spans = self.parts.iter().filter(|(_, to)| **to <= horizon);
        before
            .into_iter()
            .chain(spans.map(|(from, to)| Part::Span(*from, *to)))
            .collect()
    }

    /// The oldest span ended at least `after` before `clock`, not yet
    /// wholly behind `horizon` (about to go) and not `skip`ped (by its
    /// start: done, or waiting to be tried again): the next trail day to
    /// pack. Catch-alls are never packed.
    pub fn to_pack(
        &self,
        clock: i64,
        after: i64,
        horizon: i64,
        skip: impl Fn(i64) -> bool,
    ) -> Option<Part> {
        self.parts
            .iter()
            .find(|(from, to)| **to > horizon && to.saturating_add(after) <= clock && !skip(**from))
            .map(|(from, to)| Part::Span(*from, *to))
    }

    /// A partition was dropped.
    pub fn dropped(&mut self, p: Part) {
        match p {
            Part::Span(from, _) => {
                self.parts.remove(&from);
            }
            Part::Before(_) => self.before = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn days(v: &[i64]) -> BTreeSet<i64> {
        v.iter().map(|d| d * DAY_MS).collect()
    }

    fn day(d: i64) -> Part {
        Part::Span(d * DAY_MS, (d + 1) * DAY_MS)
    }

    #[test]
    fn recent_days_get_their_own_and_old_ones_share_the_catch_all() {
        let have = Spans::from_parts(DAY_MS, [day(100)]);
        // Only recent days: each its own, once; any time of a day will do.
        let needed: BTreeSet<i64> = [100 * DAY_MS + 5, 101 * DAY_MS + 7].into();
        assert_eq!(have.plan(&needed, 95 * DAY_MS), [day(101)]);
        // Years of old days: one catch-all under the lowest day partition;
        // days from it up to now keep their own.
        let needed: BTreeSet<i64> = (0..=130).map(|d| d * DAY_MS).collect();
        let plan = have.plan(&needed, 120 * DAY_MS);
        assert_eq!(plan[0], Part::Before(100 * DAY_MS));
        let own: Vec<Part> = (101..=130).map(day).collect();
        assert_eq!(plan[1..], own);
        let mut after = have.clone();
        plan.iter().for_each(|p| after.made(*p));
        assert!(after.plan(&needed, 120 * DAY_MS).is_empty(), "all covered");
        // With no day partition yet, the floor bounds the catch-all.
        let plan = Spans::new(DAY_MS).plan(&days(&[1, 2, 50]), 40 * DAY_MS);
        assert_eq!(plan, [Part::Before(40 * DAY_MS), day(50)]);
    }

    #[test]
    fn days_are_packed_oldest_first_once_ended_and_never_when_about_to_go() {
        let d = Spans::from_parts(
            DAY_MS,
            [Part::Before(10 * DAY_MS), day(10), day(11), day(12)],
        );
        let (none, ten, both) = (days(&[]), days(&[10]), days(&[10, 11]));
        fn skip(s: &BTreeSet<i64>) -> impl Fn(i64) -> bool + '_ {
            move |from| s.contains(&from)
        }
        // Day 11 ends at 12d; an hour later it may be packed, day 10 first.
        assert_eq!(
            d.to_pack(12 * DAY_MS, HOUR_MS, 0, skip(&none)),
            Some(day(10))
        );
        assert_eq!(d.to_pack(12 * DAY_MS, HOUR_MS, 0, skip(&ten)), None);
        assert_eq!(
            d.to_pack(12 * DAY_MS + HOUR_MS, HOUR_MS, 0, skip(&ten)),
            Some(day(11))
        );
        // Day 10 about to be dropped: skipped.
        assert_eq!(
            d.to_pack(12 * DAY_MS + HOUR_MS, HOUR_MS, 11 * DAY_MS, skip(&none)),
            Some(day(11))
        );
        // The open day never.
        assert_eq!(d.to_pack(12 * DAY_MS + 5, 0, 0, skip(&both)), None);
    }

    #[test]
    fn partitions_go_once_wholly_behind_the_horizon() {
        let mut d = Spans::from_parts(DAY_MS, [Part::Before(10 * DAY_MS), day(10), day(11)]);
        assert_eq!(d.retired(10 * DAY_MS), [Part::Before(10 * DAY_MS)]);
        assert_eq!(
            d.retired(11 * DAY_MS + 5),
            [Part::Before(10 * DAY_MS), day(10)]
        );
        d.dropped(Part::Before(10 * DAY_MS));
        d.dropped(day(10));
        assert_eq!(d, Spans::from_parts(DAY_MS, [day(11)]));
    }

    #[test]
    fn a_new_span_is_clipped_to_partitions_made_under_another() {
        // Hours of a type whose dedup grew past a day: today's day partition
        // starts after the last hour and ends before the next one made.
        let h = |n: i64| 100 * DAY_MS + n * HOUR_MS;
        let have = Spans::from_parts(
            DAY_MS,
            [
                Part::Span(h(0), h(1)),
                Part::Span(h(5), h(6)),
                Part::Span(h(20), h(21)),
            ],
        );
        let plan = have.plan(&[h(2), h(7), h(22)].into(), 0);
        assert_eq!(
            plan,
            [
                Part::Span(h(1), h(5)),
                Part::Span(h(6), h(20)),
                Part::Span(h(21), h(24))
            ]
        );
    }

    proptest! {
        /// Whatever was made before (under any span) and whatever times come,
        /// the plan covers them all, and no two partitions overlap.
        #[test]
        fn plans_cover_every_time_and_never_overlap(
            old_span in prop_oneof![Just(HOUR_MS), Just(DAY_MS)],
            span in prop_oneof![Just(HOUR_MS), Just(DAY_MS)],
            old in proptest::collection::btree_set(0i64..2_000, 0..6),
            times in proptest::collection::btree_set(0i64..(20 * DAY_MS), 0..40),
            floor in 0i64..(20 * DAY_MS),
        ) {
            let mut have = Spans::new(old_span);
            let first: BTreeSet<i64> = old.iter().map(|h| h * HOUR_MS * 5).collect();
            for p in have.plan(&first, 0) {
                have.made(p);
            }
            have.span = span;
            let plan = have.plan(&times, floor);
            for p in &plan {
                have.made(*p);
            }
            for t in &times {
                prop_assert!(have.covered(*t), "{t} not covered");
            }
            let mut end = have.before.unwrap_or(i64::MIN);
            for (from, to) in &have.parts {
                prop_assert!(from < to && *from >= end, "{from}..{to} overlaps");
                end = *to;
            }
        }
    }
}
