//! A shard's counters: lock-free increments from the intake thread and the
//! writer, flushed as deltas to `tidemark.shard_counters`. Their names are
//! `crate::telemetry`'s; this holds the values.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::telemetry::{Counter, Family};
use tidemark_wire::{EventType, Reject, Types};

/// Monotone counters, one slot per name: the per-type families for every
/// type the shard knows, `rejected_<reason>`, then every [`Counter`].
#[derive(Debug)]
pub struct Counters {
    names: Vec<String>,
    values: Vec<AtomicU64>,
    flushed: Vec<AtomicU64>,
    ntypes: usize,
    /// The live figures beside the counters (intake, writer and the
    /// metrics endpoint already share this object).
    pub live: crate::live::Live,
}

impl Counters {
    /// Every counter at zero, with per-type families for `types`.
    pub fn new(types: &Types) -> Counters {
        let type_names: Vec<String> = EventType::BUILTIN
            .iter()
            .map(|t| types.name(*t).to_owned())
            .chain(types.custom().map(|(_, n)| n.to_owned()))
            .collect();
        let mut names = Vec::new();
        for fam in Family::PER_TYPE {
            names.extend(type_names.iter().map(|t| fam.name(t)));
        }
        names.extend(Reject::REASONS.iter().map(|r| Family::Rejected.name(r)));
        names.extend(Counter::ALL.iter().map(|c| c.name().to_owned()));
        Counters {
            values: names.iter().map(|_| AtomicU64::new(0)).collect(),
            flushed: names.iter().map(|_| AtomicU64::new(0)).collect(),
            names,
            ntypes: type_names.len(),
            live: Default::default(),
        }
    }

    /// The slot of an event type among the per-type counters: built-ins, then custom types.
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

    fn slot(&self, c: Counter) -> usize {
        self.ntypes * Family::PER_TYPE.len() + Reject::REASONS.len() + c as usize
    }

    /// Adds to `<family>_<type>`; `family` must be one of [`Family::PER_TYPE`].
    pub fn per_type(&self, family: Family, t: EventType, n: u64) {
        let f = Family::PER_TYPE
            .iter()
            .position(|f| *f == family)
            .expect("a per-type family");
        let slot = Self::type_slot(t);
        debug_assert!(slot < self.ntypes);
        self.values[f * self.ntypes + slot].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one message refused for `r`.
    pub fn rejected(&self, r: &Reject) {
        self.values[self.ntypes * Family::PER_TYPE.len() + r.index()]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Adds to a counter.
    pub fn add(&self, c: Counter, n: u64) {
        self.values[self.slot(c)].fetch_add(n, Ordering::Relaxed);
    }

    /// A counter's total in this run.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[self.slot(c)].load(Ordering::Relaxed)
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
            if let Some(i) = self.names.iter().position(|n| n == name) {
                self.flushed[i].fetch_sub(*d as u64, Ordering::Relaxed);
            }
        }
    }

    /// Current totals since this process started, nonzero only.
    pub fn snapshot(&self) -> Vec<(String, i64)> {
        let mut all = self.totals();
        all.retain(|(_, v)| *v > 0);
        all
    }

    /// Every counter's total since this process started, zeros included:
    /// a series must exist before its first increment for `increase()` and
    /// `rate()` to see that increment.
    pub fn totals(&self) -> Vec<(String, i64)> {
        self.names
            .iter()
            .zip(&self.values)
            .map(|(n, v)| (n.clone(), v.load(Ordering::Relaxed) as i64))
            .collect()
    }
}

/// Serves this shard's counters as Prometheus metrics on `addr`: the
/// per-type families as `tidemark_shard_<family>_events_total{shard, type}`,
/// refusals as `tidemark_shard_rejected_total{shard, reason}`, database
/// errors as `tidemark_shard_db_errors_total{shard, class}`, every other
/// counter as `tidemark_shard_<name>_total{shard}`. Values count from this
/// run's start.
pub fn serve_metrics(
    addr: &str,
    shard: &str,
    counters: std::sync::Arc<Counters>,
) -> Result<tidemark_metrics::Endpoint, tidemark_metrics::ServeError> {
    use tidemark_metrics::{Kind, Sample};
    let shard = shard.to_owned();
    let endpoint = tidemark_metrics::serve(addr, "shard", move || {
        let mut live = counters.live.samples(&shard, tidemark_intake::wall_ms());
        live.extend(counters.totals().into_iter().map(|(name, value)| {
            let mut labels = vec![("shard", shard.clone())];
            let (metric, help) = match Family::PER_TYPE
                .iter()
                .chain([&Family::Rejected])
                .find_map(|f| f.subject(&name).map(|s| (*f, s.to_owned())))
            {
                Some((Family::Rejected, reason)) => {
                    labels.push(("reason", reason));
                    ("rejected".to_owned(), "messages refused, by reason")
                }
                Some((f, t)) => {
                    labels.push(("type", t));
                    let help = match f {
                        Family::Received => "events accepted, by type",
                        Family::Late => "events after their window (never merged), by type",
                        Family::OutsideWindows => "events of a type no target's window reads",
                        Family::Unmatched => "late events whose transaction no population holds",
                        _ => "events refused as more than max_future ahead, by type",
                    };
                    (format!("{}_events", f.prefix()), help)
                }
                None => match name.strip_prefix("db_errors_") {
                    Some(class) => {
                        labels.push(("class", class.to_owned()));
                        ("db_errors".to_owned(), "database errors, by class")
                    }
                    None => (name, "a shard counter (docs/operations.md)"),
                },
            };
            Sample {
                name: metric,
                help,
                kind: Kind::Counter,
                labels,
                value: value as f64,
                buckets: Vec::new(),
            }
        }));
        live
    })?;
    tracing::info!(addr = endpoint.addr, "serving metrics at /metrics");
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_taken_once() {
        let c = Counters::new(&Types::new(&["open"]).unwrap());
        c.per_type(Family::Late, EventType::Custom(0), 2);
        c.rejected(&Reject::BadTxid);
        c.add(Counter::Batches, 1);
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

    #[test]
    fn every_slot_has_the_name_it_is_counted_under() {
        let types = Types::new(&["open"]).unwrap();
        let c = Counters::new(&types);
        for k in Counter::ALL {
            c.add(k, 1);
        }
        for f in Family::PER_TYPE {
            c.per_type(f, EventType::Install, 1);
        }
        for r in [Reject::FrameCount(3), Reject::BadTxid, Reject::NonFinite] {
            c.rejected(&r);
        }
        let snap = c.snapshot();
        for k in Counter::ALL {
            assert_eq!(k.get(&snap), 1, "{}", k.name());
        }
        for f in Family::PER_TYPE {
            assert_eq!(f.sum(&snap), 1, "{f:?}");
            assert!(snap.iter().any(|(n, _)| *n == f.name("install")));
        }
        assert_eq!(Family::Rejected.sum(&snap), 3);
    }
}
