//! Writing batches: every pending event routed by the watermarks, fresh ones
//! appended, later ones merged, one transaction per batch; a batch the
//! database refuses for what it holds is split until the refused events are
//! found and quarantined.

use std::collections::{BTreeSet, HashMap};

use crate::store::buffer::{EventRow, MergeRow};
use crate::store::state;
use crate::telemetry::{Counter, Family};
use tidemark_store::{ErrorClass, StoreError};
use tidemark_wire::{EventType, Txid};

use super::Writer;
use crate::phases::{route, Route, Watermarks};

/// One pending event: its chunk, its index there, and where it goes.
#[derive(Debug, Clone, Copy)]
struct Item {
    chunk: usize,
    event: usize,
    route: Route,
}

/// An unclassified error repeating this many times on a healthy connection is
/// treated as a refusal of the data.
const UNKNOWN_REPEATS: u32 = 3;

/// Merges into one tier: a row per txid, with the event types it brings.
#[derive(Default)]
struct Merges {
    index: HashMap<Txid, usize>,
    rows: Vec<MergeRow>,
    kinds: Vec<Vec<EventType>>,
}

impl Writer {
    /// Writes every pending event: fresh ones appended with `COPY`, later
    /// ones merged into consolidated rows, in one transaction. A batch the
    /// database refuses for what it holds is split until the refused events
    /// are found; those are quarantined and the rest written. On any other
    /// error what was not written stays pending and the error is returned.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let wm = self
            .wm
            .clone()
            .unwrap_or_else(|| Watermarks::at(&self.phases, i64::MIN / 4));
        // Decide every event's place first; partitions must exist before the COPY.
        let p = self.partition_ms();
        let mut items = Vec::with_capacity(self.pending_events);
        let mut fresh_at = BTreeSet::new();
        for (ci, chunk) in self.pending.iter().enumerate() {
            for (ei, e) in chunk.events.iter().enumerate() {
                let route = route(&self.phases, &wm, e.kind, e.created, e.ts);
                if route == Route::Fresh {
                    fresh_at.insert(e.created.div_euclid(p));
                }
                items.push(Item {
                    chunk: ci,
                    event: ei,
                    route,
                });
            }
        }
        for bucket in fresh_at {
            self.ensure_events_partition(bucket * p).await?;
        }
        let mut written = vec![false; items.len()];
        let mut todo = Vec::new();
        todo.push(0..items.len());
        let mut result = Ok(());
        while let Some(range) = todo.pop() {
            let err = match self.write(&items[range.clone()]).await {
                Ok(()) => {
                    self.unknown_failures = 0;
                    for it in &items[range.clone()] {
                        if it.route == Route::Fresh {
                            let created = self.pending[it.chunk].events[it.event].created;
                            *self
                                .rows_by_bucket
                                .entry(created.div_euclid(p) * p)
                                .or_default() += 1;
                        }
                    }
                    written[range].fill(true);
                    continue;
                }
                Err(e) => e,
            };
            let class = err.class();
            self.counters.add(Counter::db_errors(class), 1);
            let isolate = match class {
                ErrorClass::Data => true,
                ErrorClass::Unknown if !self.client.is_closed() => {
                    self.unknown_failures += 1;
                    self.unknown_failures >= UNKNOWN_REPEATS
                }
                _ => false,
            };
            if !isolate {
                result = Err(err);
                break;
            }
            if range.len() == 1 {
                if let Err(e) = self.quarantine(items[range.start], &err).await {
                    result = Err(e);
                    break;
                }
                self.unknown_failures = 0;
                written[range.start] = true;
                continue;
            }
            let mid = range.start + range.len() / 2;
            todo.push(mid..range.end);
            todo.push(range.start..mid);
        }
        if written.iter().all(|w| *w) {
            self.pending.clear();
            self.pending_events = 0;
            self.pending_bytes = 0;
        } else {
            // Keep only what was not written, so a retry never writes twice.
            let mut keep = written.iter().map(|w| !w);
            for chunk in &mut self.pending {
                chunk
                    .events
                    .retain(|_| keep.next().expect("one flag per event"));
            }
            self.pending.retain(|c| !c.events.is_empty());
            self.pending_events = self.pending.iter().map(|c| c.events.len()).sum();
            // A chunk's arena stays whole until it is written: count it whole.
            self.pending_bytes = self.pending.iter().map(|c| c.bytes()).sum();
        }
        result
    }

    /// Writes some pending events in one transaction; counts them on commit.
    async fn write(&mut self, items: &[Item]) -> Result<(), StoreError> {
        let mut fresh: Vec<EventRow<'_>> = Vec::with_capacity(items.len());
        // Per tier (txns, long): one row per txid.
        let mut merges: [Merges; 2] = Default::default();
        let mut late: Vec<EventType> = Vec::new();
        let mut outside: Vec<EventType> = Vec::new();
        for it in items {
            let chunk = &self.pending[it.chunk];
            let e = &chunk.events[it.event];
            match it.route {
                Route::Fresh => fresh.push(EventRow {
                    txid: e.txid.as_str(),
                    created_ms: e.created,
                    type_name: self.config.types.name(e.kind),
                    ts_ms: e.ts,
                    arrival: e.arrival,
                    features: chunk.features(e),
                    price: e.price,
                    user: chunk.user(e),
                }),
                r @ (Route::Consolidated | Route::LongWait) => {
                    let col = self
                        .layout
                        .column(self.config.types.name(e.kind))
                        .expect("merged events have a column");
                    let m = &mut merges[usize::from(r == Route::LongWait)];
                    let i = *m.index.entry(e.txid).or_insert_with(|| {
                        m.rows.push(MergeRow {
                            txid: e.txid.as_str().to_owned(),
                            created_ms: e.created,
                            ts: Vec::new(),
                        });
                        m.kinds.push(Vec::new());
                        m.rows.len() - 1
                    });
                    m.rows[i].ts.push((col, e.ts));
                    m.kinds[i].push(e.kind);
                }
                Route::Late => late.push(e.kind),
                Route::OutsideWindows => outside.push(e.kind),
            }
        }
        let [txns, long] = &merges;
        let started = std::time::Instant::now();
        let done = self
            .layout
            .write_batch(&mut self.client, &fresh, &txns.rows, &long.rows)
            .await?;
        self.counters.live.batch_took(started.elapsed());
        for kind in late {
            self.counters.per_type(Family::Late, kind, 1);
        }
        for kind in outside {
            self.counters.per_type(Family::OutsideWindows, kind, 1);
        }
        // A merge without a row: its transaction got no impression (or no bid) in
        // time, so no population holds it.
        let mut unmatched = 0;
        for (m, missing) in [(txns, &done.unmatched_txns), (long, &done.unmatched_long)] {
            for &i in missing {
                unmatched += 1;
                for &kind in &m.kinds[i] {
                    self.counters.per_type(Family::Unmatched, kind, 1);
                }
            }
        }
        let merged = txns.rows.len() + long.rows.len();
        self.counters
            .add(Counter::Merged, (merged - unmatched) as u64);
        self.counters.add(Counter::RowsWritten, done.written);
        self.counters.add(Counter::Batches, 1);
        Ok(())
    }

    /// Sets aside one event the database refused on its own.
    async fn quarantine(&mut self, it: Item, err: &StoreError) -> Result<(), StoreError> {
        let chunk = &self.pending[it.chunk];
        let e = &chunk.events[it.event];
        let topic = format!("{}-{}", self.config.types.name(e.kind), e.txid.as_str());
        let reason = err.to_string();
        let kept = state::quarantine(
            &self.client,
            &self.layout.shard,
            &state::Quarantined {
                topic: &topic,
                payload: chunk.raw(e).as_bytes(),
                reason: &reason,
                sqlstate: err.sqlstate(),
            },
            self.config.quarantine_max,
        )
        .await?;
        self.counters.add(
            if kept {
                Counter::Quarantined
            } else {
                Counter::QuarantineDropped
            },
            1,
        );
        tracing::warn!(
            topic,
            kept,
            "the database refused one event; set aside in tidemark.quarantine: {reason}"
        );
        Ok(())
    }
}
