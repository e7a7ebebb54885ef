//! A batch's way through the link stage and the workers (SPEC 11,
//! "Persons and links"), over any [`Connection`]: judged ([`Pipeline::judge`]),
//! split between the link stage and the workers ([`Pipeline::settle`]), its
//! link groups applied concurrently ([`Pipeline::link_stage`]), the rest
//! routed by person ([`Pipeline::route`]) and applied by the workers, each
//! part retried until it commits ([`Pipeline::work`]). What each step
//! decides is `core`'s; what fails stays for the retry, what committed
//! stays so. The property test runs this same pipeline over its in-memory
//! database (`crate::sim`).

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::time::Instant;

use tidemark_store::StoreError;
use tidemark_wire::Txid;

use crate::core::{self, Caps, Counts, Entry, Event, Layout, Pace, Placed, Work};
use crate::links;
use crate::refusals::{isolate, refused};
use crate::store::Marking;
use crate::tables::Connection;
use crate::worker::Worker;
use crate::Config;

/// Where identifiers sat, looked up ahead of the batch that carries them
/// (while the workers apply the one before): the identifiers asked for
/// and those found.
///
/// Looked up early on the same server (forgotten when a connection is
/// opened again), a placement can only be behind, and only in ways that
/// send more to the link stage, never less: between the link stage that
/// ran before the look-up and the next, only workers write, and a worker
/// never moves an identifier to another person; it adds identifiers of
/// one-identifier events (an event carrying one not found goes to the link
/// stage, which loads it in its own transaction) and lowers first ts (a
/// first ts found too high makes more riders, `core::split`).
pub(crate) struct Ahead {
    asked: HashSet<String>,
    placed: Placed,
}

/// A batch in flight: first its link-carrying events (in groups, one per
/// connection), then the rest, routed by person once the links are
/// committed, per worker until each part commits.
pub(crate) struct Inflight {
    /// The link stage's entries not yet committed, in groups that share no
    /// identifier and no person (`core::groups`), one per connection (the
    /// coordinator's first), each in arrival order.
    links: Vec<Vec<Entry>>,
    /// Whether the batch was split ([`Pipeline::settle`]); until then
    /// `rest` holds it all in arrival order.
    settled: bool,
    rest: Vec<Event>,
    /// Where the batch's identifiers sat before its link stage (`settle`),
    /// and what the link stage may move: routing looks up only the rest
    /// (`core::unmoved`). `None` when no link was looked for, or once a
    /// connection was opened again (maybe to another server).
    placed: Option<Placed>,
    touched: core::Touched,
    /// Duplicates within the batch and stale copies, committed with part 0.
    judged: Counts,
    parts: Option<Vec<Option<Work>>>,
    /// Events at or past this get trail rows (`None`: no trails).
    pub trail_from: Option<i64>,
}

impl Inflight {
    /// The batch's events not yet committed.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        let parts = self
            .parts
            .iter()
            .flatten()
            .flatten()
            .flat_map(|w| &w.events);
        let links = self.links.iter().flatten();
        let links = links.filter(|e| !e.rider).map(|e| &e.event);
        links.chain(&self.rest).chain(parts)
    }

    /// The parts routed and not yet committed, by worker.
    #[cfg(test)]
    pub fn parts(&self) -> impl Iterator<Item = (usize, &Work)> {
        let parts = self.parts.iter().flatten().enumerate();
        parts.filter_map(|(i, w)| Some((i, w.as_ref()?)))
    }
}

/// The workers, the batch in flight and what the link stage keeps between
/// batches on the coordinator's connection (which the caller holds).
pub(crate) struct Pipeline<C, S = RandomState> {
    /// The workers, each with its connection.
    pub workers: Vec<Worker<C>>,
    /// The batch being applied.
    pub inflight: Option<Inflight>,
    /// Placements looked up for the next batch ([`Ahead`]).
    ahead: Option<Ahead>,
    /// How many entries the coordinator's next link-stage transaction
    /// takes (each worker keeps its own).
    pub link_pace: Pace,
    /// How the coordinator's next link-stage transaction takes first-copy
    /// marks (a worker's link group shares its worker's).
    link_marking: Marking,
    /// Routes persons to workers.
    hasher: S,
    /// Errors of no known class in a row (see [`refused`]).
    unknown_failures: u32,
}

impl<C: Connection, S: BuildHasher> Pipeline<C, S> {
    /// A pipeline over `workers`, nothing in flight.
    pub fn new(workers: Vec<Worker<C>>, link_pace: Pace, hasher: S) -> Self {
        Pipeline {
            workers,
            inflight: None,
            ahead: None,
            link_pace,
            link_marking: Marking::default(),
            hasher,
            unknown_failures: 0,
        }
    }

    /// Drops later copies within the batch and stale copies
    /// (`core::judge`: older than each type's `dedup`, ms, behind the clock
    /// each was accepted at); the rest, in arrival order, is the batch in
    /// flight. `uncommitted`: counts of an earlier judging of these events
    /// not committed yet ([`Self::take_back`]).
    pub fn judge(
        &mut self,
        events: Vec<Event>,
        dedup: &[i64],
        trail_from: Option<i64>,
        uncommitted: Counts,
    ) {
        let (rest, judged) = core::judge(events, dedup, uncommitted);
        self.inflight = Some(Inflight {
            links: Vec::new(),
            settled: false,
            rest,
            placed: None,
            touched: Default::default(),
            judged,
            parts: None,
            trail_from,
        });
    }

    /// Takes the batch in flight apart: what of it is not yet committed, in
    /// arrival order, with its judged counts not committed, to be judged
    /// again as a new batch. Its links were settled, and its parts routed,
    /// on what a lost connection's server held, and a promoted standby may
    /// hold less (persons a lost merge had joined stand apart there). What
    /// did commit there is a first copy already, so judging again counts
    /// nothing twice.
    pub fn take_back(&mut self) -> Option<(Vec<Event>, Counts)> {
        let old = self.inflight.take()?;
        let parts = old.parts.into_iter().flatten().flatten();
        Some(core::reassemble(old.links, old.rest, parts, old.judged))
    }

    /// Forgets what was read on connections now closed: the next may be to
    /// another server (a promoted standby that missed the last commits).
    pub fn forget(&mut self) {
        for w in &mut self.workers {
            w.known.clear();
        }
        self.ahead = None;
    }

    /// A worker's connection was opened again, maybe to another server:
    /// what was read before may not be there.
    pub fn reopened(&mut self, worker: usize) {
        self.workers[worker].known.clear();
        self.ahead = None;
        if let Some(i) = &mut self.inflight {
            i.placed = None;
        }
    }

    /// Applies the batch in flight, stage after stage, adding what commits
    /// to `counts`; `next` is the next batch's first events (its
    /// placements are looked up while the workers run). On an error what
    /// did not commit stays in flight for the retry.
    pub async fn apply(
        &mut self,
        main: &mut C,
        config: &Config,
        layout: &Layout,
        next: &[Event],
        counts: &mut BTreeMap<String, i64>,
    ) -> Result<(), StoreError> {
        let t0 = Instant::now();
        self.settle(main).await?;
        let t1 = Instant::now();
        let link_entries = self.link_stage(main, config, layout, counts).await?;
        let t2 = Instant::now();
        self.route(main).await?;
        let t3 = Instant::now();
        self.work(main, config, layout, next, counts).await?;
        // Where a batch's time goes, phase by phase (a retried step reports
        // only its last attempt): `RUST_LOG=tidemark_profiles=debug`.
        tracing::debug!(
            link_entries,
            settle = ?(t1 - t0),
            links = ?(t2 - t1),
            route = ?(t3 - t2),
            workers = ?t3.elapsed(),
            "batch applied"
        );
        self.inflight = None;
        Ok(())
    }

    /// Splits the batch (arrival order, in `rest`) between the link stage
    /// and the workers (`core::split` decides, from where its identifiers
    /// sit: looked up now, but for those [`Ahead`] has).
    pub async fn settle(&mut self, main: &C) -> Result<(), StoreError> {
        let groups = self.workers.len() + 1;
        let inflight = self.inflight.as_mut().expect("a batch in flight");
        if inflight.settled {
            return Ok(());
        }
        if !core::has_links(&inflight.rest) {
            inflight.settled = true;
            return Ok(());
        }
        let carried = core::carried(&inflight.rest);
        let placed: Placed = match self.ahead.take() {
            None => main.placed(&carried).await?,
            Some(Ahead { asked, mut placed }) => {
                let rest: Vec<&str> = carried
                    .into_iter()
                    .filter(|id| !asked.contains(*id))
                    .collect();
                if !rest.is_empty() {
                    placed.extend(main.placed(&rest).await?);
                }
                placed
            }
        };
        // Only now, with nothing left to fail, does the batch leave `rest`:
        // an error above keeps it whole for the retry.
        inflight.settled = true;
        let events = std::mem::take(&mut inflight.rest);
        let (links, rest) = core::split(events, &placed);
        inflight.links = core::groups(links, &placed, groups);
        inflight.touched = core::touched(&inflight.links, &placed);
        inflight.placed = Some(placed);
        inflight.rest.extend(rest);
        Ok(())
    }

    /// Applies the link stage's groups, one per connection (the
    /// coordinator's, then each worker's), concurrently (`core::groups`):
    /// each in transactions of its own pace, so no row lock is held long
    /// however many persons merge; a transaction the database refuses for
    /// what it holds is halved until the refused entry is alone and set
    /// aside. Returns the entries it had.
    pub async fn link_stage(
        &mut self,
        main: &mut C,
        config: &Config,
        layout: &Layout,
        counts: &mut BTreeMap<String, i64>,
    ) -> Result<usize, StoreError> {
        let inflight = self.inflight.as_mut().expect("a batch in flight");
        let link_entries: usize = inflight.links.iter().map(Vec::len).sum();
        if link_entries == 0 {
            return Ok(0);
        }
        let caps = Caps {
            max_ids: config.max_ids,
            blocklist_after: config.blocklist_after.min(i32::MAX as u64) as i32,
        };
        let mut conns = vec![(
            links::Conn {
                client: Some(main),
                pace: &mut self.link_pace,
                marking: &mut self.link_marking,
            },
            self.workers.len() as i16,
        )];
        let mut known = Vec::new();
        for w in &mut self.workers {
            let conn = links::Conn {
                client: w.client.as_mut(),
                pace: &mut w.link_pace,
                marking: &mut w.marking,
            };
            conns.push((conn, w.index));
            known.push(&mut w.known);
        }
        let known = RefCell::new(known);
        let stop = Cell::new(false);
        let failures = self.unknown_failures;
        let trail_from = inflight.trail_from;
        let done = futures_util::future::join_all(
            conns
                .into_iter()
                .zip(inflight.links.iter_mut())
                .filter(|(_, group)| !group.is_empty())
                .map(|((conn, row), group)| {
                    let stage = links::Stage {
                        caps,
                        trail_from,
                        counts_row: row,
                    };
                    let (known, stop) = (&known, &stop);
                    links::apply_group(conn, config, layout, stage, group, known, stop, failures)
                }),
        )
        .await;
        let mut error = None;
        self.unknown_failures = 0;
        for d in done {
            for (k, v) in d.counts {
                *counts.entry(k.to_owned()).or_default() += v;
            }
            // Its worker part would be refused alike.
            let aside: HashSet<(Txid, usize)> = d.set_aside.into_iter().collect();
            if !aside.is_empty() {
                inflight
                    .rest
                    .retain(|r| !aside.contains(&(r.txid, r.type_index)));
            }
            self.unknown_failures = self.unknown_failures.max(d.unknown_failures);
            if let Err(e) = d.result {
                error.get_or_insert(e);
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        inflight.links.clear();
        Ok(link_entries)
    }

    /// Routes the rest of the batch to the workers by the person each
    /// event counts for, as the link stage left them: only the persons it
    /// may have moved are looked up again (`core::unmoved`).
    pub async fn route(&mut self, main: &C) -> Result<(), StoreError> {
        let inflight = self.inflight.as_mut().expect("a batch in flight");
        if inflight.parts.is_some() {
            return Ok(());
        }
        let primaries = core::primaries(&inflight.rest);
        let (mut person, ask) = match &inflight.placed {
            Some(placed) => core::unmoved(primaries, placed, &inflight.touched),
            None => (HashMap::new(), primaries),
        };
        if !ask.is_empty() {
            person.extend(main.persons_of(&ask).await?);
        }
        // Taken only after the query: an error there keeps the batch.
        let rest = std::mem::take(&mut inflight.rest);
        let judged = std::mem::take(&mut inflight.judged);
        let works = core::route(
            rest,
            &person,
            &self.hasher,
            self.workers.len(),
            inflight.trail_from,
            judged,
        );
        inflight.parts = Some(works.into_iter().map(Some).collect());
        inflight.placed = None;
        Ok(())
    }

    /// Applies every routed part not yet committed, each on its worker,
    /// concurrently, while `next`'s placements are looked up on the
    /// coordinator's connection ([`Ahead`]); a part the database refuses
    /// for what it holds is split until the refused events are alone and
    /// set aside ([`isolate`]).
    pub async fn work(
        &mut self,
        main: &mut C,
        config: &Config,
        layout: &Layout,
        next: &[Event],
        counts: &mut BTreeMap<String, i64>,
    ) -> Result<(), StoreError> {
        let inflight = self.inflight.as_mut().expect("a batch in flight");
        let works = inflight.parts.as_mut().expect("routed");
        let look = (self.ahead.is_none() && core::has_links(next)).then(|| core::carried(next));
        let main_ro = &*main;
        let (results, looked) = tokio::join!(
            futures_util::future::join_all(
                self.workers
                    .iter_mut()
                    .zip(works.iter_mut())
                    .filter_map(|(w, work)| work.as_mut().map(|work| (w, work)))
                    .map(|(w, work)| async move {
                        (w.index as usize, w.apply_paced(layout, work).await)
                    }),
            ),
            async {
                match look {
                    Some(ids) => Some((main_ro.placed(&ids).await, ids)),
                    None => None,
                }
            }
        );
        if let Some((Ok(placed), ids)) = looked {
            let asked = ids.into_iter().map(str::to_owned).collect();
            self.ahead = Some(Ahead { asked, placed });
        }
        let mut error = None;
        let mut refusals = Vec::new();
        for (i, (done, r)) in results {
            for (k, v) in done {
                *counts.entry(k.to_owned()).or_default() += v;
            }
            match r {
                Ok(()) => {
                    self.unknown_failures = 0;
                    works[i] = None;
                }
                Err(e) => {
                    let closed = self.workers[i].client.as_ref().is_none_or(C::is_closed);
                    if refused(&e, &mut self.unknown_failures, closed) {
                        refusals.push(i);
                    } else {
                        error = Some(e);
                    }
                }
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        for i in refusals {
            let work = works[i].take().expect("a part that failed");
            let worker = &mut self.workers[i];
            let done = isolate(
                worker,
                main,
                config,
                layout,
                work,
                &mut self.unknown_failures,
            )
            .await
            .map_err(|(e, left)| {
                works[i] = Some(left);
                e
            })?;
            for (k, v) in done {
                *counts.entry(k).or_default() += v;
            }
        }
        Ok(())
    }
}
