//! What `tidemark status` checks of each part of a deployment.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::Value;
use tidemark_intake::ClockKind;

use crate::deployment::Part;

#[derive(Default)]
pub struct Check {
    pub problems: Vec<String>,
    pub facts: serde_json::Map<String, Value>,
}

impl Check {
    pub fn problem(&mut self, p: String) {
        self.problems.push(p);
    }
    pub fn fact(&mut self, k: &str, v: impl Into<Value>) {
        self.facts.insert(k.to_owned(), v.into());
    }
}

async fn connect(url: &str, r: &mut Check) -> Option<tidemark_store::Client> {
    match tokio::time::timeout(Duration::from_secs(5), tidemark_store::connect(url)).await {
        Ok(Ok(c)) => Some(c),
        Ok(Err(e)) => {
            r.problem(format!("database away: {e}"));
            None
        }
        Err(_) => {
            r.problem("database away: no answer within 5 s".into());
            None
        }
    }
}

pub async fn check(part: &Part, default: &str, stale_ms: i64, r: &mut Check) {
    let now = tidemark_intake::wall_ms();
    let behind = |r: &mut Check, wall: bool, clock: Option<i64>| {
        if let (true, Some(clock)) = (wall, clock) {
            r.fact("clock_lag_s", (now - clock) / 1000);
            if now - clock > stale_ms {
                r.problem(format!(
                    "its clock trails wall time by {} s",
                    (now - clock) / 1000
                ));
            }
        }
    };
    match part {
        Part::Shard(c) => {
            let Some(db) = connect(c.database_url.as_deref().unwrap_or(default), r).await else {
                return;
            };
            match tidemark_shard::status(&db, &c.name).await {
                Ok(s) if s["known"] == true => {
                    r.fact("running", s["running"].clone());
                    r.fact("next_seq", s["next_seq"].clone());
                    if s["running"] != true {
                        r.problem("not running: no process holds its lock".into());
                    }
                    behind(
                        r,
                        c.subscription.clock == ClockKind::Wall,
                        s["clock_ms"].as_i64(),
                    );
                }
                Ok(_) => r.problem("never started against this database".into()),
                Err(e) => r.problem(format!("status unreadable: {e}")),
            }
        }
        Part::Profiles(c) => {
            let Some(db) = connect(c.database_url.as_deref().unwrap_or(default), r).await else {
                return;
            };
            let running = tidemark_profiles::store::lock_holder(&db)
                .await
                .ok()
                .flatten()
                .is_some();
            r.fact("running", running);
            if !running {
                r.problem("not running: no process holds the profile lock".into());
            }
            let clock = tidemark_profiles::store::clock_of(&db, &c.name)
                .await
                .ok()
                .flatten();
            behind(r, c.subscription.clock == ClockKind::Wall, clock);
        }
        Part::Learner(c) => learner(c, default, now, stale_ms, r).await,
    }
}

/// A learner is behind when observations wait in a shard it reads and its
/// last checkpoint (which carries its positions) is older than `stale_ms`.
async fn learner(
    c: &tidemark_learner::Config,
    default: &str,
    now: i64,
    stale_ms: i64,
    r: &mut Check,
) {
    let latest = tidemark_checkpoint::latest(&c.checkpoint_dir)
        .and_then(|p| tidemark_checkpoint::Checkpoint::read(&p, false).ok());
    let age_ms = latest.as_ref().map(|k| now - k.created_at_ms);
    r.fact("checkpoint_age_s", age_ms.map(|a| a / 1000));
    let mut waiting = 0i64;
    for s in &c.sources {
        let Some(db) = connect(s.database_url.as_deref().unwrap_or(default), r).await else {
            continue;
        };
        let shards = match &s.shards {
            Some(v) => v.clone(),
            None => tidemark_store::observations::shards(&db)
                .await
                .unwrap_or_default(),
        };
        for shard in shards {
            let head = tidemark_store::observations::head(&db, &shard)
                .await
                .unwrap_or(0);
            let stream = format!("{}/{shard}", s.name);
            let at = latest
                .as_ref()
                .and_then(|k| k.positions.get(&stream).copied())
                .unwrap_or(0);
            waiting += (head - at).max(0);
        }
    }
    r.fact("observations_unread", waiting);
    if waiting > 0 && age_ms.is_none_or(|a| a > stale_ms) {
        let since = age_ms.map_or("no checkpoint yet".into(), |a| {
            format!("its last checkpoint is {} s old", a / 1000)
        });
        r.problem(format!("behind: {waiting} observations unread and {since}"));
    }
}

/// The body of `GET path` from `addr` (`host:port`) if it answers 200 within 2 s.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::net::ToSocketAddrs;
    let to = addr.to_socket_addrs().ok()?.next()?;
    let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_owned()))
}
