//! Differential tests: real shards over real sockets, and every
//! observation compared, row by row, with `tidemark-reference`, SPEC 5
//! written out apart from the shard. Each run uses a market file written by
//! `tidemark publish --write` (duplicates with shifted timestamps, bounded
//! disorder), so the reference reads exactly what was sent.
//!
//! Disorder stays under `lateness` and grace, so every expected row is
//! determined; late events are tested with explicit ticks in `shard.rs`.
//! Sizes scale with `TIDEMARK_EXACT_SCALE` (1 = CI; `just check-exact N SCALE`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_reference as reference;
use tidemark_testkit::exact::*;

use tidemark_testkit::{
    block_on, now_ms, query_i64, query_rows, run_ok, wait_for, wait_until, Proc, Publisher, TestDb,
};

/// Keeps both cores busy until dropped.
struct Contention(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Contention {
    fn start(threads: usize) -> Contention {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Contention(stop, handles)
    }
}

impl Drop for Contention {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for h in self.1.drain(..) {
            let _ = h.join();
        }
    }
}

/// One shard fed by `tidemark publish --replay` of a market file, then compared.
fn one_shard_replay(label: &str, m: &MarketFile, extra_config: &str, speed: &str, tables: &str) {
    let db = TestDb::new(label);
    let endpoint = free_endpoint();
    let config = config_text(&[], extra_config, tables);
    let metrics = tidemark_testkit::free_addr();
    let mut shard = Proc::shard(
        &db,
        "x",
        &endpoint,
        format!("metrics_addr = \"{metrics}\"\n{config}"),
    );
    finish(replay(&m.path, &endpoint, speed));
    wait_all_swept(&db, "x", m);
    let scraped = tidemark_testkit::scrape(&metrics);
    shard.stop();
    let got = observed(&db, "x");
    assert_same(label, &got, &expected_with(&config, m, tables));
    // The endpoint counted what was emitted, target by target: every row,
    // an early target's provisional ones too.
    let per_target = query_rows(
        &db.url,
        "SELECT target, count(*)::text, sum(label)::text FROM tidemark.observations GROUP BY target",
    );
    assert_eq!(
        per_target.len(),
        got.keys()
            .map(|k| &k.0)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    for row in per_target {
        let [target, rows, positives] = [0, 1, 2].map(|i| row[i].clone().unwrap());
        for (metric, n) in [("observations", rows), ("positive_observations", positives)] {
            let line =
                format!(r#"tidemark_shard_{metric}_total{{shard="x",target="{target}"}} {n}"#);
            assert!(
                scraped.lines().any(|l| l == line),
                "{line} not in\n{scraped}"
            );
        }
    }
    for tier in ["events", "txns", "long"] {
        let series = format!(r#"tidemark_shard_buffer_rows{{shard="x",tier="{tier}"}}"#);
        assert!(
            tidemark_testkit::metric(&scraped, &series).is_some(),
            "{series} in\n{scraped}"
        );
    }
    assert_eq!(counter(&db, "x", "future_click"), 0);
    assert_eq!(counter(&db, "x", "future_install"), 0);
}

#[test]
fn exact_at_full_speed_with_the_high_socket_backed_up() {
    // Faster than a debug-built shard takes it: the publisher blocks on the
    // high-frequency socket's full queue while clicks flow on the other.
    let m = market("backlog", "2m", 700.0, &[]);
    one_shard_replay("backlog", &m, "rcvhwm = 20000", "0", "");
}

#[test]
fn exact_early_feedback_at_full_speed_with_the_high_socket_backed_up() {
    let m = early_market("backlog_early");
    one_shard_replay("backlog_early", &m, "rcvhwm = 20000", "0", EARLY);
}

#[test]
fn exact_with_the_cpu_contended() {
    let m = market("contended", "2m", 300.0, &[]);
    let _busy = Contention::start(2);
    one_shard_replay("contended", &m, "", "20", "");
}

#[test]
fn exact_early_feedback_with_the_cpu_contended() {
    let m = early_market("contended_early");
    let _busy = Contention::start(2);
    one_shard_replay("contended_early", &m, "", "20", EARLY);
}

#[test]
fn exact_with_a_custom_target() {
    let m = market("custom", "2m", 300.0, &["--custom-types", "open"]);
    let targets = r#"
[[targets]]
name = "open_90s"
given = "click"
event = "open"
after = "5s"
until = "90s"
grace = "5s"
[[targets]]
name = "open_any"
given = "impression"
event = "open"
until = "100s"
grace = "5s"
"#;
    let db = TestDb::new("custom");
    let endpoint = free_endpoint();
    let config = config_text(&[], r#"custom_types = ["open"]"#, targets);
    let mut shard = Proc::shard(&db, "x", &endpoint, &config);
    finish(replay(&m.path, &endpoint, "0"));
    wait_all_swept(&db, "x", &m);
    shard.stop();
    let want = expected(&config, &sent_of(&m.lines));
    assert!(want.keys().any(|(t, _)| t == "open_90s"));
    assert!(want
        .iter()
        .any(|((t, _), e)| t == "open_90s" && e.label == 1));
    assert_same("custom", &observed(&db, "x"), &want);
}

#[test]
fn exact_across_three_shards_from_plan() {
    let m = market("plan3", "2m", 400.0, &[]);
    let out = run_ok(&["plan", "--rate", "0.75", "--shards", "3", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let db = TestDb::new("plan3");
    let endpoint = free_endpoint();
    let mut shards = Vec::new();
    for s in plan["shards"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap().to_owned();
        let prefixes: Vec<String> = s["prefixes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect();
        let config = config_text(&prefixes, "", "");
        let proc = Proc::shard(&db, &name, &endpoint, &config);
        shards.push((name, config, proc));
    }
    finish(replay(&m.path, &endpoint, "0"));
    let sent = sent_of(&m.lines);
    let mut total = 0;
    for (name, config, proc) in &mut shards {
        wait_all_swept(&db, name, &m);
        proc.stop();
        let want = expected(config, &sent);
        total += want.len();
        assert_same(name, &observed(&db, name), &want);
    }
    // Together they sample 3/4 of the transactions: nothing outside, nothing twice.
    let all = expected(&config_text(&[], "", ""), &sent);
    assert!(
        total < all.len() && total * 10 > all.len() * 6,
        "{total} of {}",
        all.len()
    );
}

#[test]
fn exact_with_junk_and_poison_mixed_in() {
    let m = market_dup("poison", "2m", 300.0, "0.2", &[]);
    let db = TestDb::new("poison");
    let endpoint = free_endpoint();
    let mut junk = Publisher::new();
    let config = config_text(&[], "", "");
    // The shard also listens to a second publisher that sends only junk and poison.
    let mut shard = Proc::shard_multi(&db, "x", &[&endpoint, &junk.endpoint], &config);
    junk.wait_subscribed("tick", 2);
    // The database refuses what the decoder accepts: a constraint stands in
    // for any value PostgreSQL cannot take, once in the buffer, once in the
    // observations.
    wait_for("the shard's tables", || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'shard_x'",
        )
        .filter(|n| *n >= 1)
    });
    let refuse = "ALTER TABLE shard_x.events ADD CONSTRAINT no_poison CHECK (features->>'poison' IS DISTINCT FROM 'copy');
         ALTER TABLE tidemark.observations ADD CONSTRAINT no_poison CHECK (features->>'poison' IS DISTINCT FROM 'emit')";
    let url = db.url.clone();
    block_on(async move {
        tidemark_store::connect(&url)
            .await
            .unwrap()
            .batch_execute(refuse)
            .await
            .unwrap()
    });
    let start = m.lines.iter().map(|l| ts_of(l)).min().unwrap();
    let tx = |n: u128, c: i64| tidemark_wire::Txid::new(0xbad0_0000 + n, c as u64);
    let (p_copy, p_emit) = (tx(1, start + 30_000), tx(2, start + 31_000));
    let bid = |x: &tidemark_wire::Txid, f: &str| {
        format!(
            r#"{{"type":"bid","txid":"{x}","ts":{},"features":{f}}}"#,
            x.created_ms()
        )
    };
    let imp = |x: &tidemark_wire::Txid| {
        format!(
            r#"{{"type":"impression","txid":"{x}","ts":{}}}"#,
            x.created_ms() + 100
        )
    };
    let ok = tx(3, start + 32_000);
    let future = tidemark_wire::Txid::new(7, (now_ms() + 86_400_000) as u64);
    let oversize = format!(
        r#"{{"type":"click","txid":"{ok}","ts":1,"pad":"{}"}}"#,
        "x".repeat(70_000)
    );
    let junk_msgs: Vec<Vec<Vec<u8>>> = vec![
        vec![b"bid-0123".to_vec()],
        vec![
            format!("bid-{ok}").into_bytes(),
            b"{}".to_vec(),
            b"third".to_vec(),
        ],
        vec![format!("bid-{ok}").into_bytes(), b"{not json".to_vec()],
        vec![
            format!("bid-{ok}").into_bytes(),
            bid(&ok, r#"{"app":"a\u0000b"}"#).into_bytes(),
        ],
        vec![
            format!("bid-{ok}").into_bytes(),
            format!(r#"{{"type":"bid","txid":"{ok}","ts":9007199254740993,"features":{{}}}}"#)
                .into_bytes(),
        ],
        vec![
            format!("bid-{ok}").into_bytes(),
            bid(&ok, r#"{"n":1e999}"#).into_bytes(),
        ],
        vec![format!("click-{ok}").into_bytes(), imp(&ok).into_bytes()],
        vec![b"bid-XYZ".to_vec(), b"{}".to_vec()],
        vec![
            format!("bid-{future}").into_bytes(),
            bid(&future, "{}").into_bytes(),
        ],
        vec![
            b"tick".to_vec(),
            format!(
                r#"{{"type":"tick","publisher":"junk","ts":{}}}"#,
                now_ms() + 86_400_000
            )
            .into_bytes(),
        ],
        // Over 64 KiB, within the transport limit: refused alone (SPEC 2).
        vec![format!("click-{ok}").into_bytes(), oversize.into_bytes()],
    ];
    let poison: Vec<Vec<Vec<u8>>> = vec![
        frames_of(&bid(&p_copy, r#"{"poison":"copy","app":"p"}"#)),
        frames_of(&imp(&p_copy)),
        frames_of(&bid(&p_emit, r#"{"poison":"emit","app":"p"}"#)),
        frames_of(&imp(&p_emit)),
    ];
    for f in junk_msgs.iter().chain(&poison) {
        let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        junk.raw(&refs);
    }
    finish(replay(&m.path, &endpoint, "0"));
    wait_all_swept(&db, "x", &m);
    shard.stop();

    // The reference sees everything sent, the poison included; the shard
    // quarantined the refused copy (so that transaction is an orphan) and set
    // the refused observation aside.
    let mut sent: Vec<reference::Sent> = junk_msgs
        .iter()
        .chain(&poison[2..])
        .map(|f| reference::Sent {
            frames: f.clone(),
            clock_at_least: None,
        })
        .collect();
    sent.extend(sent_of(&m.lines));
    let mut want = expected(&config, &sent);
    assert!(want
        .remove(&("ctr".to_owned(), p_emit.to_string()))
        .is_some());
    assert_same("poison", &observed(&db, "x"), &want);
    assert_eq!(counter(&db, "x", "quarantined"), 1);
    assert_eq!(counter(&db, "x", "emission_gaps"), 1);
    let q = query_rows(
        &db.url,
        "SELECT topic, convert_from(payload, 'UTF8'), sqlstate FROM tidemark.quarantine",
    );
    assert_eq!(q.len(), 1);
    assert_eq!(q[0][0].as_deref(), Some(format!("bid-{p_copy}").as_str()));
    assert!(q[0][1].as_deref().unwrap().contains(r#""poison":"copy""#));
    assert_eq!(q[0][2].as_deref(), Some("23514"));
    let gaps = query_rows(&db.url, "SELECT target, txid FROM tidemark.emission_gaps");
    assert_eq!(
        gaps,
        vec![vec![Some("ctr".to_owned()), Some(p_emit.to_string())]]
    );
    for reason in [
        "rejected_frame_count",
        "rejected_bad_json",
        "rejected_nul_char",
        "rejected_ts_range",
        "rejected_non_finite",
        "rejected_oversize",
        "rejected_topic_mismatch",
        "rejected_bad_txid",
        "future_bid",
        "future_tick",
    ] {
        assert!(counter(&db, "x", reason) >= 1, "{reason} not counted");
    }
    // The oversized event cost no connection (SPEC 2, v1.3).
    assert_eq!(counter(&db, "x", "connections_restored"), 0);
}

/// A test-owned publisher that kills the shard and republishes like a
/// retrying publisher: PUB/SUB never redelivers what a killed process held.
struct Killer {
    publ: Publisher,
    shard: Proc,
    subscriptions: usize,
    kills: usize,
    /// When each line went out.
    log: Vec<Instant>,
}

impl Killer {
    /// `kill -9`, restart, and republish every line sent in the last 30 s.
    fn kill(&mut self, lines: &[String]) {
        self.shard.kill9();
        self.kills += 1;
        self.shard.restart();
        self.subscriptions += 2;
        self.publ.wait_subscribed("tick", self.subscriptions);
        let since = Instant::now() - Duration::from_secs(30);
        let first = self
            .log
            .iter()
            .position(|at| *at >= since)
            .unwrap_or(self.log.len());
        for line in &lines[first..self.log.len()] {
            let f = frames_of(line);
            self.publ.raw(&[&f[0], &f[1]]);
        }
    }
}

/// Sends a market file with ticks as SPEC 3 asks, killing the shard (and
/// restarting it at once) at `kills` random moments during intake, or while
/// it sweeps and emits the tail.
fn kill_9_run(label: &str, during_emission: bool, kills: usize, tables: &str) {
    // Early feedback has late rows to write only where installs come late,
    // inside the market's span.
    let m = market_for(label, "90s", 300.0, tables);
    let db = TestDb::new(label);
    let publ = Publisher::new();
    let config = config_text(&[], "", tables);
    let shard = Proc::shard(&db, "x", &publ.endpoint, &config);
    let mut k = Killer {
        publ,
        shard,
        subscriptions: 2,
        kills: 0,
        log: Vec::new(),
    };
    k.publ.wait_subscribed("tick", 2);
    let mut rng = now_ms() as u64 | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let kill_at: Vec<usize> = if during_emission {
        Vec::new()
    } else {
        (0..kills)
            .map(|_| next(m.lines.len() as u64) as usize)
            .collect()
    };
    let mut ticker = Ticker::default();
    for (i, line) in m.lines.iter().enumerate() {
        ticker.before(&k.publ, line);
        let f = frames_of(line);
        k.publ.raw(&[&f[0], &f[1]]);
        k.log.push(Instant::now());
        if i % 500 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        if kill_at.contains(&i) {
            std::thread::sleep(Duration::from_millis(next(300)));
            k.kill(&m.lines);
        }
    }
    let mut t = ticker.last();
    k.publ.tick(t);
    if during_emission {
        // Everything is written once the clock passes the last tick: what
        // the kills below can lose is sweeping and emission only.
        wait_swept(&db, "x", t - LATENESS_MS, Duration::from_secs(120));
    }
    let end = m.end_ms + TAIL_MS;
    while t < end {
        t = (t + 10_000).min(end);
        k.publ.tick(t);
        std::thread::sleep(Duration::from_millis(40));
        if during_emission && next(6) == 0 {
            std::thread::sleep(Duration::from_millis(next(200)));
            k.kill(&m.lines);
            k.publ.tick(t);
        }
    }
    if during_emission && k.kills == 0 {
        k.kill(&m.lines);
    }
    // A tick after the last restart, so the clock reaches the end.
    k.publ.tick(end);
    wait_swept(
        &db,
        "x",
        end - LATENESS_MS - 1_000,
        Duration::from_secs(120),
    );
    k.shard.stop();
    eprintln!("{label}: {} kills", k.kills);
    assert!(k.kills >= 1);
    assert_same(
        label,
        &observed(&db, "x"),
        &expected_with(&config, &m, tables),
    );
}

/// Restarts never stall (SPEC 12, v1.3): killed and started again at once,
/// twenty times, every start succeeds and the observations stay exact.
#[test]
fn a_shard_killed_twenty_times_and_restarted_at_once_stays_exact() {
    kill_9_run("kill_20", false, 20, "");
}

#[test]
fn exact_after_kill_9_during_intake() {
    kill_9_run("kill_intake", false, 3, "");
}

#[test]
fn exact_after_kill_9_during_emission() {
    kill_9_run("kill_emission", true, 3, "");
}

/// Early feedback (SPEC 5, v1.3): provisional, late and final rows once
/// each, in order, across kills while the tail is swept and emitted.
#[test]
fn exact_early_feedback_after_kill_9_during_emission() {
    kill_9_run("kill_early", true, 3, EARLY);
}

#[test]
fn exact_replaying_days_of_sparse_traffic_at_speed_0() {
    // Two days of event time, a transaction every ~5 s. Partitions of 7 s
    // widen to the cap of a day, which is no multiple of 7 s.
    let m = market("sparse", "2d", 0.2, &[]);
    let started = Instant::now();
    one_shard_replay("sparse", &m, "partition = \"7s\"", "0", "");
    eprintln!("sparse: {:.1}s end to end", started.elapsed().as_secs_f64());
}

/// Not a test of speed: says how the publisher exits when a shard is slow.
#[test]
fn publish_waits_for_a_slow_shard_instead_of_dropping_its_tail() {
    let m = market("tail", "1m", 800.0, &[]);
    let db = TestDb::new("tail");
    let endpoint = free_endpoint();
    // A small queue and a CPU-starved shard: the replay ends long before the shard reads it all.
    let config = config_text(&[], "rcvhwm = 1000", "");
    let _busy = Contention::start(2);
    let mut shard = Proc::shard(&db, "x", &endpoint, &config);
    finish(replay(&m.path, &endpoint, "0"));
    wait_all_swept(&db, "x", &m);
    shard.stop();
    let received: i64 = ["bid", "impression", "click", "install"]
        .iter()
        .map(|t| counter(&db, "x", &format!("received_{t}")))
        .sum();
    assert_eq!(received as usize, m.lines.len(), "every event sent arrived");
}

#[test]
fn exact_with_connections_cut_at_random() {
    cut_run("cut", "");
}

#[test]
fn exact_early_feedback_with_connections_cut_at_random() {
    cut_run("cut_early", EARLY);
}

fn cut_run(label: &str, tables: &str) {
    // Every session of the shard terminated again and again, at any point of
    // intake, partition upkeep or emission: each retry must keep what it held.
    let db = TestDb::new(label);
    let m = market_for(label, "2m", 300.0, tables);
    let endpoint = free_endpoint();
    let config = config_text(&[], "", tables);
    let mut shard = Proc::shard(&db, "x", &endpoint, &config);
    let cutter = tidemark_testkit::Cutter::start(&db.url, "tidemark shard x", 50, 300, true);
    finish(replay(&m.path, &endpoint, "10"));
    // A contended box may back off for seconds between cuts: a replay can
    // end before ten; the sweeps go on, and so does the cutting.
    let (limit, every) = (Duration::from_secs(120), Duration::from_millis(100));
    wait_until("ten sessions cut", limit, every, || {
        (cutter.cuts() >= 10).then_some(())
    });
    let cuts = cutter.stop();
    wait_all_swept(&db, "x", &m);
    shard.stop();
    assert!(cuts >= 10, "only {cuts} sessions cut");
    assert!(
        counter(&db, "x", "db_errors_transient") >= 1,
        "the cuts were met"
    );
    assert_same(
        label,
        &observed(&db, "x"),
        &expected_with(&config, &m, tables),
    );
}

#[test]
fn exact_across_a_postgresql_restart_under_load() {
    restart_run("restart", "");
}

#[test]
fn exact_early_feedback_across_a_postgresql_restart_under_load() {
    restart_run("restart_early", EARLY);
}

fn restart_run(label: &str, tables: &str) {
    // A clean (fast) stop keeps unlogged tables: nothing may be lost, the
    // shard holds what it received and the publisher waits meanwhile.
    let cluster = tidemark_testkit::own_cluster(&format!("{label}-home"), false);
    let db = TestDb::external(label, &cluster.url());
    let m = market_for(label, "2m", 400.0, tables);
    let endpoint = free_endpoint();
    let config = config_text(&[], "", tables);
    let mut shard = Proc::shard(&db, "x", &endpoint, &config);
    let publisher = std::thread::spawn({
        let path = m.path.clone();
        let endpoint = endpoint.clone();
        move || finish(replay(&path, &endpoint, "20"))
    });
    // Stop PostgreSQL part-way through intake, for a second.
    wait_for("intake under way", || {
        query_i64(&db.url, "SELECT count(*) FROM shard_x.events").filter(|n| *n > 5_000)
    });
    cluster.down().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    cluster.up(None).unwrap();
    publisher.join().unwrap();
    wait_all_swept(&db, "x", &m);
    shard.stop();
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM tidemark.gaps"),
        Some(0),
        "a clean restart loses nothing"
    );
    assert!(
        counter(&db, "x", "db_errors_transient") >= 1,
        "the outage was met"
    );
    let status = query_rows(
        &db.url,
        "SELECT last_error FROM tidemark.shard_status WHERE shard = 'x'",
    );
    assert!(
        status[0][0].is_some(),
        "the outage is shown in shard_status once the database is back"
    );
    assert_same(
        label,
        &observed(&db, "x"),
        &expected_with(&config, &m, tables),
    );
    cluster.destroy().unwrap();
}
