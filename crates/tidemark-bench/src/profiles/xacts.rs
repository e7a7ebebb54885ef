//! The profile process's transactions as seen from `pg_stat_activity`
//! while a benchmark runs, by connection role: how long they last, whether
//! they wrote, the locks they waited on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The profile process's transactions as seen from `pg_stat_activity`,
/// sampled every 5 ms: a row lock is held no longer than the transaction
/// that took it, so the longest transaction bounds every lock. Told apart by
/// connection (`application_name`): the link stage's and the workers'.
pub struct Xacts {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<anyhow::Result<BTreeMap<(i32, u64), Xact>>>,
}

/// One transaction seen: its connection's role, the longest age seen (ms),
/// the lock it was seen waiting on, whether it wrote (had a transaction id:
/// only then can it hold row locks), and, for the longest one's report, the
/// statement it was on when last seen and when it started.
#[derive(Default)]
struct Xact {
    role: String,
    age: f64,
    lock: Option<String>,
    wrote: bool,
    query: String,
    start: f64,
}

impl Xacts {
    /// Starts sampling the other client backends of `url`'s database.
    pub async fn watch(url: &str) -> anyhow::Result<Xacts> {
        let c = tidemark_store::connect(url).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let t0 = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        let handle = tokio::spawn(async move {
            let q = crate::store::transactions_statement(&c).await?;
            let mut seen: BTreeMap<(i32, u64), Xact> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                for r in c.query(&q, &[]).await? {
                    let key = (r.get::<_, i32>(0), r.get::<_, i64>(1) as u64);
                    let x = seen.entry(key).or_insert_with(|| {
                        // "tidemark profiles NAME: worker 1" -> "worker"
                        let app: String = r.get(4);
                        let role = app.rsplit(": ").next().unwrap_or("");
                        let role = role.split(' ').next().unwrap_or("");
                        Xact {
                            role: if role.is_empty() { "other" } else { role }.to_string(),
                            ..Xact::default()
                        }
                    });
                    x.age = x.age.max(r.get(2));
                    x.wrote |= r.get::<_, bool>(5);
                    x.query = r.get::<_, Option<String>>(6).unwrap_or_default();
                    x.start = (key.1 as f64 / 1e6 - t0).max(0.0);
                    if let Some(lock) = r.get::<_, Option<String>>(3) {
                        x.lock = Some(lock);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(seen)
        });
        Ok(Xacts { stop, handle })
    }

    /// Stops sampling; a line per role on the transactions seen.
    pub async fn report(self) -> anyhow::Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.handle.await??;
        let mut by_role: BTreeMap<String, Vec<&Xact>> = BTreeMap::new();
        for x in seen.values() {
            let kind = if x.wrote { "writing" } else { "read-only" };
            by_role
                .entry(format!("{} {kind}", x.role))
                .or_default()
                .push(x);
        }
        let mut lines = Vec::new();
        for (role, xs) in by_role {
            let mut ages: Vec<f64> = xs.iter().map(|x| x.age).collect();
            ages.sort_by(f64::total_cmp);
            let q = |p: f64| ages[((ages.len() as f64 * p) as usize).min(ages.len() - 1)];
            // Which locks were waited on (`extend`: two backends growing one table).
            let mut locks: BTreeMap<&str, usize> = BTreeMap::new();
            for lock in xs.iter().filter_map(|x| x.lock.as_deref()) {
                *locks.entry(lock).or_default() += 1;
            }
            let longest = xs.iter().max_by(|a, b| a.age.total_cmp(&b.age));
            let (at, query) = longest.map_or((0.0, ""), |x| (x.start, x.query.as_str()));
            lines.push(format!(
                "{role}: {} transactions seen (sampled every 5 ms), longest {:.0} ms (began {at:.0} s in, last seen on {:?}), p99 {:.0} ms, {} over 100 ms, {} waited on a lock {locks:?}",
                ages.len(),
                q(1.0),
                query.split_whitespace().collect::<Vec<_>>().join(" "),
                q(0.99),
                ages.iter().filter(|a| **a > 100.0).count(),
                locks.values().sum::<usize>()
            ));
        }
        if lines.is_empty() {
            lines.push("no transactions seen".into());
        }
        Ok(lines.join("\n  "))
    }
}
