//! `tidemark plan` and argument handling, through the binary.

use tidemark_testkit::bin;

#[test]
fn plan_json_gives_disjoint_sets_within_tolerance() {
    let out = bin()
        .args(["plan", "--rate", "0.3", "--shards", "4", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shards = v["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    let sets: Vec<(String, Vec<String>)> = shards
        .iter()
        .map(|s| {
            let ps = s["prefixes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect();
            (s["name"].as_str().unwrap().to_owned(), ps)
        })
        .collect();
    let c = tidemark_plan::coverage(&sets);
    assert!(c.overlaps.is_empty(), "{:?}", c.overlaps);
    for (s, (_, ps)) in shards.iter().zip(&sets) {
        let share = tidemark_plan::share(ps);
        assert!((share - 0.3 / 4.0).abs() <= 16f64.powi(-6));
        assert_eq!(s["rate"].as_f64().unwrap(), share);
    }
    assert!((v["rate"].as_f64().unwrap() - 0.3).abs() <= 4.0 * 16f64.powi(-6));
}

#[test]
fn bad_plan_arguments_fail_cleanly() {
    for args in [
        vec!["--rate", "0", "--shards", "2"],
        vec!["--rate", "1.5", "--shards", "2"],
        vec!["--rate", "nan", "--shards", "2"],
        vec!["--rate", "0.5", "--shards", "0"],
        vec!["--rate", "0.5", "--shards", "-1"],
        vec!["--rate", "abc", "--shards", "1"],
        vec!["--rate", "0.5"],
    ] {
        let out = bin().arg("plan").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(!err.trim().is_empty(), "{args:?} said nothing");
    }
}

#[test]
fn plan_check_finds_overlapping_shard_configs() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("plan-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, prefixes: &str| {
        let p = dir.join(format!("{name}.toml"));
        std::fs::write(
            &p,
            format!(
                "name = \"{name}\"\nendpoints = [\"tcp://127.0.0.1:1\"]\nprefixes = [{prefixes}]\n"
            ),
        )
        .unwrap();
        p.to_str().unwrap().to_owned()
    };
    let (a, b, c) = (
        write("a", "\"0\", \"1\""),
        write("b", "\"2\""),
        write("c", "\"1f\""),
    );
    let ok = bin()
        .args(["plan", "--json", "--check", &a, &b])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["rate"].as_f64(), Some(3.0 / 16.0));
    assert_eq!(v["uncovered"].as_f64(), Some(13.0 / 16.0));
    let bad = bin()
        .args(["plan", "--check", &a, &b, &c])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stdout).contains("overlap: a \"1\" and c \"1f\""));
}

/// A configuration that cannot be used exits 78 (EX_CONFIG), which the
/// shipped units do not restart on; anything else that fails exits 1.
#[test]
fn a_configuration_error_exits_78_and_names_the_key() {
    let dir = tidemark_testkit::tmp_dir().join(format!("exit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"s0\"\nendpoints = [\"tcp://127.0.0.1:1\"]\nbatch_events = \"5\"\n",
    )
    .unwrap();
    let missing = dir.join("missing.toml");
    for (command, file) in [
        ("shard", &bad),
        ("profiles", &bad),
        ("shard", &missing),
        ("learn", &missing),
    ] {
        // A variable that is not UTF-8 in the environment is no crash.
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"\xff\xfe");
        let out = bin()
            .env("TIDEMARK_NOT_UTF8", odd)
            .arg(command)
            .arg("--config")
            .arg(file)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(78),
            "{command} {}: {said}",
            file.display()
        );
        if file == &bad {
            assert!(said.contains("batch_events"), "{said}");
        }
    }
    let out = bin()
        .args([
            "proxy",
            "--backend",
            "tcp://127.0.0.1:1",
            "--curve-secret-key",
        ])
        .arg(&missing)
        .arg("--curve-publishers")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Answers a supervisor or a shell can act on: `db status` by its exit
/// status, a mistyped subcommand with a suggestion.
#[test]
fn db_status_answers_by_exit_status_and_typos_get_a_suggestion() {
    let home = tidemark_testkit::tmp_dir().join(format!("nohome-{}", std::process::id()));
    let out = bin()
        .args(["db", "status", "--home"])
        .arg(&home)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "not initialised\n");
    let out = bin().arg("shrad").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("shard"),
        "{out:?}"
    );
}

/// SIGHUP is logged and ignored (nothing is reloaded); SIGTERM still stops.
#[test]
fn sighup_is_ignored() {
    let child = bin()
        .args([
            "publish",
            "--bind",
            "tcp://127.0.0.1:*",
            "--tps",
            "50",
            "--warmup",
            "0s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    for signal in ["HUP", "TERM"] {
        tidemark_testkit::signal(child.id(), signal);
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("SIGHUP ignored"), "{said}");
}

#[test]
fn publish_stops_cleanly_on_sigterm_and_reports() {
    let child = bin()
        .args([
            "publish",
            "--bind",
            "tcp://127.0.0.1:*",
            "--tps",
            "50",
            "--warmup",
            "0s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    tidemark_testkit::signal(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["events"].as_u64().unwrap() > 0);
    assert!(report["ticks"].as_u64().unwrap() > 0);
}

/// `publish --replay /dev/stdin --follow` (a `kcat … |` pipe): events go
/// out as lines arrive, and while the pipe is idle ticks keep coming
/// (every 250 ms, with the `sent` counts), so shards neither let the
/// publisher go nor lose track of what it sent.
#[test]
fn a_followed_pipe_is_published_line_by_line_and_ticked_while_idle() {
    use std::io::Write;
    let endpoint = format!("tcp://{}", tidemark_testkit::free_addr());
    let mut child = bin()
        .args([
            "publish",
            "--replay",
            "/dev/stdin",
            "--follow",
            "--speed",
            "0",
        ])
        .args(["--bind", &endpoint, "--warmup", "1s", "--drain", "1s"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.set_rcvtimeo(100).unwrap();
    sub.connect(&endpoint).unwrap();
    let t0 = 1_700_000_000_000i64;
    let line = |n: u128| {
        let t = tidemark_wire::Txid::new(n, t0 as u64);
        format!("{{\"type\":\"bid\",\"txid\":\"{t}\",\"ts\":{t0},\"features\":{{}}}}\n")
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(line(1).as_bytes()).unwrap();
    stdin.flush().unwrap();
    // Two seconds of an idle pipe.
    let (mut bids, mut ticks) = (0, Vec::new());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < until {
        if let Ok(frames) = sub.recv_multipart(0) {
            match &frames[0][..] {
                b"tick" => ticks.push(String::from_utf8(frames[1].clone()).unwrap()),
                t if t.starts_with(b"bid-") => bids += 1,
                _ => {}
            }
        }
    }
    assert_eq!(bids, 1);
    assert!(ticks.len() >= 5, "{} ticks in 2 s idle", ticks.len());
    assert!(ticks.last().unwrap().contains("\"sent\""), "{ticks:?}");
    stdin.write_all(line(2).as_bytes()).unwrap();
    stdin.flush().unwrap();
    tidemark_testkit::wait_for("the next line published", || {
        let frames = sub.recv_multipart(0).ok()?;
        frames[0].starts_with(b"bid-").then_some(())
    });
    tidemark_testkit::signal(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every command and subcommand prints its help, so clap's own checks of
/// the definitions (unique names, conflicts naming real options) ran on it,
/// and every option has a line of help.
#[test]
fn every_command_has_help_for_every_option() {
    fn commands(path: &[&str]) -> Vec<String> {
        let out = bin().args(path).arg("--help").output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{path:?} --help failed");
        // An option's line: "  -x, --name <V>  help" or "      --name  help"; a
        // line of its own means its help follows on the next lines.
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            if t.starts_with("--") || (t.starts_with('-') && t.get(2..4) == Some(", ")) {
                let inline = t.contains("  ");
                let below = lines
                    .get(i + 1)
                    .is_some_and(|n| n.starts_with("          "));
                assert!(inline || below, "{path:?}: no help for {t:?}");
            }
        }
        text.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_owned)
            .collect()
    }
    let mut seen = 0;
    for c in commands(&[]) {
        seen += 1;
        for sub in commands(&[&c]) {
            commands(&[&c, &sub]);
        }
    }
    assert!(seen >= 14, "{seen} commands");
}

/// Completions and man pages come from the same definitions as `--help`:
/// every subcommand is in them, and bash accepts the script.
#[test]
fn completions_and_man_pages_cover_every_command() {
    let out = bin().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let script = String::from_utf8(out.stdout).unwrap();
    let check = std::process::Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let dir = tidemark_testkit::tmp_dir().join(format!("man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = bin().arg("man").arg(&dir).output().unwrap();
    assert!(out.status.success());
    for sub in [
        "shard",
        "status",
        "validate",
        "learn",
        "checkpoint-verify",
        "profile-get",
        "db-up",
    ] {
        let name = format!("tidemark__subcmd__{}", sub.replace('-', "__subcmd__"));
        assert!(script.contains(&name), "{name} in completions");
        let page = std::fs::read_to_string(dir.join(format!("tidemark-{sub}.1"))).unwrap();
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{sub}: {page}"
        );
    }
}
