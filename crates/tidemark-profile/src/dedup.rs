//! First copy wins (SPEC 11): for each (type, txid) the first copy received
//! is the event; later copies change nothing, for `dedup` of txid creation
//! time; copies of transactions older than that are stale.

use std::collections::BTreeSet;

/// The (type, txid) pairs seen within the window, ordered by creation time
/// so the window slides by dropping a prefix.
#[derive(Debug, Clone, Default)]
pub struct Dedup {
    window_ms: i64,
    seen: BTreeSet<(i64, String, String)>,
}

/// What a copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first copy: the event.
    First,
    /// A later copy: changes nothing.
    Duplicate,
    /// Its transaction is older than the window: ignored, counted `stale`.
    Stale,
}

impl Dedup {
    /// Remembers pairs for `window_ms` of creation time.
    pub fn new(window_ms: i64) -> Dedup {
        Dedup {
            window_ms,
            seen: BTreeSet::new(),
        }
    }

    /// Judges a copy of `(type, txid)` created at `created_ms`, against the
    /// process's reference time `now_ms`, and remembers a first copy.
    pub fn judge(&mut self, type_name: &str, txid: &str, created_ms: i64, now_ms: i64) -> Verdict {
        if created_ms < now_ms - self.window_ms {
            return Verdict::Stale;
        }
        if self
            .seen
            .insert((created_ms, type_name.to_owned(), txid.to_owned()))
        {
            Verdict::First
        } else {
            Verdict::Duplicate
        }
    }

    /// Forgets pairs no copy can match any more (created before `now_ms - window`).
    pub fn slide(&mut self, now_ms: i64) {
        let keep = (now_ms - self.window_ms, String::new(), String::new());
        self.seen = self.seen.split_off(&keep);
    }

    /// Pairs remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_copy_wins_within_the_window() {
        let mut d = Dedup::new(1_000);
        assert_eq!(d.judge("click", "t1", 5_000, 5_500), Verdict::First);
        assert_eq!(d.judge("click", "t1", 5_000, 5_600), Verdict::Duplicate);
        assert_eq!(d.judge("install", "t1", 5_000, 5_600), Verdict::First);
        assert_eq!(d.judge("click", "t0", 3_999, 5_000), Verdict::Stale);
        d.slide(7_000);
        assert!(d.is_empty());
        assert_eq!(d.judge("click", "t1", 5_000, 7_000), Verdict::Stale);
    }

    proptest::proptest! {
        /// However copies interleave, each (type, txid) counts exactly once.
        #[test]
        fn duplicates_count_once(
            copies in proptest::collection::vec((0u8..3, 0u8..20), 1..200),
        ) {
            let mut d = Dedup::new(10_000);
            let mut firsts = BTreeSet::new();
            for (t, x) in &copies {
                // A txid carries its creation time.
                let created = i64::from(*x) * 50;
                if d.judge(&t.to_string(), &x.to_string(), created, 5_000) == Verdict::First {
                    proptest::prop_assert!(firsts.insert((*t, *x)), "counted twice");
                }
            }
            let distinct: BTreeSet<(u8, u8)> = copies.iter().map(|c| (c.0, c.1)).collect();
            proptest::prop_assert_eq!(firsts, distinct);
        }
    }
}
