//! Failover of the profile database (issue 24): the profile process writes
//! through a libpq host list, the primary first and its hot standby second,
//! `target_session_attrs=read-write`. The standby replays part A and is
//! stopped; part B is committed on the primary alone; the primary dies and
//! the standby is promoted. B is gone with the old primary, as asynchronous
//! replication allows (docs/operations.md). The process must find the new
//! primary through the host list, forget what it read on the old one (the
//! persons its workers cache, the placements of its link stage) and apply
//! part C on what the new primary holds: every row equal to the reference's
//! over A then C. A process that trusted its memory would carry B's counts,
//! persons and merges into the new primary.

use tidemark_testkit::profiles::*;
use tidemark_testkit::*;

/// Both servers in one connection string, writers finding the primary.
fn host_list(primary: &str, standby: &str) -> String {
    let param = |url: &str, key: &str| -> String {
        url.split(['?', '&'])
            .find_map(|p| p.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} in {url}"))
            .to_owned()
    };
    let (host, port) = (
        format!("{},{}", param(primary, "host"), param(standby, "host")),
        format!("{},{}", param(primary, "port"), param(standby, "port")),
    );
    let base = primary.split('?').next().unwrap();
    format!("{base}?host={host}&port={port}&target_session_attrs=read-write")
}

/// An event for `user:<user>` created and made three days before `now`.
fn event_days_back(kind: &str, user: &str, now: i64, random: u128) -> (String, String) {
    let at = now - 3 * 86_400_000;
    let tx = tidemark_wire::Txid::new(0xda7_0000 + random, at as u64);
    let mut payload = String::new();
    tidemark_wire::event_payload(&mut payload, kind, &tx, at, &format!(r#""user": "{user}""#));
    (tidemark_wire::topic(kind, &tx), payload)
}

#[test]
fn a_promoted_standby_that_missed_commits_is_written_as_it_stands() {
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let cluster = own_cluster("profiles-failover-home", true);
    let h = cluster.home().to_str().unwrap();
    let (primary, standby) = (cluster.url(), cluster.standby().url());
    let db = TestDb::external("profiles_failover", &host_list(&primary, &standby));
    let mut publisher = Publisher::new();
    let mut proc = ShardProc::start_profiles(&db, "failover", &publisher.endpoint, LINKS);
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    let messages = link_stream(now as u64 ^ 0xfa11, 3000, now);
    let third = messages.len() / 3;
    let (a, b, c) = (
        &messages[..third],
        &messages[third..2 * third],
        &messages[2 * third..],
    );
    publish(&mut publisher, a);
    fence(&mut publisher, &db.url, "fo_a", now);
    let lsn = query_rows(&primary, "SELECT pg_current_wal_lsn()::text")[0][0]
        .clone()
        .unwrap();
    let replayed = format!("SELECT (pg_last_wal_replay_lsn() >= '{lsn}')::text");
    wait_for("the standby to replay part A", || {
        (query_rows(&standby, &replayed)[0][0].as_deref() == Some("true")).then_some(())
    });
    run_ok(&["db", "down", "--standby", "--home", h]);

    // B and C each bring an event of a day A has none of: its mark and
    // trail partitions made for B on the old primary are not on the new.
    let day_b = [event_days_back("impression", "lost_day_b", now, 1)];
    publish(&mut publisher, b);
    publish(&mut publisher, &day_b);
    fence(&mut publisher, &db.url, "fo_b", now);
    let count_ids = "SELECT count(*) FROM tidemark.profile_ids";
    let ids_with_b = query_i64(&primary, count_ids).unwrap();
    cluster.crash().unwrap();
    cluster.standby().promote().unwrap();
    let ids_without_b = query_i64(&standby, count_ids).unwrap();
    assert!(
        ids_without_b < ids_with_b,
        "the promoted standby missed part B: {ids_without_b} identifiers, the old primary {ids_with_b}"
    );

    let day_c = [event_days_back("impression", "lost_day_c", now, 2)];
    publish(&mut publisher, &day_c);
    publish(&mut publisher, c);
    fence(&mut publisher, &db.url, "fo_c", now);
    let kept: Vec<_> = a.iter().chain(&day_c).chain(c).cloned().collect();
    let oracle = oracle(LINKS, &kept, now);
    // Across the two sockets the order is unknown: masters as they stood
    // in the log are not compared (as after kill -9).
    compare_links(&standby, &oracle, &kept, now, false);
    // The registration (`profile_status` reads it) names the process's
    // backend on the new primary, not one of the old.
    let registered = "SELECT count(*) FROM tidemark.profile_process p
         JOIN pg_stat_activity a ON a.pid = p.pid
         WHERE p.name = 'failover' AND a.application_name = 'tidemark profiles failover: links'";
    assert_eq!(query_i64(&standby, registered), Some(1));
    let log = proc.log();
    assert!(log.contains("connection was lost; reconnected"), "{log}");
    proc.stop();
    cluster.destroy().unwrap();
}
