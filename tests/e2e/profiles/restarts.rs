//! Restarts never stall (SPEC 12, v1.3): a process killed with `kill -9`
//! and started again at once, twenty times in a row, starts every time
//! (waiting out its predecessor's session within `lock_grace` instead of
//! refusing), and what it serves is exact.

use tidemark_testkit::profiles::*;
use tidemark_testkit::*;

#[test]
fn a_profile_process_killed_twenty_times_and_restarted_at_once_loses_nothing() {
    let config = config();
    let db = TestDb::new("profiles_kill20");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "prof", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    // Copies made identical: a kill followed by more publishing makes a
    // later copy the first received (`identical_copies`); first copies
    // that differ are tested without kills in profiles.rs.
    let messages = identical_copies(stream(now as u64 ^ 0x20, 4000, now));
    let oracle = oracle(config, &messages, now);
    let mut subscriptions = 2;
    let mut rng = now as u64 | 1;
    for k in 0..20 {
        let part = &messages[k * messages.len() / 20..(k + 1) * messages.len() / 20];
        publish(&mut publisher, part);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(std::time::Duration::from_millis(rng % 150));
        proc.kill9();
        // At once: its predecessor's session may still hold the lock.
        proc.restart();
        subscriptions += 2;
        // It subscribes only once started (lock taken, tables read).
        publisher.wait_subscribed("tick", subscriptions);
    }
    // Publishers replay: everything again. What was committed is a
    // duplicate now; what was lost counts once.
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence_kill20", now);
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
    proc.stop();
    let started = proc.log().matches("profile process started").count();
    assert_eq!(started, 21, "every start succeeded");
}

/// The case that kept a process down for good: its session blocked on a
/// row an operator's idle transaction holds, the process killed (by the
/// watchdog, here by `kill -9`) and started again at once. The dead
/// process's session still holds the profile lock while it waits; the new
/// one waits it out within `lock_grace` (the server ends that session once
/// it sees its client gone), then waits for the row as long as the operator
/// holds it, and applies everything once the transaction ends.
#[test]
fn a_restart_waits_out_a_predecessor_blocked_behind_an_operator() {
    let config = config();
    let db = TestDb::new("profiles_blocked");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "prof", &publisher.endpoint, &config);
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let messages = stream(now as u64 ^ 0xb10c, 2000, now);
    let oracle = oracle(config, &messages, now);
    publish(&mut publisher, &messages[..1000]);
    fence(&mut publisher, &db.url, "fence_blocked_1", now);

    // The operator's transaction, left idle holding the process's row.
    let operator = Operator::begin(&db.url, "SELECT * FROM tidemark.profile_process FOR UPDATE");
    let old = wait_for("the process's session waiting for the row", || {
        query_i64(
            &db.url,
            "SELECT min(pid)::bigint FROM pg_stat_activity
             WHERE application_name LIKE 'tidemark profiles prof: links%' AND wait_event_type = 'Lock'",
        )
    });
    proc.kill9();
    let killed = std::time::Instant::now();
    proc.restart();
    // The dead process's session ends while the operator still holds the
    // row: the server checks its client every 2 s (SPEC 12).
    let gone = || {
        query_i64(
            &db.url,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {old}"),
        ) == Some(0)
    };
    while !gone() && killed.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        gone(),
        "the dead process's session outlived its client by 5 s"
    );
    std::thread::sleep(std::time::Duration::from_secs(6).saturating_sub(killed.elapsed()));
    operator.commit();
    publisher.wait_subscribed("tick", 4);
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence_blocked_2", now);
    compare(&db.url, &oracle, &messages, now);
    proc.stop();
    let log = proc.log();
    assert_eq!(log.matches("profile process started").count(), 2, "{log}");
}
