//! `tidemark status` and `tidemark validate` over a deployment's
//! configuration files: healthy while everything runs, unhealthy (exit 1,
//! the part and the reason in the JSON) when a shard stops, when the learner
//! stops with observations waiting, and when the database stops.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tidemark_testkit::{bin, query_i64, run_ok, wait_for, Proc, TestDb};

fn status(files: &[&Path]) -> (Option<i32>, Value) {
    let out = bin()
        .args(["status", "--json", "--stale", "2s"])
        .args(files)
        .env_remove("TIDEMARK_DATABASE_URL")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

/// The problems `status` reports for the part named `name`.
fn problems(v: &Value, name: &str) -> Vec<String> {
    let part = v["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap();
    part["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn status_turns_unhealthy_when_a_shard_the_learner_or_the_database_stops() {
    // A cluster of its own: the test stops it.
    let home = tidemark_testkit::tmp_dir().join("status-home");
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    run_ok(&["db", "up", "--home", home.to_str().unwrap()]);
    let db = TestDb::external("status", &cluster.url());
    let endpoint = tidemark_testkit::exact::free_endpoint();
    let mut shard = Proc::shard(&db, "st0", &endpoint, "");
    let counters = tidemark_testkit::config::Config::new().counter("clk", "click", "1h");
    let mut profiles = Proc::profiles(&db, "stp", &endpoint, counters);
    let dir = tidemark_testkit::tmp_dir().join(format!("status-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let shards = ["st0", "ghost"];
    let learner_cfg = tidemark_testkit::config::Config::new()
        .set("checkpoint_dir", dir.join("ckpt"))
        .set("checkpoint_interval", "200ms")
        .set("poll", "50ms")
        .set("bits", 12usize)
        .push(
            "sources",
            &[
                ("name", &"local"),
                ("database_url", &db.url.as_str()),
                ("shards", &shards),
            ],
        )
        .write(&dir.join("learner.toml"));
    let mut learner = bin()
        .args(["learn", "--config", learner_cfg.to_str().unwrap()])
        .stderr(std::fs::File::create(dir.join("learner.log")).unwrap())
        .spawn()
        .unwrap();
    let files: Vec<PathBuf> = vec![
        shard.config.clone(),
        profiles.config.clone(),
        learner_cfg.clone(),
    ];
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();

    let out = bin().arg("validate").args(&files).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);

    let healthy = || {
        wait_for("a healthy deployment", || {
            let (code, v) = status(&files);
            (code == Some(0) && v["healthy"] == true).then_some(v)
        })
    };
    let v = healthy();
    assert_eq!(v["parts"].as_array().unwrap().len(), 3);

    // A shard stops: it, and only it, is unhealthy.
    shard.stop();
    let (code, v) = status(&files);
    assert_eq!(code, Some(1));
    assert_eq!(v["healthy"], false);
    assert!(
        problems(&v, "st0")
            .iter()
            .any(|p| p.contains("not running")),
        "{v}"
    );
    assert!(
        problems(&v, "stp").is_empty() && problems(&v, "learner").is_empty(),
        "{v}"
    );
    shard.restart();
    healthy();

    // The learner stops while a shard's observations wait for it.
    tidemark_testkit::signal(learner.id(), "TERM");
    assert!(learner.wait().unwrap().success());
    let inserted = query_i64(
        &db.url,
        "WITH i AS (INSERT INTO tidemark.observations (shard, seq, target, txid, label, features, rate, created_at)
                    SELECT 'ghost', g, 'ctr', md5(g::text), 0, '{}', 1, now() FROM generate_series(1, 50) g
                    RETURNING 1)
         SELECT count(*) FROM i",
    );
    assert_eq!(inserted, Some(50));
    let v = wait_for("the learner reported behind", || {
        let (code, v) = status(&files);
        (code == Some(1)).then_some(v)
    });
    let learner_problems = problems(&v, "learner");
    assert!(
        learner_problems
            .iter()
            .any(|p| p.contains("50 observations unread")),
        "{v}"
    );
    assert!(problems(&v, "st0").is_empty(), "{v}");

    // The database stops: every part says so.
    cluster.down().unwrap();
    let (code, v) = status(&files);
    assert_eq!(code, Some(1));
    for name in ["st0", "stp", "learner"] {
        assert!(
            problems(&v, name)
                .iter()
                .any(|p| p.contains("database away")),
            "{name}: {v}"
        );
    }
    // An unusable file is a configuration error (78), whatever else runs.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nendpoints = []\nretension = \"1d\"\n").unwrap();
    let out = bin().args(["status"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean `retention`?"));

    let _ = shard.child.kill();
    let _ = profiles.child.kill();
    let _ = (shard.child.wait(), profiles.child.wait());
    profiles.child.try_wait().ok();
    let _ = cluster.destroy();
}
