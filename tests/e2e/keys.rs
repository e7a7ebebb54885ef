//! CURVE keys (SPEC 2, 7) on real processes and sockets: only listed keys
//! get in, ticks count only under the names listed with their keys, and
//! nobody without the fleet's key reads what publishers send, whether
//! publishers reach shards directly or through a keyed `tidemark proxy`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tidemark_testkit::exact::counter;
use tidemark_testkit::{query_rows, wait_for, Proc, Reaped, TestDb, GUARDED_CLOCK};
use tidemark_wire::Txid;

const BID: &str = r#""features":{"app":"a"}"#;
const T0: i64 = 1_700_000_000_000;

fn tick(name: &str, ts: i64) -> String {
    format!(r#"{{"type":"tick","publisher":"{name}","ts":{ts}}}"#)
}

fn bid(t: &Txid) -> String {
    format!(r#"{{"type":"bid","txid":"{t}","ts":{T0},{BID}}}"#)
}

fn send(s: &zmq::Socket, topic: &str, payload: &str) {
    s.send_multipart([topic.as_bytes(), payload.as_bytes()], 0)
        .unwrap();
}

/// A fresh directory for one test's key files.
fn key_dir(test: &str) -> PathBuf {
    let dir = tidemark_testkit::tmp_dir().join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `tidemark keys new DIR/NAME`: the secret key file and the public key.
fn new_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let file = dir.join(name);
    let out = tidemark_testkit::bin()
        .args(["keys", "new"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let public = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(
        std::fs::read_to_string(dir.join(format!("{name}.pub")))
            .unwrap()
            .trim(),
        public
    );
    (file, public)
}

/// An XPUB publisher speaking CURVE as `own` to a server whose public key
/// is `server`, binding (`None`) or connecting to `connect`; returns it and
/// the endpoint it bound.
fn curve_publisher(
    ctx: &zmq::Context,
    server: &[u8; 32],
    own: &zmq::CurveKeyPair,
    connect: Option<&str>,
) -> (zmq::Socket, String) {
    let s = ctx.socket(zmq::XPUB).unwrap();
    s.set_curve_serverkey(server).unwrap();
    s.set_curve_publickey(&own.public_key).unwrap();
    s.set_curve_secretkey(&own.secret_key).unwrap();
    s.set_xpub_verbose(true).unwrap();
    s.set_rcvtimeo(100).unwrap();
    let endpoint = match connect {
        Some(ep) => {
            s.connect(ep).unwrap();
            ep.to_owned()
        }
        None => {
            s.bind("tcp://127.0.0.1:*").unwrap();
            s.get_last_endpoint().unwrap().unwrap()
        }
    };
    (s, endpoint)
}

/// How many tick subscriptions a publisher sees before `until`.
fn ticks_subscribed(s: &zmq::Socket, until: Instant, want: usize) -> usize {
    let mut ticks = 0;
    while Instant::now() < until && ticks < want {
        if let Ok(m) = s.recv_bytes(0) {
            ticks += usize::from(m == b"\x01tick");
        }
    }
    ticks
}

fn soon(seconds: u64) -> Instant {
    Instant::now() + Duration::from_secs(seconds)
}

/// The txids of the bids a shard holds, sorted.
fn buffered_bids(db: &TestDb, shard: &str) -> Vec<String> {
    let sql = format!("SELECT txid FROM shard_{shard}.events WHERE type = 'bid' ORDER BY txid");
    query_rows(&db.url, &sql)
        .into_iter()
        .filter_map(|r| r[0].clone())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// With `[curve]`, only listed keys get in (an unlisted publisher's
/// handshake fails: not even its subscriptions arrive, and nothing it sends
/// reaches the buffer), and a listed publisher's ticks count only under its
/// own name (`foreign_tick` otherwise).
#[test]
fn with_keys_only_listed_publishers_get_in_and_ticks_carry_their_names() {
    let db = TestDb::new("curve");
    let dir = key_dir("curve");
    let (fleet_file, fleet_public) = new_key(&dir, "fleet.key");
    let fleet = tidemark_intake::curve::parse_key(&fleet_public).unwrap();
    let (alice, bob) = (
        zmq::CurveKeyPair::new().unwrap(),
        zmq::CurveKeyPair::new().unwrap(),
    );
    let ctx = zmq::Context::new();
    let (listed, listed_ep) = curve_publisher(&ctx, &fleet, &alice, None);
    let (unlisted, unlisted_ep) = curve_publisher(&ctx, &fleet, &bob, None);
    let config = format!(
        "{GUARDED_CLOCK}\n[curve]\nsecret_key_file = \"{}\"\n[[curve.publishers]]\nname = \"alice\"\npublic_key = \"{}\"\n",
        fleet_file.display(),
        zmq::z85_encode(&alice.public_key).unwrap()
    );
    let mut shard = Proc::shard_multi(&db, "k", &[&listed_ep, &unlisted_ep], &config);
    assert_eq!(
        ticks_subscribed(&listed, soon(20), 2),
        2,
        "the listed publisher's handshake"
    );
    assert_eq!(
        ticks_subscribed(&unlisted, soon(2), 2),
        0,
        "no handshake for an unlisted key"
    );
    send(&listed, "tick", &tick("alice", T0));
    let mut sent = Vec::new();
    for n in 0..5u128 {
        let t = Txid::new(n, T0 as u64);
        send(&listed, &format!("bid-{t}"), &bid(&t));
        sent.push(t.to_string());
        let other = Txid::new(100 + n, T0 as u64);
        send(&unlisted, &format!("bid-{other}"), &bid(&other));
    }
    // A listed key ticking under another name, far ahead: refused.
    send(&listed, "tick", &tick("mallory", T0 + 60_000));
    wait_for("alice's bids and the foreign ticks counted", || {
        send(&listed, "tick", &tick("alice", T0 + 1_000));
        std::thread::sleep(Duration::from_millis(100));
        (counter(&db, "k", "received_bid") == 5 && counter(&db, "k", "foreign_tick") == 2)
            .then_some(())
    });
    shard.stop();
    assert_eq!(
        counter(&db, "k", "received_bid"),
        5,
        "none of the unlisted key's"
    );
    assert_eq!(counter(&db, "k", "foreign_tick"), 2, "one per socket");
    assert_eq!(buffered_bids(&db, "k"), sorted(sent), "alice's, row by row");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Messages a subscriber got, waiting `ms` for the first.
fn drain(s: &zmq::Socket, ms: i32) -> usize {
    s.set_rcvtimeo(ms).unwrap();
    let mut n = 0;
    while s.recv_bytes(0).is_ok() {
        n += 1;
        s.set_rcvtimeo(0).unwrap();
    }
    n
}

/// Publishers reach the fleet through a keyed proxy: the proxy lets in only
/// the keys it lists (`tidemark publish` with its keys, and a raw CURVE
/// socket), passes their ticks on only under their listed names (a listed
/// key ticking as another: dropped and counted at the proxy, never reaching
/// the shard), and is itself listed by the shard as a forwarder. Nobody
/// without the fleet's secret key reads the proxy's output: a subscriber
/// with a wrong key and a plain one get nothing.
#[test]
fn a_keyed_proxy_lets_in_listed_publishers_and_passes_ticks_only_under_their_names() {
    let db = TestDb::new("keyproxy");
    let dir = key_dir("keyproxy");
    let (fleet_file, _) = new_key(&dir, "fleet.key");
    let (proxy_file, proxy_public) = new_key(&dir, "proxy.key");
    let (alice_file, alice_public) = new_key(&dir, "alice.key");
    let (carol, bob, eve) = (
        zmq::CurveKeyPair::new().unwrap(),
        zmq::CurveKeyPair::new().unwrap(),
        zmq::CurveKeyPair::new().unwrap(),
    );
    let list = dir.join("publishers.toml");
    let entry = |name: &str, key: &str| {
        format!("[[publishers]]\nname = \"{name}\"\npublic_key = \"{key}\"\n")
    };
    let carol_public = zmq::z85_encode(&carol.public_key).unwrap();
    std::fs::write(
        &list,
        entry("alice", &alice_public) + &entry("carol", &carol_public),
    )
    .unwrap();
    let (front, back, metrics) = (
        format!("tcp://{}", tidemark_testkit::free_addr()),
        format!("tcp://{}", tidemark_testkit::free_addr()),
        tidemark_testkit::free_addr(),
    );
    let _proxy = Reaped(
        tidemark_testkit::bin()
            .args(["proxy", "--frontend", &front, "--backend", &back])
            .args(["--metrics-addr", &metrics, "--curve-secret-key"])
            .arg(&proxy_file)
            .arg("--curve-server-key")
            .arg(dir.join("fleet.key.pub"))
            .arg("--curve-publishers")
            .arg(&list)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let config = format!(
        "{GUARDED_CLOCK}\n[curve]\nsecret_key_file = \"{}\"\n[[curve.publishers]]\nname = \"proxy-eu\"\npublic_key = \"{proxy_public}\"\nforwarder = true\n",
        fleet_file.display()
    );
    let mut shard = Proc::shard(&db, "x", &back, &config);
    let ctx = zmq::Context::new();
    // Readers of the proxy's output without the fleet's secret key.
    let wrong = ctx.socket(zmq::SUB).unwrap();
    wrong.set_curve_server(true).unwrap();
    wrong.set_curve_secretkey(&eve.secret_key).unwrap();
    let plain = ctx.socket(zmq::SUB).unwrap();
    for s in [&wrong, &plain] {
        s.set_subscribe(b"").unwrap();
        s.connect(&back).unwrap();
    }
    let proxy_key = tidemark_intake::curve::parse_key(&proxy_public).unwrap();
    let (listed, _) = curve_publisher(&ctx, &proxy_key, &carol, Some(&front));
    let (unlisted, _) = curve_publisher(&ctx, &proxy_key, &bob, Some(&front));
    assert_eq!(
        ticks_subscribed(&listed, soon(30), 1),
        1,
        "the shard's subscriptions reach a listed publisher through the proxy"
    );
    assert_eq!(
        ticks_subscribed(&unlisted, soon(2), 1),
        0,
        "no handshake for an unlisted key"
    );
    let mut sent = Vec::new();
    send(&listed, "tick", &tick("carol", T0));
    for n in 0..5u128 {
        let t = Txid::new(n, T0 as u64);
        send(&listed, &format!("bid-{t}"), &bid(&t));
        sent.push(t.to_string());
        let other = Txid::new(100 + n, T0 as u64);
        send(&unlisted, &format!("bid-{other}"), &bid(&other));
    }
    // A listed key ticking as another listed publisher, far ahead.
    send(&listed, "tick", &tick("alice", T0 + 60_000));
    // `tidemark publish` with its own keys, through the proxy.
    let replay = dir.join("alice.jsonl");
    let alice_bids: Vec<Txid> = (200..205u128).map(|n| Txid::new(n, T0 as u64)).collect();
    let lines: String = alice_bids.iter().map(|t| bid(t) + "\n").collect();
    std::fs::write(&replay, lines).unwrap();
    sent.extend(alice_bids.iter().map(Txid::to_string));
    let out = tidemark_testkit::bin()
        .args([
            "publish",
            "--connect",
            &front,
            "--name",
            "alice",
            "--speed",
            "0",
        ])
        .args(["--warmup", "3s", "--drain", "20s", "--replay"])
        .arg(&replay)
        .arg("--curve-secret-key")
        .arg(&alice_file)
        .arg("--curve-server-key")
        .arg(dir.join("proxy.key.pub"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let refused = |reason: &str| {
        let text = tidemark_testkit::try_scrape(&metrics)?;
        tidemark_testkit::metric(
            &text,
            &format!("tidemark_proxy_refused_total{{reason=\"{reason}\"}}"),
        )
    };
    wait_for("both publishers' bids at the shard", || {
        send(&listed, "tick", &tick("carol", T0 + 1_000));
        std::thread::sleep(Duration::from_millis(100));
        (counter(&db, "x", "received_bid") == 10).then_some(())
    });
    assert_eq!(refused("foreign_tick"), Some(1.0), "carol's tick as alice");
    assert!(
        refused("unlisted_key").is_some_and(|n| n >= 1.0),
        "bob's handshakes"
    );
    shard.stop();
    assert_eq!(counter(&db, "x", "received_bid"), 10, "none of bob's");
    assert_eq!(counter(&db, "x", "foreign_tick"), 0, "the proxy dropped it");
    assert_eq!(buffered_bids(&db, "x"), sorted(sent), "row by row");
    assert_eq!(drain(&wrong, 500), 0, "a wrong fleet key reads nothing");
    assert_eq!(drain(&plain, 0), 0, "no key reads nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A listed publisher may move the event clock as far as it likes, a step
/// of at most `max_future` at a time (SPEC 6 trusts listed publishers): its
/// ticks are accepted, and the transactions it overtakes are labelled
/// early (a click still on its way arrives late and counts nothing). The
/// threat model in docs/operations.md names this cost of a stolen key.
#[test]
fn a_listed_publisher_ratcheting_its_own_clock_is_trusted() {
    let db = TestDb::new("ratchet");
    let dir = key_dir("ratchet");
    let (fleet_file, fleet_public) = new_key(&dir, "fleet.key");
    let fleet = tidemark_intake::curve::parse_key(&fleet_public).unwrap();
    let alice = zmq::CurveKeyPair::new().unwrap();
    let ctx = zmq::Context::new();
    let (publ, ep) = curve_publisher(&ctx, &fleet, &alice, None);
    let config = format!(
        "{GUARDED_CLOCK}\n[curve]\nsecret_key_file = \"{}\"\n[[curve.publishers]]\nname = \"alice\"\npublic_key = \"{}\"\n",
        fleet_file.display(),
        zmq::z85_encode(&alice.public_key).unwrap()
    );
    let mut shard = Proc::shard(&db, "r", &ep, &config);
    assert_eq!(ticks_subscribed(&publ, soon(20), 2), 2);
    let t = Txid::new(1, T0 as u64);
    send(&publ, "tick", &tick("alice", T0));
    send(&publ, &format!("bid-{t}"), &bid(&t));
    let imp = format!(r#"{{"type":"impression","txid":"{t}","ts":{}}}"#, T0 + 100);
    send(&publ, &format!("impression-{t}"), &imp);
    wait_for("the impression", || {
        (counter(&db, "r", "received_impression") == 1).then_some(())
    });
    // Steps of 5 minutes, each within max_future (10m) of the last: an hour.
    let end = T0 + 3_600_000;
    for step in 1..=12 {
        send(&publ, "tick", &tick("alice", T0 + step * 300_000));
        std::thread::sleep(Duration::from_millis(150));
    }
    tidemark_testkit::exact::wait_swept(&db, "r", end, Duration::from_secs(30));
    let click = format!(r#"{{"type":"click","txid":"{t}","ts":{}}}"#, T0 + 10_000);
    // Counters reach the database as the clock moves: a millisecond a turn.
    let mut now = end;
    wait_for("the overtaken click counted late", || {
        send(&publ, &format!("click-{t}"), &click);
        now += 1;
        send(&publ, "tick", &tick("alice", now));
        std::thread::sleep(Duration::from_millis(100));
        (counter(&db, "r", "late_click") >= 1).then_some(())
    });
    shard.stop();
    assert_eq!(counter(&db, "r", "future_tick"), 0, "every step accepted");
    let label = tidemark_testkit::query_i64(
        &db.url,
        &format!(
            "SELECT label::bigint FROM tidemark.observations \
             WHERE shard = 'r' AND target = 'ctr' AND txid = '{t}'"
        ),
    );
    assert_eq!(label, Some(0), "swept before its click arrived");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The profile process reads through the same intake: with `[curve]`, an
/// unlisted key's events never reach a profile, a listed key's are applied.
#[test]
fn with_keys_a_profile_process_applies_only_listed_publishers() {
    let db = TestDb::new("curve_profiles");
    let dir = key_dir("curve_profiles");
    let (fleet_file, fleet_public) = new_key(&dir, "fleet.key");
    let fleet = tidemark_intake::curve::parse_key(&fleet_public).unwrap();
    let (alice, bob) = (
        zmq::CurveKeyPair::new().unwrap(),
        zmq::CurveKeyPair::new().unwrap(),
    );
    let ctx = zmq::Context::new();
    let (listed, listed_ep) = curve_publisher(&ctx, &fleet, &alice, None);
    let (unlisted, unlisted_ep) = curve_publisher(&ctx, &fleet, &bob, None);
    let config = format!(
        "clock = \"wall\"\nbatch_delay = \"50ms\"\n[curve]\nsecret_key_file = \"{}\"\n[[curve.publishers]]\nname = \"alice\"\npublic_key = \"{}\"\n",
        fleet_file.display(),
        zmq::z85_encode(&alice.public_key).unwrap()
    );
    let mut proc = Proc::profiles_multi(&db, "kp", &[&listed_ep, &unlisted_ep], &config);
    assert_eq!(ticks_subscribed(&listed, soon(20), 2), 2);
    assert_eq!(ticks_subscribed(&unlisted, soon(2), 2), 0);
    let now = tidemark_testkit::now_ms();
    for n in 0..5u128 {
        for (s, who) in [(&listed, "a"), (&unlisted, "b")] {
            let t = Txid::new(n + if who == "a" { 0 } else { 100 }, now as u64);
            let imp =
                format!(r#"{{"type":"impression","txid":"{t}","ts":{now},"user":"{who}{n}"}}"#);
            send(s, &format!("impression-{t}"), &imp);
        }
    }
    let count = |sql: &str| tidemark_testkit::query_i64(&db.url, sql);
    let applied = "SELECT sum(n)::bigint FROM tidemark.profile_counts WHERE reason = 'applied'";
    wait_for("alice's events applied", || {
        (count(applied)? == 5).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    proc.stop();
    assert_eq!(count(applied), Some(5), "none of the unlisted key's");
    let ids = "SELECT count(*) FROM tidemark.profile_ids WHERE id LIKE 'user:b%'";
    assert_eq!(
        count(ids),
        Some(0),
        "no profile for an unlisted key's users"
    );
    let ids = "SELECT count(*) FROM tidemark.profile_ids WHERE id LIKE 'user:a%'";
    assert_eq!(count(ids), Some(5));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keys handled with care (SPEC 2): a proxy that would forward unchecked
/// publishers to shards that trust it refuses to start unless told to, and
/// a secret key its group or others can read is refused, the fix named.
#[test]
fn a_proxy_refuses_to_forward_unchecked_publishers_and_open_secret_keys() {
    use std::os::unix::fs::PermissionsExt;
    let dir = key_dir("keycare");
    let (proxy_key, _) = new_key(&dir, "proxy.key");
    let (fleet_key, _) = new_key(&dir, "fleet.key");
    let _ = fleet_key;
    let fleet_pub = dir.join("fleet.key.pub");
    let proxy = |extra: &[&str]| {
        tidemark_testkit::bin()
            .args([
                "proxy",
                "--backend",
                "tcp://127.0.0.1:1",
                "--curve-secret-key",
            ])
            .arg(&proxy_key)
            .arg("--curve-server-key")
            .arg(&fleet_pub)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = proxy(&[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{said}");
    assert!(
        said.contains("--curve-publishers") && said.contains("--open-publishers"),
        "{said}"
    );

    std::fs::set_permissions(&proxy_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = proxy(&["--open-publishers"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{said}");
    assert!(said.contains("chmod 600"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
