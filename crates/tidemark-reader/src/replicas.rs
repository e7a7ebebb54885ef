//! Reads spread over hot standbys (streaming replicas of the profile
//! database): each read goes to the next replica in turn whose lag is within
//! the caller's bound, else to the primary. A replica that errs is left
//! alone for a few seconds; its lag is asked at most once a second.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;

use crate::{store, ReadError};

/// Where a read was served, and the lag seen there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The primary (no replica given, or none usable).
    Primary,
    /// Replica `index` (in the order given, a host list counting each of
    /// its hosts: [`crate::split_hosts`]), `lag_ms` behind its primary.
    Replica {
        /// Its position among the replicas given, host lists expanded.
        index: usize,
        /// Its lag when last asked, ms.
        lag_ms: i64,
    },
}

/// Whether a read failed for the server's sake (unreachable, connection
/// lost, shutting down, out of resources, or cancelled by a conflict with
/// replay), so the primary may answer it, rather than for the query's.
pub(crate) fn server_trouble(e: &ReadError) -> bool {
    match e {
        ReadError::Url(_) | ReadError::Schema(_) => false,
        ReadError::Pool(_) => true,
        ReadError::Db(e) => e.code().is_none_or(|c| {
            let c = c.code();
            c == "40001" || ["08", "53", "57"].iter().any(|class| c.starts_with(class))
        }),
    }
}

/// How long a replica that erred is skipped.
const AWAY: Duration = Duration::from_secs(5);
/// How long a lag reading is trusted.
const LAG_FRESH: Duration = Duration::from_secs(1);

/// One replica's pool and what is known of it.
pub(crate) struct Replica {
    pub(crate) pool: Pool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    lag: Option<(Instant, i64)>,
    away_until: Option<Instant>,
}

impl Replica {
    pub(crate) fn new(pool: Pool) -> Replica {
        Replica {
            pool,
            state: Mutex::default(),
        }
    }

    /// Skips it for a while (it erred).
    pub(crate) fn away(&self) {
        let mut s = self.state.lock().expect("replica state");
        s.away_until = Some(Instant::now() + AWAY);
        s.lag = None;
    }

    /// Its lag if it may serve a read lagging at most `max_ms`.
    pub(crate) async fn usable(&self, max_ms: i64) -> Option<i64> {
        {
            let s = self.state.lock().expect("replica state");
            if s.away_until.is_some_and(|t| Instant::now() < t) {
                return None;
            }
            if let Some((_, lag)) = s.lag.filter(|(at, _)| at.elapsed() < LAG_FRESH) {
                return (lag <= max_ms).then_some(lag);
            }
        }
        match self.lag().await {
            Ok(lag) => {
                let mut s = self.state.lock().expect("replica state");
                s.lag = Some((Instant::now(), lag));
                s.away_until = None;
                (lag <= max_ms).then_some(lag)
            }
            Err(_) => {
                self.away();
                None
            }
        }
    }

    async fn lag(&self) -> Result<i64, ReadError> {
        let c = self.pool.get().await?;
        let r = c.query_one(store::LAG_QUERY, &[]).await?;
        let (standby, lag): (bool, Option<i64>) = (r.get(0), r.get(1));
        // A promoted replica is a primary of its own, no longer following
        // the one the reader writes beside: never within any bound (it was
        // read as 0 for ever, serving a diverged copy).
        Ok(if standby {
            lag.unwrap_or(i64::MAX)
        } else {
            i64::MAX
        })
    }
}
