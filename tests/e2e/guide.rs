//! docs/first-pipeline.md, run as a newcomer runs it: every `sh` block of
//! the page, in order, in one bash, in an empty directory, with the test
//! build's `tidemark` on `PATH` (the page's one `cargo build` line is that
//! build) and `TIDEMARK_DATABASE_URL` set to a fresh test database (the
//! page's branch for "a PostgreSQL of your own"; `db up` is tested in db.rs).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tidemark_testkit::{query_i64, TestDb};

const PAGE: &str = include_str!("../../docs/first-pipeline.md");

/// The page's `sh` blocks, but the build line.
fn script() -> String {
    let mut out = String::from("set -euo pipefail\n");
    let mut rest = PAGE;
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + 6..];
        let end = body.find("```").expect("a closed block");
        if !body.starts_with("cargo build") {
            out.push_str(&body[..end]);
        }
        rest = &body[end + 3..];
    }
    out
}

#[test]
fn the_first_pipeline_guide_runs_as_written() {
    // Its configurations use the shipped ports, as the deploy test does.
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for port in [5556, 9400, 9401, 9410, 9420] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: the guide uses it"
        );
    }
    let db = TestDb::new("guide");
    let dir = tidemark_testkit::tmp_dir().join(format!("guide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin_dir = tidemark_testkit::bin_path().parent().unwrap().to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let script = script();
    assert!(script.contains("tidemark publish") && script.contains("tidemark score"));
    let child = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&dir)
        .env("PATH", path)
        .env("TIDEMARK_DATABASE_URL", &db.url)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // Whatever happens, nothing the page started outlives the test.
    let group = child.id();
    let started = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while started.elapsed() < Duration::from_secs(300) {
            std::thread::sleep(Duration::from_millis(200));
            if !tidemark_testkit::signal_group(group, None) {
                return;
            }
        }
        tidemark_testkit::signal_group(group, Some("KILL"));
    });
    let out = child.wait_with_output().unwrap();
    tidemark_testkit::signal_group(group, Some("KILL"));
    watchdog.join().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the guide failed:\n{stdout}\n{stderr}"
    );

    // What the page promises: observations of every target, a verified
    // checkpoint that learned them, a score, a profile.
    for target in ["ctr", "cvr_short", "cvr_long"] {
        let n = query_i64(
            &db.url,
            &format!("SELECT count(*) FROM tidemark.observations WHERE target = '{target}'"),
        )
        .unwrap();
        assert!(n > 100, "{n} {target} observations");
    }
    let tsv = std::fs::read_to_string(dir.join("pipeline/ctr.tsv")).unwrap();
    assert!(tsv.starts_with("label\t") && tsv.lines().count() > 1000);
    assert!(stdout.contains("\nok: "), "checkpoint verify:\n{stdout}");
    let score: serde_json::Value = stdout
        .lines()
        .find(|l| l.contains("\"p_install\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no score in:\n{stdout}"));
    for k in ["ctr", "cvr_short", "cvr_long", "p_install"] {
        let p = score[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} in {score}"));
        assert!(p > 0.0 && p < 1.0, "{k} = {p}");
    }
    let profile: serde_json::Value = stdout
        .lines()
        .find(|l| l.contains("\"user:p1\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no profile in:\n{stdout}"));
    assert!(profile.to_string().contains("clk_1h"), "{profile}");
}
