//! A decayed counter: `Σ w · 2^(-(t - ts) / half_life)` over the events
//! counted, at any time `t`.
//!
//! Forward decay (Cormode et al.): each event's weight is fixed relative to a
//! reference time, so the sum does not depend on arrival order. Keeping it
//! relative to one fixed landmark overflows (a 1 s half-life over a year is
//! 2^31,536,000), so the reference moves with the newest event and the value
//! is rescaled as it moves: the state is the counter's value *at* the
//! reference, which is always a finite, representable number.

/// A decayed counter: its value at `reference` (ms since the epoch). The
/// half-life is the counter definition's, passed to each call so the state
/// stays 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Decayed {
    /// The counter's value at `reference`.
    pub value: f64,
    /// Milliseconds since the epoch; the newest `ts` counted (0 when empty).
    pub reference: i64,
}

/// `2^(-dt / half_life)` for `dt` in ms (negative `dt` grows).
#[inline]
fn factor(dt: i64, half_life_ms: i64) -> f64 {
    (-(dt as f64) / half_life_ms as f64).exp2()
}

impl Decayed {
    /// Counts an event of weight `w` at `ts`.
    pub fn add(&mut self, ts: i64, w: f64, half_life_ms: i64) {
        if self.value == 0.0 {
            *self = Decayed {
                value: w,
                reference: ts,
            };
        } else if ts > self.reference {
            self.value = self.value * factor(ts - self.reference, half_life_ms) + w;
            self.reference = ts;
        } else {
            self.value += w * factor(self.reference - ts, half_life_ms);
        }
    }

    /// The counter's value at `t` (before its newest event too: then terms
    /// are above their weight).
    pub fn at(&self, t: i64, half_life_ms: i64) -> f64 {
        if self.value == 0.0 {
            return 0.0;
        }
        self.value * factor(t - self.reference, half_life_ms)
    }

    /// The sum of two counters of one definition (a merge of two persons):
    /// exact whatever each has seen, as both are decayed to the later
    /// reference first.
    pub fn merge(&self, other: &Decayed, half_life_ms: i64) -> Decayed {
        if other.value == 0.0 {
            return *self;
        }
        if self.value == 0.0 {
            return *other;
        }
        let reference = self.reference.max(other.reference);
        Decayed {
            value: self.value * factor(reference - self.reference, half_life_ms)
                + other.value * factor(reference - other.reference, half_life_ms),
            reference,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: i64 = 86_400_000;

    /// The definition, summed term by term at `t` (no state, no rescaling).
    fn direct(events: &[(i64, f64)], t: i64, h: i64) -> f64 {
        events.iter().map(|&(ts, w)| w * factor(t - ts, h)).sum()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs()) || (a == 0.0 && b == 0.0)
    }

    #[test]
    fn one_half_life_halves() {
        let mut c = Decayed::default();
        c.add(1_000, 2.0, 500);
        assert_eq!(c.at(1_500, 500), 1.0);
        assert_eq!(c.at(500, 500), 4.0);
        assert_eq!(std::mem::size_of::<Decayed>(), 16);
    }

    #[test]
    fn a_one_second_half_life_over_a_year_stays_finite() {
        let mut c = Decayed::default();
        let year = 365 * DAY;
        c.add(0, 1.0, 1_000);
        c.add(year, 1.0, 1_000);
        c.add(year / 2, 1.0, 1_000);
        assert_eq!(c.at(year, 1_000), 1.0, "older terms decayed to nothing");
        assert!(c.value.is_finite());
        let mut d = Decayed::default();
        d.add(year, 1.0, 1_000);
        d.add(0, 1.0, 1_000);
        assert_eq!(c.merge(&d, 1_000).at(year, 1_000), 2.0);
    }

    proptest! {
        /// Any split of a stream, each part in any order, merged in any
        /// order, equals the definition to 1e-12 relative.
        #[test]
        fn any_split_in_any_order_merges_exactly(
            events in prop::collection::vec((0i64..30 * DAY, 0.5f64..4.0), 1..200),
            parts in 1usize..6,
            seed in any::<u64>(),
            h in prop::sample::select(vec![1_000i64, 3_600_000, DAY, 7 * DAY, 30 * DAY]),
        ) {
            let mut rng = seed;
            let mut next = move || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; rng };
            let mut split: Vec<Vec<(i64, f64)>> = vec![Vec::new(); parts];
            for e in &events {
                split[(next() % parts as u64) as usize].push(*e);
            }
            let mut counters: Vec<Decayed> = split
                .iter_mut()
                .map(|part| {
                    // Out of order: shuffled.
                    for i in (1..part.len()).rev() {
                        part.swap(i, (next() % (i as u64 + 1)) as usize);
                    }
                    let mut c = Decayed::default();
                    for &(ts, w) in part.iter() {
                        c.add(ts, w, h);
                    }
                    c
                })
                .collect();
            for i in (1..counters.len()).rev() {
                counters.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            let merged = counters.iter().fold(Decayed::default(), |a, c| a.merge(c, h));
            let newest = events.iter().map(|e| e.0).max().unwrap();
            // Read at the newest event and a little after it (a bidder reads "now").
            for t in [newest, newest + h / 3, newest + h] {
                let want = direct(&events, t, h);
                let got = merged.at(t, h);
                prop_assert!(close(got, want, 1e-12), "t {t}: {got} vs {want}");
            }
        }
    }
}
