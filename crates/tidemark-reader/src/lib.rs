//! Reading profiles (SPEC 11): the crate a bidder links to know, at bid
//! time, what each person did.
//!
//! Owns: a pool of connections (`deadpool-postgres`), `get(ids, at)` (any
//! number of identifiers in one round trip: identifier → person → profile
//! is one join), `trail(id, from, to)` (one index range scan per identifier
//! of the person and per day), and the counter definitions, read once and
//! re-read when a profile shows a newer one. Besides `tidemark-store`, the
//! one place SQL lives: a bidder should not need the store's dependencies.
//! Counter values are computed with `tidemark-person`'s `Decayed`, the
//! same maths the profile process writes with.

#![warn(missing_docs)]

mod times;

use std::sync::{Arc, RwLock};
use std::time::Instant;

pub use times::{Histogram, Times};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tidemark_person::Decayed;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The database URL cannot be parsed.
    #[error("bad database url: {0}")]
    Url(String),
    /// No connection could be had from the pool.
    #[error("connection pool: {0}")]
    Pool(String),
    /// The server refused or the connection broke.
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
}

impl From<deadpool_postgres::PoolError> for ReadError {
    fn from(e: deadpool_postgres::PoolError) -> ReadError {
        match e {
            deadpool_postgres::PoolError::Backend(e) => ReadError::Db(e),
            other => ReadError::Pool(other.to_string()),
        }
    }
}

/// A person's profile as seen through one identifier at one time.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The identifier asked for.
    pub id: String,
    /// Its person's master (itself when unknown).
    pub master: String,
    /// Identifiers its person holds (1 when unknown).
    pub size: i64,
    /// Whether the identifier is blocklisted (links nothing more).
    pub blocklisted: bool,
    /// The time the counters are computed at, ms.
    pub at: i64,
    /// Every defined counter's value at `at`, in definition order.
    pub counters: Vec<(String, f64)>,
    /// Per type with events, in definition order.
    pub types: Vec<TypeSeen>,
    /// Each counter's state and half-life, to evaluate it at other times.
    state: Vec<(Decayed, i64)>,
}

/// A person's events of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSeen {
    /// The type.
    pub type_name: String,
    /// Events counted (unweighted).
    pub count: i64,
    /// The earliest `ts`, ms.
    pub first: i64,
    /// The latest `ts`, ms.
    pub last: i64,
}

impl Profile {
    /// The value of the counter `name` (0 when it is not defined).
    pub fn counter(&self, name: &str) -> f64 {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, v)| *v)
    }

    /// Every counter's value at `t` instead of `at` (a bidder evaluates at
    /// its own bid time after one batched read).
    pub fn counters_at(&self, t: i64) -> Vec<(&str, f64)> {
        self.counters
            .iter()
            .zip(&self.state)
            .map(|((name, _), (c, half_life))| (name.as_str(), c.at(t, *half_life)))
            .collect()
    }

    /// The SPEC 11 JSON line of `tidemark profile get --json`.
    pub fn to_json(&self) -> serde_json::Value {
        let map = |f: fn(&TypeSeen) -> i64| -> serde_json::Map<_, _> {
            self.types
                .iter()
                .map(|t| (t.type_name.clone(), f(t).into()))
                .collect()
        };
        serde_json::json!({
            "id": self.id,
            "master": self.master,
            "size": self.size,
            "blocklisted": self.blocklisted,
            "at": self.at,
            "counters": self.counters.iter().map(|(n, v)| (n.clone(), serde_json::json!(v)))
                .collect::<serde_json::Map<_, _>>(),
            "counts": map(|t| t.count),
            "first": map(|t| t.first),
            "last": map(|t| t.last),
        })
    }
}

/// One event of a trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrailEvent {
    /// Its type.
    pub type_name: String,
    /// Its txid.
    pub txid: String,
    /// Its `ts`, ms.
    pub ts: i64,
    /// The identifiers it carried, sorted bytewise.
    pub ids: Vec<String>,
}

impl TrailEvent {
    /// The SPEC 11 JSON line of `tidemark trail --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"type": self.type_name, "txid": self.txid, "ts": self.ts, "ids": self.ids})
    }
}

/// Counter and type definitions, by stored position.
#[derive(Debug, Default)]
struct Definitions {
    /// `(name, half_life_ms)` at position i+1.
    counters: Vec<(String, i64)>,
    /// Type names at position i+1.
    types: Vec<String>,
}

const GET: &str =
    "SELECT p.master, p.size, p.counter_values, p.counter_refs, p.counts, p.firsts, p.lasts,
            i.blocklisted_at IS NOT NULL
     FROM unnest($1::text[]) WITH ORDINALITY AS q(id, n)
     LEFT JOIN tidemark.profile_ids i ON i.id = q.id
     LEFT JOIN tidemark.profiles p ON p.person = i.person
     ORDER BY q.n";

/// The identifiers of the person holding `$1` (or `$1` alone), then the
/// trail: `id = ANY(...)` on the `(id, ts)` index is one range scan per
/// identifier, in each day's partition the `ts` range keeps. The rare row
/// whose identifier list was too long for the index costs one more query.
pub const TRAIL_QUERY: &str =
    "SELECT t.type, t.txid, t.ts, t.ids, t.id FROM tidemark.profile_trail t
     WHERE t.id = ANY(coalesce(
               (SELECT array_agg(o.id) FROM tidemark.profile_ids me
                JOIN tidemark.profile_ids o ON o.person = me.person WHERE me.id = $1),
               ARRAY[$1]))
       AND t.ts >= $2 AND t.ts < $3 AND ($4::text[] IS NULL OR t.type = ANY($4))
     ORDER BY t.ts, t.type COLLATE \"C\", t.txid COLLATE \"C\"";

/// The identifier lists too long for the trail index (their rows' `ids` is
/// empty: no event carries none).
const WIDE_QUERY: &str =
    "SELECT w.id, w.ts, w.type, w.txid, w.ids FROM tidemark.profile_trail_wide w
     JOIN unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS u(id, ts, type, txid)
       ON (w.id, w.ts, w.type, w.txid) = (u.id, u.ts, u.type, u.txid)";

/// A pool of connections to a profile database.
#[derive(Clone)]
pub struct Reader {
    pool: Pool,
    defs: Arc<RwLock<Arc<Definitions>>>,
    times: Arc<Times>,
}

impl Reader {
    /// A reader of the profile database at `url`, with at most `connections`
    /// connections (opened lazily).
    pub fn new(url: &str, connections: usize) -> Result<Reader, ReadError> {
        let mut target = tidemark_tls::parse(url).map_err(|e| ReadError::Url(e.to_string()))?;
        target.tcp_defaults();
        let manager = Manager::from_config(
            target.config,
            target.tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(connections.max(1))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| ReadError::Pool(e.to_string()))?;
        Ok(Reader {
            pool,
            defs: Default::default(),
            times: Default::default(),
        })
    }

    async fn definitions(&self, refresh: bool) -> Result<Arc<Definitions>, ReadError> {
        let current = self.defs.read().expect("defs lock").clone();
        if !refresh && !current.types.is_empty() {
            return Ok(current);
        }
        let c = self.pool.get().await?;
        let counters = c
            .query(
                "SELECT name, half_life_ms FROM tidemark.profile_counters ORDER BY position",
                &[],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let types = c
            .query(
                "SELECT name FROM tidemark.profile_types ORDER BY position",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let d = Arc::new(Definitions { counters, types });
        *self.defs.write().expect("defs lock") = d.clone();
        Ok(d)
    }

    /// The profiles of `ids` at `at` (ms), in the order asked, in one round
    /// trip. An unknown identifier is its own person with nothing counted.
    /// Every successful call is timed ([`Reader::lookup_times`]).
    pub async fn get(&self, ids: &[&str], at: i64) -> Result<Vec<Profile>, ReadError> {
        let started = Instant::now();
        let mut defs = self.definitions(false).await?;
        let rows = {
            let c = self.pool.get().await?;
            let stmt = c.prepare_cached(GET).await?;
            c.query(&stmt, &[&ids]).await?
        };
        let newer = rows.iter().any(|r| {
            let values: Option<Vec<f64>> = r.get(2);
            let counts: Option<Vec<i64>> = r.get(4);
            values.is_some_and(|v| v.len() > defs.counters.len())
                || counts.is_some_and(|c| c.len() > defs.types.len())
        });
        if newer {
            defs = self.definitions(true).await?;
        }
        let profiles = ids
            .iter()
            .zip(&rows)
            .map(|(id, r)| profile(id, r, &defs, at))
            .collect();
        self.times.record(started.elapsed());
        Ok(profiles)
    }

    /// How long `get` has taken, over every call on this reader and its clones.
    pub fn lookup_times(&self) -> Histogram {
        self.times.read()
    }

    /// The events counted for the person holding `id` with `from <= ts < to`,
    /// ordered by (ts, type, txid); `types` filters.
    pub async fn trail(
        &self,
        id: &str,
        from: i64,
        to: i64,
        types: Option<&[String]>,
    ) -> Result<Vec<TrailEvent>, ReadError> {
        let c = self.pool.get().await?;
        let stmt = c.prepare_cached(TRAIL_QUERY).await?;
        let types: Option<Vec<&str>> = types.map(|t| t.iter().map(String::as_str).collect());
        let rows = c.query(&stmt, &[&id, &from, &to, &types]).await?;
        let mut events: Vec<TrailEvent> = rows
            .iter()
            .map(|r| TrailEvent {
                type_name: r.get(0),
                txid: r.get(1),
                ts: r.get(2),
                ids: r.get(3),
            })
            .collect();
        let wide: Vec<usize> = (0..events.len())
            .filter(|i| events[*i].ids.is_empty())
            .collect();
        if !wide.is_empty() {
            let under: Vec<String> = wide.iter().map(|i| rows[*i].get(4)).collect();
            let ts: Vec<i64> = wide.iter().map(|i| events[*i].ts).collect();
            let ty: Vec<&str> = wide.iter().map(|i| events[*i].type_name.as_str()).collect();
            let tx: Vec<&str> = wide.iter().map(|i| events[*i].txid.as_str()).collect();
            let lists = c.query(WIDE_QUERY, &[&under, &ts, &ty, &tx]).await?;
            let mut by_key: std::collections::HashMap<(i64, String, String), Vec<String>> = lists
                .iter()
                .map(|r| ((r.get(1), r.get(2), r.get(3)), r.get(4)))
                .collect();
            for i in wide {
                let e = &mut events[i];
                let key = (e.ts, e.type_name.clone(), e.txid.clone());
                e.ids = by_key.remove(&key).unwrap_or_default();
            }
        }
        Ok(events)
    }

    /// The profile process's clock as saved (the default `at`), if any.
    pub async fn clock(&self) -> Result<Option<i64>, ReadError> {
        let c = self.pool.get().await?;
        let r = c
            .query_one("SELECT max(clock_ms) FROM tidemark.profile_process", &[])
            .await?;
        Ok(r.get(0))
    }
}

fn profile(id: &str, r: &tokio_postgres::Row, defs: &Definitions, at: i64) -> Profile {
    let master: Option<String> = r.get(0);
    let size: Option<i32> = r.get(1);
    let values: Vec<f64> = r.get::<_, Option<_>>(2).unwrap_or_default();
    let refs: Vec<i64> = r.get::<_, Option<_>>(3).unwrap_or_default();
    let counts: Vec<i64> = r.get::<_, Option<_>>(4).unwrap_or_default();
    let firsts: Vec<i64> = r.get::<_, Option<_>>(5).unwrap_or_default();
    let lasts: Vec<i64> = r.get::<_, Option<_>>(6).unwrap_or_default();
    let state: Vec<(Decayed, i64)> = defs
        .counters
        .iter()
        .enumerate()
        .map(|(i, (_, half_life))| {
            let c = Decayed {
                value: values.get(i).copied().unwrap_or(0.0),
                reference: refs.get(i).copied().unwrap_or(0),
            };
            (c, *half_life)
        })
        .collect();
    let counters = defs
        .counters
        .iter()
        .zip(&state)
        .map(|((name, _), (c, half_life))| (name.clone(), c.at(at, *half_life)))
        .collect();
    let types = defs
        .types
        .iter()
        .enumerate()
        .filter(|(j, _)| counts.get(*j).is_some_and(|n| *n > 0))
        .map(|(j, t)| TypeSeen {
            type_name: t.clone(),
            count: counts[j],
            first: firsts[j],
            last: lasts[j],
        })
        .collect();
    Profile {
        id: id.to_owned(),
        master: master.unwrap_or_else(|| id.to_owned()),
        size: size.map_or(1, i64::from),
        blocklisted: r.get::<_, Option<bool>>(7).unwrap_or(false),
        at,
        counters,
        types,
        state,
    }
}
