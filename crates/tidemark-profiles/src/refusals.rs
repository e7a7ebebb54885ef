//! What the database refuses for what an event holds (SPEC 11, "bad
//! input"): which errors count as a refusal ([`refused`]), how a refused
//! event is set aside on its own ([`set_aside`]: kept in
//! `tidemark.profile_quarantine` and counted), and how a worker's refused
//! part is split until the refused events are alone ([`isolate`]). The
//! link stage splits its own groups alike (`crate::links::apply_group`).

use std::collections::BTreeMap;

use tidemark_store::StoreError;

use crate::core::{Counts, Event, Layout, Work};
use crate::tables::{Connection, ProfileTables};
use crate::worker::Worker;
use crate::Config;

/// An error of no known class that repeats this many times on a healthy
/// connection is taken as the batch's own, as a shard takes it.
const UNKNOWN_REPEATS: u32 = 3;

/// Whether the database refused a transaction for what it holds (a data
/// error, or one of no known class repeating on a healthy connection), so
/// splitting it finds the refused events; every other error is retried
/// whole.
pub(crate) fn refused(e: &StoreError, unknown_failures: &mut u32, closed: bool) -> bool {
    use tidemark_store::ErrorClass;
    match e.class() {
        ErrorClass::Data => true,
        ErrorClass::Unknown if !closed => {
            *unknown_failures += 1;
            *unknown_failures >= UNKNOWN_REPEATS
        }
        _ => false,
    }
}

/// Sets aside one event the database refused on its own: kept in
/// `tidemark.profile_quarantine` (while it holds fewer than
/// `quarantine_max` rows) and counted, in one transaction; returns the
/// reason counted.
pub(crate) async fn set_aside<C: Connection>(
    client: &mut C,
    config: &Config,
    e: &Event,
    error: &StoreError,
    row: i16,
) -> Result<&'static str, StoreError> {
    let topic = format!("{}-{}", config.types[e.type_index], e.txid.as_str());
    let why = error.to_string();
    let tx = client.begin().await?;
    let kept = tx
        .quarantine(
            &topic,
            &e.raw,
            &why,
            error.sqlstate(),
            config.quarantine_max,
        )
        .await?;
    let reason = if kept {
        "quarantined"
    } else {
        "quarantine_dropped"
    };
    tx.add_counts(row, &Counts::from([(reason, 1)])).await?;
    tx.commit().await?;
    tracing::warn!(
        topic,
        kept,
        "the database refused one event; set aside in tidemark.profile_quarantine: {why}"
    );
    Ok(reason)
}

/// Applies a worker's part the database refused, in pieces (halved on
/// each refusal, doubled again after each success up to the worker's pace,
/// in the part's order, as
/// smaller batches would be) until the refused events are alone and set
/// aside. Returns the counts committed; on an error splitting cannot help
/// with, the error and what is left of the part.
pub(crate) async fn isolate<C: Connection>(
    worker: &mut Worker<C>,
    main: &mut C,
    config: &Config,
    layout: &Layout,
    work: Work,
    unknown_failures: &mut u32,
) -> Result<BTreeMap<String, i64>, (StoreError, Work)> {
    let Work {
        mut events,
        mut counts,
        trail_from,
    } = work;
    let mut done: BTreeMap<String, i64> = BTreeMap::new();
    let mut limit = (events.len() / 2).clamp(1, worker.pace.events());
    while !events.is_empty() {
        let n = events.len().min(limit);
        let piece = Work {
            events: events.drain(..n).collect(),
            counts: std::mem::take(&mut counts),
            trail_from,
        };
        let result = worker.apply(layout, &piece).await;
        let Work {
            events: mut back,
            counts: piece_counts,
            ..
        } = piece;
        match result {
            Ok(c) => {
                *unknown_failures = 0;
                for (k, v) in c {
                    *done.entry(k.to_owned()).or_default() += v;
                }
                limit = (limit * 2)
                    .min(events.len().max(1))
                    .min(worker.pace.events());
                continue;
            }
            Err(e) => {
                // Not committed: the counts go with the next piece.
                counts = piece_counts;
                let closed = worker.client.as_ref().is_none_or(C::is_closed);
                let alone = n == 1 && refused(&e, unknown_failures, closed);
                let outcome = if alone {
                    set_aside(main, config, &back[0], &e, worker.index).await
                } else {
                    Err(e)
                };
                match outcome {
                    Ok(reason) => *done.entry(reason.to_owned()).or_default() += 1,
                    Err(e) => {
                        back.append(&mut events);
                        if n > 1 && refused(&e, unknown_failures, closed) {
                            events = back;
                            limit = (n / 2).max(1);
                            continue;
                        }
                        let left = Work {
                            events: back,
                            counts,
                            trail_from,
                        };
                        return Err((e, left));
                    }
                }
            }
        }
    }
    Ok(done)
}
