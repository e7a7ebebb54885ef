//! The profile process's test bench: an in-memory database ([`Db`])
//! holding what the profile tables would between transactions, which
//! implements the executors' seam (`crate::tables`) statement by statement
//! as PostgreSQL would, and generators of events. [`Sim`] runs batches
//! through the very pipeline, link stage and workers that run in
//! production over it; the property test (`property`) checks what it holds,
//! batch after batch, against `tidemark-reference` (SPEC 11 written out
//! alone).

mod db;
mod events;
mod property;

use std::cell::{Ref, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use serde_json::{json, Value};
use tidemark_store::StoreError;

use crate::coordinator::pipeline::Pipeline;
use crate::core::{Caps, Counts, Entry, Event, Known, Layout, LinkPlan, Pace, TrailRow, Work};
use crate::links::{self, Stage};
use crate::store::Marking;
use crate::worker::Worker;
use crate::Config;
pub use db::{Db, IdState, SimConn};
pub use events::{created, ev, layout, type_name, Msg, HOUR, T0, TYPES};

/// A profile process over a [`Db`]: the production pipeline
/// (`coordinator::pipeline`), link stage and workers, run on a
/// single-threaded runtime over connections to it.
pub struct Sim {
    db: Rc<RefCell<Db>>,
    /// The layout.
    pub layout: Layout,
    /// `max_ids`, `blocklist_after` and the rest, as configured.
    pub config: Config,
    /// Events at or past this get trail rows.
    pub trail_from: Option<i64>,
    /// Each type's `dedup` (ms), judged against each event's acceptance clock.
    pub dedup: Vec<i64>,
    main: SimConn,
    pipeline: Pipeline<SimConn, BuildHasherDefault<DefaultHasher>>,
    runtime: tokio::runtime::Runtime,
    /// Cut every connection after this many transactions of the next batch
    /// (link-stage, then workers'): its uncommitted rest is judged again as
    /// a batch, as the coordinator does when its connection is lost.
    pub cut: Option<usize>,
    /// Events received so far (`Event::seq`).
    arrivals: u64,
}

impl Sim {
    /// An empty database; two workers, trails kept, nothing stale.
    pub fn new(max_ids: usize, blocklist_after: i32) -> Sim {
        let mut sim = Sim::with(max_ids, blocklist_after, 2, 500);
        sim.trail_from = Some(0);
        sim
    }

    /// An empty database with `workers` workers, link-stage transactions
    /// of at most `link_chunk` entries.
    pub fn with(max_ids: usize, blocklist_after: i32, workers: usize, link_chunk: usize) -> Sim {
        let db: Rc<RefCell<Db>> = Default::default();
        let conn = |index| SimConn {
            db: db.clone(),
            index,
        };
        let text = "name = \"sim\"\nendpoints = [\"tcp://127.0.0.1:1\"]\n";
        let mut config = Config::parse(text).expect("a configuration");
        // Below what a configuration allows, to reach the caps sooner.
        (config.max_ids, config.blocklist_after) = (max_ids, blocklist_after as u64);
        let pace = || Pace::new(link_chunk, 1, link_chunk);
        let workers = (0..workers)
            .map(|i| Worker {
                index: i as i16,
                client: Some(conn(i + 1)),
                pace: Pace::new(2_000, 1, 2_000),
                link_pace: pace(),
                marking: Marking::default(),
                // Small, so it also starts again empty now and then.
                known: Known::new(3),
            })
            .collect();
        Sim {
            layout: layout(),
            config,
            trail_from: Some(0),
            dedup: vec![0; TYPES.len()],
            main: conn(0),
            pipeline: Pipeline::new(workers, pace(), Default::default()),
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime"),
            cut: None,
            arrivals: 0,
            db,
        }
    }

    /// What the tables hold.
    pub fn db(&self) -> Ref<'_, Db> {
        self.db.borrow()
    }

    /// `max_ids`, `blocklist_after`.
    fn caps(&self) -> Caps {
        Caps {
            max_ids: self.config.max_ids,
            blocklist_after: self.config.blocklist_after as i32,
        }
    }

    /// One batch (arrival order), as the coordinator applies it.
    pub fn batch(&mut self, events: Vec<Event>) {
        self.batch_then(events, &[]);
    }

    /// [`Sim::batch`], looking up where `next`'s identifiers sit while the
    /// workers apply this one, as the coordinator does. A batch cut (see
    /// [`Sim::cut`]) is judged again whole, as after a lost connection.
    pub fn batch_then(&mut self, mut events: Vec<Event>, next: &[Event]) {
        for e in &mut events {
            e.seq = self.arrivals;
            self.arrivals += 1;
        }
        let (dedup, trail_from) = (self.dedup.clone(), self.trail_from);
        self.pipeline
            .judge(events, &dedup, trail_from, Counts::new());
        self.db.borrow_mut().cut = self.cut.take();
        while let Err(e) = self.apply(next) {
            assert!(matches!(e, StoreError::Lost(_)), "{e}");
            self.db.borrow_mut().cut = None;
            self.pipeline.forget();
            let (events, judged) = self.pipeline.take_back().expect("in flight");
            self.pipeline.judge(events, &dedup, trail_from, judged);
        }
    }

    /// The batch in flight through the pipeline's stages (as
    /// `Pipeline::apply` runs them), checking between them what lets the
    /// link groups and the workers run at once.
    fn apply(&mut self, next: &[Event]) -> Result<(), StoreError> {
        let (p, main) = (&mut self.pipeline, &mut self.main);
        let (config, layout) = (&self.config, &self.layout);
        let mut counts = BTreeMap::new();
        self.runtime.block_on(async {
            self.db.borrow_mut().link_rows.clear();
            p.settle(main).await?;
            p.link_stage(main, config, layout, &mut counts).await?;
            // No row read or written by two link groups.
            let rows = std::mem::take(&mut self.db.borrow_mut().link_rows);
            for (i, (a, ra)) in rows.iter().enumerate() {
                for (b, rb) in &rows[i + 1..] {
                    if a != b {
                        assert!(
                            ra.0.is_disjoint(&rb.0),
                            "two link groups hold one identifier"
                        );
                        assert!(ra.1.is_disjoint(&rb.1), "two link groups hold one person");
                    }
                }
            }
            p.route(main).await?;
            // What routing relies on: the persons as the links left them,
            // so no person is counted by two workers.
            let mut worker_of: HashMap<i64, usize> = HashMap::new();
            for (i, w) in p.inflight.as_ref().expect("in flight").parts() {
                for id in w.events.iter().filter_map(|e| e.ids.primary()) {
                    if let Some(s) = self.db.borrow().ids.get(id.as_str()) {
                        let first = *worker_of.entry(s.person).or_insert(i);
                        assert_eq!(first, i, "two workers hold the person of {id}");
                    }
                }
            }
            p.work(main, config, layout, next, &mut counts).await
        })?;
        self.pipeline.inflight = None;
        Ok(())
    }

    /// One link-stage transaction, as the link stage runs it; returns its plan.
    pub fn links(&mut self, entries: &[Entry]) -> LinkPlan {
        let stage = Stage {
            caps: self.caps(),
            trail_from: self.trail_from,
            counts_row: 0,
        };
        let (main, layout) = (&mut self.main, &self.layout);
        let known = RefCell::new(Vec::new());
        let mut marking = Marking::default();
        let apply = links::apply(main, layout, stage, entries, &mut marking, &known);
        self.runtime.block_on(apply).expect("applied")
    }

    /// One worker's transaction, as a worker runs it.
    pub fn work(&mut self, work: &Work) {
        self.work_knowing(work, &mut Known::new(0));
    }

    /// [`Sim::work`] by a worker that knows `known`.
    pub fn work_knowing(&mut self, work: &Work, known: &mut Known) {
        let mut w = Worker {
            index: 0,
            client: Some(self.main.clone()),
            pace: Pace::new(1, 1, 1),
            link_pace: Pace::new(1, 1, 1),
            marking: Marking::default(),
            known: std::mem::replace(known, Known::new(0)),
        };
        let layout = &self.layout;
        let applied = self.runtime.block_on(w.apply(layout, work));
        *known = w.known;
        applied.expect("applied");
    }

    /// The identifiers of the person holding `id` (`id` alone if unknown), sorted.
    pub fn person(&self, id: &str) -> Vec<String> {
        let db = self.db();
        match db.ids.get(id) {
            None => vec![id.to_owned()],
            Some(s) => self
                .db()
                .ids
                .iter()
                .filter(|(_, o)| o.person == s.person)
                .map(|(i, _)| i.clone())
                .collect(),
        }
    }

    /// What `profile get ID --at AT --json` prints (SPEC 11), as the reader
    /// builds it from the rows.
    pub fn get(&self, id: &str, at: i64) -> Value {
        let db = self.db();
        let Some(s) = db.ids.get(id) else {
            return json!({"id": id, "master": id, "size": 1, "blocklisted": false, "at": at,
                "counters": {"clk": 0.0}, "counts": {}, "first": {}, "last": {}});
        };
        let p = &db.persons[&s.person];
        let (mut counts, mut first, mut last) = (json!({}), json!({}), json!({}));
        for (i, name) in TYPES.iter().enumerate() {
            let t = p.types[self.layout.type_pos[i] as usize - 1];
            if t.count > 0 {
                counts[name] = json!(t.count);
                first[name] = json!(t.first);
                last[name] = json!(t.last);
            }
        }
        let clk = p.counters[0].at(at, self.layout.counters[0].half_life_ms);
        json!({"id": id, "master": p.master, "size": p.size, "blocklisted": s.blocklisted,
            "at": at, "counters": {"clk": clk}, "counts": counts, "first": first, "last": last})
    }

    /// What `trail ID --json` prints over all time (SPEC 11).
    pub fn trail(&self, id: &str) -> Vec<Value> {
        let members: BTreeSet<String> = self.person(id).into_iter().collect();
        let name = |r: &TrailRow| type_name(&self.layout, r.type_pos);
        let db = self.db();
        let mut rows: Vec<&TrailRow> = db
            .trail
            .iter()
            .filter(|r| members.contains(&r.id))
            .collect();
        rows.sort_by(|a, b| (a.ts, name(a), &a.txid).cmp(&(b.ts, name(b), &b.txid)));
        rows.iter()
            .map(|r| json!({"type": name(r), "txid": r.txid, "ts": r.ts, "ids": r.ids}))
            .collect()
    }

    /// Checks every row invariant the e2e tests check in PostgreSQL: every
    /// identifier in an existing person, sizes true, masters members with
    /// the smallest (first ts, identifier).
    pub fn check_rows(&self) {
        let db = self.db();
        for (id, s) in &db.ids {
            assert!(db.persons.contains_key(&s.person), "orphan {id}");
        }
        for (n, p) in &db.persons {
            let members: Vec<(&String, &IdState)> =
                db.ids.iter().filter(|(_, s)| s.person == *n).collect();
            assert_eq!(p.size as usize, members.len(), "size of {n}");
            let master = members
                .iter()
                .min_by_key(|(id, s)| (s.first_ts, id.as_str()))
                .map(|(id, _)| id.as_str());
            assert_eq!(Some(p.master.as_str()), master, "master of {n}");
        }
    }
}
