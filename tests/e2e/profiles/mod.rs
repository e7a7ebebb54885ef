//! Profiles (SPEC 11) end to end: the built binary's `profiles`, `profile
//! get` and `trail` against real ZeroMQ and PostgreSQL, compared row by row
//! with `tidemark_reference::profiles`, an oracle written from the contract alone (`docs/contract.md`).

// Several publishers linking the same persons at once.
mod bridging;
// First-copy marks taken plainly, and copies.
mod marks;
// Restarts never stall (SPEC 12): kill -9 twenty times, an operator's lock.
mod restarts;
// Staleness fixed at acceptance: held databases.
mod staleness;
// What ANALYZE does to the profile tables.
mod statistics;
// Trails packed by day, read back against the reference.
mod trails;

use serde_json::Value;
use tidemark_wire::Txid;

use tidemark_testkit::profiles::*;
use tidemark_testkit::*;

#[test]
fn profiles_match_the_reference_row_by_row() {
    let db = TestDb::new("profiles_exact");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "prof", &publisher.endpoint, config());
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let messages = stream(now as u64, 3000, now);
    let oracle = oracle(config(), &messages, now);
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence1", now);
    compare(&db.url, &oracle, &messages, now);

    // Counts by reason, as the oracle counts them, and the fence's events.
    let counts = query_rows(
        &db.url,
        "SELECT key, value::text FROM tidemark.profile_status, jsonb_each(counts) ORDER BY 1",
    );
    let got = |k: &str| {
        counts
            .iter()
            .find(|r| r[0].as_deref() == Some(k))
            .map_or(0, |r| r[1].as_ref().unwrap().parse::<u64>().unwrap())
    };
    let want = oracle.counts();
    assert_eq!(got("applied"), want["applied"] + FENCE_EVENTS);
    for k in [
        "duplicate",
        "stale",
        "bad_identifier",
        "no_identifier",
        "future",
    ] {
        assert_eq!(got(k), want[k], "count of {k}");
    }
    assert_eq!(
        got("rejected_bad_txid") + got("rejected_bad_json"),
        want["rejected"]
    );

    // The SQL function agrees with the reader.
    let sql = query_rows(
        &db.url,
        &format!(
            "SELECT counters::text FROM tidemark.profile_get(ARRAY['user:u1', 'user:nobody'], {now})"
        ),
    );
    for (row, id) in sql.iter().zip(["user:u1", "user:nobody"]) {
        let v: Value = serde_json::from_str(row[0].as_ref().unwrap()).unwrap();
        let want = oracle.get(id, now);
        for (name, w) in want["counters"].as_object().unwrap() {
            let (g, w) = (v[name].as_f64().unwrap(), w.as_f64().unwrap());
            assert!(
                (g - w).abs() <= 1e-9 * w.abs().max(1e-300),
                "SQL {name} of {id}: {g} vs {w}"
            );
        }
    }
    proc.stop();
}

#[test]
fn a_kill_9_loses_nothing_committed_and_never_double_counts() {
    let db = TestDb::new("profiles_kill");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "prof", &publisher.endpoint, config());
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let messages = stream(now as u64 ^ 0x5eed, 4000, now);
    let oracle = oracle(config(), &messages, now);
    // Kill somewhere in the middle of intake, with batches in flight.
    let cut = messages.len() / 3 + (now as usize % (messages.len() / 3));
    publish(&mut publisher, &messages[..cut]);
    std::thread::sleep(std::time::Duration::from_millis(now as u64 % 300));
    proc.kill9();
    let applied_before = query_i64(
        &db.url,
        "SELECT events_applied FROM tidemark.profile_status",
    );
    // Publishers replay: everything again, from the start, in order. Whatever
    // was committed is a duplicate now; whatever was lost counts once.
    proc.restart();
    publisher.wait_subscribed("tick", 4);
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence2", now);
    compare(&db.url, &oracle, &messages, now);
    let applied = query_i64(
        &db.url,
        "SELECT events_applied FROM tidemark.profile_status",
    )
    .unwrap();
    assert_eq!(
        applied as u64,
        oracle.counts()["applied"] + FENCE_EVENTS,
        "applied once each"
    );
    assert!(applied_before.unwrap_or(0) <= applied);
    proc.stop();
}

#[test]
fn one_process_per_database_and_counter_definitions_are_fixed() {
    let db = TestDb::new("profiles_owner");
    let publisher = Publisher::new();
    let mut first = Proc::profiles(&db, "one", &publisher.endpoint, config());
    wait_for("the first process to register", || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM tidemark.profile_process WHERE name = 'one'",
        )
        .filter(|n| *n == 1)
    });
    let mut second = Proc::profiles(&db, "two", &publisher.endpoint, config());
    let status = second.child.wait().unwrap();
    assert!(!status.success());
    assert!(second.log().contains("already runs"), "{}", second.log());
    first.stop();
    let changed = config()
        .to_string()
        .replace("half_life = \"1d\"", "half_life = \"2d\"");
    let mut third = Proc::profiles(&db, "three", &publisher.endpoint, &changed);
    let status = third.child.wait().unwrap();
    assert!(!status.success());
    assert!(third.log().contains("\"clk_1d\""), "{}", third.log());
}

#[test]
fn the_synthetic_bidder_reads_profiles_into_its_bids() {
    let db = TestDb::new("profiles_bidder");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "bidder", &publisher.endpoint, config());
    publisher.wait_subscribed("tick", 2);
    // Persons' history: the market's own events, straight into the profile process.
    let file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}_history.jsonl", db.name));
    run_ok(&[
        "publish",
        "--persons",
        "20",
        "--tps",
        "400",
        "--speed",
        "0",
        "--span",
        "10m",
        "--seed",
        "5",
        "--write",
        file.to_str().unwrap(),
    ]);
    let history = std::fs::read_to_string(&file).unwrap();
    let mut sent = 0;
    for line in history.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(
            v["user"].as_str().unwrap().starts_with('p'),
            "every event carries its person: {line}"
        );
        let topic = format!(
            "{}-{}",
            v["type"].as_str().unwrap(),
            v["txid"].as_str().unwrap()
        );
        if v["type"] != "bid" {
            publisher.raw(&[topic.as_bytes(), line.as_bytes()]);
            sent += 1;
        }
    }
    assert!(sent > 100);
    fence(&mut publisher, &db.url, "fence3", now_ms());
    proc.stop();

    // The bidder: every bid carries its person's counters, as read just before.
    let bids = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}_bids.jsonl", db.name));
    run_ok(&[
        "publish",
        "--persons",
        "20",
        "--tps",
        "50",
        "--speed",
        "0",
        "--span",
        "10s",
        "--seed",
        "6",
        "--profiles",
        &db.url,
        "--profile-rate",
        "r=clk_1d/imp_1h@0.2",
        "--write",
        bids.to_str().unwrap(),
    ]);
    // `--profile-rate`'s smoothing as docs/demo.md states it: clicks (here
    // over a day) capped at views (an hour's), 10 views at the prior 0.2.
    let rate = |c: f64, v: f64| {
        let q = (c.min(v) + 2.0) / (v + 10.0);
        (q / (1.0 - q)).ln()
    };
    let mut enriched = 0;
    for line in std::fs::read_to_string(&bids).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] != "bid" {
            continue;
        }
        let f = &v["features"];
        let user = format!("user:{}", v["user"].as_str().unwrap());
        let want = profile_get(&db.url, &[user.as_str()], v["ts"].as_i64().unwrap());
        for name in ["imp_1h", "clk_1d", "ins_7d"] {
            let got = f[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name} missing from {line}"));
            let w = want[0]["counters"][name].as_f64().unwrap();
            // Read once per batch, evaluated at the bid's own time.
            assert!(
                (got - w).abs() <= 1e-9 * w.abs().max(1e-300),
                "{name} of {user}: bid says {got}, profile {w}"
            );
        }
        let c = |name: &str| f[name].as_f64().unwrap();
        let want = rate(c("clk_1d"), c("imp_1h"));
        assert!(
            (c("r") - want).abs() < 1e-9,
            "rate of {user}: {line}, want {want}"
        );
        enriched += 1;
    }
    assert!(enriched > 100, "{enriched} bids");
    // Only what is derived: the rate and the person, no counts. A rate
    // naming a counter the database lacks is an error, not a silent 0.
    let derived = bids.with_extension("derived");
    let only = |rate: &str| {
        let a = [
            "--speed",
            "0",
            "--span",
            "10s",
            "--profiles",
            &db.url,
            "--profile-rate",
            rate,
        ];
        let b = [
            "--profile-person",
            "--no-profile-counters",
            "--write",
            derived.to_str().unwrap(),
        ];
        tidemark_testkit::bin()
            .args(["publish", "--persons", "20"])
            .args(a)
            .args(b)
            .output()
            .unwrap()
    };
    assert!(only("r=clk_1d/imp_1h@0.2").status.success());
    let text = std::fs::read_to_string(&derived).unwrap();
    let bid = text
        .lines()
        .find(|l| l.contains(r#""type":"bid""#))
        .unwrap();
    let f = &serde_json::from_str::<Value>(bid).unwrap()["features"];
    assert!(
        f["r"].is_f64() && f["person"].is_string() && f["imp_1h"].is_null(),
        "{bid}"
    );
    let wrong = only("r=clk_2d/imp_1h@0.2");
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success() && err.contains(r#"no counter "clk_2d""#),
        "{err}"
    );

    // The same bidder on a socket, serving its metrics: every lookup timed.
    let addr = tidemark_testkit::free_addr();
    let bind = format!("tcp://{}", tidemark_testkit::free_addr());
    let child = tidemark_testkit::bin()
        .env("RUST_LOG", "info")
        .args([
            "publish",
            "--persons",
            "20",
            "--tps",
            "50",
            "--duration",
            "4s",
        ])
        .args(["--warmup", "0s", "--drain", "1s", "--bind", &bind])
        .args(["--profiles", &db.url, "--metrics-addr", &addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let series = |s: &str| format!(r#"tidemark_{s}{{publisher="tidemark-publish"}}"#);
    let text = wait_for("lookups timed on the endpoint", || {
        let t = tidemark_testkit::try_scrape(&addr)?;
        let n = tidemark_testkit::metric(
            &t,
            &series("publisher_profile_lookup_duration_seconds_count"),
        )?;
        (n >= 3.0).then_some(t)
    });
    let count = tidemark_testkit::metric(
        &text,
        &series("publisher_profile_lookup_duration_seconds_count"),
    )
    .unwrap();
    let inf = r#"tidemark_publisher_profile_lookup_duration_seconds_bucket{le="+Inf",publisher="tidemark-publish"}"#;
    assert_eq!(tidemark_testkit::metric(&text, inf), Some(count), "{text}");
    assert!(
        tidemark_testkit::metric(
            &text,
            &series("publisher_profile_lookup_duration_seconds_sum")
        )
        .unwrap()
            > 0.0
    );
    let bids = r#"tidemark_publisher_events_total{publisher="tidemark-publish",type="bid"}"#;
    assert!(
        tidemark_testkit::metric(&text, bids).unwrap() > 0.0,
        "{text}"
    );
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && log.contains("p99_under_ms"),
        "{log}"
    );
}

#[test]
fn whole_days_behind_the_clock_are_dropped_and_old_copies_are_stale() {
    let retain = config::Config::new()
        .set("clock", "event")
        .set("lateness", "0s")
        .set("trail", "1d")
        .set("dedup.impression", "1h")
        .set("dedup.click", "1d")
        .set("batch_delay", "50ms")
        .counter("clk_1d", "click", "1d");
    let db = TestDb::new("profiles_retain");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "retain", &publisher.endpoint, &retain);
    publisher.wait_subscribed("tick", 2);
    let t0 = now_ms();
    publisher.tick(t0);
    let tx = Txid::new(0xabc, t0 as u64);
    publisher.event("click", &tx, t0 - 20 * HOUR, r#""user": "old""#);
    publisher.event(
        "impression",
        &Txid::new(0xabd, t0 as u64),
        t0,
        r#""user": "old""#,
    );
    let partitions = |table: &str| {
        query_i64(
            &db.url,
            &format!(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'tidemark.{table}'::regclass"
            ),
        )
        .unwrap()
    };
    wait_for("both events applied", || {
        query_i64(
            &db.url,
            "SELECT events_applied FROM tidemark.profile_status",
        )
        .filter(|n| *n == 2)
    });
    // Marks by type: the click's day, the impression's hour.
    assert!(partitions("profile_trail") >= 1 && partitions("profile_seen") == 2);
    assert_eq!(
        partitions("profile_trail_chunks"),
        partitions("profile_trail")
    );
    assert_eq!(trail(&db.url, "user:old", 0, t0 + DAY, None).len(), 2);
    let stale = || {
        query_i64(
            &db.url,
            "SELECT (counts->>'stale')::bigint FROM tidemark.profile_status",
        )
    };
    // Three hours: the impression's marks go, the click's stay.
    publisher.tick_steps(t0, t0 + 3 * HOUR);
    wait_for("the impression's hour dropped", || {
        (partitions("profile_seen") == 1).then_some(())
    });
    let copy = Txid::new(0xabd, t0 as u64);
    publisher.event("impression", &copy, t0, r#""user": "old""#);
    wait_for("the impression's copy stale", || {
        stale().filter(|n| *n == 1)
    });

    // Three days of event time pass: every day the events touched ends more
    // than a day behind the clock, for trails and for first copies alike.
    publisher.tick_steps(t0 + 3 * HOUR, t0 + 3 * DAY);
    wait_for("whole days dropped", || {
        (partitions("profile_trail") == 0 && partitions("profile_seen") == 0).then_some(())
    });
    assert_eq!(partitions("profile_trail_packed"), 0);
    assert_eq!(partitions("profile_trail_chunks"), 0);
    assert!(trail(&db.url, "user:old", 0, t0 + 4 * DAY, None).is_empty());
    // The profile stays; a late copy of the click is stale, not counted again.
    publisher.event("click", &tx, t0 - 20 * HOUR, r#""user": "old""#);
    wait_for("the late copy judged stale", || stale().filter(|n| *n == 2));
    let p = profile_get(&db.url, &["user:old"], t0);
    assert_eq!(
        p[0]["counts"],
        serde_json::json!({"click": 1, "impression": 1})
    );
    proc.stop();
}

#[test]
fn a_postgresql_crash_under_ingest_loses_nothing_committed() {
    // Its replay hides a lost batch except where a transaction's first copy
    // was lost and its second kept (seen twice in CI before the fix); the
    // connection-cut test below finds such losses directly (docs/profiles.md).
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    // A cluster of its own: crashing the shared one would disturb other tests.
    let cluster = own_cluster("profiles-crash-home", false);
    let db = TestDb::external("profiles_crash", &cluster.url());
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "crash", &publisher.endpoint, config());
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let messages = stream(now as u64 ^ 0xc0ffee, 3000, now);
    let oracle = oracle(config(), &messages, now);
    let half = messages.len() / 2;
    publish(&mut publisher, &messages[..half]);
    cluster.crash().unwrap();
    // Events keep coming while the database is away: the process holds them.
    publish(&mut publisher, &messages[half..]);
    std::thread::sleep(std::time::Duration::from_millis(700));
    cluster.up(None).unwrap();
    // Logged tables keep what was committed; the process reconnects with
    // back-off, applies what it held, and the replay changes nothing more.
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence4", now);
    compare(&db.url, &oracle, &messages, now);
    assert!(proc.log().contains("database error"), "{}", proc.log());
    proc.stop();
    cluster.down().unwrap();
}

#[test]
fn links_merge_persons_as_the_reference_does() {
    let db = TestDb::new("profiles_links");
    let mut publisher = Publisher::new();
    let metrics = tidemark_testkit::free_addr();
    let config = links().set("metrics_addr", metrics.as_str());
    let mut proc = Proc::profiles(&db, "links", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    // Impressions (which link, and a few carry one identifier or settle
    // persons already joined), then the clicks: the reference receives the
    // process's order, so even the merge log's masters are known.
    let (mut messages, clicks): (Vec<_>, Vec<_>) = link_stream(now as u64, 2500, now)
        .into_iter()
        .partition(|(t, _)| t.starts_with("impression"));
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence5", now);
    publish(&mut publisher, &clicks);
    fence(&mut publisher, &db.url, "fence5b", now);
    messages.extend(clicks);
    let oracle = oracle(links(), &messages, now);
    compare_links(&db.url, &oracle, &messages, now, true);
    let refused = query_i64(
        &db.url,
        "SELECT (counts->>'links_refused')::bigint FROM tidemark.profile_status",
    );
    assert_eq!(
        refused.unwrap_or(0) as u64,
        oracle.counts()["links_refused"]
    );
    assert!(
        oracle.counts()["links_refused"] > 0,
        "the stream exercises the cap"
    );
    let biggest = query_i64(&db.url, "SELECT max(size)::bigint FROM tidemark.profiles").unwrap();
    assert!(biggest <= 6, "no person above max_ids");
    // The metrics endpoint counts what the database counts (this run is the
    // database's only one), reason by reason.
    wait_for("the endpoint's counts to match the database's", || {
        let text = tidemark_testkit::try_scrape(&metrics)?;
        let counts = query_rows(
            &db.url,
            "SELECT reason, sum(n)::text FROM tidemark.profile_counts GROUP BY 1 HAVING sum(n) > 0",
        );
        assert!(counts.len() >= 3, "{counts:?}");
        counts
            .iter()
            .all(|r| {
                let (reason, n) = (r[0].as_deref().unwrap(), r[1].as_deref().unwrap());
                let series = format!(
                    r#"tidemark_profiles_events_total{{profiles="links",reason="{reason}"}}"#
                );
                tidemark_testkit::metric(&text, &series) == n.parse().ok()
            })
            .then_some(())
    });
    proc.stop();
}

#[test]
fn connections_cut_at_random_lose_nothing_and_count_nothing_twice() {
    // Every event is sent once: an event a retry dropped shows as a missing
    // count. (A replay, as after a crash, would hide it behind its copy.)
    let db = TestDb::new("profiles_cut");
    let mut publisher = Publisher::new();
    let config = links().set("batch_events", 100usize);
    let mut proc = Proc::profiles(&db, "cut", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let (mut messages, clicks): (Vec<_>, Vec<_>) = link_stream(now as u64 ^ 0xc07, 3000, now)
        .into_iter()
        .partition(|(t, _)| t.starts_with("impression"));
    // Slowly, so the cuts fall on every step of many batches. The cuts stop
    // before each fence: on a contended machine a batch can outlast the
    // gap between cuts, and nothing would then ever commit.
    let mut cuts = 0;
    for (part, name) in [(&messages, "fence_cut"), (&clicks, "fence_cut_2")] {
        let cutter =
            tidemark_testkit::Cutter::start(&db.url, "tidemark profiles cut:%", 50, 200, true);
        for piece in part.chunks(30) {
            publish(&mut publisher, piece);
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
        cuts += cutter.stop();
        fence(&mut publisher, &db.url, name, now);
    }
    eprintln!("{cuts} sessions cut mid-statement");
    assert!(cuts >= 10, "only {cuts} sessions cut");
    messages.extend(clicks);
    let oracle = oracle(&config, &messages, now);
    compare_links(&db.url, &oracle, &messages, now, true);
    assert!(proc.log().contains("database error"), "{}", proc.log());
    proc.stop();
}

#[test]
fn links_survive_kill_9_during_merges() {
    let db = TestDb::new("profiles_links_kill");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "linkk", &publisher.endpoint, links());
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let messages = link_stream(now as u64 ^ 0x11, 3000, now);
    let oracle = oracle(links(), &messages, now);
    let cut = messages.len() / 3 + (now as usize % (messages.len() / 3));
    publish(&mut publisher, &messages[..cut]);
    std::thread::sleep(std::time::Duration::from_millis(now as u64 % 200));
    proc.kill9();
    proc.restart();
    publisher.wait_subscribed("tick", 4);
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence6", now);
    compare_links(&db.url, &oracle, &messages, now, false);
    proc.stop();
}

#[test]
fn an_event_carrying_many_long_identifiers_never_wedges_the_process() {
    let db = TestDb::new("profiles_wide");
    let mut publisher = Publisher::new();
    let config = config().set("max_ids_per_event", 64usize);
    let mut proc = Proc::profiles(&db, "wide", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    // Valid per SPEC 11 (each value ≤ 256 bytes), far beyond what one index
    // entry can hold once listed in the trail.
    let mut rng = Rng(now as u64 | 1);
    let noise = |rng: &mut Rng| {
        (0..32)
            .map(|_| format!("{:08x}", rng.next() as u32))
            .collect::<String>()
    };
    let many: Vec<String> = (0..40)
        .map(|k| format!(r#""k{k}": "{}""#, &noise(&mut rng)[..250]))
        .collect();
    let ids = format!(r#""ids": {{{}}}"#, many.join(", "));
    let wide = Txid::new(0x31de, now as u64);
    publisher.event(
        "impression",
        &wide,
        now,
        &format!(r#""user": "wide", {ids}"#),
    );
    let single = Txid::new(0x31df, now as u64);
    publisher.event("click", &single, now, &ids);
    fence(&mut publisher, &db.url, "fence8", now);
    let p = profile_get(&db.url, &["user:wide"], now);
    // The click's identifiers were linked by the impression: one person.
    assert_eq!(
        p[0]["counts"],
        serde_json::json!({"click": 1, "impression": 1})
    );
    let t = trail(&db.url, "user:wide", 0, now + DAY, None);
    assert_eq!(t.len(), 2);
    assert_eq!(
        t[0]["ids"].as_array().unwrap().len() + t[1]["ids"].as_array().unwrap().len(),
        81,
        "every identifier each carried"
    );
    proc.stop();
}
