//! Hostile and broken peers against real processes (issue "trust
//! boundary"): what each one is refused, what is counted, and that honest
//! traffic is kept.

use std::time::Duration;

use tidemark_testkit::exact::counter;
use tidemark_testkit::{now_ms, wait_for, Proc, Publisher, Reaped, TestDb, GUARDED_CLOCK};
use tidemark_wire::Txid;

const BID: &str = r#""features":{"app":"a"}"#;

/// A panic on the intake thread ends the process with a failure status (so
/// `Restart=on-failure` restarts it), after what intake had accepted is
/// written.
#[test]
fn a_panic_in_intake_exits_non_zero_after_writing_what_was_accepted() {
    let db = TestDb::new("panic");
    let mut publ = Publisher::new();
    let mut shard = Proc::start_env(
        "shard",
        &db,
        "p",
        &publ.endpoint,
        "batch_delay = \"20ms\"",
        &[("TIDEMARK_FAULT", "intake_panic")],
    );
    publ.wait_subscribed("tick", 2);
    let now = now_ms();
    for n in 0..5u128 {
        publ.event("bid", &Txid::new(n, now as u64), now, BID);
    }
    let fault = format!(r#"{BID},"fault":1"#);
    publ.event("bid", &Txid::new(9, now as u64), now, &fault);
    let status = wait_for("the shard to exit", || {
        std::thread::sleep(Duration::from_millis(50));
        shard.child.try_wait().unwrap()
    });
    let log = shard.log();
    assert!(!status.success(), "{status}; log:\n{log}");
    assert!(log.contains("fault injected: intake_panic"), "{log}");
    assert_eq!(counter(&db, "p", "received_bid"), 5, "{log}");
    assert_eq!(counter(&db, "p", "rows_written"), 5, "{log}");
}

/// A frame over the transport limit (1 MiB) is never read whole: the
/// shard's socket drops the connection (libzmq does not reconnect a
/// connecting socket after that), intake connects again within a second
/// and counts it, and honest messages before and after the oversized one
/// are all kept. The endpoint is given by host name, which the socket's
/// monitor reports by the address it resolved to (SPEC 2, v1.3).
#[test]
fn an_oversized_frame_costs_one_connection_which_comes_back() {
    let db = TestDb::new("oversize");
    let mut publ = Publisher::new();
    let by_name = publ.endpoint.replace("127.0.0.1", "localhost");
    let mut shard = Proc::shard(&db, "o", &by_name, "batch_delay = \"20ms\"");
    publ.wait_subscribed("tick", 2);
    let now = now_ms();
    let bid =
        |publ: &mut Publisher, n: u128| publ.event("bid", &Txid::new(n, now as u64), now, BID);
    for n in 0..3 {
        bid(&mut publ, n);
    }
    wait_for("the first bids", || {
        (counter(&db, "o", "received_bid") == 3).then_some(())
    });
    let topic = tidemark_wire::topic("bid", &Txid::new(7, now as u64));
    let huge = vec![b' '; 8 << 20];
    publ.raw(&[topic.as_bytes(), &huge]);
    wait_for("the dropped connection restored", || {
        (counter(&db, "o", "connections_restored") >= 1).then_some(())
    });
    // The restored connection subscribes again.
    publ.wait_subscribed("tick", 3);
    std::thread::sleep(Duration::from_millis(200));
    for n in 10..13 {
        bid(&mut publ, n);
    }
    wait_for("the later bids", || {
        (counter(&db, "o", "received_bid") == 6).then_some(())
    });
    shard.stop();
    assert_eq!(counter(&db, "o", "connections_restored"), 1);
    assert!(shard.log().contains("connected again"));
}

/// The proxy reads no frame over the limit either: connected to a
/// publisher (`--publishers`), it restores the connection an oversized
/// frame cost and forwards what follows.
#[test]
fn the_proxy_restores_a_publisher_connection_dropped_for_an_oversized_frame() {
    let (back, metrics) = (tidemark_testkit::free_addr(), tidemark_testkit::free_addr());
    let mut publ = Publisher::new();
    let _proxy = Reaped(
        tidemark_testkit::bin()
            .args(["proxy", "--publishers", &publ.endpoint])
            .args(["--backend", &format!("tcp://{back}")])
            .args(["--metrics-addr", &metrics, "--hwm", "1000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.connect(&format!("tcp://{back}")).unwrap();
    sub.set_subscribe(b"bid-").unwrap();
    sub.set_rcvtimeo(100).unwrap();
    publ.wait_subscribed("bid-", 1);
    let now = now_ms();
    let topic = tidemark_wire::topic("bid", &Txid::new(1, now as u64));
    publ.raw(&[topic.as_bytes(), b"{}"]);
    assert!(sub.recv_multipart(0).is_ok(), "an honest message first");
    // Over 64 KiB, within the transport limit: dropped alone, counted, and
    // the message behind it on the same connection goes on.
    publ.raw(&[topic.as_bytes(), &vec![b' '; 70_000]]);
    publ.raw(&[topic.as_bytes(), b"{\"next\":1}"]);
    let got = tidemark_testkit::wait_for("the message behind it", || sub.recv_multipart(0).ok());
    assert_eq!(got[1], b"{\"next\":1}");
    let oversize = tidemark_testkit::wait_for("the oversize counted", || {
        let t = tidemark_testkit::try_scrape(&metrics)?;
        tidemark_testkit::metric(&t, r#"tidemark_proxy_refused_total{reason="oversize"}"#)
            .filter(|n| *n >= 1.0)
    });
    assert_eq!(oversize, 1.0);
    // Over the transport limit: the connection goes, and comes back.
    publ.raw(&[topic.as_bytes(), &vec![b' '; (1 << 20) + 1]]);
    publ.wait_subscribed("bid-", 2);
    let restored = tidemark_testkit::wait_for("the restore counted", || {
        let t = tidemark_testkit::try_scrape(&metrics)?;
        tidemark_testkit::metric(&t, "tidemark_proxy_connections_restored_total")
            .filter(|n| *n >= 1.0)
    });
    assert_eq!(restored, 1.0);
    let got = tidemark_testkit::wait_for("a message after the restore", || {
        publ.raw(&[topic.as_bytes(), b"{\"after\":1}"]);
        sub.recv_multipart(0).ok()
    });
    assert_eq!(got[1], b"{\"after\":1}");
}

/// A profile process's count of `reason`, over its workers.
fn profile_count(db: &TestDb, reason: &str) -> Option<i64> {
    tidemark_testkit::query_i64(
        &db.url,
        &format!("SELECT sum(n)::bigint FROM tidemark.profile_counts WHERE reason = '{reason}'"),
    )
}

/// The `ctr` label a shard emitted for a transaction, once it has.
fn ctr_label(db: &TestDb, shard: &str, t: &Txid) -> Option<i64> {
    tidemark_testkit::query_i64(
        &db.url,
        &format!(
            "SELECT label::bigint FROM tidemark.observations \
             WHERE shard = '{shard}' AND target = 'ctr' AND txid = '{t}'"
        ),
    )
}

/// Old ticks under hundreds of invented names: only `max_publishers` names
/// count (the rest are refused and counted, on each socket they arrive
/// on), those that got in hold the clock back only until they fall silent
/// for `publisher_timeout`, and honest transactions are then labelled as
/// SPEC 5 says.
#[test]
fn ticks_under_invented_names_are_bounded_by_max_publishers() {
    let db = TestDb::new("names");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "n", &publ.endpoint, GUARDED_CLOCK);
    publ.wait_subscribed("tick", 2);
    let t0 = 1_700_000_000_000i64;
    publ.tick(t0);
    let (clicked, unclicked) = (Txid::new(1, t0 as u64), Txid::new(2, t0 as u64));
    for t in [&clicked, &unclicked] {
        publ.event("bid", t, t0, BID);
        publ.event("impression", t, t0 + 1_000, "");
    }
    publ.event("click", &clicked, t0 + 5_000, "");
    for n in 0..200 {
        let p = tidemark_wire::tick_payload(&format!("invented{n}"), t0 - 3_600_000, &[]);
        publ.raw(&[b"tick", p.as_bytes()]);
    }
    let label = |t: &Txid| ctr_label(&db, "n", t);
    // The honest publisher keeps ticking; the seven invented names that got
    // in hold the clock until they have been silent for 2 s.
    let labels = wait_for("the ctr observations", || {
        publ.tick(t0 + 120_000);
        std::thread::sleep(Duration::from_millis(100));
        Some((label(&clicked)?, label(&unclicked)?))
    });
    shard.stop();
    assert_eq!(labels, (1, 0));
    // 193 names refused, each on both sockets.
    assert_eq!(counter(&db, "n", "too_many_publishers"), 2 * 193);
    assert_eq!(counter(&db, "n", "future_tick"), 0);
}

/// Events with more identifiers than `max_ids_per_event` (16 by default),
/// up to the thousands a 64 KiB payload holds, are refused whole and
/// counted; one at the limit is applied, and no person grows from the rest.
#[test]
fn events_with_thousands_of_identifiers_are_refused_whole() {
    use tidemark_testkit::profiles::{fence, profile_get};
    let db = TestDb::new("many_ids");
    let mut publ = Publisher::new();
    let config = "clock = \"wall\"\nbatch_delay = \"20ms\"\nmax_ids = 64\n";
    let mut proc = Proc::profiles(&db, "many", &publ.endpoint, config);
    publ.wait_subscribed("tick", 2);
    let now = now_ms();
    let ids = |n: usize, tag: &str| {
        let entries: Vec<String> = (0..n).map(|k| format!(r#""k{k}":"{tag}{k}""#)).collect();
        format!(r#""ids":{{{}}}"#, entries.join(","))
    };
    // user + 15 ids: at the limit. user + 16: one too many. 4,000: a flood.
    let at_limit = format!(r#""user":"ok",{}"#, ids(15, "a"));
    let one_over = format!(r#""user":"over",{}"#, ids(16, "b"));
    let flood = ids(4_000, "c");
    assert!(flood.len() < 64 * 1024 - 200, "{} bytes", flood.len());
    publ.event("impression", &Txid::new(1, now as u64), now, &at_limit);
    publ.event("impression", &Txid::new(2, now as u64), now, &one_over);
    for n in 0..20u128 {
        publ.event("click", &Txid::new(100 + n, now as u64), now, &flood);
    }
    fence(&mut publ, &db.url, "fence", now);
    let ok = profile_get(&db.url, &["user:ok", "k3:a3"], now);
    assert_eq!(ok[0]["counts"], serde_json::json!({"impression": 1}));
    assert_eq!(ok[0]["person"], ok[1]["person"], "linked: one person");
    let over = profile_get(&db.url, &["user:over", "k0:c0"], now);
    assert!(
        over.iter()
            .all(|p| p["counts"].as_object().is_none_or(|c| c.is_empty())),
        "{over:?}"
    );
    proc.stop();
    let too_many = profile_count(&db, "too_many_ids");
    assert_eq!(too_many, Some(21));
}

/// Values PostgreSQL refuses reaching the profile process (here a trigger
/// refuses identifiers containing `poison`, SQLSTATE 22023, as a
/// constraint or a program limit would): the refused events are found by
/// splitting, in a worker's part and in the link stage alike, set aside in
/// `tidemark.profile_quarantine` with their raw message and counted; every
/// honest event around them is applied exactly as the reference says.
#[test]
fn events_the_database_refuses_are_quarantined_and_the_rest_applied() {
    use tidemark_testkit::profiles::{compare, fence, oracle, publish, stream};
    let db = TestDb::new("poison");
    let mut publ = Publisher::new();
    let config = "clock = \"wall\"\nbatch_delay = \"50ms\"\nbatch_events = 700\nworkers = 2\ntrail = \"7d\"\n";
    let mut proc = Proc::profiles(&db, "poison", &publ.endpoint, config);
    publ.wait_subscribed("tick", 2);
    tidemark_testkit::block_on({
        let url = db.url.clone();
        async move {
            let c = tidemark_store::connect(&url).await.unwrap();
            c.batch_execute(
                "CREATE FUNCTION tidemark.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                   IF NEW.id LIKE '%poison%' THEN
                     RAISE EXCEPTION 'refused: %', NEW.id USING ERRCODE = '22023';
                   END IF;
                   RETURN NEW;
                 END $$;
                 CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON tidemark.profile_ids
                   FOR EACH ROW EXECUTE FUNCTION tidemark.refuse_poison();",
            )
            .await
            .unwrap();
        }
    });
    let now = now_ms();
    let honest = stream(now as u64 ^ 0x9015, 2_000, now);
    let want = oracle(config, &honest, now);
    let poison = [
        // A single identifier: a worker's part.
        ("impression", 0x90_0001u128, r#""user":"poison1""#),
        // A link: the link stage.
        (
            "click",
            0x90_0002,
            r#""user":"u7","ids":{"idfa":"poison2"}"#,
        ),
        ("install", 0x90_0003, r#""ids":{"idfa":"poison3"}"#),
    ];
    let mut messages = honest.clone();
    for (i, (t, n, extra)) in poison.iter().enumerate() {
        let txid = Txid::new(*n, now as u64);
        let payload = format!(r#"{{"type":"{t}","txid":"{txid}","ts":{now},{extra}}}"#);
        let at = (i + 1) * messages.len() / 4;
        messages.insert(at, (tidemark_wire::topic(t, &txid), payload));
    }
    publish(&mut publ, &messages);
    fence(&mut publ, &db.url, "fence", now);
    compare(&db.url, &want, &honest, now);
    let kept = tidemark_testkit::query_rows(
        &db.url,
        "SELECT topic, convert_from(payload, 'UTF8'), sqlstate FROM tidemark.profile_quarantine ORDER BY topic",
    );
    assert_eq!(kept.len(), 3, "{kept:?}");
    for row in &kept {
        let (topic, payload) = (row[0].as_deref().unwrap(), row[1].as_deref().unwrap());
        let sent = messages
            .iter()
            .find(|(t, _)| t == topic)
            .expect("a sent topic");
        assert_eq!(payload, sent.1, "the raw message");
        assert_eq!(row[2].as_deref(), Some("22023"));
    }
    proc.stop();
    let quarantined = profile_count(&db, "quarantined");
    assert_eq!(quarantined, Some(3));
}

/// An operator's transaction left open on the buffer (`BEGIN; SELECT …`,
/// then idle) holds a lock every partition drop needs. The drop waits at
/// most `DDL_LOCK_TIMEOUT` and is put off, so intake and sweeps go on and
/// observations come out while the transaction stays open; once it ends,
/// the partitions are dropped.
#[test]
fn an_idle_transaction_on_the_buffer_delays_housekeeping_never_the_sweep() {
    let db = TestDb::new("idle_tx");
    let mut publ = Publisher::new();
    // Narrow partitions that never widen: the first one ends 10 s after t0.
    let config = format!("partition = \"10s\"\npartition_rows = 2\n{GUARDED_CLOCK}");
    let mut shard = Proc::shard(&db, "l", &publ.endpoint, &config);
    publ.wait_subscribed("tick", 2);
    let t0 = 1_700_000_000_000i64;
    publ.tick(t0);
    let (clicked, unclicked) = (Txid::new(1, t0 as u64), Txid::new(2, t0 as u64));
    for t in [&clicked, &unclicked] {
        publ.event("bid", t, t0, BID);
        publ.event("impression", t, t0 + 1_000, "");
    }
    wait_for("the events buffered", || {
        let n = tidemark_testkit::query_i64(&db.url, "SELECT count(*) FROM shard_l.events");
        (n == Some(4)).then_some(())
    });
    // The operator's session: a read of the buffer, then idle in its transaction.
    let (held_tx, held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let url = db.url.clone();
    let operator = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = tidemark_store::connect(&url).await.unwrap();
            let t = c.transaction().await.unwrap();
            t.query_one("SELECT count(*) FROM shard_l.events", &[])
                .await
                .unwrap();
            held_tx.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || released.recv()).await;
            t.rollback().await.unwrap();
        });
    });
    held.recv().unwrap();
    publ.event("click", &clicked, t0 + 5_000, "");
    let label = |t: &Txid| ctr_label(&db, "l", t);
    // Swept while the transaction stays open (without the bound, the drop
    // would wait for it, and every sweep behind the drop).
    let labels = wait_for("the ctr observations, the transaction still open", || {
        publ.tick_steps(t0, t0 + 120_000);
        std::thread::sleep(Duration::from_millis(100));
        Some((label(&clicked)?, label(&unclicked)?))
    });
    assert_eq!(labels, (1, 0));
    // The drop of the first partition waits out its bound and is put off;
    // meanwhile a new transaction, in partitions made and attached while
    // the transaction stays open, is buffered and swept.
    wait_for("the drop put off", || {
        shard
            .log()
            .contains("put off, intake goes on")
            .then_some(())
    });
    let later = Txid::new(3, (t0 + 130_000) as u64);
    publ.event("bid", &later, t0 + 130_000, BID);
    publ.event("impression", &later, t0 + 131_000, "");
    let swept = wait_for("a later observation, the transaction still open", || {
        publ.tick_steps(t0 + 120_000, t0 + 300_000);
        std::thread::sleep(Duration::from_millis(100));
        label(&later)
    });
    assert_eq!(swept, 0);
    let partitions = || {
        tidemark_testkit::query_i64(
            &db.url,
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'shard_l.events'::regclass \
             AND inhrelid::regclass::text LIKE '%20231114t221320'",
        )
    };
    assert_eq!(partitions(), Some(1), "the dropped partition waits");
    release.send(()).unwrap();
    operator.join().unwrap();
    let mut at = t0 + 300_000;
    wait_for("the partition dropped once the transaction ended", || {
        // Housekeeping runs with the sweeps, as the clock moves.
        at += 1_000;
        publ.tick(at);
        std::thread::sleep(Duration::from_millis(100));
        (partitions() == Some(0)).then_some(())
    });
    shard.stop();
}

/// A first run on the event clock, before any tick, over txids spread
/// across twenty years (an old log replayed without ticks, or a hostile
/// publisher): nothing is stale before the first tick (SPEC 11), so every
/// event is applied and its first-copy mark and trail row kept, but days
/// further back than `dedup` and `trail` from the newest txid share one
/// catch-all partition: a handful are made, not one per day (which would
/// exhaust PostgreSQL's lock table on the next read of the marks).
#[test]
fn a_first_run_over_txids_spread_across_years_makes_few_partitions() {
    let db = TestDb::new("decades");
    let mut publ = Publisher::new();
    let config = "clock = \"event\"\nbatch_delay = \"50ms\"\ntrail = \"7d\"\n";
    let mut proc = Proc::profiles(&db, "decades", &publ.endpoint, config);
    publ.wait_subscribed("tick", 2);
    let (now, day) = (now_ms(), tidemark_testkit::DAY);
    let events = 2_000i64;
    for n in 0..events {
        let created = now - n * 4 * day;
        let t = Txid::new(n as u128, created as u64);
        publ.event("install", &t, created, &format!(r#""user":"u{n}""#));
    }
    wait_for("every event applied", || {
        std::thread::sleep(Duration::from_millis(100));
        (profile_count(&db, "applied")? == events).then_some(())
    });
    // A copy of the oldest is still recognised (its mark is in the catch-all).
    let oldest = now - (events - 1) * 4 * day;
    let t = Txid::new((events - 1) as u128, oldest as u64);
    publ.event("install", &t, oldest, r#""user":"again""#);
    wait_for("the copy counted", || {
        std::thread::sleep(Duration::from_millis(100));
        (profile_count(&db, "duplicate")? >= 1).then_some(())
    });
    proc.stop();
    let partitions = |parent: &str| {
        tidemark_testkit::query_i64(
            &db.url,
            &format!(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'tidemark.{parent}'::regclass"
            ),
        )
        .unwrap()
    };
    let (seen, trail) = (partitions("profile_seen"), partitions("profile_trail"));
    eprintln!("partitions after 2,000 txids over 22 years: marks {seen}, trail {trail}");
    assert!(seen <= 8 && trail <= 8, "marks {seen}, trail {trail}");
    let trail_rows = tidemark_testkit::query_i64(
        &db.url,
        "SELECT count(*) FROM tidemark.profile_trail_events",
    );
    assert_eq!(
        trail_rows,
        Some(events),
        "every event counted keeps its trail entry"
    );
    let stale = profile_count(&db, "stale").unwrap_or(0);
    assert_eq!(stale, 0, "nothing stale before the first tick");
}

/// `quarantine_max` holds when link groups on several connections
/// quarantine at once (the second waits for the first's commit, then sees
/// its row), and an operator's open transaction on the table (a `DELETE`
/// not yet committed) holds no one up.
#[test]
fn quarantine_keeps_its_bound_across_connections_and_waits_for_no_operator() {
    use tidemark_profiles::store::quarantine;
    let db = TestDb::new("quarantine_lock");
    let url = db.url.clone();
    tidemark_testkit::block_on(async move {
        let connect = || tidemark_store::connect(&url);
        let (mut a, mut b, operator) = (
            connect().await.unwrap(),
            connect().await.unwrap(),
            connect().await.unwrap(),
        );
        operator
            .batch_execute("BEGIN; DELETE FROM tidemark.profile_quarantine WHERE false")
            .await
            .unwrap();
        let first = a.transaction().await.unwrap();
        let kept = tokio::time::timeout(
            Duration::from_secs(5),
            quarantine(&first, "click-a", "{}", "refused", Some("22P02"), 1),
        )
        .await
        .expect("not held up by the operator's transaction")
        .unwrap();
        assert!(kept);
        let second = b.transaction().await.unwrap();
        {
            let later = quarantine(&second, "click-b", "{}", "refused", Some("22P02"), 1);
            tokio::pin!(later);
            // It waits for the first transaction...
            assert!(tokio::time::timeout(Duration::from_millis(300), &mut later)
                .await
                .is_err());
            first.commit().await.unwrap();
            // ...then finds the table full.
            assert!(!later.await.unwrap());
        }
        second.commit().await.unwrap();
        operator.batch_execute("COMMIT").await.unwrap();
    });
}
