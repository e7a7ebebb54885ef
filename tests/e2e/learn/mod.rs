//! The learner end to end: observations in a real database, the built binary
//! learning them online (two targets through a pool), killed at random,
//! checkpoints scored by `tidemark score`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use tidemark_checkpoint::Checkpoint;

use tidemark_testkit::{bin, block_on, query_i64, wait_for, TestDb};

// `export`, then `learn --input` offline: the online learner's models again.
mod offline;

/// Inserts `n` observations per target into `shard`, seq continuing from `from`.
fn insert(db: &TestDb, shard: &str, from: i64, n: i64) {
    let url = db.url.clone();
    let shard = shard.to_owned();
    block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        // As a shard does before it emits.
        c.execute(
            "INSERT INTO tidemark.shards (name, prefixes, rate, clock_kind) VALUES ($1, '{}', 0.5, 'event')
             ON CONFLICT DO NOTHING",
            &[&shard],
        )
        .await
        .unwrap();
        c.execute(
            "INSERT INTO tidemark.observations (shard, seq, target, txid, label, features, rate, created_at)
             SELECT $1, $2::bigint + g * 3 + t.k, t.name, md5(g::text || $1),
                    CASE WHEN (g % 7 = 0) = (t.k = 0) AND g % 3 = 0 THEN 1 ELSE 0 END,
                    jsonb_build_object('app', 'app' || (g % 13), 'os', CASE WHEN g % 2 = 0 THEN 'ios' ELSE 'android' END,
                                       'n', g % 5, 'wifi', g % 4 = 0),
                    0.5, now()
             FROM generate_series(0::bigint, $3::bigint - 1) g,
                  (VALUES (0, 'ctr'), (1, 'cvr_short'), (2, 'cvr_long')) t(k, name)",
            &[&shard, &from, &n],
        )
        .await
        .unwrap();
    });
}

fn config(dir: &Path, db: &TestDb) -> PathBuf {
    settings(dir, db).write(&dir.join("learn.toml"))
}

fn settings(dir: &Path, db: &TestDb) -> tidemark_testkit::config::Config {
    tidemark_testkit::config::learner(dir, &db.url)
        .set("checkpoint_every", 700usize)
        .set("checkpoint_interval", "200ms")
        .set("keep", 3usize)
        .set("crosses", [["app", "os"]])
        .set("targets.cvr_long.alpha", 0.05)
}

fn start(config: &Path, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    bin()
        .env("RUST_LOG", "info")
        .args(["learn", "--config", config.to_str().unwrap()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn latest(dir: &Path) -> Option<Checkpoint> {
    let p = tidemark_checkpoint::latest(&dir.join("ckpt"))?;
    Checkpoint::read(&p, true).ok()
}

fn workdir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("learn-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn killed_at_random_the_learner_loses_and_repeats_nothing() {
    let db = TestDb::new("learn_kill");
    let dir = workdir("kill");
    // The install targets share a pool: it too must learn each row once.
    let cfg = settings(&dir, &db)
        .set("pools.install.targets", ["cvr_short", "cvr_long"])
        .write(&dir.join("learn.toml"));
    let log = dir.join("learn.log");
    insert(&db, "a", 0, 4000);
    insert(&db, "b", 0, 3000);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut child = start(&cfg, &log);
    for round in 0..8 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(100 + rng % 400));
        let _ = child.kill();
        let _ = child.wait();
        if round == 3 {
            // More observations arrive while it is down.
            insert(&db, "a", 12_000, 1000);
        }
        child = start(&cfg, &log);
    }
    let max_a = query_i64(
        &db.url,
        "SELECT max(seq) FROM tidemark.observations WHERE shard = 'a'",
    )
    .unwrap();
    let max_b = query_i64(
        &db.url,
        "SELECT max(seq) FROM tidemark.observations WHERE shard = 'b'",
    )
    .unwrap();
    let done = wait_for("the learner to catch up", || {
        let c = latest(&dir)?;
        (c.positions.get("local/a") == Some(&max_a) && c.positions.get("local/b") == Some(&max_b))
            .then_some(c)
    });
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(
        child.wait().unwrap().success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    for t in &done.targets {
        let n = query_i64(
            &db.url,
            &format!(
                "SELECT count(*) FROM tidemark.observations WHERE target = '{}'",
                t.name
            ),
        )
        .unwrap();
        assert_eq!(
            t.trained, n as u64,
            "{}: every observation learned exactly once",
            t.name
        );
    }
    let pool = done.pools.iter().find(|p| p.name == "install").unwrap();
    let taught = query_i64(
        &db.url,
        "SELECT count(*) FROM tidemark.observations WHERE target IN ('cvr_short', 'cvr_long')",
    )
    .unwrap();
    assert_eq!(
        pool.trained, taught as u64,
        "the pool learned every row of its targets exactly once"
    );
    // The positions are registered, so shard retention keeps what is unread.
    let registered = query_i64(
        &db.url,
        "SELECT seq FROM tidemark.consumers WHERE consumer = 'learner' AND shard = 'a'",
    );
    assert_eq!(registered, Some(max_a));
    let long = done.targets.iter().find(|t| t.name == "cvr_long").unwrap();
    // Per-target parameters: cvr_long's grid is the default factors over
    // its own alpha, then its label rate alone (an L1 no weight reaches).
    let tuning = long.tuning.as_ref().unwrap();
    let alphas: Vec<f64> = tuning.candidates.iter().map(|c| c.alpha).collect();
    assert_eq!(
        alphas,
        [0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 1.0].map(|f| 0.05 * f),
        "per-target parameters"
    );
    assert!(tuning.candidates[..7].iter().all(|c| c.l1 == 1.0));
    assert_eq!(tuning.candidates[7].l1, tidemark_ftrl::RATE_ONLY_L1);
    // Only the newest `keep` files remain.
    let files = std::fs::read_dir(dir.join("ckpt")).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("checkpoint-")
    });
    assert!(files.count() <= 3);
}

#[test]
fn score_reads_checkpoints_while_training_goes_on() {
    let db = TestDb::new("learn_score");
    let dir = workdir("score");
    let cfg = config(&dir, &db);
    insert(&db, "a", 0, 3000);
    let mut child = start(&cfg, &dir.join("learn.log"));
    wait_for("a first checkpoint", || latest(&dir));
    let mut score = bin()
        .args(["score", "--checkpoint", dir.join("ckpt").to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    insert(&db, "a", 9000, 3000);
    {
        let stdin = score.stdin.as_mut().unwrap();
        writeln!(stdin, r#"{{"app":"app0","os":"ios","n":3,"wifi":true}}"#).unwrap();
        writeln!(stdin, "not json").unwrap();
        writeln!(stdin, "[1,2]").unwrap();
        writeln!(stdin, r#"{{"app":"app7"}}"#).unwrap();
    }
    let out = score.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "one answer per line");
    for i in [0, 3] {
        let l = &lines[i];
        let (c, s, g) = (
            l["ctr"].as_f64().unwrap(),
            l["cvr_short"].as_f64().unwrap(),
            l["cvr_long"].as_f64().unwrap(),
        );
        assert!((0.0..=1.0).contains(&c));
        assert!((l["p_install"].as_f64().unwrap() - c * (s + g)).abs() < 1e-12);
    }
    assert!(lines[1]["error"].is_string());
    assert!(lines[2]["error"].is_string());
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_corrupt_or_foreign_checkpoint_is_refused_clearly() {
    let dir = workdir("corrupt");
    let bad = dir.join("bad.tdm");
    std::fs::write(&bad, b"definitely not a checkpoint").unwrap();
    let out = bin()
        .args(["score", "--checkpoint", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a Tidemark checkpoint"));
    // `checkpoint verify` says so too, before the file is shipped to bidders.
    let out = bin()
        .args(["checkpoint", "verify", "--json", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("not a Tidemark checkpoint"));
}

#[test]
fn the_learner_waits_out_a_lost_database_and_goes_on() {
    // A cluster of its own, stopped under the learner and started again.
    let cluster = tidemark_testkit::own_cluster("learn-away-home", false);
    let db = TestDb::external("learn_away", &cluster.url());
    let dir = workdir("away");
    let cfg = config(&dir, &db);
    let log = dir.join("learn.log");
    insert(&db, "a", 0, 1000);
    let mut child = start(&cfg, &log);
    let ckpt_dir = dir.clone();
    wait_for("the first observations learned", || {
        latest(&ckpt_dir)
            .filter(|c| c.positions.get("local/a") == Some(&2999))
            .map(|_| ())
    });
    cluster.down().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the learner exited while the database was away:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    cluster.up(None).unwrap();
    insert(&db, "a", 3000, 1000);
    wait_for(
        "the observations written after the database came back",
        || {
            latest(&ckpt_dir)
                .filter(|c| c.positions.get("local/a") == Some(&5999))
                .map(|_| ())
        },
    );
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
    cluster.destroy().unwrap();
}

/// The learner as a library, driven in-process: two shard streams read
/// concurrently over pooled connections, every observation learned once,
/// positions checkpointed and registered with the source.
#[test]
fn the_learner_service_runs_in_process() {
    let db = TestDb::new("learner_in_process");
    insert(&db, "a", 1, 400);
    insert(&db, "b", 1, 300);
    let dir = workdir("in-process");
    let mut config = tidemark_learner::Config::from_file(&config(&dir, &db)).unwrap();
    config.default_database("postgres://never-used");
    let ckpt = dir.clone();
    let summary = block_on(async move {
        let done = async move {
            // Stop once a checkpoint holds everything (or give up).
            for _ in 0..600 {
                if latest(&ckpt)
                    .is_some_and(|c| c.targets.iter().map(|t| t.trained).sum::<u64>() == 2100)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tidemark_learner::run(config, done).await.unwrap()
    });
    assert_eq!(summary.learned, 2100);
    let c = latest(&dir).unwrap();
    assert_eq!(c.positions["local/a"], 1200);
    assert_eq!(c.positions["local/b"], 900);
    let mut trained: Vec<(String, u64)> = c
        .targets
        .iter()
        .map(|t| (t.name.clone(), t.trained))
        .collect();
    trained.sort();
    assert_eq!(
        trained,
        [
            ("ctr".to_owned(), 700),
            ("cvr_long".into(), 700),
            ("cvr_short".into(), 700)
        ]
    );
    assert_eq!(
        query_i64(
            &db.url,
            "SELECT sum(seq)::bigint FROM tidemark.consumers WHERE consumer = 'learner'"
        ),
        Some(2100)
    );
}

#[test]
fn the_learner_serves_its_rows_logloss_positions_and_checkpoint_age() {
    let db = TestDb::new("learn_metrics");
    let dir = workdir("metrics");
    let cfg = config(&dir, &db);
    let addr = tidemark_testkit::free_addr();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("metrics_addr = \"{addr}\"\n{text}")).unwrap();
    insert(&db, "a", 0, 3000);
    let mut child = start(&cfg, &dir.join("learn.log"));
    let m = |s: &str| format!("tidemark_{s}");
    wait_for("every row learned, as the endpoint says", || {
        let t = tidemark_testkit::try_scrape(&addr)?;
        let rows = tidemark_testkit::metric(&t, &m(r#"learner_rows_total{target="ctr"}"#))?;
        (rows == 3000.0).then_some(())
    });
    let c = wait_for("a checkpoint of every row", || {
        latest(&dir).filter(|c| c.targets.iter().map(|t| t.trained).sum::<u64>() == 9000)
    });
    let scraped = tidemark_testkit::scrape(&addr);
    for t in &c.targets {
        let series = |name: &str| m(&format!("{name}{{target=\"{}\"}}", t.name));
        let rows = tidemark_testkit::metric(&scraped, &series("learner_rows_total")).unwrap();
        assert_eq!(rows as u64, t.trained, "{}", t.name);
        let logloss = tidemark_testkit::metric(&scraped, &series("learner_logloss")).unwrap();
        let want = t.metrics["logloss"].as_f64().unwrap();
        assert!(
            (logloss - want).abs() < 1e-9,
            "{}: {logloss} vs {want}",
            t.name
        );
    }
    let last = query_i64(&db.url, "SELECT max(seq) FROM tidemark.observations").unwrap();
    let pos = tidemark_testkit::metric(&scraped, &m(r#"learner_position{stream="local/a"}"#));
    assert_eq!(pos, Some(last as f64));
    let age = tidemark_testkit::metric(&scraped, &m("learner_checkpoint_age_seconds"));
    assert!(age.is_some_and(|a| (0.0..60.0).contains(&a)), "{age:?}");
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
}
