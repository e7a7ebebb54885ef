//! Trails packed by day (sql/V0014): once a day is an hour behind the
//! event clock, the profile process moves its one-identifier rows into one
//! row per identifier, beside ingest. Trails read through `tidemark trail`
//! are compared row by row with `tidemark_reference::profiles`, across a
//! `kill -9`, a replay and late events written into packed days.

use serde_json::Value;
use tidemark_testkit::profiles::*;
use tidemark_testkit::*;

/// Event clock, 8-day marks, 7-day trails; small batches and transactions.
fn packed() -> config::Config {
    config()
        .set("clock", "event")
        .set("lateness", "0s")
        .set("dedup", "8d")
}

/// Trail partitions an hour past their day's end at `now`, and how many of
/// them are packed.
fn packable_and_packed(url: &str, now: i64) -> (i64, i64) {
    let packable = query_i64(
        url,
        &format!(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'tidemark.profile_trail'::regclass
               AND c.relname ~ '^profile_trail_[0-9]+$'
               AND (substring(c.relname from 15)::bigint + 1) * {DAY} + {HOUR} <= {now}"
        ),
    )
    .unwrap();
    let packed = query_i64(
        url,
        "SELECT count(*) FROM tidemark.profile_trail_packed_parts",
    )
    .unwrap();
    (packable, packed)
}

#[test]
fn packed_days_read_as_the_reference_across_kill_9_replay_and_late_events() {
    let db = TestDb::new("trails_packed");
    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "packed", &publisher.endpoint, packed());
    publisher.wait_subscribed("tick", 2);
    let now = now_ms();
    publisher.tick(now);
    wait_for("the clock", || {
        query_i64(&db.url, "SELECT clock_ms FROM tidemark.profile_status").filter(|c| *c == now)
    });
    // Three days of events: two days back, one day back, the last hours.
    let mut messages = stream(now as u64 ^ 0x7a11, 1500, now - 2 * DAY);
    messages.extend(stream(now as u64 ^ 0x7a12, 1500, now - DAY));
    messages.extend(stream(now as u64 ^ 0x7a13, 1500, now));
    // Late: more events of two days back, sent after their day is packed.
    let late = stream(now as u64 ^ 0x7a14, 300, now - 2 * DAY + 3 * HOUR);
    let all: Vec<(String, String)> = messages.iter().chain(&late).cloned().collect();
    let oracle = oracle(packed(), &all, now);

    // Killed somewhere between intake and packing; everything replayed.
    let cut = messages.len() / 2 + (now as usize % (messages.len() / 2));
    publish(&mut publisher, &messages[..cut]);
    std::thread::sleep(std::time::Duration::from_millis(500 + now as u64 % 1500));
    proc.kill9();
    proc.restart();
    publisher.wait_subscribed("tick", 4);
    publisher.tick(now);
    publish(&mut publisher, &messages);
    fence(&mut publisher, &db.url, "fence", now);
    let (packable, _) = packable_and_packed(&db.url, now);
    assert!(
        packable >= 1,
        "two days back is always an hour past its end"
    );
    wait_for("every ended day packed", || {
        let (a, b) = packable_and_packed(&db.url, now);
        (a == b).then_some(())
    });
    publish(&mut publisher, &late);
    fence(&mut publisher, &db.url, "late fence", now);

    // Packing happened, and the late events stayed chunks of their own.
    let packed_events = query_i64(
        &db.url,
        "SELECT coalesce(sum(cardinality(off)), 0) FROM tidemark.profile_trail_packed",
    )
    .unwrap();
    assert!(packed_events > 0, "{packed_events} events packed");
    let late_chunks = query_i64(
        &db.url,
        "SELECT count(*) FROM tidemark.profile_trail_chunks k
         JOIN tidemark.profile_trail_packed_parts p ON k.base = p.base
         WHERE k.ids IS NULL",
    )
    .unwrap();
    assert!(late_chunks > 0, "late events written after packing");
    compare(&db.url, &oracle, &all, now);
    // Windows cutting into packed days, and the view people read.
    let ids: Vec<String> = (0..120).step_by(9).map(|p| format!("user:u{p}")).collect();
    for id in &ids {
        for (from, to) in [
            (now - 2 * DAY - 3 * HOUR, now - 2 * DAY + 2 * HOUR),
            (now - DAY - 30 * 60_000, now - DAY + 30 * 60_000),
        ] {
            assert_eq!(
                trail(&db.url, id, from, to, None),
                oracle.trail(id, from, to, None),
                "trail of {id} in [{from}, {to})"
            );
        }
        let viewed = query_i64(
            &db.url,
            &format!("SELECT count(*) FROM tidemark.profile_trail_events WHERE id = '{id}'"),
        )
        .unwrap();
        let whole = trail(&db.url, id, 0, now + DAY, None);
        let under_id = whole
            .iter()
            .filter(|e| {
                e["ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|i| i == &Value::from(id.as_str()))
            })
            .count();
        assert_eq!(viewed as usize, under_id, "view rows of {id}");
    }
    proc.stop();
}

/// Waits up to two minutes (packing two million rows on a slow machine),
/// looking often enough to catch the packer mid-statement.
fn wait_long<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    use std::time::Duration;
    wait_until(what, Duration::from_secs(120), Duration::from_millis(20), f)
}

/// A database migrated by a profile process that then stopped.
fn migrated(db: &TestDb, name: &str) {
    let mut p = Proc::profiles(db, name, "tcp://127.0.0.1:1", packed());
    wait_for("the schema", || {
        query_i64(&db.url, "SELECT count(*) FROM tidemark.profile_process").filter(|n| *n == 1)
    });
    p.stop();
}

#[test]
fn a_kill_9_while_packing_a_day_moves_every_event_exactly_once() {
    let db = TestDb::new("trails_kill_pack");
    migrated(&db, "kp");
    // A day of 2M events two days back, of 20,000 identifiers; every 7th
    // carries a second identifier, so it stays a row.
    let now = now_ms();
    let day = (now / DAY - 2) * DAY;
    let fill = format!(
        "CREATE TABLE tidemark.profile_trail_{} PARTITION OF tidemark.profile_trail FOR VALUES FROM ({day}) TO ({});
         INSERT INTO tidemark.profile_trail
         SELECT 'user:p' || (g % 20000), {day} + g * 40, 1, md5(g::text)::uuid,
                CASE WHEN g % 7 = 0 THEN ARRAY['device:q' || (g % 20000), 'user:p' || (g % 20000)] END
         FROM generate_series(1, 2000000) g;",
        day / DAY,
        day + DAY
    );
    let url = db.url.clone();
    block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.batch_execute(&fill).await.unwrap();
    });

    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "kp", &publisher.endpoint, packed());
    publisher.wait_subscribed("tick", 2);
    publisher.tick(now);
    let packer = "FROM pg_stat_activity WHERE application_name = 'tidemark profiles kp: packer'
                  AND datname = current_database()";
    wait_long("the packer moving rows", || {
        query_i64(
            &db.url,
            &format!(
                "SELECT count(*) {packer} AND state = 'active'
                 AND (query LIKE 'INSERT INTO tidemark.profile_trail_packed%' OR query LIKE 'DELETE FROM%')"
            ),
        )
        .filter(|n| *n == 1)
    });
    proc.kill9();
    // Its server session ends with it (it would otherwise hold the day).
    wait_for("the packer's session to end", || {
        query_i64(&db.url, &format!("SELECT count(*) {packer}")).filter(|n| *n == 0)
    });
    assert_eq!(
        query_i64(
            &db.url,
            "SELECT count(*) FROM tidemark.profile_trail_packed_parts"
        ),
        Some(0),
        "rolled back whole"
    );

    proc.restart();
    publisher.wait_subscribed("tick", 4);
    publisher.tick(now);
    wait_long("the day packed and tidied", || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM tidemark.profile_trail_packed_parts WHERE tidied",
        )
        .filter(|n| *n == 1)
    });
    let rows = |sql: &str| query_i64(&db.url, sql).unwrap();
    let part = format!("tidemark.profile_trail_{}", day / DAY);
    assert_eq!(
        rows(&format!("SELECT count(*) FROM {part} WHERE ids IS NULL")),
        0
    );
    assert_eq!(rows(&format!("SELECT count(*) FROM {part}")), 285_714);
    assert_eq!(
        rows("SELECT sum(cardinality(off))::bigint FROM tidemark.profile_trail_packed"),
        2_000_000 - 285_714
    );
    assert_eq!(
        rows("SELECT sum(events)::bigint FROM tidemark.profile_trail_packed_parts"),
        2_000_000 - 285_714
    );
    assert_eq!(
        rows(&format!(
            "SELECT count(*) FROM pg_index WHERE indrelid = '{part}'::regclass AND NOT indisvalid"
        )),
        0
    );

    // Row by row, against what the fill wrote.
    let type_name = query_rows(
        &db.url,
        "SELECT name FROM tidemark.profile_types WHERE position = 1",
    )[0][0]
        .clone()
        .unwrap();
    for k in [10, 7, 19_999] {
        let id = format!("user:p{k}");
        let want: Vec<Value> = query_rows(
            &db.url,
            &format!("SELECT g::text, md5(g::text) FROM generate_series({k}, 2000000, 20000) s(g) ORDER BY s.g"),
        )
        .iter()
        .map(|r| {
            let g: i64 = r[0].as_deref().unwrap().parse().unwrap();
            let ids: Vec<String> = if g % 7 == 0 {
                vec![format!("device:q{k}"), id.clone()]
            } else {
                vec![id.clone()]
            };
            serde_json::json!({"type": type_name, "txid": r[1], "ts": day + g * 40, "ids": ids})
        })
        .collect();
        let got = trail(&db.url, &id, day, day + DAY, None);
        assert_eq!(got.len(), want.len(), "trail of {id}");
        assert_eq!(got, want, "trail of {id}");
    }
    proc.stop();
}

#[test]
fn a_trail_is_one_index_range_scan_per_identifier_and_day_row_chunk_or_packed() {
    let db = TestDb::new("profiles_plan");
    migrated(&db, "plan");
    // Ten days of partitions with rows, packed and not, so pruning and
    // index use show.
    let day0 = (now_ms() / DAY - 10) * DAY;
    let mut sql = String::new();
    for d in 0..10 {
        let day = day0 + d * DAY;
        sql += &format!(
            "CREATE TABLE tidemark.profile_trail_{} PARTITION OF tidemark.profile_trail FOR VALUES FROM ({day}) TO ({});
             INSERT INTO tidemark.profile_trail SELECT 'user:u' || (g % 1000), {day} + g * 17, 1, md5(g::text)::uuid, NULL FROM generate_series(1, 5000) g;
             CREATE TABLE tidemark.profile_trail_packed_{0} PARTITION OF tidemark.profile_trail_packed FOR VALUES FROM ({day}) TO ({day} + 1);
             INSERT INTO tidemark.profile_trail_packed SELECT 'user:u' || g, {day}, ARRAY[g], ARRAY[1::smallint], ARRAY[md5(g::text)::uuid] FROM generate_series(1, 5000) g;
             CREATE TABLE tidemark.profile_trail_chunks_{0} PARTITION OF tidemark.profile_trail_chunks FOR VALUES FROM ({day}) TO ({day} + 1);
             INSERT INTO tidemark.profile_trail_chunks SELECT 'user:u' || (g % 1000), {day}, NULL, ARRAY[g], ARRAY[1::smallint], ARRAY[md5(g::text)::uuid] FROM generate_series(1, 5000) g;",
            day / DAY,
            day + DAY
        );
    }
    sql += "INSERT INTO tidemark.profile_ids VALUES ('user:u1', 1, 0), ('device:d1', 1, 0); ANALYZE tidemark.profile_trail; ANALYZE tidemark.profile_trail_packed; ANALYZE tidemark.profile_trail_chunks;";
    let url = db.url.clone();
    let plan = block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.batch_execute(&sql).await.unwrap();
        let from = day0 + 3 * DAY + 1000;
        let to = day0 + 5 * DAY - 1000;
        let explain = format!("EXPLAIN {}", tidemark_reader::TRAIL_QUERY);
        let stmt = c.prepare(&explain).await.unwrap();
        let rows = c
            .query(&stmt, &[&"user:u1", &from, &to, &(from - DAY)])
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    });
    // Days 3 and 4 only (pruned at plan time), each one scan of its (id, ts)
    // index whose condition holds the identifiers and both bounds.
    let scans: Vec<&str> = plan
        .lines()
        .filter(|l| {
            l.contains("Index Scan")
                && l.contains("profile_trail_")
                && !l.contains("profile_trail_wide")
                && !l.contains("profile_trail_packed")
                && !l.contains("profile_trail_chunks")
        })
        .collect();
    assert_eq!(scans.len(), 2, "{plan}");
    for s in &scans {
        assert!(s.contains("_id_ts_"), "{plan}");
    }
    let conditions = plan.lines().filter(|l| {
        l.contains("Index Cond: ((id = ANY") && l.contains("(ts >= ") && l.contains("(ts < ")
    });
    assert_eq!(conditions.count(), 2, "{plan}");
    assert!(!plan.contains("Seq Scan on profile_trail"), "{plan}");
    // Packed: the rows of days 3 and 4 (bases within a day of the range),
    // each one scan of its (id, base) index.
    let packed: Vec<&str> = plan
        .lines()
        .filter(|l| l.contains("Index Scan") && l.contains("profile_trail_packed_"))
        .collect();
    assert_eq!(packed.len(), 2, "{plan}");
    for s in &packed {
        assert!(
            s.contains("Index Scan") && s.contains("_id_base_"),
            "{plan}"
        );
    }
    assert!(!plan.contains("Seq Scan on profile_trail_packed"), "{plan}");
    // Chunks alike (sql/V0015).
    let chunks: Vec<&str> = plan
        .lines()
        .filter(|l| l.contains("Index Scan") && l.contains("profile_trail_chunks_"))
        .collect();
    assert_eq!(chunks.len(), 2, "{plan}");
    assert!(chunks.iter().all(|s| s.contains("_id_base_")), "{plan}");
    assert!(!plan.contains("Seq Scan on profile_trail_chunks"), "{plan}");
}

/// A day an older build made after migration 15 ran (it knows no chunks)
/// has no chunks' partition: the profile process makes it when it starts,
/// and that day's events are chunks, read back whole, none refused.
#[test]
fn a_trail_day_without_its_chunks_partition_gets_one_at_start() {
    let db = TestDb::new("trails_no_chunks");
    migrated(&db, "nc");
    let now = now_ms();
    let day = now / DAY * DAY;
    let sql = format!(
        "CREATE TABLE tidemark.profile_trail_{} PARTITION OF tidemark.profile_trail FOR VALUES FROM ({day}) TO ({})",
        day / DAY,
        day + DAY
    );
    let url = db.url.clone();
    block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.batch_execute(&sql).await.unwrap();
    });
    let chunk_parts = || {
        query_i64(
            &db.url,
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'tidemark.profile_trail_chunks'::regclass",
        )
        .unwrap()
    };
    assert_eq!(chunk_parts(), 0);

    let mut publisher = Publisher::new();
    let mut proc = Proc::profiles(&db, "nc", &publisher.endpoint, packed());
    publisher.wait_subscribed("tick", 2);
    publisher.tick(now);
    let txids: Vec<tidemark_wire::Txid> = (0..3)
        .map(|i| tidemark_wire::Txid::new(0x3c0 + i, now as u64))
        .collect();
    for (i, tx) in txids.iter().enumerate() {
        publisher.event("click", tx, now - 1000 + i as i64, r#""user": "nc""#);
    }
    wait_for("three events applied", || {
        query_i64(
            &db.url,
            "SELECT events_applied FROM tidemark.profile_status",
        )
        .filter(|n| *n == 3)
    });
    assert_eq!(chunk_parts(), 1);
    let chunked = query_i64(
        &db.url,
        "SELECT sum(cardinality(off))::bigint FROM tidemark.profile_trail_chunks WHERE id = 'user:nc'",
    );
    assert_eq!(chunked, Some(3));
    let got = trail(&db.url, "user:nc", day, day + DAY, None);
    let want: Vec<Value> = txids
        .iter()
        .enumerate()
        .map(|(i, tx)| {
            serde_json::json!({"type": "click", "txid": tx.as_str(), "ts": now - 1000 + i as i64, "ids": ["user:nc"]})
        })
        .collect();
    assert_eq!(got, want);
    let refused = query_i64(
        &db.url,
        "SELECT coalesce(sum(value::bigint), 0)::bigint FROM tidemark.profile_status, jsonb_each_text(counts) WHERE key LIKE 'rejected%' OR key LIKE 'quarantine%'",
    );
    assert_eq!(refused, Some(0));
    proc.stop();
}
