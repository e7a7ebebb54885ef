//! Numbers out of range never reach a model (SPEC 10, v1.3): observations
//! in a real database carrying the numbers a careless bidder logs (a user
//! id as a number, ±1e308, 3.4e38), the built learner learning them (two
//! targets through a pool), every checkpoint it writes loaded by every
//! reader.

use std::io::Write;
use std::process::Stdio;

use tidemark_checkpoint::Checkpoint;
use tidemark_testkit::{bin, block_on, wait_for, TestDb};

/// The hostile values, one per 40 rows: 75 in 3,000.
const HOSTILE: [&str; 5] = ["9.2e18", "1e308", "-1e308", "3.4e38", "-9.2e18"];

/// Inserts 3,000 observations per target; every 40th row's `uid` is one of
/// [`HOSTILE`], the others a small number; `m` crosses with `uid`.
fn insert(db: &TestDb) {
    let url = db.url.clone();
    block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.execute(
            "INSERT INTO tidemark.shards (name, prefixes, rate, clock_kind) VALUES ('h', '{}', 0.5, 'event')",
            &[],
        )
        .await
        .unwrap();
        let hostile: Vec<String> = HOSTILE.iter().map(|s| s.to_string()).collect();
        c.execute(
            "INSERT INTO tidemark.observations (shard, seq, target, txid, label, features, rate, created_at)
             SELECT 'h', g * 3 + t.k, t.name, md5(g::text),
                    CASE WHEN g % 7 = 0 THEN 1 ELSE 0 END,
                    jsonb_build_object('app', 'app' || (g % 13), 'm', 1 + g % 3,
                        'uid', CASE WHEN g % 40 = 0 THEN ($1::text[])[1 + (g / 40) % 5]::numeric
                                    ELSE (g % 9)::numeric END),
                    0.5, now()
             FROM generate_series(0::bigint, 2999) g,
                  (VALUES (0, 'ctr'), (1, 'cvr_short'), (2, 'cvr_long')) t(k, name)",
            &[&hostile],
        )
        .await
        .unwrap();
    });
}

#[test]
fn a_bid_with_an_absurd_number_leaves_every_checkpoint_loadable() {
    let db = TestDb::new("learn_finite");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("learn-finite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ckpt = dir.join("ckpt");
    let addr = tidemark_testkit::free_addr();
    let cfg = tidemark_testkit::config::learner(&dir, &db.url)
        .set("metrics_addr", addr.as_str())
        .set("checkpoint_every", 500usize)
        .set("keep", 100usize)
        .set("batch", 300usize)
        .set("crosses", [["uid", "m"]])
        // The install targets share a pool: its weights meet the same rows.
        .set("pools.install.targets", ["cvr_short", "cvr_long"])
        .write(&dir.join("learn.toml"));
    insert(&db);
    let log = std::fs::File::create(dir.join("learn.log")).unwrap();
    let mut child = bin()
        .env("RUST_LOG", "info")
        .args(["learn", "--config", cfg.to_str().unwrap()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let latest = || {
        let p = tidemark_checkpoint::latest(&ckpt)?;
        Checkpoint::read(&p, false).ok()
    };
    wait_for("every row learned and checkpointed", || {
        latest().filter(|c| c.targets.iter().map(|t| t.trained).sum::<u64>() == 9000)
    });
    let scraped = tidemark_testkit::scrape(&addr);
    tidemark_testkit::signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());

    // Every checkpoint written, the first included, passes verify.
    let mut files: Vec<_> = std::fs::read_dir(&ckpt)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tdm") && !p.ends_with("latest.tdm"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    for f in &files {
        let out = bin()
            .args(["checkpoint", "verify", f.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = Checkpoint::read(f, true).unwrap();
        assert_eq!(c.non_finite(), None);
        assert_eq!(c.pools.len(), 1, "{}: the pool is written", f.display());
        assert_eq!(c.hashing.max_abs, 1e15);
    }

    // Each target counted the 75 values and the 75 crosses it left out.
    for t in ["ctr", "cvr_short", "cvr_long"] {
        for feature in ["uid", "uid*m"] {
            let series =
                format!("tidemark_learner_numeric_out_of_range_total{{target=\"{t}\",feature=\"{feature}\"}}");
            assert_eq!(
                tidemark_testkit::metric(&scraped, &series),
                Some(75.0),
                "{series}"
            );
        }
    }

    // `tidemark score` answers a finite probability for the same bids.
    let bids: Vec<String> = HOSTILE
        .iter()
        .map(|v| format!(r#"{{"app":"app3","m":2,"uid":{v}}}"#))
        .collect();
    let lines = score(&ckpt, &bids);
    assert_eq!(lines.len(), HOSTILE.len());
    for l in &lines {
        let p = l["ctr"].as_f64().unwrap_or(f64::NAN);
        assert!(p > 0.0 && p < 1.0, "{l}");
    }
    // The same bid without the absurd value scores the same: it was left out.
    let want = score(&ckpt, &[r#"{"app":"app3","m":2}"#.to_owned()]);
    for l in &lines {
        assert_eq!(l, &want[0]);
    }
}

/// `tidemark score` of `bids` (one JSON object a line): its answers.
fn score(ckpt: &std::path::Path, bids: &[String]) -> Vec<serde_json::Value> {
    let mut score = bin()
        .args(["score", "--checkpoint", ckpt.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let stdin = score.stdin.as_mut().unwrap();
        for b in bids {
            writeln!(stdin, "{b}").unwrap();
        }
    }
    let out = score.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
