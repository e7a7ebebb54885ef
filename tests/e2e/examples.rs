//! The programs under `examples/`, run against real processes: what a user
//! copies first must work.

use std::collections::BTreeSet;

use tidemark_testkit::{query_rows, wait_for, Proc, TestDb, GUARDED_CLOCK};

/// The Python with pyzmq that `scripts/test.sh` prepared (`TIDEMARK_PYTHON`),
/// else the system's `python3`.
fn python() -> std::ffi::OsString {
    std::env::var_os("TIDEMARK_PYTHON").unwrap_or_else(|| "python3".into())
}

/// `examples/publisher.py` (pyzmq, written from docs/contract.md) feeds a shard
/// on the event clock; every observation is the one its record implies:
/// `ctr` for each transaction with an impression, labelled 1 when it was
/// clicked, and `cvr_short` 0 for each click (no installs).
#[test]
fn the_python_publisher_feeds_a_shard_row_by_row() {
    let db = TestDb::new("example_py");
    let endpoint = format!("tcp://{}", tidemark_testkit::free_addr());
    let mut shard = Proc::shard(&db, "py", &endpoint, GUARDED_CLOCK);
    let dir = tidemark_testkit::tmp_dir().join(format!("example-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("made.jsonl");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/publisher.py");
    let out = std::process::Command::new(python())
        .arg(script)
        .args(["--bind", &endpoint, "--transactions", "200", "--record"])
        .arg(&record)
        .output()
        .expect("python runs (scripts/test.sh provides one with pyzmq)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Vec<serde_json::Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(made.len(), 200);
    let flag = |m: &serde_json::Value, k: &str| m[k].as_bool().unwrap();
    let txid = |m: &serde_json::Value| m["txid"].as_str().unwrap().to_owned();
    let want: BTreeSet<(String, String, String)> = made
        .iter()
        .filter(|m| flag(m, "impression"))
        .map(|m| {
            (
                "ctr".into(),
                txid(m),
                u8::from(flag(m, "click")).to_string(),
            )
        })
        .chain(
            made.iter()
                .filter(|m| flag(m, "click"))
                .map(|m| ("cvr_short".into(), txid(m), "0".into())),
        )
        .collect();
    let got = || -> BTreeSet<(String, String, String)> {
        query_rows(
            &db.url,
            "SELECT target, txid, label::int::text FROM tidemark.observations \
             WHERE shard = 'py' AND target IN ('ctr', 'cvr_short')",
        )
        .into_iter()
        .map(|r| {
            let v: Vec<String> = r.into_iter().map(Option::unwrap).collect();
            (v[0].clone(), v[1].clone(), v[2].clone())
        })
        .collect()
    };
    wait_for("every observation", || {
        (got().len() >= want.len()).then_some(())
    });
    shard.stop();
    assert_eq!(got(), want, "row by row");
    let _ = std::fs::remove_dir_all(&dir);
}
