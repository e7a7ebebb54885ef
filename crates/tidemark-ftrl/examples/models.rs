//! `just bench-models`: the online learner's per-row cost, in process, on
//! rows shaped like the demo's bids (ten features, one numeric, a cross),
//! fed through [`Models::learn`] as the learner feeds observations: JSON
//! features hashed, a prediction, an update, metrics. Modes, each on the
//! same pre-built rows, rounds interleaved so the machine's noise falls on
//! all alike:
//!
//! - `final`: `cvr_long` rows, final labels only (the path before issue 48);
//! - `early`: `cvr_long` learned early: a provisional row per member, then
//!   its late or final row (twice the rows; each row's member hashed);
//! - `final, two targets`: a `cvr_short` and a `cvr_long` final row per
//!   member (the row count of the next mode, without a pool);
//! - `early, pooled`: a `cvr_short` row and `cvr_long`'s early rows per
//!   member, `cvr_long` scoring with a pool both teach (the demo's setting).
//!
//! Prints rows/s per mode and round. `cargo run --release -p tidemark-ftrl
//! --example models [members] [rounds] [mode]` (defaults 200,000, 3, every
//! mode).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Map, Value};
use tidemark_features::Hashing;
use tidemark_ftrl::{Grid, Kind, Models, Params, Row};

/// One member: its txid, its bid's features, its labels (cvr_short,
/// cvr_long).
struct Member {
    txid: String,
    features: Map<String, Value>,
    short: bool,
    long: bool,
}

fn members(n: usize) -> Vec<Member> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    (0..n)
        .map(|i| {
            let app = next(40);
            let pick = |names: &[&str], k: u64| names[k as usize].to_owned();
            let (country, exchange) = (next(5), next(3));
            let (os, size) = (next(2), next(3));
            let features = json!({
                "app": format!("app{app}"),
                "campaign": format!("c{}", next(12)),
                "country": pick(&["us", "br", "in", "de", "jp"], country),
                "exchange": pick(&["adx", "mopub", "unity"], exchange),
                "os": pick(&["android", "ios"], os),
                "size": pick(&["320x50", "300x250", "728x90"], size),
                "wifi": next(2) == 0,
                "user_clicks": next(30),
                "ctr_1h": -(next(400) as f64) / 100.0,
                "person": format!("user:p{}", next(2000)),
            });
            let Value::Object(features) = features else {
                unreachable!()
            };
            Member {
                txid: format!("{:016x}{i:08x}", next(u64::MAX)),
                features,
                short: next(1000) < 60 + app,
                long: next(1000) < 30 + app / 2,
            }
        })
        .collect()
}

fn models(pooled: bool) -> Models {
    let hashing = Hashing::new(20, 0, vec![("country".into(), "exchange".into())]);
    let m = Models::new(hashing, 100_000).with_grid(Grid::default());
    if !pooled {
        return m;
    }
    let install = |t: &str| (t.to_owned(), "install".to_owned());
    let pool = Params {
        alpha: 0.05,
        ..Params::default()
    };
    m.with_pools(&BTreeMap::from([install("cvr_long")]), |_| pool)
        .with_teachers(&BTreeMap::from([install("cvr_short"), install("cvr_long")]))
}

/// Feeds every member through `mode`; returns the rows learned.
fn run(mode: &str, members: &[Member]) -> u64 {
    let params = || Params {
        alpha: 0.15,
        ..Params::default()
    };
    let early = mode.starts_with("early");
    let two = mode != "final" && mode != "early";
    let mut m = models(mode == "early, pooled");
    // A member's matured row comes this many members after its provisional.
    const LAG: usize = 2_000;
    for (i, member) in members.iter().enumerate() {
        if two {
            m.learn(
                "cvr_short",
                params,
                &member.features,
                Row::plain(member.short),
            );
        }
        if !early {
            m.learn(
                "cvr_long",
                params,
                &member.features,
                Row::plain(member.long),
            );
            continue;
        }
        let provisional = Row::of(false, Kind::Provisional).member(&member.txid);
        m.learn("cvr_long", params, &member.features, provisional);
        if let Some(old) = i.checked_sub(LAG).map(|j| &members[j]) {
            let kind = if old.long { Kind::Late } else { Kind::Final };
            let row = Row::of(old.long, kind).member(&old.txid);
            m.learn("cvr_long", params, &old.features, row);
        }
    }
    m.trained()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(200_000, |a| a.parse().expect("members"));
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let only = args.next();
    let members = members(n);
    let modes = ["final", "early", "final, two targets", "early, pooled"]
        .into_iter()
        .filter(|m| only.as_deref().is_none_or(|o| o == *m));
    println!(
        "{n} members, the grid of {} settings",
        Grid::default().alpha.len() + 1
    );
    for round in 1..=rounds {
        for mode in modes.clone() {
            let started = Instant::now();
            let rows = run(mode, &members);
            let s = started.elapsed().as_secs_f64();
            println!(
                "round {round}  {mode:<20} {rows:>8} rows  {:>9.0} rows/s",
                rows as f64 / s
            );
        }
    }
}
