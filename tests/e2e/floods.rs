//! Floods of the largest messages allowed into each process, with its
//! consumers stalled (SPEC 12): every queue is bounded by configuration, so
//! peak resident memory stays under the bound docs/operations.md gives
//! ("Hostile input and bounds") while far more than that is offered.

use std::time::Duration;

use tidemark_testkit::{now_ms, wait_for, Proc, Reaped, TestDb};
use tidemark_wire::Txid;

/// The largest frame and libzmq's overhead on it, the `F` of the formulas.
const F: u64 = 65 * 1024;
const MIB: u64 = 1 << 20;

/// Peak resident memory of a process, from `/proc/<pid>/status` (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib * 1024
}

/// A flood of the largest messages allowed into a proxy whose only
/// subscriber has stalled: the proxy holds at most `--hwm` messages per
/// connection each way, so its peak memory stays under the bound
/// docs/operations.md gives (a base, plus connections × hwm × 64 KiB)
/// while far more than that passes through it.
#[test]
fn a_flood_into_a_stalled_proxy_stays_within_its_memory_bound() {
    let _heavy = tidemark_testkit::HEAVY.lock();
    let (front, back, metrics) = (
        tidemark_testkit::free_addr(),
        tidemark_testkit::free_addr(),
        tidemark_testkit::free_addr(),
    );
    let hwm = 200u64;
    let proxy = Reaped(
        tidemark_testkit::bin()
            .args(["proxy", "--frontend", &format!("tcp://{front}")])
            .args(["--backend", &format!("tcp://{back}")])
            .args(["--hwm", &hwm.to_string(), "--metrics-addr", &metrics])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ctx = zmq::Context::new();
    // Subscribes, then never reads: its queues fill, then the proxy's.
    let stalled = ctx.socket(zmq::SUB).unwrap();
    stalled.set_rcvhwm(10).unwrap();
    stalled.set_rcvbuf(64 * 1024).unwrap();
    stalled.connect(&format!("tcp://{back}")).unwrap();
    stalled.set_subscribe(b"bid-").unwrap();
    // Queues without limit on the test's side: every message reaches the proxy.
    let publ = ctx.socket(zmq::PUB).unwrap();
    publ.set_sndhwm(0).unwrap();
    publ.connect(&format!("tcp://{front}")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let base = peak_rss(proxy.0.id());
    let payload = vec![b' '; tidemark_wire::MAX_PAYLOAD];
    let topic = tidemark_wire::topic("bid", &Txid::new(1, now_ms() as u64));
    let messages = 20_000u64; // 1.3 GB through the proxy
    for _ in 0..messages {
        publ.send(topic.as_bytes(), zmq::SNDMORE).unwrap();
        publ.send(&payload, 0).unwrap();
    }
    wait_for("the proxy to read the whole flood", || {
        let t = tidemark_testkit::try_scrape(&metrics)?;
        let n = tidemark_testkit::metric(&t, r#"tidemark_proxy_messages_total{kind="bid"}"#)?;
        (n as u64 == messages).then_some(())
    });
    let peak = peak_rss(proxy.0.id());
    // Two connections (the publisher, the stalled shard), hwm each, plus a
    // margin for libzmq's batches: the bound docs/operations.md states.
    let per_message = tidemark_wire::MAX_PAYLOAD as u64 + 1024;
    let bound = 64 * 1024 * 1024 + 2 * hwm * per_message;
    eprintln!(
        "proxy peak RSS {} MiB (idle {} MiB, bound {} MiB) after {} MiB offered",
        peak >> 20,
        base >> 20,
        bound >> 20,
        (messages * per_message) >> 20
    );
    assert!(peak < bound, "peak {peak} over {bound}");
    assert!(
        messages * per_message > 10 * bound,
        "the flood dwarfs the bound"
    );
}

/// Holds `LOCK TABLE <tables> IN ACCESS EXCLUSIVE MODE` in a transaction of
/// its own until the returned sender is dropped or sent to.
fn hold_lock(
    url: &str,
    tables: &str,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (held_tx, held) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (url, sql) = (
        url.to_owned(),
        format!("LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE"),
    );
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = tidemark_store::connect(&url).await.unwrap();
            let t = c.transaction().await.unwrap();
            t.batch_execute(&sql).await.unwrap();
            held_tx.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || released.recv()).await;
            t.rollback().await.unwrap();
        });
    });
    held.recv().unwrap();
    (release, thread)
}

/// A bid of `size` bytes, padded in one feature.
fn big_bid(t: &Txid, ts: i64, size: usize) -> String {
    let head = format!(r#"{{"type":"bid","txid":"{t}","ts":{ts},"features":{{"pad":""#);
    let pad = size - head.len() - 3;
    format!("{head}{}\"}}}}", "x".repeat(pad))
}

/// A shard whose writer is stuck (its buffer locked, as a long migration
/// or a wedged disk would) flooded with the largest events allowed: intake
/// holds what its budgets allow (`rcvhwm`, `max_pending`,
/// `max_pending_bytes`, the chunk's byte budget), then, the writer stuck
/// past 10 s, reads on and drops the rest, counted; peak memory stays under
/// the documented bound while several times that is offered, and once the
/// lock goes every event accepted is written.
#[test]
fn a_flood_into_a_stuck_shard_stays_within_its_memory_bound() {
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let db = TestDb::new("flood_shard");
    let metrics = tidemark_testkit::free_addr();
    let (rcvhwm, max_pending, max_pending_bytes) = (100u64, 1000u64, 32 * MIB);
    let config = format!(
        "rcvhwm = {rcvhwm}\nmax_pending = {max_pending}\nmax_pending_bytes = {max_pending_bytes}\nmetrics_addr = \"{metrics}\"\n"
    );
    let ctx = zmq::Context::new();
    // Queues without limit on the test's side: every message reaches the shard.
    let publ = ctx.socket(zmq::XPUB).unwrap();
    publ.set_sndhwm(0).unwrap();
    publ.set_xpub_verbose(true).unwrap();
    publ.set_rcvtimeo(100).unwrap();
    publ.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = publ.get_last_endpoint().unwrap().unwrap();
    let mut shard = Proc::shard(&db, "f", &endpoint, &config);
    let mut subscribed = 0;
    while subscribed < 2 {
        if let Ok(m) = publ.recv_bytes(0) {
            subscribed += usize::from(m == b"\x01tick");
        }
    }
    let scrape = |series: &str| {
        let t = tidemark_testkit::try_scrape(&metrics)?;
        tidemark_testkit::metric(&t, series)
    };
    wait_for("the shard's metrics", || {
        scrape("process_resident_memory_bytes")
    });
    let (release, holder) = hold_lock(&db.url, "shard_f.events, shard_f.txns");
    let base = peak_rss(shard.child.id());
    let now = now_ms();
    let messages = 30_000u64; // 1.9 GB
    for n in 0..messages {
        let t = Txid::new(u128::from(n), now as u64);
        let bid = big_bid(&t, now, tidemark_wire::MAX_PAYLOAD);
        publ.send_multipart([format!("bid-{t}").as_bytes(), bid.as_bytes()], 0)
            .unwrap();
    }
    let received = r#"tidemark_shard_received_events_total{shard="f",type="bid"}"#;
    let dropped = r#"tidemark_shard_dropped_overflow_total{shard="f"}"#;
    let (kept, lost) = wait_for("the whole flood read", || {
        std::thread::sleep(Duration::from_millis(200));
        let (r, d) = (
            scrape(received)? as u64,
            scrape(dropped).unwrap_or(0.0) as u64,
        );
        (r + d == messages).then_some((r, d))
    });
    let peak = peak_rss(shard.child.id());
    // docs/operations.md: 100 MiB + 2 sockets x C x rcvhwm x F + 2 x
    // (max_pending_bytes + a chunk) + (max(max_pending / 2048, 4) + 1) chunks,
    // a chunk being at most 8 MiB + 2F.
    let chunk = 8 * MIB + 2 * F;
    let chunks = (max_pending / 2048).max(4) + 1;
    let bound = 100 * MIB + 2 * rcvhwm * F + 2 * (max_pending_bytes + chunk) + chunks * chunk;
    eprintln!(
        "shard peak RSS {} MiB (idle {} MiB, bound {} MiB) after {} MiB offered: {kept} kept, {lost} dropped",
        peak / MIB,
        base / MIB,
        bound / MIB,
        messages * F / MIB
    );
    assert!(peak < bound, "peak {peak} over {bound}");
    assert!(messages * F > 5 * bound, "the flood dwarfs the bound");
    assert!(lost > 0, "the stuck writer made intake drop");
    drop(release);
    holder.join().unwrap();
    shard.stop();
    let written = tidemark_testkit::query_i64(&db.url, "SELECT count(*) FROM shard_f.events");
    assert_eq!(
        written,
        Some(kept as i64),
        "every event accepted is written"
    );
}

/// A profile process whose database is stuck (its first-copy marks
/// locked) flooded with the largest events allowed: it takes what its
/// budgets allow (`rcvhwm`, `max_pending_bytes`, the chunk's byte budget)
/// and then holds back, so the rest waits in the sender's queue; peak
/// memory stays under the documented bound, and once the lock goes every
/// event is applied.
#[test]
fn a_flood_into_a_stuck_profile_process_stays_within_its_memory_bound() {
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let db = TestDb::new("flood_profiles");
    let (rcvhwm, max_pending_bytes) = (100u64, 32 * MIB);
    let config =
        format!("clock = \"wall\"\nrcvhwm = {rcvhwm}\nmax_pending_bytes = {max_pending_bytes}\n");
    let ctx = zmq::Context::new();
    let publ = ctx.socket(zmq::XPUB).unwrap();
    publ.set_sndhwm(0).unwrap();
    publ.set_xpub_verbose(true).unwrap();
    publ.set_rcvtimeo(100).unwrap();
    publ.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = publ.get_last_endpoint().unwrap().unwrap();
    let mut proc = Proc::profiles(&db, "flood", &endpoint, &config);
    let mut subscribed = 0;
    while subscribed < 2 {
        if let Ok(m) = publ.recv_bytes(0) {
            subscribed += usize::from(m == b"\x01tick");
        }
    }
    // Applied counts only come with a batch: one small event first, so the
    // tables exist and a count is there to read.
    let applied = || {
        tidemark_testkit::query_i64(
            &db.url,
            "SELECT sum(n)::bigint FROM tidemark.profile_counts WHERE reason = 'applied'",
        )
    };
    let now = now_ms();
    let send = |n: u64, size: usize| {
        let t = Txid::new(u128::from(n), now as u64);
        let head =
            format!(r#"{{"type":"impression","txid":"{t}","ts":{now},"user":"u{n}","pad":""#);
        let pad = size.saturating_sub(head.len() + 2);
        let payload = format!("{head}{}\"}}", "x".repeat(pad));
        publ.send_multipart(
            [format!("impression-{t}").as_bytes(), payload.as_bytes()],
            0,
        )
        .unwrap();
    };
    send(0, 100);
    wait_for("the first event applied", || {
        (applied()? == 1).then_some(())
    });
    let (release, holder) = hold_lock(&db.url, "tidemark.profile_seen");
    let base = peak_rss(proc.child.id());
    let messages = 30_000u64; // 1.9 GB
    for n in 1..=messages {
        send(n, tidemark_wire::MAX_PAYLOAD);
    }
    // Long enough for every queue of the process to fill while stuck.
    std::thread::sleep(Duration::from_secs(5));
    let stuck = peak_rss(proc.child.id());
    drop(release);
    holder.join().unwrap();
    wait_for("every event applied", || {
        std::thread::sleep(Duration::from_millis(200));
        (applied()? == 1 + messages as i64).then_some(())
    });
    let peak = peak_rss(proc.child.id());
    proc.stop();
    // docs/operations.md: 100 MiB + 2 sockets x C x rcvhwm x F + 2 x
    // max_pending_bytes + 18 chunks of at most 4 MiB + 2F.
    let bound = 100 * MIB + 2 * rcvhwm * F + 2 * max_pending_bytes + 18 * (4 * MIB + 2 * F);
    eprintln!(
        "profile process peak RSS {} MiB (idle {} MiB, stuck {} MiB, bound {} MiB) after {} MiB offered, all applied",
        peak / MIB,
        base / MIB,
        stuck / MIB,
        bound / MIB,
        messages * F / MIB
    );
    assert!(peak < bound, "peak {peak} over {bound}");
    assert!(messages * F > 5 * bound, "the flood dwarfs the bound");
}
