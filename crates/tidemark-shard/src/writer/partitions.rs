//! Buffer partitions: `events` partitions sized by rows (a sparse stretch
//! gets few wide ones, a dense one narrow ones), `txns` partitions mirroring
//! them, both dropped whole once the watermarks that read them have passed.

use std::collections::BTreeMap;

use crate::store::buffer::Partition;
use tidemark_store::StoreError;

use super::Writer;

/// The widest a buffer partition grows over sparse stretches.
const MAX_PARTITION_MS: i64 = 86_400_000;

/// Bounds `[from, to)` of a new partition of buckets `p` wide holding
/// creation time `t`, after `prev` (`from, to, rows`: rows near `target` keep
/// its width, fewer double it up to about a day, more halve it) and before
/// the partition starting at `next`. Never overlaps either.
fn partition_bounds(
    t: i64,
    p: i64,
    prev: Option<(i64, i64, u64)>,
    next: i64,
    target: u64,
) -> (i64, i64) {
    let widest = (MAX_PARTITION_MS / p * p).max(p);
    let width = match prev {
        None => p,
        Some((from, to, rows)) => {
            let w = to - from;
            if rows < target / 2 {
                (w * 2).min(widest)
            } else if rows > target * 2 {
                (w / 2).max(p) / p * p
            } else {
                w
            }
        }
    };
    // Never before the end of the one before, whatever bounds it has.
    let from = (t.div_euclid(p) * p).max(prev.map_or(i64::MIN, |prev| prev.1));
    (from, (from + width).min(next))
}

/// The parts of `[from, to)` no partition in `parts` covers.
fn holes(from: i64, to: i64, parts: &BTreeMap<i64, Partition>) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = from;
    // The one starting before `from` may reach into the range.
    let before = parts.range(..from).next_back().map(|(_, p)| p);
    for p in before
        .into_iter()
        .chain(parts.range(from..to).map(|(_, p)| p))
    {
        if p.from_ms > at {
            out.push((at, p.from_ms.min(to)));
        }
        at = at.max(p.to_ms);
        if at >= to {
            return out;
        }
    }
    if at < to {
        out.push((at, to));
    }
    out
}

impl Writer {
    /// Reads which buffer partitions exist from the catalog.
    pub(super) async fn load_partitions(&mut self) -> Result<(), StoreError> {
        self.events_parts.clear();
        self.txns_parts.clear();
        for p in self.layout.partitions(&self.client, "events").await? {
            self.events_parts.insert(p.from_ms, p);
        }
        for p in self.layout.partitions(&self.client, "txns").await? {
            self.txns_parts.insert(p.from_ms, p);
        }
        Ok(())
    }

    /// Consolidation writes rows of `(lo, hi]` into `txns`: make the `txns`
    /// partitions mirroring the `events` partitions that hold them.
    pub(super) async fn ensure_txns_partitions(
        &mut self,
        lo: i64,
        hi: i64,
    ) -> Result<(), StoreError> {
        // Only where no `txns` partition is yet: one made with other bounds
        // (another partition width, an earlier version) must not be overlapped.
        let needed: Vec<(i64, i64)> = self
            .events_parts
            .values()
            .filter(|p| p.to_ms > lo && p.from_ms <= hi)
            .flat_map(|p| holes(p.from_ms, p.to_ms, &self.txns_parts))
            .collect();
        for (from, to) in needed {
            let part = self
                .layout
                .create_partition(&self.client, "txns", from, to)
                .await?;
            self.txns_parts.insert(from, part);
        }
        Ok(())
    }

    /// Makes sure an `events` partition covers creation time `t`. A new one
    /// starts at `t`'s bucket and is as wide as keeps it near
    /// `partition_rows`, judged by the partition before it: a sparse replay
    /// gets few wide partitions, a dense stream narrow ones.
    pub(super) async fn ensure_events_partition(&mut self, t: i64) -> Result<(), StoreError> {
        let p = self.partition_ms();
        let prev = self.events_parts.range(..=t).next_back().map(|(_, v)| v);
        if prev.is_some_and(|prev| prev.to_ms > t) {
            return Ok(());
        }
        let prev = prev.map(|prev| {
            let rows = self
                .rows_by_bucket
                .range(prev.from_ms..prev.to_ms)
                .map(|(_, n)| n)
                .sum();
            (prev.from_ms, prev.to_ms, rows)
        });
        let next = self
            .events_parts
            .range(t + 1..)
            .next()
            .map_or(i64::MAX, |(k, _)| *k);
        let (from, to) = partition_bounds(t, p, prev, next, self.config.partition_rows);
        let part = self
            .layout
            .create_partition(&self.client, "events", from, to)
            .await?;
        self.events_parts.insert(from, part);
        Ok(())
    }

    /// Drops, each in its own transaction, the partitions wholly behind the
    /// watermarks that read them. Safe to repeat.
    pub(super) async fn drop_partitions(&mut self) -> Result<(), StoreError> {
        let Some(wm) = self.wm.clone() else {
            return Ok(());
        };
        if !self.lock_waits.ready() {
            return Ok(());
        }
        for (parts, mark) in [
            (&mut self.events_parts, wm.impression),
            (&mut self.txns_parts, wm.unclicked),
        ] {
            let done: Vec<i64> = parts
                .values()
                .filter(|p| p.to_ms - 1 <= mark)
                .map(|p| p.from_ms)
                .collect();
            for from in done {
                let table = &parts[&from].table;
                match self.layout.drop_partition(&self.client, table).await {
                    Ok(()) => {
                        tracing::debug!(table, "dropped partition");
                        parts.remove(&from);
                    }
                    // Kept listed: the next sweep tries again.
                    Err(e) if e.is_lock_timeout() => {
                        self.lock_waits.put_off("dropping a buffer partition");
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.lock_waits.done();
        Ok(())
    }

    /// Makes the fresh partitions the next minutes will need before events arrive.
    pub(super) async fn create_ahead(&mut self, clock: i64) -> Result<(), StoreError> {
        let p = self.partition_ms();
        let first = clock.div_euclid(p) * p;
        for t in (0..3).map(|i| first + i * p) {
            self.ensure_events_partition(t).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(bounds: &[(i64, i64)]) -> BTreeMap<i64, Partition> {
        bounds
            .iter()
            .map(|&(from_ms, to_ms)| {
                (
                    from_ms,
                    Partition {
                        from_ms,
                        to_ms,
                        table: String::new(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn partitions_widen_over_sparse_stretches_and_never_overlap() {
        let p = 7_000;
        assert_eq!(
            partition_bounds(10_000, p, None, i64::MAX, 100),
            (7_000, 14_000)
        );
        // Sparse: twice as wide; dense: half; near the target: the same.
        assert_eq!(
            partition_bounds(15_000, p, Some((7_000, 14_000, 1)), i64::MAX, 100),
            (14_000, 28_000)
        );
        assert_eq!(
            partition_bounds(15_000, p, Some((0, 14_000, 900)), i64::MAX, 100),
            (14_000, 21_000)
        );
        assert_eq!(
            partition_bounds(15_000, p, Some((7_000, 14_000, 100)), i64::MAX, 100),
            (14_000, 21_000)
        );
        // At the cap: a day rounded down to whole buckets.
        let (f, t) = partition_bounds(200_000_000, p, Some((0, 86_394_000, 0)), i64::MAX, 100);
        assert_eq!(t - f, 86_394_000);
        // A previous partition ending inside `t`'s bucket (other bounds,
        // another version): the new one starts where it ends.
        assert_eq!(
            partition_bounds(86_406_500, p, Some((0, 86_406_000, 0)), i64::MAX, 100).0,
            86_406_000
        );
        // The next partition bounds the new one.
        assert_eq!(
            partition_bounds(15_000, p, Some((7_000, 14_000, 1)), 20_000, 100),
            (14_000, 20_000)
        );
    }

    #[test]
    fn holes_are_what_no_partition_covers() {
        assert_eq!(holes(0, 10, &parts(&[])), [(0, 10)]);
        assert_eq!(holes(0, 10, &parts(&[(0, 10)])), []);
        // A wide partition from before covers a narrow range whole.
        assert_eq!(holes(60, 120, &parts(&[(0, 600)])), []);
        assert_eq!(
            holes(0, 100, &parts(&[(-50, 20), (40, 60)])),
            [(20, 40), (60, 100)]
        );
        assert_eq!(holes(0, 100, &parts(&[(90, 200)])), [(0, 90)]);
        assert_eq!(holes(0, 100, &parts(&[(-10, 0), (100, 110)])), [(0, 100)]);
    }
}
