//! Staleness fixed at acceptance (SPEC 11, v1.3): an event a profile
//! process accepted in time is applied however long the database then
//! keeps it waiting, row by row against the reference.

use tidemark_reference::profiles::Profiles;
use tidemark_testkit::profiles::*;
use tidemark_testkit::*;
use tidemark_wire::Txid;

/// The tests' profile configuration, impressions remembered 20 s only: a
/// wait of 30 s outlasts the horizon of every impression it holds.
fn held() -> config::Config {
    config().set("dedup.impression", "20s")
}

/// Impressions and clicks of 60 persons, created within the last 8 s of
/// `now`, a tenth sent twice.
fn fresh(now: i64, n: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for i in 0..n {
        let t = if i % 4 == 3 { "click" } else { "impression" };
        let created = now - (i as i64 % 8) * 1000;
        let tx = Txid::new(0x0005_7a1e_0000_0000 + i as u128, created as u64);
        let m = (
            format!("{t}-{}", tx.as_str()),
            format!(
                r#"{{"type": "{t}", "txid": "{}", "ts": {created}, "user": "s{}"}}"#,
                tx.as_str(),
                i % 60
            ),
        );
        if i % 10 == 0 {
            out.push(m.clone());
        }
        out.push(m);
    }
    out
}

#[test]
fn events_held_by_a_locked_database_past_their_horizon_are_all_applied() {
    let config = held();
    let db = TestDb::new("stale_held");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "held", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    fence(&mut publisher, &db.url, "held_before", now_ms());

    // An operator's transaction holds the table every event's first copy is
    // marked in: nothing can be applied while it lasts.
    let operator = Operator::begin(
        &db.url,
        "LOCK TABLE tidemark.profile_seen IN EXCLUSIVE MODE",
    );
    let now = now_ms();
    let messages = fresh(now, 2400);
    // Several batches' worth (`batch_events` 700): the first is judged at
    // once, the others only once the database lets go. The reference takes
    // each event at the clock it was accepted at: `now`.
    let oracle = oracle(&config, &messages, now);
    publish(&mut publisher, &messages);
    // Held past the impressions' 20-s horizon, then let go.
    std::thread::sleep(std::time::Duration::from_secs(30));
    operator.commit();
    fence(&mut publisher, &db.url, "held_after", now_ms());
    all_applied(&db.url, &oracle, &messages, now);
    proc.stop();
}

/// The same under the event clock, the server stopped rather than locked,
/// and ticks still arriving: the clock runs three hours past every
/// impression's horizon while the events wait, and each was accepted in
/// time, so each is applied once the server is back.
#[test]
fn events_held_by_a_stopped_server_under_the_event_clock_are_all_applied() {
    // A cluster of its own: stopping the shared one would disturb other tests.
    let home = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("stale-home");
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    run_ok(&["db", "up", "--home", home.to_str().unwrap()]);
    let db = TestDb::external("stale_stopped", &cluster.url());
    let config =
        (config().set("clock", "event").set("lateness", "0s")).set("dedup.impression", "20m");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "stopped", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    let t0 = now_ms();
    publisher.tick(t0);
    fence(&mut publisher, &db.url, "stopped_before", t0);

    cluster.down().unwrap();
    let messages = fresh(t0, 2400);
    // Accepted at the clock of the tick before them: t0.
    let oracle = oracle(&config, &messages, t0);
    publish(&mut publisher, &messages);
    std::thread::sleep(std::time::Duration::from_secs(2));
    // Three hours of event time while the server is away.
    let later = t0 + 3 * HOUR;
    publisher.tick_steps(t0, later);
    std::thread::sleep(std::time::Duration::from_secs(5));
    cluster.up(None).unwrap();
    fence(&mut publisher, &db.url, "stopped_after", later);
    all_applied(&db.url, &oracle, &messages, t0);
    proc.stop();
    drop(db);
    cluster.destroy().unwrap();
}

/// Every event the run accepted applied, row by row against the reference
/// at `now`, none counted stale.
fn all_applied(url: &str, oracle: &Profiles, messages: &[(String, String)], now: i64) {
    compare(url, oracle, messages, now);
    let stale = query_i64(
        url,
        "SELECT coalesce(sum(n), 0)::bigint FROM tidemark.profile_counts WHERE reason = 'stale'",
    );
    assert_eq!(stale, Some(0), "nothing accepted in time is stale");
    assert_eq!(oracle.counts()["applied"], 2400);
}
