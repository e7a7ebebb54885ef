//! The profile differential harness (SPEC 11): streams of profile events
//! (disorder, duplicates, bad identifiers, links), published raw, and the
//! built binary's `profile get` and `trail` compared with
//! `tidemark_reference::profiles`, an oracle written from the contract alone (`docs/contract.md`).

use std::collections::BTreeSet;

use serde_json::Value;
use tidemark_reference::profiles::{Profiles, Setup};
use tidemark_wire::Txid;

use crate::config::Config;
use crate::{query_rows, run_ok, store, wait_for, Publisher, Rng, DAY, HOUR};

/// The messages of one run, in publication order: `(topic, payload)`.
/// Persons are `user:u<i>`, or for a few events only `ids` with one entry;
/// duplicates (identical and with another `ts`), out-of-order `ts`, bad
/// identifiers, stale and future txids, junk.
pub fn stream(seed: u64, events: usize, now: i64) -> Vec<(String, String)> {
    let mut rng = Rng(seed | 1);
    let types = ["impression", "click", "install"];
    let mut out: Vec<(String, String)> = Vec::new();
    for n in 0..events {
        let t = types[[0, 0, 0, 0, 1, 1, 2][rng.below(7) as usize]];
        let created = clear_of_horizons(now - 6 * HOUR + rng.below(6 * HOUR as u64) as i64, now);
        let txid = Txid::new(u128::from(rng.next()) << 16 | n as u128, created as u64);
        // Out of order: ts anywhere in the hour after creation, up to now.
        let ts = (created + rng.below(HOUR as u64) as i64).min(now);
        let person = rng.below(120);
        let who = match rng.below(20) {
            0 => format!(r#""ids": {{"device": "d{person}"}}"#),
            1 => format!(r#""user": "u{person}", "ids": {{"Bad Kind": "x"}}"#),
            // A value PostgreSQL's array syntax must escape.
            2 => format!(r#""user": 7, "ids": {{"email": "e{person}\"{{,}} \\"}}"#),
            3 => r#""user": """#.to_string(),
            _ => format!(r#""user": "u{person}""#),
        };
        let topic = format!("{t}-{}", txid.as_str());
        let payload = |ts: i64| {
            format!(
                r#"{{"type": "{t}", "txid": "{}", "ts": {ts}, {who}}}"#,
                txid.as_str()
            )
        };
        out.push((topic.clone(), payload(ts)));
        match rng.below(10) {
            0 => out.push((topic, payload(ts))),
            1 => out.push((topic, payload((ts - 1000).max(created)))),
            _ => {}
        }
    }
    // Stale (created 9 days ago), future (an hour ahead), junk.
    let stale = Txid::new(1, (now - 9 * DAY) as u64);
    let future = Txid::new(2, (now + HOUR) as u64);
    for (tx, ts) in [(stale, now - 9 * DAY), (future, now + HOUR)] {
        out.push((
            format!("click-{}", tx.as_str()),
            format!(
                r#"{{"type": "click", "txid": "{}", "ts": {ts}, "user": "u1"}}"#,
                tx.as_str()
            ),
        ));
    }
    out.push(("click-zz".into(), "{}".into()));
    out.push((
        "impression-".to_string() + Txid::new(3, now as u64).as_str(),
        "not json".into(),
    ));
    out
}

/// Moves a creation time a minute away from the default `dedup` horizons
/// (impression 1 h, click 3 h behind `now`). The oracle judges staleness at
/// the test's `now`, a wall-clock process a little later: an event created
/// within those seconds of a horizon would be fresh for one and stale for
/// the other, a race of the test, not a fault of either.
fn clear_of_horizons(created: i64, now: i64) -> i64 {
    const MINUTE: i64 = 60_000;
    for horizon in [now - HOUR, now - 3 * HOUR] {
        if (created - horizon).abs() < MINUTE {
            return horizon + MINUTE;
        }
    }
    created
}

/// `messages` with every later copy of a topic (a type and txid) made
/// identical to its first. For runs killed again and again while
/// publishing: a kill loses the batch it held, and the copy that arrives
/// next (a later copy, before the publisher replays the lost one) is then
/// the first copy received, so with copies that differ, which one counts
/// would depend on where the kills fell, not on the contract.
pub fn identical_copies(messages: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut first: std::collections::HashMap<String, String> = Default::default();
    messages
        .into_iter()
        .map(|(t, m)| {
            let m = first.entry(t.clone()).or_insert(m).clone();
            (t, m)
        })
        .collect()
}

/// What the process must end with after receiving `messages` in order, all
/// at wall time `now` (its clock and reference).
pub fn oracle(config: impl std::fmt::Display, messages: &[(String, String)], now: i64) -> Profiles {
    let setup =
        Setup::from_toml(&config.to_string()).expect("the oracle reads the test configuration");
    let mut oracle = Profiles::new(setup);
    for (t, m) in messages {
        oracle.receive(t.as_bytes(), m.as_bytes(), now, Some(now));
    }
    oracle
}

/// Publishes raw messages, pausing briefly every 500 so no queue overflows.
pub fn publish(p: &mut Publisher, messages: &[(String, String)]) {
    for (i, (t, m)) in messages.iter().enumerate() {
        p.raw(&[t.as_bytes(), m.as_bytes()]);
        if i % 500 == 499 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Waits until everything sent before on either socket has committed:
/// sends one impression and one click for `user:<name>` (one per socket)
/// and waits until both are counted, then does so again for
/// `user:<name>/after`. The first pair's batch may still be committing its
/// other parts when the pair is counted; batches commit one after another,
/// so the second pair, in a later batch, is counted only once it has.
/// Each name once per database: a name used again would fence nothing,
/// so it fails.
pub fn fence(p: &mut Publisher, url: &str, name: &str, now: i64) {
    for id in fence_ids(name) {
        fence_once(p, url, &id["user:".len()..], now);
    }
}

/// Events a fence applies (an impression and a click, twice).
pub const FENCE_EVENTS: u64 = 4;

/// The identifiers a fence's events carry.
pub fn fence_ids(name: &str) -> [String; 2] {
    [format!("user:{name}"), format!("user:{name}/after")]
}

fn fence_once(p: &mut Publisher, url: &str, name: &str, now: i64) {
    // Txids from the name (FNV-1a), so that distinct fences do not share
    // one (a copy would be dropped as a duplicate), and apart from the
    // streams' (80 random bits) in a range of their own.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let id = format!("user:{name}");
    let before = profile_get(url, &[id.as_str()], now).pop();
    assert!(
        before.is_none_or(|v| v["counts"].as_object().is_none_or(|c| c.is_empty())),
        "fence {name:?} was used before in this database: it would fence nothing"
    );
    for (i, t) in ["impression", "click"].iter().enumerate() {
        let tx = Txid::new(
            0xfe_0000_0000 | u128::from(hash) << 1 | i as u128,
            now as u64,
        );
        p.event(t, &tx, now, &format!(r#""user": "{name}""#));
    }
    wait_for("the fence events to be counted", || {
        let v = profile_get(url, &[id.as_str()], now).pop()?;
        let counts = v["counts"].as_object()?.len();
        (counts == 2).then_some(())
    });
}

/// `tidemark profile get --json` of `ids` at `at`: one object per identifier.
pub fn profile_get(url: &str, ids: &[&str], at: i64) -> Vec<Value> {
    let mut args = vec!["profile", "get"];
    args.extend_from_slice(ids);
    let at = at.to_string();
    args.extend_from_slice(&["--at", &at, "--json", "--database-url", url]);
    let out = run_ok(&args);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// `tidemark trail --json` of `id` over `[from, to)`.
pub fn trail(url: &str, id: &str, from: i64, to: i64, types: Option<&str>) -> Vec<Value> {
    let (from, to) = (from.to_string(), to.to_string());
    let mut args = vec![
        "trail",
        id,
        "--from",
        &from,
        "--to",
        &to,
        "--json",
        "--database-url",
        url,
    ];
    if let Some(t) = types {
        args.extend_from_slice(&["--types", t]);
    }
    let out = run_ok(&args);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every field equal, counters to 1e-9 relative.
pub fn assert_same_profile(got: &Value, want: &Value) {
    for key in [
        "id",
        "master",
        "size",
        "blocklisted",
        "at",
        "counts",
        "first",
        "last",
    ] {
        assert_eq!(
            got[key], want[key],
            "{key} of {}: got {got}, want {want}",
            want["id"]
        );
    }
    let (g, w) = (
        got["counters"].as_object().unwrap(),
        want["counters"].as_object().unwrap(),
    );
    assert_eq!(
        g.keys().collect::<Vec<_>>(),
        w.keys().collect::<Vec<_>>(),
        "counter names"
    );
    for (name, wv) in w {
        let (gv, wv) = (g[name].as_f64().unwrap(), wv.as_f64().unwrap());
        let tolerance = 1e-9 * wv.abs().max(1e-300);
        assert!(
            (gv - wv).abs() <= tolerance,
            "{name} of {}: got {gv}, want {wv}",
            want["id"]
        );
    }
}

/// Compares every identifier of the stream (and an unknown one) at two
/// times, and the trails of a sample, with the oracle.
pub fn compare(url: &str, oracle: &Profiles, messages: &[(String, String)], now: i64) {
    let mut ids: BTreeSet<String> = BTreeSet::new();
    for (_, m) in messages {
        if let Ok(v) = serde_json::from_str::<Value>(m) {
            if let Some(u) = v["user"].as_str().filter(|u| !u.is_empty()) {
                ids.insert(format!("user:{u}"));
            }
            if let Some(d) = v["ids"]["device"].as_str() {
                ids.insert(format!("device:{d}"));
            }
            if let Some(e) = v["ids"]["email"].as_str() {
                ids.insert(format!("email:{e}"));
            }
        }
    }
    ids.insert("user:nobody".into());
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    for at in [now, now + 3 * DAY, now - 2 * HOUR] {
        let got = profile_get(url, &ids, at);
        assert_eq!(got.len(), ids.len());
        for (g, id) in got.iter().zip(&ids) {
            assert_same_profile(g, &oracle.get(id, at));
        }
    }
    for id in ids.iter().step_by(7) {
        assert_eq!(
            trail(url, id, 0, now + DAY, None),
            oracle.trail(id, 0, now + DAY, None),
            "trail of {id}"
        );
        let (from, to) = (now - 3 * HOUR, now - HOUR);
        assert_eq!(
            trail(url, id, from, to, Some("click,install")),
            oracle.trail(id, from, to, Some(&["click", "install"])),
            "filtered trail of {id}"
        );
    }
}

/// The profile configuration of the plain differential runs (wall clock,
/// 7-day trails, small batches and transactions so kills and cuts land
/// between commits, three counters).
pub fn config() -> Config {
    Config::new()
        .set("clock", "wall")
        .set("trail", "7d")
        .set("batch_delay", "50ms")
        .set("batch_events", 700usize)
        // Shares of ~350 events in transactions of at most 60: kill -9,
        // cuts and restarts land between a share's commits.
        .set("transaction_events", 60usize)
        .set("workers", 2usize)
        .counter("imp_1h", "impression", "1h")
        .counter("clk_1d", "click", "1d")
        .counter("ins_7d", "install", "7d")
}

/// The profile configuration of the link runs: every type remembered 8
/// days, so the streams' transactions (created up to 6 h back) all count
/// and every distinct event is applied.
pub fn links() -> Config {
    Config::new()
        .set("clock", "wall")
        .set("dedup", "8d")
        .set("trail", "7d")
        .set("batch_delay", "50ms")
        .set("batch_events", 300usize)
        .set("workers", 2usize)
        .set("max_ids", 6usize)
        .set("blocklist_after", 3usize)
        .counter("imp_1h", "impression", "1h")
        .counter("clk_1d", "click", "1d")
}

/// Events of 60 true persons, each with a user, up to three devices and a
/// member id, linked at random; some carry a shared carrier IP or the test
/// device, which would glue unrelated persons into super-nodes, or a link
/// of a chain that grows past `max_ids`.
///
/// Links depend on arrival order, which is known only within one socket:
/// every event that may link is an impression (the high-frequency socket);
/// clicks carry only a `user`.
pub fn link_stream(seed: u64, events: usize, now: i64) -> Vec<(String, String)> {
    // Shown with a failure: the same seed and `now` give the same stream.
    eprintln!("link_stream: seed {seed:#x}, now {now}");
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    // Two persons of four, then a link between them: refused (8 > 6), and
    // as they are the same size, charged to both sides.
    for (i, ids) in [
        r#""user": "tA", "ids": {"device": "tA1", "member": "tA2"}"#,
        r#""user": "tA", "ids": {"email": "tA3"}"#,
        r#""user": "tB", "ids": {"device": "tB1", "member": "tB2"}"#,
        r#""user": "tB", "ids": {"email": "tB3"}"#,
        r#""user": "tA", "ids": {"device": "tB1"}"#,
    ]
    .iter()
    .enumerate()
    {
        let txid = Txid::new(0x7e1e + i as u128, (now - HOUR) as u64);
        out.push((
            format!("impression-{}", txid.as_str()),
            format!(
                r#"{{"type": "impression", "txid": "{}", "ts": {}, {ids}}}"#,
                txid.as_str(),
                now - HOUR + i as i64
            ),
        ));
    }
    for n in 0..events {
        let t = ["impression", "impression", "click"][rng.below(3) as usize];
        if t == "click" {
            let created =
                clear_of_horizons(now - 5 * HOUR + rng.below(5 * HOUR as u64) as i64, now);
            let txid = Txid::new(u128::from(rng.next()) << 16 | n as u128, created as u64);
            let ts = (created + rng.below(HOUR as u64) as i64).min(now);
            let payload = format!(
                r#"{{"type": "click", "txid": "{}", "ts": {ts}, "user": "u{}"}}"#,
                txid.as_str(),
                rng.below(60)
            );
            out.push((format!("click-{}", txid.as_str()), payload));
            continue;
        }
        let created = now - 5 * HOUR + rng.below(5 * HOUR as u64) as i64;
        let txid = Txid::new(u128::from(rng.next()) << 16 | n as u128, created as u64);
        let ts = (created + rng.below(HOUR as u64) as i64).min(now);
        let p = rng.below(60);
        let mut ids = Vec::new();
        if rng.below(3) > 0 {
            ids.push(format!(r#""device": "d{p}_{}""#, rng.below(3)));
        }
        if rng.below(3) == 0 {
            ids.push(format!(r#""member": "m{p}""#));
        }
        match rng.below(25) {
            0 => ids.push(format!(r#""ip": "10.0.0.{}""#, rng.below(2))),
            1 => ids.push(r#""test": "device""#.to_string()),
            // A chain x:c0 – y:c0 – x:c1 – y:c1 – … that grows past max_ids.
            2 => {
                let c = rng.below(12);
                ids.push(format!(r#""x": "c{}", "y": "c{c}""#, c + rng.below(2)));
            }
            _ => {}
        }
        let user = if rng.below(4) > 0 {
            format!(r#""user": "u{p}", "#)
        } else {
            String::new()
        };
        let payload = format!(
            r#"{{"type": "{t}", "txid": "{}", "ts": {ts}, {user}"ids": {{{}}}}}"#,
            txid.as_str(),
            ids.join(", ")
        );
        out.push((format!("{t}-{}", txid.as_str()), payload));
    }
    out
}

pub fn link_ids(messages: &[(String, String)]) -> Vec<String> {
    let mut ids = BTreeSet::new();
    for (_, m) in messages {
        let v: Value = serde_json::from_str(m).unwrap();
        if let Some(u) = v["user"].as_str() {
            ids.insert(format!("user:{u}"));
        }
        for (k, x) in v["ids"].as_object().into_iter().flatten() {
            ids.insert(format!("{k}:{}", x.as_str().unwrap()));
        }
    }
    ids.into_iter().collect()
}

/// Compares persons, profiles, trails, refusals, the blocklist and the merge
/// log with the reference. The log's masters ("as they stood") depend on
/// every event before the merge, so they are compared only when
/// `masters_in_log` says the two sockets' order was known to the reference.
pub fn compare_links(
    url: &str,
    oracle: &Profiles,
    messages: &[(String, String)],
    now: i64,
    masters_in_log: bool,
) {
    // Invariants first: every identifier in exactly one existing person,
    // sizes true, masters among the identifiers.
    let broken = query_rows(url, store::BROKEN_PERSONS);
    assert!(broken.is_empty(), "{broken:?}");
    let ids = link_ids(messages);
    for id in &ids {
        let members: Vec<String> = query_rows(url, &store::members_query(id))
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect();
        assert_eq!(members, oracle.person(id), "the person holding {id}");
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    for at in [now, now + DAY] {
        for (g, id) in profile_get(url, &refs, at).iter().zip(&refs) {
            assert_same_profile(g, &oracle.get(id, at));
        }
    }
    for id in refs.iter().step_by(5) {
        assert_eq!(
            trail(url, id, 0, now + DAY, None),
            oracle.trail(id, 0, now + DAY, None),
            "trail of {id}"
        );
    }
    let blocklist: Vec<(String, u64)> = query_rows(url, store::BLOCKLIST)
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap(),
                r[1].clone().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let mut want = oracle.blocklist();
    want.sort();
    assert_eq!(blocklist, want, "blocklist");
    let refusals: Vec<(String, u64)> = query_rows(url, store::REFUSALS)
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap(),
                r[1].clone().unwrap().parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(refusals, oracle.refusals(), "refusals charged");
    let mut merges: Vec<(i64, String, String, String)> = query_rows(url, store::MERGES)
        .into_iter()
        .map(|r| {
            let r: Vec<String> = r.into_iter().map(Option::unwrap).collect();
            (
                r[0].parse().unwrap(),
                r[1].clone(),
                r[2].clone(),
                r[3].clone(),
            )
        })
        .collect();
    merges.sort();
    let mut want = oracle.merges().to_vec();
    want.sort();
    if !masters_in_log {
        let strip = |m: &mut Vec<(i64, String, String, String)>| {
            m.iter_mut()
                .for_each(|m| (m.2, m.3) = (String::new(), String::new()));
            m.sort();
        };
        strip(&mut merges);
        strip(&mut want);
    }
    let extra: Vec<_> = merges.iter().filter(|m| !want.contains(m)).collect();
    let missing: Vec<_> = want.iter().filter(|m| !merges.contains(m)).collect();
    assert!(
        extra.is_empty() && missing.is_empty() && merges.len() == want.len(),
        "the merge log: logged but not in the reference {extra:?}, missing {missing:?}"
    );
}
