//! Shards under faults: PostgreSQL crashing, retention racing consumers,
//! PUB/SUB losing messages, a stop with the database away, a silent
//! tracker, a flood beyond the high-water marks.

use super::*;

#[test]
fn a_postgresql_crash_is_recorded_as_a_gap_and_the_shard_carries_on() {
    // A cluster of its own: crashing the shared one would disturb other tests.
    let home = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("crash-home");
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    tidemark_testkit::run_ok(&["db", "up", "--home", home.to_str().unwrap()]);
    let url = cluster.url();
    let mut publ = Publisher::new();
    let db = tidemark_testkit::TestDb::external("crash", &url);
    let mut shard = Proc::shard(&db, "c", &publ.endpoint, EVENT_CLOCK);
    publ.wait_subscribed("tick", 2);
    publ.tick(T0 - 20 * S);
    for i in 0..100 {
        let x = tx(i, T0 + i as i64);
        publ.event("bid", &x, T0 + 10, BID);
        publ.event("impression", &x, T0 + 20, "");
    }
    publ.tick(T0);
    wait_for("the buffer to fill", || {
        (query_i64(&url, "SELECT count(*) FROM shard_c.events")? == 200).then_some(())
    });

    cluster.crash().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    cluster.up(None).unwrap();
    // The shard reconnects on its own and finds its sentinel gone.
    let gap = wait_for("a gap row", || {
        let r = query_rows(
            &url,
            "SELECT from_ms::text, to_ms::text FROM tidemark.gaps WHERE shard = 'c'",
        );
        r.first().map(|r| {
            (
                r[0].clone().unwrap().parse::<i64>().unwrap(),
                r[1].clone().unwrap().parse::<i64>().unwrap(),
            )
        })
    });
    assert!(
        gap.0 <= T0 && gap.1 >= T0 + 100,
        "gap {gap:?} must cover the lost creation times"
    );
    assert_eq!(
        query_i64(&url, "SELECT count(*) FROM shard_c.events"),
        Some(0),
        "crash recovery empties unlogged tables"
    );
    // It carries on: new transactions still become observations.
    let after = tx(1000, T0 + 30 * S);
    std::thread::sleep(Duration::from_millis(300));
    publ.event("bid", &after, T0 + 30 * S, BID);
    publ.event("impression", &after, T0 + 30 * S + 5, "");
    std::thread::sleep(Duration::from_millis(300));
    publ.tick(T0 + 200 * S);
    wait_for("the new transaction's ctr observation", || {
        query_i64(
            &url,
            &format!("SELECT count(*) FROM tidemark.observations WHERE txid = '{after}'"),
        )
        .filter(|n| *n >= 1)
    });
    shard.stop();
    // Its seq jumped past any number an earlier primary (or the commits the
    // crash took) may have given a learner (SPEC 5, 12).
    let seq = query_i64(
        &url,
        &format!("SELECT min(seq) FROM tidemark.observations WHERE txid = '{after}'"),
    )
    .unwrap();
    assert!(seq > 1 << 32, "seq {seq} after the gap");
    let lost_observed = query_i64(
        &url,
        &format!("SELECT count(*) FROM tidemark.observations WHERE txid <> '{after}'"),
    );
    assert_eq!(
        lost_observed,
        Some(0),
        "the 100 buffered transactions were lost, and said so"
    );
    cluster.destroy().unwrap();
}

#[test]
fn retention_never_deletes_what_a_consumer_has_not_read() {
    let db = TestDb::new("retention");
    let mut publ = Publisher::new();
    let cfg = format!("retention = \"0s\"\nretention_check = \"100ms\"\n{EVENT_CLOCK}");
    let mut shard = Proc::shard(&db, "t", &publ.endpoint, &cfg);
    publ.wait_subscribed("tick", 2);
    // A learner has read up to seq 3 of this shard.
    query_i64(
        &db.url,
        "WITH i AS (INSERT INTO tidemark.consumers (consumer, shard, seq) VALUES ('learner', 't', 3) RETURNING 1) SELECT count(*) FROM i",
    );
    publ.tick(T0 - 20 * S);
    for i in 0..5 {
        let x = tx(i, T0 + i as i64);
        publ.event("bid", &x, T0 + 10, BID);
        publ.event("impression", &x, T0 + 20, "");
    }
    std::thread::sleep(Duration::from_millis(200));
    publ.tick(T0 + 61 * S);
    wait_clock(&db, "t", T0 + 61 * S);
    let kept = wait_for("retention to delete what was read", || {
        let min = query_i64(
            &db.url,
            "SELECT min(seq) FROM tidemark.observations WHERE shard = 't'",
        )?;
        (min == 4).then_some(min)
    });
    assert_eq!(kept, 4);
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM tidemark.observations"),
        Some(2)
    );
    query_i64(
        &db.url,
        "WITH u AS (UPDATE tidemark.consumers SET seq = 5 RETURNING 1) SELECT count(*) FROM u",
    );
    wait_for("the rest to go once read", || {
        (query_i64(&db.url, "SELECT count(*) FROM tidemark.observations")? == 0).then_some(())
    });
    shard.stop();
    assert_eq!(counter(&db, "t", "pruned"), 5);
}

#[test]
fn ticks_sent_counts_estimate_what_pubsub_lost() {
    let db = TestDb::new("loss");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(
        &db,
        "l",
        &publ.endpoint,
        "prefixes = [\"0\"]\nbatch_delay = \"20ms\"",
    );
    publ.wait_subscribed("tick", 2);
    let now = tidemark_testkit::now_ms();
    // The publisher had sent 10 bids before; 5 more reach the shard, but it claims 10.
    publ.tick_sent(now, &[("bid-0".into(), 10)]);
    for i in 0..5u128 {
        publ.event("bid", &tx(i, now), now, BID);
    }
    publ.tick_sent(now + 1, &[("bid-0".into(), 20)]);
    std::thread::sleep(Duration::from_millis(300));
    shard.stop();
    assert_eq!(counter(&db, "l", "received_bid"), 5);
    assert_eq!(counter(&db, "l", "lost_estimate"), 5);
}

#[test]
fn a_stop_with_the_database_away_ends_within_shutdown_timeout_and_says_what_it_lost() {
    // A cluster of its own: stopping the shared one would disturb other tests.
    let home = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("away-home");
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    tidemark_testkit::run_ok(&["db", "up", "--home", home.to_str().unwrap()]);
    let db = tidemark_testkit::TestDb::external("away", &cluster.url());
    let mut publ = Publisher::new();
    let cfg = format!("shutdown_timeout = \"2s\"\n{EVENT_CLOCK}");
    let mut shard = Proc::shard(&db, "a", &publ.endpoint, &cfg);
    publ.wait_subscribed("tick", 2);
    wait_for("the shard's tables", || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'shard_a'",
        )
        .filter(|n| *n > 0)
    });
    cluster.down().unwrap();
    // Held in memory: the database is away.
    for i in 0..50 {
        publ.event("bid", &tx(i, T0), T0 + 1, BID);
    }
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    tidemark_testkit::signal(shard.child.id(), "TERM");
    let status = shard.child.wait().unwrap();
    let took = started.elapsed();
    let log = shard.log();
    assert!(!status.success(), "must exit non-zero: {log}");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} with a 2s shutdown_timeout"
    );
    assert!(
        log.contains("stopped without writing 50 accepted events"),
        "must say what it could not write: {log}"
    );

    // A second signal ends a stop at once, even with a long shutdown_timeout.
    let cfg = format!("shutdown_timeout = \"1h\"\n{EVENT_CLOCK}");
    cluster.up(None).unwrap();
    let mut shard = Proc::shard(&db, "b", &publ.endpoint, &cfg);
    publ.wait_subscribed("tick", 4);
    wait_for("the second shard's tables", || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'shard_b'",
        )
        .filter(|n| *n > 0)
    });
    cluster.down().unwrap();
    for i in 0..10 {
        publ.event("bid", &tx(100 + i, T0), T0 + 1, BID);
    }
    std::thread::sleep(Duration::from_millis(500));
    let pid = shard.child.id();
    tidemark_testkit::signal(pid, "TERM");
    std::thread::sleep(Duration::from_millis(500));
    assert!(shard.child.try_wait().unwrap().is_none(), "still trying");
    tidemark_testkit::signal(pid, "INT");
    let started = std::time::Instant::now();
    let status = shard.child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "{}", shard.log());
    cluster.destroy().unwrap();
}

/// The liveness gate (docs/shard.md): a tracker falls silent while bids flow;
/// a gated shard holds its phases, so clicks the tracker sends late (stamped
/// inside their window) still label their transactions, where an ungated
/// shard on the same stream labels them 0 and counts the clicks late. The
/// second silence outlasts `liveness_max_hold`: the gated shard then sweeps
/// anyway, counted and said.
#[test]
fn the_liveness_gate_holds_a_silent_trackers_windows_then_gives_up() {
    let db = TestDb::new("liveness");
    let mut publ = Publisher::new();
    let windows = &format!(
        "clock = \"event\"\nlateness = \"0s\"\npublisher_timeout = \"1h\"\nperiod = \"100ms\"\nbatch_delay = \"20ms\"\n{SECOND_WINDOWS}"
    );
    let metrics = tidemark_testkit::free_addr();
    let gated = format!(
        "liveness_silence = \"1s\"\nliveness_max_hold = \"3s\"\nmetrics_addr = \"{metrics}\"\n{windows}"
    );
    let mut g = Proc::shard(&db, "gated", &publ.endpoint, &gated);
    let mut u = Proc::shard(&db, "ungated", &publ.endpoint, windows);
    publ.wait_subscribed("tick", 4);
    let start = std::time::Instant::now();
    let t0 = tidemark_testkit::now_ms();
    // Event time follows wall time; ticks and bids every 50 ms.
    let mut n = 100u128;
    let mut pump = |publ: &mut Publisher, until_s: f64| {
        while start.elapsed().as_secs_f64() < until_s {
            let now = t0 + start.elapsed().as_millis() as i64;
            n += 1;
            let t = tx(n, now);
            publ.event("bid", &t, now, BID);
            publ.event("impression", &t, now + 10, "");
            publ.tick(now);
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // A: a click at once, so the low socket is heard in this run.
    let a = tx(1, t0);
    publ.event("bid", &a, t0, BID);
    publ.event("impression", &a, t0 + 10, "");
    publ.event("click", &a, t0 + 20, "");
    // B: its click is made at +1.5 s but the silent tracker sends it at +2.6 s.
    let b = tx(2, t0 + 100);
    publ.event("bid", &b, t0 + 100, BID);
    publ.event("impression", &b, t0 + 110, "");
    pump(&mut publ, 2.6);
    publ.event("click", &b, t0 + 1600, "");
    // C: no click ever; the second silence runs past the bound.
    let c = tx(3, t0 + 2700);
    publ.event("bid", &c, t0 + 2700, BID);
    publ.event("impression", &c, t0 + 2710, "");
    pump(&mut publ, 9.0);
    let label = |shard: &str, t: &Txid| {
        query_i64(
            &db.url,
            &format!("SELECT label::bigint FROM tidemark.observations WHERE shard = '{shard}' AND target = 'ctr' AND txid = '{t}'"),
        )
    };
    // (Waited for: a loaded machine sweeps later, never otherwise.)
    let settled = |shard: &str, t: &Txid| wait_for("an observation", || label(shard, t));
    assert_eq!(settled("gated", &a), 1);
    assert_eq!(settled("gated", &b), 1, "held until the late click came");
    assert_eq!(settled("ungated", &b), 0, "swept before the late click");
    assert_eq!(settled("gated", &c), 0, "swept once the bound passed");
    // The endpoint's live figures: time spent, the clock's lag, the watermarks.
    let text = tidemark_testkit::scrape(&metrics);
    let m = |series: &str| tidemark_testkit::metric(&text, &format!("tidemark_shard_{series}"));
    assert!(
        m(r#"batch_write_duration_seconds_count{shard="gated"}"#).is_some_and(|n| n > 0.0),
        "{text}"
    );
    assert!(
        m(r#"sweep_duration_seconds_sum{shard="gated"}"#).is_some_and(|s| s > 0.0),
        "{text}"
    );
    let lag = m(r#"clock_lag_seconds{shard="gated"}"#).unwrap();
    assert!(
        (0.0..5.0).contains(&lag),
        "swept close to now once the bound passed: {lag}"
    );
    let ctr = m(r#"watermark_timestamp_seconds{shard="gated",phase="ctr"}"#).unwrap();
    let imp = m(r#"watermark_timestamp_seconds{shard="gated",phase="impression"}"#).unwrap();
    // The ctr phase trails the impression phase by the click window less the impression window.
    assert!(
        ((imp - ctr) - 1.0).abs() < 1e-6,
        "impression {imp}, ctr {ctr}"
    );
    assert!(ctr * 1000.0 > t0 as f64 && ctr * 1000.0 < tidemark_testkit::now_ms() as f64);
    g.stop();
    u.stop();
    assert_eq!(counter(&db, "ungated", "late_click"), 1);
    assert_eq!(counter(&db, "gated", "late_click"), 0);
    assert_eq!(counter(&db, "gated", "liveness_holds"), 2);
    assert_eq!(counter(&db, "gated", "liveness_gave_up"), 1);
    assert_eq!(counter(&db, "ungated", "liveness_holds"), 0);
    let log = g.log();
    assert!(log.contains("holding every phase"), "{log}");
    assert!(log.contains("sweeping anyway"), "{log}");
    assert_seq_gap_free(&db, "gated");
}

/// Fault campaign: a publisher floods far beyond the high-water marks. The
/// shard stays up with bounded memory, and every message is accounted for:
/// received + dropped by intake (`dropped_overflow`) + lost by PUB/SUB
/// (`lost_estimate`) = sent, exactly, for one publisher.
#[test]
fn a_flood_beyond_the_high_water_marks_is_counted_and_memory_stays_bounded() {
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let db = TestDb::new("flood");
    let mut publ = Publisher::with_sndhwm(1000);
    let mut shard = Proc::shard(
        &db,
        "f",
        &publ.endpoint,
        "rcvhwm = 100\nmax_pending = 5000\nbatch_events = 2000\nbatch_delay = \"20ms\"",
    );
    publ.wait_subscribed("tick", 2);
    let pid = shard.child.id();
    let rss_kb = || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            })
            .unwrap_or(0)
    };
    let now = tidemark_testkit::now_ms();
    let mut sent = [0u64; 16];
    let mut peak = 0;
    // The estimate counts from the publisher's first tick: nothing sent yet.
    let zero: Vec<(String, u64)> = (0..16).map(|d| (format!("bid-{d:x}"), 0)).collect();
    publ.tick_sent(now - 1, &zero);
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..300_000u128 {
        let t = tx(
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835),
            now,
        );
        sent[t.first_digit().to_digit(16).unwrap() as usize] += 1;
        publ.event("bid", &t, now, BID);
        if i % 20_000 == 0 {
            peak = peak.max(rss_kb());
        }
    }
    let sent_counts: Vec<(String, u64)> =
        (0..16).map(|d| (format!("bid-{d:x}"), sent[d])).collect();
    // The tick that tells the shard what was sent must itself get through.
    for k in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        publ.tick_sent(now + k, &sent_counts);
        peak = peak.max(rss_kb());
    }
    assert!(shard.child.try_wait().unwrap().is_none(), "{}", shard.log());
    shard.stop();
    let received = counter(&db, "f", "received_bid");
    let lost = counter(&db, "f", "lost_estimate");
    let dropped = counter(&db, "f", "dropped_overflow");
    eprintln!("flood: sent 300000, received {received}, dropped {dropped}, lost {lost}, peak RSS {peak} kB");
    assert!(
        lost + dropped > 0,
        "the flood went beyond the high-water marks"
    );
    assert_eq!(
        received + dropped + lost,
        300_000,
        "every message accounted for"
    );
    assert!(peak < 400 * 1024, "memory bounded: peak RSS {peak} kB");
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM shard_f.events"),
        Some(received),
        "everything received is buffered"
    );
}
