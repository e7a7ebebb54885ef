//! Shards end to end: real ZeroMQ sockets into the built binary, a real
//! PostgreSQL database, observations checked against SPEC 5. Faults
//! (crashes, retention, loss, stops, the liveness gate, floods) are in
//! `faults`.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_wire::Txid;

// Row by row against the reference under faults and load.
mod early;
mod exact;
mod faults;

use tidemark_testkit::exact::counter;
use tidemark_testkit::{query_i64, query_rows, wait_for, Proc, Publisher, TestDb};

const T0: i64 = 1_700_000_000_000;
const S: i64 = 1000;

/// Event clock, no lateness or grace, short windows: impression 10s, click
/// 60s, install 120s/300s, and a custom target on `open` within 60s of a click.
const EVENT_CLOCK: &str = r#"
clock = "event"
lateness = "0s"
publisher_timeout = "1h"
period = "100ms"
batch_delay = "20ms"
custom_types = ["open"]
[windows]
impression = "10s"
click = "60s"
install_short = "120s"
install_long = "300s"
[grace]
impression = "0s"
click = "0s"
install_short = "0s"
install_long = "0s"
[[targets]]
name = "open_1m"
given = "click"
event = "open"
until = "60s"
"#;

fn tx(n: u128, created: i64) -> Txid {
    Txid::new(n, created as u64)
}

/// Waits until the shard has applied its clock up to `clock`.
fn wait_clock(db: &TestDb, shard: &str, clock: i64) {
    wait_for(&format!("clock {clock}"), || {
        let c = query_i64(
            &db.url,
            &format!("SELECT clock_ms FROM tidemark.shards WHERE name = '{shard}'"),
        )?;
        (c >= clock).then_some(())
    });
}

fn observations(db: &TestDb) -> BTreeMap<(String, String), i16> {
    query_rows(
        &db.url,
        "SELECT target, txid, label::text FROM tidemark.observations",
    )
    .into_iter()
    .map(|r| {
        let label: i16 = r[2].as_deref().unwrap().parse().unwrap();
        ((r[0].clone().unwrap(), r[1].clone().unwrap()), label)
    })
    .collect()
}

/// The stream invariants: each (target, txid) at most once, `seq` 1..=n without gaps.
fn assert_seq_gap_free(db: &TestDb, shard: &str) {
    let repeats = query_i64(
        &db.url,
        &format!("SELECT count(*) - count(DISTINCT (target, txid)) FROM tidemark.observations WHERE shard = '{shard}'"),
    );
    assert_eq!(repeats, Some(0), "an observation was emitted twice");
    let r = query_rows(
        &db.url,
        &format!("SELECT count(*)::text, min(seq)::text, max(seq)::text FROM tidemark.observations WHERE shard = '{shard}'"),
    );
    let n: i64 = r[0][0].as_deref().unwrap().parse().unwrap();
    if n > 0 {
        assert_eq!(r[0][1].as_deref(), Some("1"));
        assert_eq!(
            r[0][2].as_deref().map(|s| s.parse::<i64>().unwrap()),
            Some(n),
            "seq has gaps or repeats"
        );
    }
}

/// Windows of 1 to 4 seconds, no grace: phases that pass while a test waits.
const SECOND_WINDOWS: &str = r#"
[windows]
impression = "1s"
click = "2s"
install_short = "3s"
install_long = "4s"
[grace]
impression = "0s"
click = "0s"
install_short = "0s"
install_long = "0s"
"#;

const BID: &str = r#""features":{"app":"a","n":1}"#;

#[test]
fn observations_follow_spec_5_for_every_arrival_order() {
    let db = TestDb::new("spec5");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "s", &publ.endpoint, EVENT_CLOCK);
    publ.wait_subscribed("tick", 2);
    publ.tick(T0 - 20 * S);
    let mut expected: BTreeMap<(String, String), i16> = BTreeMap::new();
    let mut expect = |t: &str, x: &Txid, label: i16| {
        expected.insert((t.to_owned(), x.to_string()), label);
    };

    // Every order of bid, impression and click, each step in its own batch.
    let orders: [[&str; 3]; 6] = [
        ["bid", "impression", "click"],
        ["bid", "click", "impression"],
        ["impression", "bid", "click"],
        ["impression", "click", "bid"],
        ["click", "bid", "impression"],
        ["click", "impression", "bid"],
    ];
    let ordered: Vec<Txid> = (0..6).map(|i| tx(100 + i, T0 + i as i64 * S)).collect();
    for step in 0..3 {
        for (x, order) in ordered.iter().zip(&orders) {
            let c = x.created_ms() as i64;
            match order[step] {
                "bid" => publ.event("bid", x, c + 10, BID),
                "impression" => publ.event("impression", x, c + 500, ""),
                _ => publ.event("click", x, c + 5 * S, ""),
            }
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    for x in &ordered {
        expect("ctr", x, 1);
        expect("cvr_short", x, 0);
        expect("cvr_long", x, 0);
        expect("open_1m", x, 0);
    }

    let c = T0 + 10 * S;
    let full = |publ: &mut Publisher, x: &Txid| {
        publ.event("bid", x, c + 10, BID);
        publ.event("impression", x, c + 500, "");
    };
    // Bid only: dropped at the impression sweep. Impression only: an orphan.
    let bid_only = tx(200, c);
    publ.event("bid", &bid_only, c, BID);
    let orphan = tx(201, c);
    publ.event("impression", &orphan, c + 1, "");
    // Click windows: exactly at the end counts; a millisecond later does not.
    let at_end = tx(202, c);
    full(&mut publ, &at_end);
    publ.event("click", &at_end, c + 60 * S, "");
    expect("ctr", &at_end, 1);
    for t in ["cvr_short", "cvr_long", "open_1m"] {
        expect(t, &at_end, 0);
    }
    let after_end = tx(203, c);
    full(&mut publ, &after_end);
    publ.event("click", &after_end, c + 60 * S + 1, "");
    expect("ctr", &after_end, 0);
    // Installs: at the short window's end; just after it (long); after the long one.
    for (n, at, short, long) in [
        (204, 120 * S, 1, 0),
        (205, 120 * S + 1, 0, 1),
        (206, 300 * S + 1, 0, 0),
    ] {
        let x = tx(n, c);
        full(&mut publ, &x);
        publ.event("click", &x, c + S, "");
        publ.event("install", &x, c + at, "");
        expect("ctr", &x, 1);
        expect("cvr_short", &x, short);
        expect("cvr_long", &x, long);
        expect("open_1m", &x, 0);
    }
    // Duplicate bids: the earliest ts wins, though it arrives second.
    let dup = tx(207, c);
    publ.event("bid", &dup, c + 50, r#""features":{"v":"later"}"#);
    publ.event("bid", &dup, c + 20, r#""features":{"v":"earliest"}"#);
    publ.event("impression", &dup, c + 600, "");
    publ.event("impression", &dup, c + 600, "");
    expect("ctr", &dup, 0);
    // Impression windows: at the end counts, after it does not.
    let imp_end = tx(208, c);
    publ.event("bid", &imp_end, c, BID);
    publ.event("impression", &imp_end, c + 10 * S, "");
    expect("ctr", &imp_end, 0);
    let imp_late = tx(209, c);
    publ.event("bid", &imp_late, c, BID);
    publ.event("impression", &imp_late, c + 10 * S + 1, "");
    // A click stamped before its transaction began counts as at creation.
    let skewed = tx(210, c);
    full(&mut publ, &skewed);
    publ.event("click", &skewed, c - 5 * S, "");
    expect("ctr", &skewed, 1);
    for t in ["cvr_short", "cvr_long", "open_1m"] {
        expect(t, &skewed, 0);
    }
    // The custom target: an `open` within 60s of creation, given a click.
    let opened = tx(211, c);
    full(&mut publ, &opened);
    publ.event("click", &opened, c + S, "");
    publ.event("open", &opened, c + 30 * S, "");
    expect("ctr", &opened, 1);
    expect("cvr_short", &opened, 0);
    expect("cvr_long", &opened, 0);
    expect("open_1m", &opened, 1);

    std::thread::sleep(Duration::from_millis(300));
    // Far ahead, a minute at a time (a single jump of an hour is refused).
    let end = T0 + 3600 * S;
    publ.tick_steps(T0 - 20 * S, end);
    wait_clock(&db, "s", end);
    let got = observations(&db);
    assert_eq!(got, expected, "observations differ from SPEC 5");
    assert_seq_gap_free(&db, "s");
    let features = query_rows(
        &db.url,
        &format!("SELECT features->>'v' FROM tidemark.observations WHERE txid = '{dup}'"),
    );
    assert_eq!(features[0][0].as_deref(), Some("earliest"));

    // Late events change nothing and are counted by type.
    publ.event("click", &at_end, c + S, "");
    publ.event("bid", &tx(300, c), c, BID);
    publ.event("install", &tx(204, c), c + 2 * S, "");
    std::thread::sleep(Duration::from_millis(300));
    shard.stop();
    assert_eq!(observations(&db), expected);
    assert_eq!(counter(&db, "s", "late_click"), 1);
    assert_eq!(counter(&db, "s", "late_bid"), 1);
    assert_eq!(counter(&db, "s", "late_install"), 1);
    assert_eq!(counter(&db, "s", "orphans"), 1);
    assert!(counter(&db, "s", "duplicates") >= 2);
    assert_eq!(counter(&db, "s", "outside_windows_click"), 1);
    assert_eq!(counter(&db, "s", "outside_windows_impression"), 1);
    // Nothing is left in the buffer: every phase is past every transaction.
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM shard_s.long"),
        Some(0)
    );
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM shard_s.txns"),
        Some(0)
    );
}

#[test]
fn malformed_messages_are_counted_and_never_fatal() {
    let db = TestDb::new("malformed");
    let mut publ = Publisher::new();
    let metrics = tidemark_testkit::free_addr();
    let mut shard = Proc::shard(
        &db,
        "m",
        &publ.endpoint,
        format!("batch_delay = \"20ms\"\nmetrics_addr = \"{metrics}\""),
    );
    publ.wait_subscribed("tick", 2);
    let now = tidemark_testkit::now_ms();
    let good = tx(1, now);
    let g = good.to_string();
    let bid_topic = format!("bid-{g}");
    // (A frame over 64 KiB never reaches the decoder: the socket drops its
    // connection, and what was queued behind it; `hostile` tests that.)
    let cases: Vec<Vec<Vec<u8>>> = vec![
        vec![bid_topic.clone().into()],
        vec![bid_topic.clone().into(), b"{}".to_vec(), b"{}".to_vec()],
        vec![b"bid-0123".to_vec(), b"{}".to_vec()],
        vec![bid_topic.clone().into(), b"{not json".to_vec()],
        vec![bid_topic.clone().into(), b"[1]".to_vec()],
        vec![bid_topic.clone().into(), b"\xff\xfe".to_vec()],
        vec![
            bid_topic.clone().into(),
            format!(r#"{{"type":"bid","txid":"{g}"}}"#).into(),
        ],
        vec![
            bid_topic.clone().into(),
            format!(r#"{{"type":"bid","txid":"{g}","ts":"x","features":{{}}}}"#).into(),
        ],
        vec![
            bid_topic.clone().into(),
            format!(r#"{{"type":"click","txid":"{g}","ts":1,"features":{{}}}}"#).into(),
        ],
        vec![b"tick".to_vec(), b"{\"type\":\"tick\"}".to_vec()],
    ];
    for frames in &cases {
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        publ.raw(&refs);
    }
    // A transaction created a day ahead of the clock is refused.
    publ.event("bid", &tx(2, now + 86_400_000), now, BID);
    publ.event("bid", &good, now, BID);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        shard.child.try_wait().unwrap().is_none(),
        "shard died:\n{}",
        shard.log()
    );
    let scraped = tidemark_testkit::scrape(&metrics);
    shard.stop();
    for (name, n) in [
        ("rejected_frame_count", 2),
        ("rejected_bad_txid", 1),
        ("rejected_bad_json", 1),
        ("rejected_not_object", 1),
        ("rejected_bad_utf8", 1),
        // The bad tick arrives on both sockets: both subscribe to `tick`.
        ("rejected_missing_field", 3),
        ("rejected_mistyped_field", 1),
        ("rejected_topic_mismatch", 1),
        ("future_bid", 1),
        ("received_bid", 1),
    ] {
        assert_eq!(counter(&db, "m", name), n, "{name}");
        // The metrics endpoint says the same while the shard runs.
        let line = match name.split_once('_') {
            Some(("rejected", r)) => {
                format!(r#"tidemark_shard_rejected_total{{shard="m",reason="{r}"}} {n}"#)
            }
            Some((f, t)) => {
                format!(r#"tidemark_shard_{f}_events_total{{shard="m",type="{t}"}} {n}"#)
            }
            None => unreachable!(),
        };
        assert!(
            scraped.lines().any(|l| l == line),
            "{line} not in\n{scraped}"
        );
    }
    let log = shard.log();
    assert!(log.contains("rejected a message"), "rejections are logged");
}

#[test]
fn two_shards_split_transactions_by_prefix() {
    let db = TestDb::new("prefixes");
    let mut publ = Publisher::new();
    let low = r#"clock = "event"
batch_delay = "20ms"
prefixes = ["0", "1", "2", "3", "4", "5", "6", "7"]"#;
    let high = r#"clock = "event"
batch_delay = "20ms"
prefixes = ["8", "9", "a", "b", "c", "d", "e", "f"]"#;
    let _a = Proc::shard(&db, "low", &publ.endpoint, low);
    let _b = Proc::shard(&db, "high", &publ.endpoint, high);
    publ.wait_subscribed("tick", 4);
    publ.wait_subscribed("bid-f", 1);
    publ.wait_subscribed("bid-0", 1);
    let n = 400u128;
    for i in 0..n {
        // Spread the first digit over all sixteen values.
        publ.event("bid", &tx((i % 16) << 76 | i, T0), T0, BID);
    }
    let total = || {
        let a = query_i64(&db.url, "SELECT count(*) FROM shard_low.events")?;
        let b = query_i64(&db.url, "SELECT count(*) FROM shard_high.events")?;
        (a + b == n as i64).then_some((a, b))
    };
    let (a, b) = wait_for("both shards to store every bid", total);
    assert_eq!((a, b), (200, 200));
    let wrong = query_i64(
        &db.url,
        "SELECT (SELECT count(*) FROM shard_low.events WHERE left(txid, 1) > '7')
              + (SELECT count(*) FROM shard_high.events WHERE left(txid, 1) <= '7')",
    );
    assert_eq!(wrong, Some(0));
}

#[test]
fn a_second_shard_with_the_same_name_refuses_to_start() {
    let db = TestDb::new("lock");
    let mut publ = Publisher::new();
    let _first = Proc::shard(&db, "one", &publ.endpoint, "");
    publ.wait_subscribed("tick", 2);
    // It waits `lock_grace` for the lock (a predecessor's session may be
    // going), then refuses.
    let mut second = Proc::shard(&db, "one", &publ.endpoint, "lock_grace = \"1s\"");
    let status = wait_for("the second shard to exit", || {
        second.child.try_wait().unwrap()
    });
    assert!(!status.success());
    assert!(second.log().contains("already running"), "{}", second.log());
}

#[test]
fn a_lock_still_held_when_reconnecting_is_waited_for_then_taken() {
    // The shard's session is terminated and its lock taken by another
    // session for 8 s: as a lost session the server has not yet ended would
    // hold it. Reconnecting waits for it (`lock_grace`) instead of exiting,
    // and goes on once the lock is free.
    let db = TestDb::new("lock_grace");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "g", &publ.endpoint, EVENT_CLOCK);
    publ.wait_subscribed("tick", 2);
    let url = db.url.clone();
    let held = tidemark_testkit::block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'tidemark shard g' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
        // Take the lock as soon as the terminated backend lets it go.
        for _ in 0..100 {
            if tidemark_shard::store::state::try_lock(&c, "g")
                .await
                .unwrap()
            {
                tokio::time::sleep(Duration::from_secs(8)).await;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    });
    assert!(held, "the test took the shard's lock");
    assert!(shard.child.try_wait().unwrap().is_none(), "{}", shard.log());
    let now = tidemark_testkit::now_ms();
    publ.tick(now);
    publ.event("bid", &tx(0x61, now), now, BID);
    wait_for("the bid written after the lock came back", || {
        query_i64(&db.url, "SELECT count(*) FROM shard_g.events").filter(|n| *n == 1)
    });
    assert!(
        shard.log().contains("waiting up to lock_grace"),
        "{}",
        shard.log()
    );
    shard.stop();
}

#[test]
fn restart_keeps_clock_sequence_and_buffer() {
    let db = TestDb::new("restart");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "r", &publ.endpoint, EVENT_CLOCK);
    publ.wait_subscribed("tick", 2);
    publ.tick(T0 - 20 * S);
    let first: Vec<Txid> = (0..5).map(|i| tx(i, T0 + i as i64)).collect();
    for x in &first {
        publ.event("bid", x, T0 + 10, BID);
        publ.event("impression", x, T0 + 20, "");
    }
    std::thread::sleep(Duration::from_millis(200));
    publ.tick(T0 + 61 * S);
    wait_clock(&db, "r", T0 + 61 * S);
    // An impressed transaction whose click window is still open survives the restart.
    let waiting = tx(99, T0 + 55 * S);
    publ.event("bid", &waiting, T0 + 55 * S, BID);
    publ.event("impression", &waiting, T0 + 56 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    shard.stop();
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM tidemark.observations"),
        Some(5)
    );

    shard.restart();
    publ.wait_subscribed("tick", 4);
    // A tick from the past does not move the clock back.
    publ.tick(T0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        query_i64(
            &db.url,
            "SELECT clock_ms FROM tidemark.shards WHERE name = 'r'"
        ),
        Some(T0 + 61 * S)
    );
    publ.event("click", &waiting, T0 + 60 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    publ.tick(T0 + 200 * S);
    wait_clock(&db, "r", T0 + 200 * S);
    shard.stop();
    let got = observations(&db);
    assert_eq!(got.get(&("ctr".into(), waiting.to_string())), Some(&1));
    assert_eq!(
        got.get(&("cvr_short".into(), waiting.to_string())),
        Some(&0)
    );
    assert_eq!(got.get(&("open_1m".into(), waiting.to_string())), Some(&0));
    assert_eq!(got.len(), 5 + 3);
    assert_seq_gap_free(&db, "r");
}

#[test]
fn kill_9_during_emission_gives_each_observation_exactly_once() {
    let db = TestDb::new("kill9");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "k", &publ.endpoint, EVENT_CLOCK);
    publ.wait_subscribed("tick", 2);
    publ.tick(T0 - 20 * S);
    // 3000 transactions over 300 s of creation time (within max_future of
    // the clock); half impressed, a third of those clicked.
    let n = 3000;
    let mut impressed = 0;
    let mut clicked = 0;
    for i in 0..n {
        let c = T0 + i as i64 * 100;
        let x = tx(i as u128 + 1, c);
        publ.event("bid", &x, c + 1, BID);
        if i % 2 == 0 {
            publ.event("impression", &x, c + 100, "");
            impressed += 1;
            if i % 3 == 0 {
                publ.event("click", &x, c + 1000, "");
                clicked += 1;
            }
        }
    }
    let events = n + impressed + clicked;
    wait_for("every event in the buffer", || {
        let stored = query_i64(&db.url, "SELECT count(*) FROM shard_k.events")?;
        (stored == events as i64).then_some(())
    });
    // Advance the clock in steps, killing the shard at random moments.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut clock = T0;
    let end = T0 + 1200 * S;
    let mut kills = 0;
    while clock < end {
        clock = (clock + 20 * S).min(end);
        publ.tick(clock);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if rng.is_multiple_of(4) {
            std::thread::sleep(Duration::from_millis(rng % 120));
            shard.kill9();
            kills += 1;
            shard.restart();
            publ.wait_subscribed("tick", 2 * (kills + 1));
            publ.tick(clock);
        } else {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    wait_clock(&db, "k", end);
    shard.stop();
    assert!(kills > 3, "only {kills} kills");
    let counts = query_rows(
        &db.url,
        "SELECT target, count(*)::text, sum(label)::text FROM tidemark.observations GROUP BY 1 ORDER BY 1",
    );
    let by: BTreeMap<String, (i64, i64)> = counts
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap(),
                (
                    r[1].as_deref().unwrap().parse().unwrap(),
                    r[2].as_deref().unwrap().parse().unwrap(),
                ),
            )
        })
        .collect();
    assert_eq!(by.get("ctr"), Some(&(impressed as i64, clicked as i64)));
    assert_eq!(by.get("cvr_short"), Some(&(clicked as i64, 0)));
    assert_eq!(by.get("cvr_long"), Some(&(clicked as i64, 0)));
    assert_seq_gap_free(&db, "k");
}

#[test]
fn wall_clock_shard_emits_as_time_passes() {
    let db = TestDb::new("wall");
    let mut publ = Publisher::new();
    let cfg = format!("period = \"100ms\"\nbatch_delay = \"20ms\"\n{SECOND_WINDOWS}");
    let mut shard = Proc::shard(&db, "w", &publ.endpoint, &cfg);
    publ.wait_subscribed("tick", 2);
    let now = tidemark_testkit::now_ms();
    let x = tx(7, now);
    publ.event("bid", &x, now, BID);
    publ.event("impression", &x, now + 10, "");
    publ.event("click", &x, now + 20, "");
    publ.event("install", &x, now + 3500, "");
    let done = || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM tidemark.observations WHERE target = 'cvr_long'",
        )
        .filter(|n| *n == 1)
    };
    wait_for("the long install window to pass", done);
    shard.stop();
    let got = observations(&db);
    let key = |t: &str| (t.to_owned(), x.to_string());
    assert_eq!(got.get(&key("ctr")), Some(&1));
    assert_eq!(got.get(&key("cvr_short")), Some(&0));
    assert_eq!(got.get(&key("cvr_long")), Some(&1));
}
