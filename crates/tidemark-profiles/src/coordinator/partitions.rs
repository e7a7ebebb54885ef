//! The time partitions the coordinator keeps (SPEC 11): those a batch's
//! first-copy marks and trail rows need, made before it is applied, and
//! those no copy or trail can need any more, dropped between batches.

use std::collections::{BTreeMap, BTreeSet};

use tokio_postgres::Client;

use super::pipeline::Inflight;
use super::Process;
use crate::core::days::{self, day_of, mark_span, start_of, Spans, DAY_MS};
use crate::core::Layout;
use crate::store::{self, Daily};
use crate::{Config, ProfilesError};

impl Process<'_> {
    /// Drops whole partitions no copy or trail can need any more.
    pub(super) async fn retire(&mut self) -> Result<(), ProfilesError> {
        let main = &self.main;
        let Some(clock) = self.saved.clock_ms else {
            return Ok(());
        };
        // Nothing an event still held may need goes: retired from the
        // oldest clock an event waiting was accepted at (SPEC 11, v1.3).
        let clock = (self.pending.iter().filter_map(|e| e.accepted)).fold(clock, i64::min);
        if !self.lock_waits.ready() {
            return Ok(());
        }
        // Each type's marks go at its own horizon.
        for (&t, spans) in &mut self.marks {
            let dedup = mark_dedup(&self.config, &self.layout, t);
            for p in spans.retired(clock - dedup) {
                match store::drop_partition(main, Daily::Seen(t), p).await {
                    Ok(()) => spans.dropped(p),
                    Err(e) if e.is_lock_timeout() => {
                        self.lock_waits.put_off("dropping first-copy marks");
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                };
            }
        }
        if let Some(trail) = self.config.trail {
            let horizon = clock - trail.as_millis() as i64;
            for p in self.trail_days.retired(horizon) {
                // Dropped once its packing ends (which would fail, or make
                // the packed partition again).
                if self.packing.as_ref().is_some_and(|(q, _)| *q == p) {
                    continue;
                }
                match store::drop_partition(main, Daily::Trail, p).await {
                    Ok(()) => {
                        self.trail_days.dropped(p);
                        if let days::Part::Span(from, _) = p {
                            self.packed.remove(&from);
                            self.pack_retry.remove(&from);
                        }
                    }
                    Err(e) if e.is_lock_timeout() => {
                        self.lock_waits.put_off("dropping a day of trails");
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                };
            }
            self.pack(clock, horizon).await;
        }
        self.lock_waits.done();
        Ok(())
    }
}

/// The `dedup` horizon of the type at position `t` (ms); a type this run
/// does not read keeps its marks as long as the longest.
fn mark_dedup(config: &Config, layout: &Layout, t: i16) -> i64 {
    let longest = config.dedup.iter().max().copied().unwrap_or_default();
    let i = layout.type_pos.iter().position(|p| *p == t);
    i.map_or(longest, |i| config.dedup[i]).as_millis() as i64
}

/// A new [`Spans`] for the marks of the type at position `t`.
fn mark_spans(config: &Config, layout: &Layout, t: i16) -> Spans {
    Spans::new(mark_span(mark_dedup(config, layout, t)))
}

/// Completes trail days that have one of their two partitions: made by a
/// build before sql/V0015 after that migration ran (an older process still
/// running meanwhile), or cut between the two commits that make a day
/// (`store::create_partition`, then a failover to a server that got the
/// first). Made again whole; what exists is kept.
pub(crate) async fn complete_trail_days(
    main: &Client,
    parts: &[(Daily, days::Part)],
) -> Result<(), ProfilesError> {
    let mut made: Vec<days::Part> = Vec::new();
    for (which, part) in parts {
        // A day is listed once per parent it has a partition of.
        if *which == Daily::Trail && !made.contains(part) {
            store::create_partition(main, Daily::Trail, *part).await?;
            made.push(*part);
        }
    }
    Ok(())
}

/// The partitions found in the database: `profile_seen`'s per type
/// position (new ones split by each type's [`mark_span`]) and
/// `profile_trail`'s.
pub(crate) fn found(
    config: &Config,
    layout: &Layout,
    parts: Vec<(Daily, days::Part)>,
) -> (BTreeMap<i16, Spans>, Spans) {
    let (mut marks, mut trail) = (BTreeMap::new(), Spans::new(DAY_MS));
    for (which, part) in parts {
        match which {
            Daily::Seen(t) => marks
                .entry(t)
                .or_insert_with(|| mark_spans(config, layout, t))
                .made(part),
            Daily::Trail => trail.made(part),
        }
    }
    (marks, trail)
}

/// Creates the partitions a batch's first-copy marks and trail rows need:
/// a span's own while it is within reach of `now` (the clock, else the
/// newest tick, else the newest txid), the catch-all before that.
pub(crate) async fn ensure_partitions(
    main: &Client,
    config: &Config,
    layout: &Layout,
    inflight: Option<&Inflight>,
    now: Option<i64>,
    marks: &mut BTreeMap<i16, Spans>,
    trail_days: &mut Spans,
) -> Result<(), ProfilesError> {
    let Some(inflight) = inflight else {
        return Ok(());
    };
    let mut seen: BTreeMap<i16, BTreeSet<i64>> = BTreeMap::new();
    let mut trail = BTreeSet::new();
    // The batch's own horizon: the clock may have moved since it was judged.
    let trail_from = inflight.trail_from.unwrap_or(i64::MAX);
    for e in inflight.events() {
        let t = layout.type_pos[e.type_index];
        let spans = marks
            .entry(t)
            .or_insert_with(|| mark_spans(config, layout, t));
        if !spans.covered(e.created) {
            seen.entry(t).or_default().insert(e.created);
        }
        if config.trail.is_some() && e.ts >= trail_from && !trail_days.covered(e.ts) {
            trail.insert(e.ts);
        }
    }
    let now = now.unwrap_or(i64::MIN / 2);
    for (t, needed) in seen {
        let spans = marks.get_mut(&t).expect("entered above");
        let dedup = mark_dedup(config, layout, t);
        let floor = start_of(now - dedup, spans.span) - spans.span;
        for p in spans.plan(&needed, floor) {
            store::create_partition(main, Daily::Seen(t), p).await?;
            spans.made(p);
        }
    }
    if let Some(t) = config.trail {
        for p in trail_days.plan(&trail, day_of(now - t.as_millis() as i64) - DAY_MS) {
            store::create_partition(main, Daily::Trail, p).await?;
            trail_days.made(p);
        }
    }
    Ok(())
}
