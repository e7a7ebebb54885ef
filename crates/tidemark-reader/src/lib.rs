//! Reading profiles (SPEC 11): the crate a bidder links to know, at bid
//! time, what each person did.
//!
//! Owns: a pool of connections (`deadpool-postgres`), `get(ids, at)` (any
//! number of identifiers in one round trip: identifier → person → profile
//! is one join), `trail(id, from, to)` (one index range scan per identifier
//! of the person and per day), and the counter definitions, read once and
//! re-read when a profile shows a newer one; reads spread over hot standbys
//! within a lag bound, falling back to the primary (`with_replicas`); and,
//! in [`store`], the one
//! spelling of the profile tables as read, which the profile process writes
//! with. It does not link `tidemark-store`: a bidder should not need the
//! store's dependencies. Counter values are computed with `tidemark-person`'s `Decayed`, the
//! same maths the profile process writes with; [`ProfileRate`] is the one
//! spelling of a rate derived from two counters, so a bidder scores with the
//! value its bids were trained on.

#![warn(missing_docs)]

pub mod rate;
mod replicas;
pub mod store;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

pub use rate::ProfileRate;
pub use replicas::Served;
pub use store::TRAIL_QUERY;
pub use tidemark_metrics::{Histogram, Times};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use replicas::Replica;
use tidemark_person::{Decayed, Person};

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
    /// The database holds what its schema does not define.
    #[error("database schema: {0}")]
    Schema(String),
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

    /// `rate`'s value at `t`; `None` when the database defines no counter
    /// of that name (or none yet).
    pub fn rate_at(&self, rate: &ProfileRate, t: i64) -> Option<f64> {
        rate.of(&self.counters_at(t))
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

/// A pool of connections to a profile database, and to its replicas.
#[derive(Clone)]
pub struct Reader {
    pool: Pool,
    defs: Arc<RwLock<Arc<Definitions>>>,
    times: Arc<Times>,
    replicas: Arc<Vec<Replica>>,
    max_lag_ms: i64,
    turn: Arc<AtomicUsize>,
    served: Arc<Mutex<Option<Served>>>,
}

/// One URL per host of a libpq-style host list, in a URL's authority
/// (`postgresql://user@a:5432,b:5433/db?...`) or its query
/// (`?host=/a,/b&port=5432,5433`, each host with its port), the rest of the
/// URL shared: a list of replicas is servers to take turns on, not to fail
/// over along. Any other URL is itself.
pub fn split_hosts(url: &str) -> Vec<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return vec![url.to_owned()];
    };
    if let Some(urls) = split_query_hosts(url) {
        return urls;
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, list) = match authority.rsplit_once('@') {
        Some((u, l)) => (format!("{u}@"), l),
        None => (String::new(), authority),
    };
    if !list.contains(',') {
        return vec![url.to_owned()];
    }
    list.split(',')
        .map(|host| format!("{scheme}://{user}{host}{tail}"))
        .collect()
}

/// [`split_hosts`] for a list in the query; `None` when there is none.
fn split_query_hosts(url: &str) -> Option<Vec<String>> {
    let (base, query) = url.split_once('?')?;
    // Keys compared decoded, as libpq and tidemark-tls read them
    // (`h%6Fst=` is `host=`).
    let key = |p: &str| tidemark_tls::query_decode(p.split_once('=').map_or(p, |(k, _)| k));
    // Every `host=` (and `port=`) of the query, in order: a list may be
    // given as one comma-separated value or as the key repeated.
    let values = |name: &str| -> Vec<String> {
        query
            .split('&')
            .filter(|p| p.contains('=') && key(p) == name)
            .filter_map(|p| p.split_once('='))
            .flat_map(|(_, v)| tidemark_tls::query_list(v))
            .collect()
    };
    let hosts = Some(values("host")).filter(|h| h.len() > 1)?;
    let ports = values("port");
    if ports.len() > 1 && ports.len() != hosts.len() {
        // Left whole: connecting then says the lists do not match.
        return None;
    }
    let others: Vec<&str> = query
        .split('&')
        .filter(|p| !matches!(key(p).as_str(), "host" | "port"))
        .collect();
    let urls = hosts.iter().enumerate().map(|(i, host)| {
        let mut params: Vec<String> = others.iter().map(|p| (*p).to_owned()).collect();
        params.push(format!("host={host}"));
        // As libpq: one port for all hosts, or one each.
        if let Some(port) = ports.get(if ports.len() == hosts.len() { i } else { 0 }) {
            params.push(format!("port={port}"));
        }
        format!("{base}?{}", params.join("&"))
    });
    Some(urls.collect())
}

fn pool(url: &str, connections: usize) -> Result<Pool, ReadError> {
    let mut target = tidemark_tls::parse(url).map_err(|e| ReadError::Url(e.to_string()))?;
    target.tcp_defaults();
    let manager = Manager::from_config(
        target.config,
        target.tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(connections.max(1))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| ReadError::Pool(e.to_string()))
}

impl Reader {
    /// A reader of the profile database at `url`, with at most `connections`
    /// connections (opened lazily).
    pub fn new(url: &str, connections: usize) -> Result<Reader, ReadError> {
        Ok(Reader {
            pool: pool(url, connections)?,
            defs: Default::default(),
            times: Arc::new(Times::new(tidemark_metrics::LOOKUP_BOUNDS)),
            replicas: Arc::default(),
            max_lag_ms: 0,
            turn: Arc::default(),
            served: Arc::default(),
        })
    }

    /// Reads go to these hot standbys of the database (each with as many
    /// connections; a URL with a host list, `postgresql://a,b:5433/db`,
    /// is one replica per host), in turn, while one lags its primary by at most
    /// `max_lag`; to the primary when none does or is reachable. A replica
    /// that cannot be reached, drops the connection or cancels the read
    /// (a conflict with its replay) is skipped for 5 s and the read is made
    /// again on the primary; an error the query itself causes is returned.
    pub fn with_replicas(mut self, urls: &[&str], max_lag: Duration) -> Result<Reader, ReadError> {
        let connections = self.pool.status().max_size;
        self.replicas = Arc::new(
            urls.iter()
                .flat_map(|u| split_hosts(u))
                .map(|u| pool(&u, connections).map(Replica::new))
                .collect::<Result<_, _>>()?,
        );
        self.max_lag_ms = i64::try_from(max_lag.as_millis()).unwrap_or(i64::MAX);
        Ok(self)
    }

    /// Where the last successful read was served, and the lag seen there
    /// (`None` before the first, and always without replicas).
    pub fn last_served(&self) -> Option<Served> {
        *self.served.lock().expect("served")
    }

    /// A connection: the next usable replica's, else the primary's.
    async fn client(&self) -> Result<(Object, Served), ReadError> {
        let n = self.replicas.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let index = (start + k) % n;
            let r = &self.replicas[index];
            if let Some(lag_ms) = r.usable(self.max_lag_ms).await {
                match r.pool.get().await {
                    Ok(c) => return Ok((c, Served::Replica { index, lag_ms })),
                    Err(_) => r.away(),
                }
            }
        }
        Ok((self.pool.get().await?, Served::Primary))
    }

    /// Runs `f` on a connection from [`Reader::client`]; if a replica's
    /// fails for the server's sake (not the query's), once more on the
    /// primary. `f` takes the connection by value (not an async closure
    /// over a borrowed one) so every future a Reader returns is `Send`:
    /// bidders spawn them on multi-threaded runtimes.
    async fn run<T, F, Fut>(&self, f: F) -> Result<T, ReadError>
    where
        F: Fn(Object) -> Fut,
        Fut: Future<Output = Result<T, ReadError>>,
    {
        let (c, served) = self.client().await?;
        let (v, served) = match (f(c).await, served) {
            (Ok(v), s) => (v, s),
            (Err(e), Served::Replica { index, .. }) if replicas::server_trouble(&e) => {
                self.replicas[index].away();
                (f(self.pool.get().await?).await?, Served::Primary)
            }
            (Err(e), _) => return Err(e),
        };
        // Without replicas every read is the primary's: no shared lock per read.
        if !self.replicas.is_empty() {
            *self.served.lock().expect("served") = Some(served);
        }
        Ok(v)
    }

    async fn definitions(&self, refresh: bool) -> Result<Arc<Definitions>, ReadError> {
        let current = self.defs.read().expect("defs lock").clone();
        if !refresh && !current.types.is_empty() {
            return Ok(current);
        }
        self.run(|c| async move { self.load_definitions(&c).await })
            .await
    }

    /// Reads the definitions on `c` into the cache.
    async fn load_definitions(&self, c: &Object) -> Result<Arc<Definitions>, ReadError> {
        let (types, counters) = store::definitions(&***c).await?;
        let counters = counters.into_iter().map(|(_, n, _, h)| (n, h)).collect();
        let types = types.into_iter().map(|(_, n)| n).collect();
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
        let rows = self
            .run(|c| async move {
                let stmt = c.prepare_cached(&store::GET).await?;
                Ok(c.query(&stmt, &[&ids]).await?)
            })
            .await?;
        let persons: Vec<(Option<Person>, bool)> = rows
            .iter()
            .map(|r| (store::person_at(r, 0, 0), store::blocklisted(r)))
            .collect();
        let newer = persons
            .iter()
            .filter_map(|(p, _)| p.as_ref())
            .any(|p| p.counters.len() > defs.counters.len() || p.types.len() > defs.types.len());
        if newer {
            defs = self.definitions(true).await?;
        }
        let profiles = ids
            .iter()
            .zip(persons)
            .map(|(id, (person, blocklisted))| profile(id, person, blocklisted, &defs, at))
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
        let mut events = self
            .run(|c| async move { trail(self, c, id, from, to).await })
            .await?;
        if let Some(types) = types {
            events.retain(|e| types.contains(&e.type_name));
        }
        events.sort_by(|a, b| (a.ts, &a.type_name, &a.txid).cmp(&(b.ts, &b.type_name, &b.txid)));
        Ok(events)
    }

    /// The profile process's clock as saved (the default `at`), if any.
    pub async fn clock(&self) -> Result<Option<i64>, ReadError> {
        self.run(|c| async move { Ok(store::clock(&**c).await?) })
            .await
    }
}

/// A trail read on one connection (its queries, and the type names if new
/// to the reader, from the same server), unordered and unfiltered by type.
async fn trail(
    reader: &Reader,
    c: Object,
    id: &str,
    from: i64,
    to: i64,
) -> Result<Vec<TrailEvent>, ReadError> {
    let stmt = c.prepare_cached(TRAIL_QUERY).await?;
    // A packed day starts less than a day before the events it holds.
    let packed_from = from.saturating_sub(86_400_000);
    let rows = c.query(&stmt, &[&id, &from, &to, &packed_from]).await?;
    // (type position, event with its name still to come)
    let mut events: Vec<(i16, TrailEvent)> = Vec::with_capacity(rows.len());
    // (index in `events`, identifier the row is under)
    let mut wide: Vec<(usize, String)> = Vec::new();
    for r in &rows {
        let under: String = r.get(0);
        let ts: i64 = r.get(1);
        if let Some(offsets) = r.get::<_, Option<Vec<i32>>>(5) {
            let types: Vec<i16> = r.get(6);
            let txids: Vec<store::Txid> = r.get(7);
            let ids = r
                .get::<_, Option<Vec<String>>>(4)
                .unwrap_or_else(|| vec![under]);
            for ((off, ty), txid) in offsets.into_iter().zip(types).zip(txids) {
                let ts = ts + i64::from(off);
                if (from..to).contains(&ts) {
                    events.push((ty, event(txid.0, ts, ids.clone())));
                }
            }
            continue;
        }
        let ids = match r.get::<_, Option<Vec<String>>>(4) {
            None => vec![under],
            Some(ids) if ids.is_empty() => {
                wide.push((events.len(), under));
                ids
            }
            Some(ids) => ids,
        };
        events.push((r.get(2), event(r.get::<_, store::Txid>(3).0, ts, ids)));
    }
    if !wide.is_empty() {
        fill_wide(&c, &mut events, wide).await?;
    }
    let mut defs = reader.defs.read().expect("defs lock").clone();
    let newest = events.iter().map(|(t, _)| *t).max().unwrap_or(0);
    if newest as usize > defs.types.len() {
        defs = reader.load_definitions(&c).await?;
    }
    events
        .into_iter()
        .map(|(t, mut e)| {
            let name = usize::try_from(t - 1).ok().and_then(|i| defs.types.get(i));
            e.type_name = name
                .ok_or_else(|| {
                    ReadError::Schema(format!("trail type position {t} is not defined"))
                })?
                .clone();
            Ok(e)
        })
        .collect()
}

fn event(txid: String, ts: i64, ids: Vec<String>) -> TrailEvent {
    TrailEvent {
        type_name: String::new(),
        txid,
        ts,
        ids,
    }
}

/// Fetches the identifier lists that live in `profile_trail_wide`.
async fn fill_wide(
    c: &Object,
    events: &mut [(i16, TrailEvent)],
    wide: Vec<(usize, String)>,
) -> Result<(), ReadError> {
    let under: Vec<&str> = wide.iter().map(|(_, u)| u.as_str()).collect();
    let ts: Vec<i64> = wide.iter().map(|(i, _)| events[*i].1.ts).collect();
    let ty: Vec<i16> = wide.iter().map(|(i, _)| events[*i].0).collect();
    let tx: Vec<&str> = wide
        .iter()
        .map(|(i, _)| events[*i].1.txid.as_str())
        .collect();
    let lists = c.query(store::WIDE_QUERY, &[&under, &ts, &ty, &tx]).await?;
    let mut by_key: std::collections::HashMap<(String, i64, i16, String), Vec<String>> = lists
        .iter()
        .map(|r| {
            (
                (r.get(0), r.get(1), r.get(2), r.get::<_, store::Txid>(3).0),
                r.get(4),
            )
        })
        .collect();
    for (i, under) in wide {
        let (ty, e) = &mut events[i];
        e.ids = by_key
            .remove(&(under, e.ts, *ty, e.txid.clone()))
            .unwrap_or_default();
    }
    Ok(())
}

fn profile(
    id: &str,
    person: Option<Person>,
    blocklisted: bool,
    defs: &Definitions,
    at: i64,
) -> Profile {
    let size = person.as_ref().map_or(1, |p| p.size);
    let state: Vec<(Decayed, i64)> = defs
        .counters
        .iter()
        .enumerate()
        .map(|(i, (_, half_life))| {
            let c = person
                .as_ref()
                .and_then(|p| p.counters.get(i).copied())
                .unwrap_or_default();
            (c, *half_life)
        })
        .collect();
    let counters = defs
        .counters
        .iter()
        .zip(&state)
        .map(|((name, _), (c, half_life))| (name.clone(), c.at(at, *half_life)))
        .collect();
    let stats = person.as_ref().map_or(&[][..], |p| &p.types[..]);
    let types = defs
        .types
        .iter()
        .zip(stats)
        .filter(|(_, s)| s.count > 0)
        .map(|(t, s)| TypeSeen {
            type_name: t.clone(),
            count: s.count,
            first: s.first,
            last: s.last,
        })
        .collect();
    Profile {
        id: id.to_owned(),
        master: person.map_or_else(|| id.to_owned(), |p| p.master),
        size,
        blocklisted,
        at,
        counters,
        types,
        state,
    }
}

/// Bidders spawn reads on multi-threaded runtimes: every future a Reader
/// returns must be `Send` (checked when this compiles).
#[cfg(test)]
#[allow(dead_code)]
fn futures_are_send(r: &Reader, types: &[String]) {
    fn send<T: Send>(_: T) {}
    send(r.get(&["a"], 0));
    send(r.trail("a", 0, 1, Some(types)));
    send(r.clock());
}

#[cfg(test)]
mod tests {
    use super::split_hosts;

    #[test]
    fn a_host_list_is_one_replica_per_host() {
        assert_eq!(
            split_hosts("postgresql://u:p@a:5432,b,c:6000/db?sslmode=require"),
            [
                "postgresql://u:p@a:5432/db?sslmode=require",
                "postgresql://u:p@b/db?sslmode=require",
                "postgresql://u:p@c:6000/db?sslmode=require",
            ]
        );
        assert_eq!(
            split_hosts("postgres://a,b"),
            ["postgres://a", "postgres://b"]
        );
        // In the query, each host with its own port, or all with the one.
        assert_eq!(
            split_hosts("postgresql://u@/db?host=/a,/b%2C/c&port=1,2,3&sslmode=disable"),
            [
                "postgresql://u@/db?sslmode=disable&host=/a&port=1",
                "postgresql://u@/db?sslmode=disable&host=/b&port=2",
                "postgresql://u@/db?sslmode=disable&host=/c&port=3",
            ]
        );
        assert_eq!(
            split_hosts("postgresql://u@/db?host=/a,/b&port=7"),
            [
                "postgresql://u@/db?host=/a&port=7",
                "postgresql://u@/db?host=/b&port=7",
            ]
        );
        // A host list given as the key repeated: every host is a replica.
        assert_eq!(
            split_hosts("postgresql://u@/db?host=/a&host=/b&port=7"),
            [
                "postgresql://u@/db?host=/a&port=7",
                "postgresql://u@/db?host=/b&port=7",
            ]
        );
        // Keys are read decoded, as tidemark-tls (and libpq) read them.
        assert_eq!(
            split_hosts("postgresql://u@/db?h%6Fst=/a,/b&p%6Frt=7"),
            [
                "postgresql://u@/db?host=/a&port=7",
                "postgresql://u@/db?host=/b&port=7",
            ]
        );
        for one in [
            "postgresql://u@/db?host=/a,/b,/c&port=1,2",
            "postgresql://u@h:5432/db",
            "postgresql://tidemark@/db?host=/var/tmp/x&port=5432",
            "host=a user=u",
        ] {
            assert_eq!(split_hosts(one), [one]);
        }
    }
}
