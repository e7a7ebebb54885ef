//! The embedded cluster (SPEC 9) and the per-test database harness.

use std::process::Command;

use tidemark_testkit::{bin, block_on, run_ok, TestDb};

#[test]
fn db_up_url_down_in_a_private_home() {
    // A fresh mktemp-style directory: only its owner (root, in CI) can enter it.
    let home = tempdir();
    let h = home.to_str().unwrap();
    let concurrent: Vec<_> = (0..3)
        .map(|_| bin().args(["db", "up", "--home", h]).output_async())
        .collect();
    for child in concurrent {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let url = String::from_utf8(run_ok(&["db", "url", "--home", h]).stdout).unwrap();
    let status = String::from_utf8(run_ok(&["db", "status", "--home", h]).stdout).unwrap();
    assert!(status.starts_with("running"), "{status}");
    let url2 = url.trim().to_owned();
    let (one, version): (i32, i32) = block_on(async move {
        let c = tidemark_store::connect(&url2).await.unwrap();
        let one = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        let v = c
            .query_one("SELECT max(version) FROM tidemark.schema_migrations", &[])
            .await
            .unwrap()
            .get(0);
        (one, v)
    });
    assert_eq!((one, version), (1, tidemark_store::latest_version()));
    run_ok(&["db", "down", "--home", h]);
    let out = tidemark_testkit::bin()
        .args(["db", "status", "--home", h])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "stopped");
    assert_eq!(out.status.code(), Some(3), "stopped answers 3");
    // A second `up` restarts the same cluster, and migrations stay applied once.
    run_ok(&["db", "up", "--home", h]);
    run_ok(&["db", "down", "--home", h]);
    tidemark_store::Cluster::new(&home)
        .unwrap()
        .destroy()
        .unwrap();
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn test_databases_are_migrated_and_independent() {
    let a = TestDb::new("independent_a");
    let b = TestDb::new("independent_b");
    let (ua, ub) = (a.url.clone(), b.url.clone());
    let counts: (i64, i64) = block_on(async move {
        let ca = tidemark_store::connect(&ua).await.unwrap();
        let cb = tidemark_store::connect(&ub).await.unwrap();
        ca.execute(
            "INSERT INTO tidemark.observations (shard, seq, target, txid, label, features, rate, created_at)
             VALUES ('s', 1, 'ctr', 'x', 1, '{}', 1, now())",
            &[],
        )
        .await
        .unwrap();
        let n = |c: tokio_postgres::Client| async move {
            c.query_one("SELECT count(*) FROM tidemark.observations", &[])
                .await
                .unwrap()
                .get::<_, i64>(0)
        };
        (n(ca).await, n(cb).await)
    });
    assert_eq!(counts, (1, 0));
    let name = a.name.clone();
    drop(a);
    let admin = tidemark_store::Cluster::new(&tidemark_testkit::test_home())
        .unwrap()
        .url_for("postgres");
    let gone = block_on(async move {
        let c = tidemark_store::connect(&admin).await.unwrap();
        c.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await
            .unwrap()
            .is_none()
    });
    assert!(gone, "dropped TestDb leaves its database behind");
}

/// SPEC 9 v1.2: the embedded cluster is private. On TCP (asked for) it
/// wants the password generated once into a file only its owner reads,
/// which `db url` then carries; a directory planted where the cluster's
/// would go (a link) is refused, never followed.
#[test]
fn the_embedded_cluster_asks_for_a_password_on_tcp_and_follows_no_link() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempdir();
    let h = home.to_str().unwrap();
    let port = tidemark_testkit::free_addr()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    run_ok(&["db", "up", "--home", h, "--port", &port]);
    let url = String::from_utf8(run_ok(&["db", "url", "--home", h]).stdout).unwrap();
    let url = url.trim().to_owned();
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let pw = cluster.password().unwrap();
    assert_eq!(
        url,
        format!("postgresql://tidemark:{pw}@127.0.0.1:{port}/tidemark")
    );
    let mode = std::fs::metadata(home.join("db.password"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let without = format!("postgresql://tidemark@127.0.0.1:{port}/tidemark");
    let wrong = format!("postgresql://tidemark:nope@127.0.0.1:{port}/tidemark");
    let (with_pw, no_pw, bad_pw) = block_on(async move {
        let ok = |u: String| async move { tidemark_store::connect(&u).await.map(|_| ()) };
        (ok(url).await, ok(without).await, ok(wrong).await)
    });
    assert!(with_pw.is_ok(), "{with_pw:?}");
    for refused in [no_pw, bad_pw] {
        let e = format!("{:?}", refused.unwrap_err());
        assert!(e.contains("password") || e.contains("28P01"), "{e}");
    }
    run_ok(&["db", "down", "--home", h]);
    cluster.destroy().unwrap();
    std::fs::remove_dir_all(&home).unwrap();

    // A link planted where a fresh home's cluster directory goes.
    let home = tempdir();
    let target = tempdir();
    let planted = tidemark_store::Cluster::new(&home)
        .unwrap()
        .dir()
        .to_owned();
    std::os::unix::fs::symlink(&target, &planted).unwrap();
    let out = bin()
        .args(["db", "up", "--home", home.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("refusing it"), "{err}");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing written through the link"
    );
    std::fs::remove_file(&planted).unwrap();
    std::fs::remove_dir_all(&home).unwrap();
    std::fs::remove_dir_all(&target).unwrap();
}

/// A new directory under the system temp dir, mode 0700 like `mktemp -d`.
fn tempdir() -> std::path::PathBuf {
    let out = Command::new("mktemp").arg("-d").output().unwrap();
    std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

trait OutputAsync {
    fn output_async(&mut self) -> std::process::Child;
}

impl OutputAsync for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Every counter name, as `tidemark_shard::telemetry` defines it, lands in
/// the family and subject the operators' views say, and `shard_status`
/// sums the ones it names.
#[test]
fn the_views_classify_every_counter_as_telemetry_defines_it() {
    use tidemark_shard::telemetry::{Counter, Family};
    let db = TestDb::new("telemetry_views");
    // (name, family, subject)
    type Classified = Vec<(String, String, String)>;
    let mut want: Classified = Counter::ALL
        .iter()
        .map(|c| (c.name().to_owned(), "shard".into(), c.name().to_owned()))
        .collect();
    for f in Family::ALL {
        for subject in ["bid", "install", "open", "bad_txid", "cvr_short", "tick_x"] {
            want.push((f.name(subject), f.prefix().into(), subject.into()));
        }
    }
    let url = db.url.clone();
    let rows = want.clone();
    let (got, status): (Classified, (i64, i64)) = block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.execute(
            "INSERT INTO tidemark.shards (name, prefixes, rate, clock_kind, config) VALUES ('v', '{}', 1, 'wall', '{}')",
            &[],
        )
        .await
        .unwrap();
        let deltas: Vec<(String, i64)> = rows.iter().map(|r| (r.0.clone(), 1)).collect();
        tidemark_shard::store::state::add_counters(&c, "v", &deltas)
            .await
            .unwrap();
        // The view has no `name` column: rebuild it from family and subject.
        let got = c
            .query(
                "SELECT family, subject FROM tidemark.counters WHERE shard = 'v'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| {
                let (f, s): (String, String) = (r.get(0), r.get(1));
                let name = if f == "shard" {
                    s.clone()
                } else {
                    format!("{f}_{s}")
                };
                (name, f, s)
            })
            .collect();
        let s = c
            .query_one(
                "SELECT quarantined, db_errors FROM tidemark.shard_status WHERE shard = 'v'",
                &[],
            )
            .await
            .unwrap();
        (got, (s.get(0), s.get(1)))
    });
    let mut got = got;
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let db_errors = Counter::ALL
        .iter()
        .filter(|c| c.name().starts_with("db_errors_"))
        .count() as i64;
    assert_eq!(status, (1, db_errors));
}

#[test]
fn a_hot_standby_follows_the_primary_read_only_and_reports_its_lag() {
    let home = tempdir();
    let h = home.to_str().unwrap();
    let out = run_ok(&["db", "up", "--standby", "--home", h]);
    let urls = String::from_utf8(out.stdout).unwrap();
    let [primary, standby] = urls.lines().collect::<Vec<_>>()[..] else {
        panic!("two URLs: {urls}")
    };
    assert_ne!(primary, standby);
    let status = String::from_utf8(run_ok(&["db", "status", "--standby", "--home", h]).stdout);
    assert!(status.unwrap().starts_with("running"));
    let (p, s) = (primary.to_owned(), standby.to_owned());
    block_on(async move {
        let p = tidemark_store::connect(&p).await.unwrap();
        let s = tidemark_store::connect(&s).await.unwrap();
        p.batch_execute(
            "INSERT INTO tidemark.profile_process (name, clock_ms) VALUES ('standby_test', 42)",
        )
        .await
        .unwrap();
        // Streaming: the row shows on the standby within seconds.
        let mut seen = false;
        for _ in 0..200 {
            let n: i64 = s
                .query_one(
                    "SELECT count(*) FROM tidemark.profile_process WHERE name = 'standby_test'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if n == 1 {
                seen = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(seen, "the primary's row reached the standby");
        let row = s
            .query_one(
                "SELECT on_replica, replica_lag_ms FROM tidemark.profile_status WHERE name = 'standby_test'",
                &[],
            )
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0));
        let lag: i64 = row.get(1);
        assert!((0..60_000).contains(&lag), "lag {lag} ms");
        let on_primary = p
            .query_one(
                "SELECT on_replica, replica_lag_ms FROM tidemark.profile_status WHERE name = 'standby_test'",
                &[],
            )
            .await
            .unwrap();
        assert!(!on_primary.get::<_, bool>(0));
        assert_eq!(on_primary.get::<_, Option<i64>>(1), None);
        let refused = s
            .batch_execute("DELETE FROM tidemark.profile_process")
            .await
            .unwrap_err();
        assert_eq!(
            refused.code(),
            Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
        );
    });
    // Reads: from the replica while it is within --max-lag; from the
    // primary once its replay is paused and it falls behind.
    let served = |max_lag: &str| {
        let out = bin()
            .args([
                "profile",
                "get",
                "user:u1",
                "--json",
                "--database-url",
                primary,
            ])
            .args(["--replica", standby, "--max-lag", max_lag])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["id"], "user:u1");
        String::from_utf8(out.stderr).unwrap()
    };
    let said = served("5s");
    assert!(said.contains("served by replica"), "{said}");
    let (p, s) = (primary.to_owned(), standby.to_owned());
    block_on(async move {
        let s = tidemark_store::connect(&s).await.unwrap();
        s.batch_execute("SELECT pg_wal_replay_pause()")
            .await
            .unwrap();
        let p = tidemark_store::connect(&p).await.unwrap();
        p.batch_execute("UPDATE tidemark.profile_process SET clock_ms = 43")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    });
    let said = served("500ms");
    assert!(said.contains("served by the primary"), "{said}");
    let said = served("1h");
    assert!(said.contains("served by replica"), "{said}");
    let s = standby.to_owned();
    block_on(async move {
        let s = tidemark_store::connect(&s).await.unwrap();
        s.batch_execute("SELECT pg_wal_replay_resume()")
            .await
            .unwrap();
    });
    run_ok(&["db", "down", "--standby", "--home", h]);
    // A replica that is away: the primary serves.
    let said = served("5s");
    assert!(said.contains("served by the primary"), "{said}");
    let out = bin()
        .args(["db", "status", "--standby", "--home", h])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "stopped answers 3");
    // A second start reuses the copy and catches up.
    run_ok(&["db", "up", "--standby", "--home", h]);
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    cluster.standby().destroy().unwrap();
    cluster.destroy().unwrap();
    std::fs::remove_dir_all(&home).unwrap();
}

/// Migration 12 moves first-copy marks kept in V0007's shared day
/// partitions to one catch-all per type, every mark kept, each type's bound
/// at the UTC day after its newest mark.
#[test]
fn marks_kept_before_the_split_by_type_move_to_a_catch_all_per_type() {
    let db = TestDb::new("marks_v11");
    let url = db.url.clone();
    let (applied, rows) = block_on(async move {
        let mut c = tidemark_store::connect(&url).await.unwrap();
        // Day 20,000 since the epoch, as V0007 partitioned it.
        let day = 20_000 * 86_400_000i64;
        let key = |ms: i64, random: u64| {
            let h = format!("{ms:012x}");
            format!("{}-{}-0000-0000-{random:012x}", &h[..8], &h[8..])
        };
        let (k1, k2) = (key(day + 5 * 3_600_000, 1), key(day + 9 * 3_600_000, 2));
        let old = format!(
            "DROP TABLE tidemark.profile_seen;
             CREATE TABLE tidemark.profile_seen (key uuid NOT NULL, type smallint NOT NULL,
                 PRIMARY KEY (key, type)) PARTITION BY RANGE (key);
             CREATE TABLE tidemark.profile_seen_20000 PARTITION OF tidemark.profile_seen
                 FOR VALUES FROM ('{}') TO ('{}');
             INSERT INTO tidemark.profile_seen VALUES ('{k1}', 1), ('{k1}', 3), ('{k2}', 1);
             DELETE FROM tidemark.schema_migrations WHERE version = 12;",
            key(day, 0),
            key(day + 86_400_000, 0)
        );
        c.batch_execute(&old).await.unwrap();
        let applied = tidemark_store::migrate(&mut c).await.unwrap();
        let rows: Vec<(String, String, i16)> = c
            .query(
                "SELECT tableoid::regclass::text, key::text, type FROM tidemark.profile_seen
                 ORDER BY 2, 3",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        (applied, rows)
    });
    assert_eq!(applied, [12]);
    let part = |t: i16| format!("profile_seen_{t}_before_1728086400000");
    let want = [
        (part(1), "019255e6-2880-0000-0000-000000000001", 1),
        (part(3), "019255e6-2880-0000-0000-000000000001", 3),
        (part(1), "019256c1-e280-0000-0000-000000000002", 1),
    ];
    let want: Vec<(String, String, i16)> = want
        .into_iter()
        .map(|(p, k, t)| (p, k.to_string(), t))
        .collect();
    assert_eq!(rows, want);
}

/// A `profile_trail_chunks` row: id, base, ids, off, type, txid.
type Chunk = (
    String,
    i64,
    Option<Vec<String>>,
    Vec<i32>,
    Vec<i16>,
    Vec<String>,
);

/// Migration 13 rewrites trail rows kept in V0007's layout (type names,
/// txids as text, the list repeated for every event) compactly, in a
/// partition made as the profile process makes them, and every event still
/// reads back as it was written: through the reader (a list of one, of
/// several, one kept in `profile_trail_wide`, and a row written after the
/// migration into the old partition, a chunk since migration 15, which
/// made the partition's chunks), filtered by type, and through the
/// `profile_trail_events` view.
#[test]
fn trail_rows_kept_before_the_compact_layout_read_back_the_same() {
    use tidemark_profiles::{days::Part, store};
    let db = TestDb::new("trail_v12");
    let url = db.url.clone();
    let day = 20_000 * 86_400_000i64;
    let tx = |n: u64, c: char| format!("{}{:012x}", c.to_string().repeat(20), day as u64 + n);
    let (tx1, tx2, tx3, tx4, tx5) = (tx(1, 'a'), tx(2, '0'), tx(3, 'f'), tx(4, '7'), tx(5, 'c'));
    let many: Vec<String> = (0..200).map(|i| format!("device:{i:04}")).collect();
    let (t1, t2, t3, t4, t5, m) = (
        tx1.clone(),
        tx2.clone(),
        tx3.clone(),
        tx4.clone(),
        tx5.clone(),
        many.clone(),
    );
    let (applied, stored, chunk, viewed, read, filtered) = block_on(async move {
        let mut c = tidemark_store::connect(&url).await.unwrap();
        c.batch_execute(
            "DROP VIEW IF EXISTS tidemark.profile_trail_events;
             DROP TABLE tidemark.profile_trail, tidemark.profile_trail_wide;
             CREATE TABLE tidemark.profile_trail (id text NOT NULL, ts bigint NOT NULL,
                 type text NOT NULL, txid text NOT NULL, ids text[] NOT NULL) PARTITION BY RANGE (ts);
             CREATE INDEX profile_trail_id_ts ON tidemark.profile_trail (id, ts) INCLUDE (type, txid, ids);
             CREATE TABLE tidemark.profile_trail_wide (id text NOT NULL, ts bigint NOT NULL,
                 type text NOT NULL, txid text NOT NULL, ids text[] NOT NULL,
                 PRIMARY KEY (id, ts, type, txid));",
        )
        .await
        .unwrap();
        for p in [Part::Span(day, day + 86_400_000), Part::Before(day)] {
            store::create_partition(&c, store::Daily::Trail, p)
                .await
                .unwrap();
        }
        // Before migration 15: no chunks (it makes the partition's).
        c.batch_execute(
            "DROP TABLE tidemark.profile_trail_chunks;
             DELETE FROM tidemark.schema_migrations WHERE version = 15;",
        )
        .await
        .unwrap();
        let old = format!(
            "INSERT INTO tidemark.profile_types VALUES (1, 'impression'), (2, 'click'), (3, 'install');
             INSERT INTO tidemark.profile_ids VALUES ('user:u1', 1, 0), ('device:d1', 1, 0);
             INSERT INTO tidemark.profile_trail VALUES
                 ('user:u1', {day} + 10, 'impression', '{t1}', ARRAY['user:u1']),
                 ('user:u1', {day} + 20, 'click', '{t2}', ARRAY['device:d1', 'user:u1']),
                 ('device:d1', {day} + 20, 'install', '{t3}', '{{}}');
             INSERT INTO tidemark.profile_trail_wide VALUES
                 ('device:d1', {day} + 20, 'install', '{t3}', ARRAY['{}']);
             DELETE FROM tidemark.schema_migrations WHERE version = 13;",
            m.join("','")
        );
        c.batch_execute(&old).await.unwrap();
        let applied = tidemark_store::migrate(&mut c).await.unwrap();
        let after = store::TrailRow {
            id: "device:d1".into(),
            ts: day + 30,
            type_pos: 2,
            txid: t4,
            ids: vec!["device:d1".into()],
        };
        let chunk_parts: String = c
            .query_one(
                "SELECT string_agg(pg_get_expr(c.relpartbound, c.oid), '; ' ORDER BY c.relname)
                 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = 'tidemark.profile_trail_chunks'::regclass",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            chunk_parts,
            format!(
                "FOR VALUES FROM ('{day}') TO ('{}'); FOR VALUES FROM (MINVALUE) TO ('{day}')",
                day + 1
            )
        );
        let w = c.transaction().await.unwrap();
        // And one with a list: a chunk that carries it.
        let listed = store::TrailRow {
            id: "user:u1".into(),
            ts: day + 40,
            type_pos: 2,
            txid: t5,
            ids: vec!["device:d1".into(), "user:u1".into()],
        };
        store::insert_trail(&w, &[listed, after]).await.unwrap();
        w.commit().await.unwrap();
        let rows = async |sql: &str| c.query(sql, &[]).await.unwrap();
        // Written after: a one-identifier event is a chunk (sql/V0015).
        let chunk =
            rows("SELECT id, base, ids, off, type, txid::text[] FROM tidemark.profile_trail_chunks ORDER BY id")
                .await
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
                .collect::<Vec<Chunk>>();
        let stored: Vec<(i16, String, Option<Vec<String>>)> = rows(
            "SELECT type, txid::text, ids FROM tidemark.profile_trail_20000 ORDER BY ts, type",
        )
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
        let viewed: Vec<(String, String, Vec<String>)> =
            rows("SELECT type, txid, ids FROM tidemark.profile_trail_events ORDER BY ts, type")
                .await
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
        let reader = tidemark_reader::Reader::new(&url, 1).unwrap();
        let read = reader.trail("user:u1", day, day + 100, None).await.unwrap();
        let types = ["click".to_string(), "nosuch".to_string()];
        let filtered = reader
            .trail("device:d1", day, day + 100, Some(&types))
            .await
            .unwrap();
        (applied, stored, chunk, viewed, read, filtered)
    });
    assert_eq!(applied, [13, 15]);
    let dashed = |t: &str| {
        format!(
            "{}-{}-{}-{}-{}",
            &t[..8],
            &t[8..12],
            &t[12..16],
            &t[16..20],
            &t[20..]
        )
    };
    let both = vec!["device:d1".to_string(), "user:u1".to_string()];
    assert_eq!(
        stored,
        [
            (1, dashed(&tx1), None),
            (2, dashed(&tx2), Some(both.clone())),
            (3, dashed(&tx3), Some(vec![])),
        ]
    );
    let chunk_of = |id: &str, ids: Option<Vec<String>>, off: i32, ty: i16, tx: &str| {
        (
            id.to_string(),
            day,
            ids,
            vec![off],
            vec![ty],
            vec![dashed(tx)],
        )
    };
    assert_eq!(
        chunk,
        [
            chunk_of("device:d1", None, 30, 2, &tx4),
            chunk_of("user:u1", Some(both.clone()), 40, 2, &tx5)
        ]
    );
    let want = [
        ("impression", tx1, vec!["user:u1".to_string()]),
        ("click", tx2, both.clone()),
        ("install", tx3, many),
        ("click", tx4, vec!["device:d1".to_string()]),
        ("click", tx5, both),
    ];
    let want: Vec<(String, String, Vec<String>)> = want
        .into_iter()
        .map(|(t, x, ids)| (t.to_string(), x, ids))
        .collect();
    assert_eq!(viewed, want);
    let triple = |events: Vec<tidemark_reader::TrailEvent>| -> Vec<(String, String, Vec<String>)> {
        events
            .into_iter()
            .map(|e| (e.type_name, e.txid, e.ids))
            .collect()
    };
    assert_eq!(triple(read), want);
    let clicks: Vec<_> = want.into_iter().filter(|w| w.0 == "click").collect();
    assert_eq!(triple(filtered), clicks);
}
