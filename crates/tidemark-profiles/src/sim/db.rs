//! The in-memory profile tables ([`Db`]) and their statements, as
//! PostgreSQL runs them, behind the executors' seam (`crate::tables`):
//! [`SimConn`] and [`SimTx`].

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use tidemark_person::Person;
use tidemark_store::StoreError;

use crate::core::{Counts, IdRow, Merge, Placed, StoredId, StoredPerson, TrailRow};
use crate::store::Marking;
use crate::tables::{Connection, ProfileTables};

/// A row of `tidemark.profile_ids`.
#[derive(Debug, Clone, PartialEq)]
pub struct IdState {
    /// Its person.
    pub person: i64,
    /// Its first ts.
    pub first_ts: i64,
    /// Refusals charged.
    pub refusals: i64,
    /// `blocklisted_at IS NOT NULL`.
    pub blocklisted: bool,
}

/// What the profile tables hold, and the statements on them.
#[derive(Debug, Default)]
pub struct Db {
    /// `profile_seen`: (txid, type position).
    seen: HashSet<(String, i16)>,
    /// `profile_ids`.
    pub ids: BTreeMap<String, IdState>,
    /// `profiles` (`master_first` is no column: 0 here, read from the
    /// master's row on load).
    pub persons: BTreeMap<i64, Person>,
    /// `profile_person_seq`.
    seq: i64,
    /// `profile_merges`.
    pub merges: Vec<Merge>,
    /// `profile_trail`.
    pub trail: Vec<TrailRow>,
    /// `profile_counts`, summed over workers.
    pub counts: BTreeMap<String, i64>,
    /// Transactions begun before every connection is cut (`None`: never).
    pub(super) cut: Option<usize>,
    /// The rows each link-stage transaction committed read or wrote, by
    /// connection: two link groups must never share one.
    pub(super) link_rows: Vec<(usize, Rows)>,
}

/// Identifiers and persons a transaction read or wrote.
type Rows = (HashSet<String>, HashSet<i64>);

impl Db {
    /// `record_seen`: takes each pair not taken; per pair, whether this
    /// call took it.
    pub fn record_seen(&mut self, pairs: &[(String, i16)]) -> Vec<bool> {
        let new: HashSet<&(String, i16)> = pairs
            .iter()
            .filter(|p| self.seen.insert((*p).clone()))
            .collect();
        pairs.iter().map(|p| new.contains(p)).collect()
    }

    /// `already_seen`.
    pub fn already_seen(&self, pairs: &[(String, i16)]) -> Vec<bool> {
        pairs.iter().map(|p| self.seen.contains(p)).collect()
    }

    /// `load`: the stored identifiers among `ids`, with their persons.
    pub fn load(&self, ids: &[&str]) -> Vec<StoredId> {
        let ids: BTreeSet<&str> = ids.iter().copied().collect();
        ids.into_iter()
            .filter_map(|id| {
                let s = self.ids.get(id)?;
                let mut profile = self.persons[&s.person].clone();
                profile.master_first = self.ids[&profile.master].first_ts;
                Some(StoredId {
                    id: id.to_owned(),
                    first_ts: s.first_ts,
                    refusals: s.refusals,
                    blocklisted: s.blocklisted,
                    person: StoredPerson {
                        person: s.person,
                        profile,
                    },
                })
            })
            .collect()
    }

    /// `placed`.
    pub fn placed(&self, ids: &[&str]) -> Placed {
        ids.iter()
            .filter_map(|id| {
                let s = self.ids.get(*id)?;
                Some((id.to_string(), (s.person, s.first_ts, s.blocklisted)))
            })
            .collect()
    }

    /// `persons_of`.
    pub fn persons_of(&self, ids: &[&str]) -> HashMap<String, i64> {
        ids.iter()
            .filter_map(|id| Some((id.to_string(), self.ids.get(*id)?.person)))
            .collect()
    }

    /// `new_persons`.
    pub fn new_persons(&mut self, n: usize) -> Vec<i64> {
        (0..n)
            .map(|_| {
                self.seq += 1;
                self.seq
            })
            .collect()
    }

    /// `absorb`.
    pub fn absorb(&mut self, absorbed: &[i64], into: &[i64]) {
        let to: HashMap<i64, i64> = absorbed.iter().copied().zip(into.iter().copied()).collect();
        for s in self.ids.values_mut() {
            if let Some(w) = to.get(&s.person) {
                s.person = *w;
            }
        }
        for p in absorbed {
            self.persons.remove(p);
        }
    }

    /// `upsert_ids`: blocklisted stays so once it was.
    pub fn upsert_ids(&mut self, rows: &[IdRow]) {
        for r in rows {
            let was = self.ids.get(&r.id).is_some_and(|s| s.blocklisted);
            self.ids.insert(
                r.id.clone(),
                IdState {
                    person: r.person,
                    first_ts: r.first_ts,
                    refusals: r.refusals,
                    blocklisted: was || r.blocklisted,
                },
            );
        }
    }

    /// `upsert_persons`: whole rows, arrays of the layout's lengths.
    pub fn upsert_persons(&mut self, persons: &[StoredPerson], counters: usize, types: usize) {
        for sp in persons {
            let p = &sp.profile;
            assert!(p.counters.len() == counters && p.types.len() == types);
            let stored = Person {
                master_first: 0,
                ..p.clone()
            };
            self.persons.insert(sp.person, stored);
        }
    }

    /// `insert_ids`: new rows, each a new person; panics on a stored one,
    /// as the unique index refuses it.
    pub fn insert_ids(&mut self, ids: &[&str], first_ts: &[i64]) -> Vec<i64> {
        ids.iter()
            .zip(first_ts)
            .map(|(id, ts)| {
                self.seq += 1;
                let row = IdState {
                    person: self.seq,
                    first_ts: *ts,
                    refusals: 0,
                    blocklisted: false,
                };
                assert!(
                    self.ids.insert(id.to_string(), row).is_none(),
                    "{id} exists"
                );
                self.seq
            })
            .collect()
    }

    /// `lower_first_ts`.
    pub fn lower_first_ts(&mut self, ids: &[&str], first_ts: &[i64]) {
        for (id, ts) in ids.iter().zip(first_ts) {
            if let Some(s) = self.ids.get_mut(*id) {
                s.first_ts = s.first_ts.min(*ts);
            }
        }
    }

    /// `add_counts` (zeros are not written).
    pub fn add_counts(&mut self, counts: &Counts) {
        for (k, v) in counts.iter().filter(|(_, v)| **v != 0) {
            *self.counts.entry(k.to_string()).or_default() += v;
        }
    }
}

/// One connection to a [`Db`] (each of the coordinator's and workers').
#[derive(Debug, Clone)]
pub struct SimConn {
    pub(super) db: Rc<RefCell<Db>>,
    /// Which connection: link groups on two must touch no row in common.
    pub(super) index: usize,
}

/// A transaction on a [`SimConn`]: each statement applied as it runs (the
/// groups that run at once share no row, so none sees another's).
pub struct SimTx<'a> {
    conn: &'a SimConn,
    /// What it read or wrote, and whether it is a link-stage transaction
    /// (the only kind that numbers fresh persons).
    rows: RefCell<(Rows, bool)>,
}

impl Connection for SimConn {
    type Tx<'a> = SimTx<'a>;

    async fn begin(&mut self) -> Result<SimTx<'_>, StoreError> {
        let mut db = self.db.borrow_mut();
        match db.cut {
            Some(0) => return Err(StoreError::Lost("cut by the simulator".into())),
            Some(n) => db.cut = Some(n - 1),
            None => {}
        }
        drop(db);
        Ok(SimTx {
            conn: self,
            rows: Default::default(),
        })
    }

    fn is_closed(&self) -> bool {
        false
    }

    async fn placed(&self, ids: &[&str]) -> Result<Placed, StoreError> {
        Ok(self.db.borrow().placed(ids))
    }

    async fn persons_of(&self, ids: &[&str]) -> Result<HashMap<String, i64>, StoreError> {
        Ok(self.db.borrow().persons_of(ids))
    }
}

impl SimTx<'_> {
    fn db(&self) -> std::cell::RefMut<'_, Db> {
        self.conn.db.borrow_mut()
    }

    fn ids<'s>(&self, ids: impl IntoIterator<Item = &'s str>) {
        let mut r = self.rows.borrow_mut();
        r.0 .0.extend(ids.into_iter().map(str::to_owned));
    }

    fn persons(&self, persons: impl IntoIterator<Item = i64>) {
        self.rows.borrow_mut().0 .1.extend(persons);
    }
}

impl ProfileTables for SimTx<'_> {
    async fn take_marks(
        &self,
        pairs: &[(String, i16)],
        _how: &mut Marking,
    ) -> Result<Option<Vec<bool>>, StoreError> {
        Ok(Some(self.db().record_seen(pairs)))
    }

    async fn already_seen(&self, pairs: &[(String, i16)]) -> Result<Vec<bool>, StoreError> {
        Ok(self.db().already_seen(pairs))
    }

    async fn load(&self, ids: &[&str]) -> Result<Vec<StoredId>, StoreError> {
        let loaded = self.db().load(ids);
        // A blocklisted identifier's row, read and left alone, decides
        // nothing (it links nothing; were the event older than its first
        // ts, or counted for it, it would be written), so groups may share
        // it (`batch::groups`).
        let idle: HashSet<&str> = (loaded.iter().filter(|s| s.blocklisted))
            .map(|s| s.id.as_str())
            .collect();
        self.ids(ids.iter().copied().filter(|i| !idle.contains(i)));
        let live = loaded.iter().filter(|s| !s.blocklisted);
        self.persons(live.map(|s| s.person.person));
        Ok(loaded)
    }

    async fn new_persons(&self, n: usize) -> Result<Vec<i64>, StoreError> {
        self.rows.borrow_mut().1 = true;
        Ok(self.db().new_persons(n))
    }

    async fn absorb(&self, absorbed: &[i64], into: &[i64]) -> Result<(), StoreError> {
        self.persons(absorbed.iter().chain(into).copied());
        self.db().absorb(absorbed, into);
        Ok(())
    }

    async fn upsert_ids(&self, rows: &[IdRow]) -> Result<(), StoreError> {
        self.ids(rows.iter().map(|r| r.id.as_str()));
        self.db().upsert_ids(rows);
        Ok(())
    }

    async fn upsert_persons(
        &self,
        persons: &[StoredPerson],
        counters: usize,
        types: usize,
    ) -> Result<(), StoreError> {
        self.persons(persons.iter().map(|p| p.person));
        self.db().upsert_persons(persons, counters, types);
        Ok(())
    }

    async fn log_merges(&self, merges: &[Merge]) -> Result<(), StoreError> {
        self.db().merges.extend(merges.iter().cloned());
        Ok(())
    }

    async fn insert_trail(&self, rows: &[TrailRow]) -> Result<(), StoreError> {
        self.db().trail.extend(rows.iter().cloned());
        Ok(())
    }

    async fn insert_ids(&self, ids: &[&str], first_ts: &[i64]) -> Result<Vec<i64>, StoreError> {
        Ok(self.db().insert_ids(ids, first_ts))
    }

    async fn lower_first_ts(&self, ids: &[&str], first_ts: &[i64]) -> Result<(), StoreError> {
        self.db().lower_first_ts(ids, first_ts);
        Ok(())
    }

    async fn add_counts(&self, _row: i16, counts: &Counts) -> Result<(), StoreError> {
        self.db().add_counts(counts);
        Ok(())
    }

    async fn quarantine(
        &self,
        _topic: &str,
        _payload: &str,
        _reason: &str,
        _sqlstate: Option<&str>,
        _max: i64,
    ) -> Result<bool, StoreError> {
        unreachable!("the simulator refuses nothing")
    }

    async fn commit(self) -> Result<(), StoreError> {
        let (rows, link) = self.rows.into_inner();
        if link {
            self.conn
                .db
                .borrow_mut()
                .link_rows
                .push((self.conn.index, rows));
        }
        // The other groups' transactions go on meanwhile, as they do on
        // their own connections.
        tokio::task::yield_now().await;
        Ok(())
    }

    async fn rollback(self) -> Result<(), StoreError> {
        unreachable!("the simulator takes every mark at once")
    }
}
