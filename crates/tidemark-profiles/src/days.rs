//! Which partitions a table split by UTC day needs, and which it can drop
//! (pure: `store` makes and drops them). A day has its partition; days
//! further behind the clock than the table keeps anything share one
//! catch-all partition, "everything before day D". Only a first run on
//! the event clock sees such days (before the first tick nothing is stale,
//! SPEC 11): one partition each would be thousands for txids spread over
//! years, and a read of the parent then locks every one of them.

use std::collections::BTreeSet;

/// A day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// One partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The UTC day starting at this ms.
    Day(i64),
    /// Everything before the UTC day starting at this ms.
    Before(i64),
}

/// The start of the UTC day holding `ms`.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS) * DAY_MS
}

/// The partitions one table has.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Days {
    /// Days with a partition of their own.
    pub days: BTreeSet<i64>,
    /// The catch-all's bound, if it exists.
    pub before: Option<i64>,
}

impl Days {
    /// From the partitions found in the database.
    pub fn from_parts(parts: impl IntoIterator<Item = Part>) -> Days {
        let mut d = Days::default();
        for p in parts {
            d.made(p);
        }
        d
    }

    /// The partitions rows of `needed` days lack, to be made in this order:
    /// a day at or after `floor` (the oldest day the table keeps, judged
    /// from the clock or, before there is one, the newest txid) gets its
    /// own; older days go to the catch-all, made when first needed with a
    /// bound no day partition lies under.
    pub fn plan(&self, needed: &BTreeSet<i64>, floor: i64) -> Vec<Part> {
        let covered = |d: i64| self.before.is_some_and(|b| d < b) || self.days.contains(&d);
        let missing: Vec<i64> = needed.iter().copied().filter(|d| !covered(*d)).collect();
        let mut plan = Vec::new();
        let mut before = self.before;
        if before.is_none() && missing.iter().any(|d| *d < floor) {
            let lowest_day = self.days.first().copied().unwrap_or(i64::MAX);
            let bound = floor.min(lowest_day);
            plan.push(Part::Before(bound));
            before = Some(bound);
        }
        plan.extend(
            missing
                .into_iter()
                .filter(|d| before.is_none_or(|b| *d >= b))
                .map(Part::Day),
        );
        plan
    }

    /// A partition was made.
    pub fn made(&mut self, p: Part) {
        match p {
            Part::Day(d) => {
                self.days.insert(d);
            }
            Part::Before(b) => self.before = Some(b),
        }
    }

    /// The partitions holding only rows before `horizon`, oldest first.
    pub fn retired(&self, horizon: i64) -> Vec<Part> {
        let before = self.before.filter(|b| *b <= horizon).map(Part::Before);
        let days = self.days.iter().filter(|d| **d + DAY_MS <= horizon);
        before
            .into_iter()
            .chain(days.map(|d| Part::Day(*d)))
            .collect()
    }

    /// A partition was dropped.
    pub fn dropped(&mut self, p: Part) {
        match p {
            Part::Day(d) => {
                self.days.remove(&d);
            }
            Part::Before(_) => self.before = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(v: &[i64]) -> BTreeSet<i64> {
        v.iter().map(|d| d * DAY_MS).collect()
    }

    #[test]
    fn recent_days_get_their_own_and_old_ones_share_the_catch_all() {
        let have = Days::from_parts([Part::Day(100 * DAY_MS)]);
        // Only recent days: each its own, once.
        assert_eq!(
            have.plan(&days(&[100, 101]), 95 * DAY_MS),
            [Part::Day(101 * DAY_MS)]
        );
        // Years of old days: one catch-all under the lowest day partition;
        // days from it up to now keep their own.
        let needed: BTreeSet<i64> = (0..=130).map(|d| d * DAY_MS).collect();
        let plan = have.plan(&needed, 120 * DAY_MS);
        assert_eq!(plan[0], Part::Before(100 * DAY_MS));
        let own: Vec<Part> = (101..=130).map(|d| Part::Day(d * DAY_MS)).collect();
        assert_eq!(plan[1..], own);
        let mut after = have.clone();
        plan.iter().for_each(|p| after.made(*p));
        assert!(after.plan(&needed, 120 * DAY_MS).is_empty(), "all covered");
        // With no day partition yet, the floor bounds the catch-all.
        let plan = Days::default().plan(&days(&[1, 2, 50]), 40 * DAY_MS);
        assert_eq!(plan, [Part::Before(40 * DAY_MS), Part::Day(50 * DAY_MS)]);
    }

    #[test]
    fn partitions_go_once_wholly_behind_the_horizon() {
        let mut d = Days::from_parts([
            Part::Before(10 * DAY_MS),
            Part::Day(10 * DAY_MS),
            Part::Day(11 * DAY_MS),
        ]);
        assert_eq!(d.retired(10 * DAY_MS), [Part::Before(10 * DAY_MS)]);
        assert_eq!(
            d.retired(11 * DAY_MS + 5),
            [Part::Before(10 * DAY_MS), Part::Day(10 * DAY_MS)]
        );
        d.dropped(Part::Before(10 * DAY_MS));
        d.dropped(Part::Day(10 * DAY_MS));
        assert_eq!(d, Days::from_parts([Part::Day(11 * DAY_MS)]));
    }
}
