//! A shard's counters: fixed names, lock-free increments from the intake
//! thread and the writer, flushed as deltas to `tidemark.shard_counters`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tidemark_wire::{EventType, Reject, Types};

/// Named monotone counters. Names are made once at start; hot-path increments
/// go through precomputed indices.
#[derive(Debug)]
pub struct Counters {
    names: Vec<String>,
    values: Vec<AtomicU64>,
    flushed: Vec<AtomicU64>,
    index: HashMap<String, usize>,
    /// Per event type: the first index of each per-type family.
    families: HashMap<&'static str, usize>,
    ntypes: usize,
}

/// Families of per-type counters, `<family>_<type>`.
pub const PER_TYPE: [&str; 5] = ["received", "late", "outside_windows", "unmatched", "future"];

/// Other counters, besides `rejected_<reason>`.
pub const SINGLE: [&str; 23] = [
    "dropped_overflow",
    "dropped_features",
    "batches",
    "rows_written",
    "merged",
    "sweeps",
    "transactions_swept",
    "kept_impressed",
    "orphans",
    "unimpressed",
    "duplicates",
    "kept_clicked",
    "forgotten",
    "gaps",
    "pruned",
    "lost_estimate",
    "future_tick",
    "quarantined",
    "quarantine_dropped",
    "db_errors_transient",
    "db_errors_resource",
    "db_errors_data",
    "db_errors_unknown",
];

impl Counters {
    pub fn new(types: &Types) -> Counters {
        let type_names: Vec<String> = EventType::BUILTIN
            .iter()
            .map(|t| types.name(*t).to_owned())
            .chain(types.custom().map(|(_, n)| n.to_owned()))
            .collect();
        let mut names = Vec::new();
        let mut families = HashMap::new();
        for fam in PER_TYPE {
            families.insert(fam, names.len());
            names.extend(type_names.iter().map(|t| format!("{fam}_{t}")));
        }
        families.insert("rejected", names.len());
        names.extend(Reject::REASONS.iter().map(|r| format!("rejected_{r}")));
        names.extend(SINGLE.iter().map(|s| s.to_string()));
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        Counters {
            values: names.iter().map(|_| AtomicU64::new(0)).collect(),
            flushed: names.iter().map(|_| AtomicU64::new(0)).collect(),
            names,
            index,
            families,
            ntypes: type_names.len(),
        }
    }

    pub fn type_slot(t: EventType) -> usize {
        match t {
            EventType::Auction => 0,
            EventType::Bid => 1,
            EventType::Impression => 2,
            EventType::Click => 3,
            EventType::Install => 4,
            EventType::Custom(i) => 5 + usize::from(i),
        }
    }

    /// Adds to `<family>_<type>`.
    pub fn per_type(&self, family: &'static str, t: EventType, n: u64) {
        let base = self.families[family];
        let slot = Self::type_slot(t);
        debug_assert!(slot < self.ntypes);
        self.values[base + slot].fetch_add(n, Ordering::Relaxed);
    }

    pub fn rejected(&self, r: &Reject) {
        self.values[self.families["rejected"] + r.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds to a counter by name; unknown names are a bug.
    pub fn add(&self, name: &str, n: u64) {
        let i = *self
            .index
            .get(name)
            .unwrap_or_else(|| panic!("unknown counter {name}"));
        self.values[i].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, name: &str) -> u64 {
        self.index
            .get(name)
            .map_or(0, |&i| self.values[i].load(Ordering::Relaxed))
    }

    /// Everything counted since the last call, as `(name, delta)`; marks it flushed.
    /// Call `unflush` with the result if writing it failed.
    pub fn take_deltas(&self) -> Vec<(String, i64)> {
        let mut out = Vec::new();
        for (i, name) in self.names.iter().enumerate() {
            let now = self.values[i].load(Ordering::Relaxed);
            let before = self.flushed[i].swap(now, Ordering::Relaxed);
            if now != before {
                out.push((name.clone(), (now - before) as i64));
            }
        }
        out
    }

    /// Puts back deltas that could not be written.
    pub fn unflush(&self, deltas: &[(String, i64)]) {
        for (name, d) in deltas {
            if let Some(&i) = self.index.get(name) {
                self.flushed[i].fetch_sub(*d as u64, Ordering::Relaxed);
            }
        }
    }

    /// Current totals since this process started, nonzero only.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        self.names
            .iter()
            .zip(&self.values)
            .map(|(n, v)| (n.clone(), v.load(Ordering::Relaxed)))
            .filter(|(_, v)| *v > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter added by name but not registered panics at run time (the
    /// junk-and-poison differential run found `future_tick` so): every
    /// literal name added in this crate must be registered.
    #[test]
    fn every_counter_added_by_name_is_registered() {
        for (file, text) in [
            ("intake.rs", include_str!("intake.rs")),
            ("writer.rs", include_str!("writer.rs")),
            ("lib.rs", include_str!("lib.rs")),
        ] {
            for piece in text.split(".add(\"").skip(1) {
                let name = &piece[..piece.find('"').unwrap()];
                assert!(
                    SINGLE.contains(&name),
                    "{file}: counter {name:?} is not in SINGLE"
                );
            }
        }
        for name in [
            "db_errors_transient",
            "db_errors_resource",
            "db_errors_data",
            "db_errors_unknown",
        ] {
            assert!(SINGLE.contains(&name));
        }
    }

    #[test]
    fn deltas_are_taken_once() {
        let c = Counters::new(&Types::new(&["open"]).unwrap());
        c.per_type("late", EventType::Custom(0), 2);
        c.rejected(&Reject::BadTxid);
        c.add("batches", 1);
        let mut d = c.take_deltas();
        d.sort();
        assert_eq!(
            d,
            [
                ("batches".to_owned(), 1),
                ("late_open".to_owned(), 2),
                ("rejected_bad_txid".to_owned(), 1)
            ]
        );
        assert!(c.take_deltas().is_empty());
        c.unflush(&d);
        assert_eq!(c.take_deltas().len(), 3);
    }
}
