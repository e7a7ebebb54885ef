//! `deploy/`: the systemd units verify (`systemd-analyze verify`, where the
//! machine has it) and every `ExecStart` is a command line this binary takes;
//! `layout.rs` runs the shipped layout and checks the alerts and dashboard.

mod layout;

use std::path::{Path, PathBuf};
use std::process::Command;

fn units() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 4, "{v:?}");
    v
}

/// A unit's `ExecStart`, split into words, with `${NAME}` replaced by the
/// unit's own `Environment=NAME=value` default, as systemd does when
/// tidemark.env sets nothing.
fn exec_start(unit: &Path) -> Vec<String> {
    exec_line(unit, "ExecStart=").unwrap_or_else(|| panic!("{}: no ExecStart", unit.display()))
}

/// A unit's `key` line (`ExecStart=`, `ExecStartPre=`) as `exec_start` splits it.
fn exec_line(unit: &Path, key: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(unit).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix(key))?;
    let defaults: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .flat_map(str::split_whitespace)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (format!("${{{k}}}"), v.to_owned()))
        .collect();
    Some(
        line.split_whitespace()
            .map(|w| {
                defaults
                    .iter()
                    .fold(w.to_owned(), |w, (k, v)| w.replace(k, v))
            })
            .collect(),
    )
}

/// The shipped configurations copied into a fresh directory standing for
/// /etc/tidemark (paths pointed into it), with the keys the install step
/// makes (`tidemark keys new`): the fleet's, the proxy's, and the one
/// publisher `publishers.toml` lists.
fn shipped_etc(name: &str) -> PathBuf {
    let etc = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&etc);
    std::fs::create_dir_all(etc.join("publishers")).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config");
    for e in std::fs::read_dir(&shipped).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace(
                "/var/lib/tidemark/checkpoints",
                etc.join("checkpoints").to_str().unwrap(),
            )
            .replace("/etc/tidemark/", &format!("{}/", etc.display()));
        std::fs::write(etc.join(p.file_name().unwrap()), text).unwrap();
    }
    for key in ["fleet.key", "proxy.key", "publishers/bidder-eu1.key"] {
        let out = tidemark_testkit::bin()
            .args(["keys", "new"])
            .arg(etc.join(key))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    etc
}

#[test]
fn every_unit_starts_a_command_line_tidemark_takes() {
    for unit in units() {
        let args = exec_start(&unit);
        assert_eq!(args[0], "/usr/local/bin/tidemark", "{}", unit.display());
        // `--help` after the arguments: clap checks them all, runs nothing.
        let args: Vec<String> = args[1..]
            .iter()
            .map(|a| a.replace("%i", "s0"))
            .chain(["--help".to_owned()])
            .collect();
        let out = tidemark_testkit::bin().args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{}: tidemark {args:?}: {}",
            unit.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A crash loop never leaves a unit failed for good (SPEC 12, v1.3): each
/// start waits out its predecessor's session, so systemd must never stop
/// restarting it.
#[test]
fn every_unit_restarts_without_a_start_limit() {
    for unit in units() {
        let text = std::fs::read_to_string(&unit).unwrap();
        let unit_section = text.split("[Service]").next().unwrap();
        assert!(
            unit_section
                .lines()
                .any(|l| l.trim() == "StartLimitIntervalSec=0"),
            "{}: StartLimitIntervalSec=0 in [Unit]",
            unit.display()
        );
        assert!(
            text.lines().any(|l| l.starts_with("Restart=")),
            "{}",
            unit.display()
        );
    }
}

#[test]
fn the_systemd_units_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no systemd-analyze on this machine");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tidemark-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut names = Vec::new();
    for unit in units() {
        // The built binary stands in for /usr/local/bin/tidemark, which
        // `verify` checks exists; the template is verified as an instance.
        let text = std::fs::read_to_string(&unit)
            .unwrap()
            .replace("/usr/local/bin/tidemark", env!("CARGO_BIN_EXE_tidemark"));
        let name = unit
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .replace("@.", "@s0.");
        std::fs::write(dir.join(&name), text).unwrap();
        names.push(format!("./{name}"));
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&names)
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // verify exits 0 on unknown keys and bad values: any word it says is a failure.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn plan_writes_shard_configurations_that_check_and_never_overwrites() {
    let dir = std::env::temp_dir().join(format!("tidemark-plan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let args = [
        "plan",
        "--rate",
        "0.25",
        "--shards",
        "4",
        "--write-configs",
        d,
    ];
    tidemark_testkit::run_ok(&args);
    let files: Vec<String> = (0..4)
        .map(|i| dir.join(format!("shard-s{i}.toml")).display().to_string())
        .collect();
    let mut check = vec!["plan", "--check"];
    check.extend(files.iter().map(String::as_str));
    let out = tidemark_testkit::run_ok(&check);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("shards 4, sampled share 0.250000000"),
        "{said}"
    );
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        text.contains("endpoints = [\"tcp://127.0.0.1:5556\"]"),
        "{text}"
    );
    // A second plan into the same directory refuses, naming the file.
    let again = tidemark_testkit::bin().args(args).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not overwritten"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn logs_are_json_lines_on_request_and_plain_text_off_a_terminal() {
    let publish = |extra: &[&str]| {
        let out = tidemark_testkit::bin()
            .env("RUST_LOG", "info")
            .args(["publish", "--bind", "tcp://127.0.0.1:*", "--tps", "10"])
            .args(["--duration", "1s", "--warmup", "0s", "--drain", "1s"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let json = publish(&["--log-format", "json"]);
    let lines: Vec<&str> = json.lines().collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
    let text = publish(&[]);
    assert!(text.contains("INFO"), "{text}");
    assert!(!text.contains('\u{1b}'), "colour off a terminal: {text:?}");
    // The fatal line too: a JSON log line with the exit status, or plain text.
    let dir = tidemark_testkit::tmp_dir().join(format!("fatal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = \"s0\"\nendpoints = []\nbogus = 1\n").unwrap();
    let run = |format: &str| {
        tidemark_testkit::bin()
            .args([
                "shard",
                "--config",
                bad.to_str().unwrap(),
                "--log-format",
                format,
            ])
            .output()
            .unwrap()
    };
    let out = run("json");
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8(out.stderr).unwrap();
    let last: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR", "{err}");
    assert_eq!(last["fields"]["exit_status"], 78, "{err}");
    assert!(
        last["fields"]["error"].as_str().unwrap().contains("bogus"),
        "{err}"
    );
    let out = run("text");
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("tidemark: "));
}

#[test]
fn the_database_url_comes_from_the_environment() {
    let db = tidemark_testkit::TestDb::new("env_url");
    let out = tidemark_testkit::bin()
        .env("TIDEMARK_DATABASE_URL", &db.url)
        .args(["export", "--target", "ctr"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("0 observations of ctr"));
    // A URL that leads nowhere fails: the variable is what was used.
    let out = tidemark_testkit::bin()
        .env(
            "TIDEMARK_DATABASE_URL",
            "postgresql://nobody@/none?host=/nonexistent",
        )
        .args(["export", "--target", "ctr"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn the_example_configurations_parse() {
    let dir = shipped_etc("example-etc");
    let c0 = tidemark_shard::Config::from_file(&dir.join("shard-s0.toml")).unwrap();
    for i in 0..4 {
        let c = tidemark_shard::Config::from_file(&dir.join(format!("shard-s{i}.toml"))).unwrap();
        assert_eq!(c.name, format!("s{i}"));
        assert!(
            c.database_url.is_none(),
            "secrets come from the environment"
        );
    }
    let l = tidemark_learner::Config::from_file(&dir.join("learner.toml")).unwrap();
    assert!(l.needs_default_database());
    let p = tidemark_profiles::Config::from_file(&dir.join("profiles.toml")).unwrap();
    for c in [&p.subscription.curve, &c0.subscription.curve] {
        let c = c.as_ref().expect("the shipped configurations use keys");
        assert!(c.publishers.iter().all(|l| l.forwarder), "only the proxy");
    }
    let listed = tidemark_intake::config::read_publishers(&dir.join("publishers.toml")).unwrap();
    assert_eq!(listed[0].name, "bidder-eu1");
    // The proxy binds loopback unless told otherwise, and never 0.0.0.0.
    for unit in units() {
        let args = exec_start(&unit);
        assert!(
            !args.iter().any(|a| a.contains("0.0.0.0")),
            "{}",
            unit.display()
        );
    }
}

#[test]
fn the_proxy_forwards_everything_and_counts_it_by_kind() {
    let (front, back, metrics) = (
        tidemark_testkit::free_addr(),
        tidemark_testkit::free_addr(),
        tidemark_testkit::free_addr(),
    );
    let mut proxy = tidemark_testkit::bin()
        .args(["proxy", "--frontend", &format!("tcp://{front}")])
        .args([
            "--backend",
            &format!("tcp://{back}"),
            "--metrics-addr",
            &metrics,
        ])
        .spawn()
        .unwrap();
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.connect(&format!("tcp://{back}")).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.set_rcvtimeo(50).unwrap();
    let publ = ctx.socket(zmq::PUB).unwrap();
    publ.connect(&format!("tcp://{front}")).unwrap();
    // Ticks until one comes through: the subscription has reached the publisher.
    tidemark_testkit::wait_for("a tick through the proxy", || {
        publ.send("tick", zmq::SNDMORE).unwrap();
        publ.send("{}", 0).unwrap();
        sub.recv_multipart(0).ok()
    });
    while sub.recv_multipart(0).is_ok() {}
    for i in 0..110 {
        let topic = if i < 100 { "bid-0abc" } else { "click-0abc" };
        publ.send(topic, zmq::SNDMORE).unwrap();
        publ.send("{}", 0).unwrap();
    }
    let mut got = 0;
    while sub.recv_multipart(0).is_ok() {
        got += 1;
    }
    assert_eq!(got, 110, "every message forwarded");
    let text = tidemark_testkit::wait_for("the counts", || {
        let t = tidemark_testkit::try_scrape(&metrics)?;
        let clicks =
            tidemark_testkit::metric(&t, r#"tidemark_proxy_messages_total{kind="click"}"#)?;
        (clicks == 10.0).then_some(t)
    });
    let m = |k: &str| {
        tidemark_testkit::metric(
            &text,
            &format!(r#"tidemark_proxy_messages_total{{kind="{k}"}}"#),
        )
    };
    assert_eq!(m("bid"), Some(100.0));
    assert!(m("tick").is_some_and(|t| t >= 1.0));
    assert!(m("subscribe").is_some_and(|t| t >= 1.0), "{text}");
    let _ = proxy.kill();
    let _ = proxy.wait();
}

#[test]
fn a_shard_refused_by_its_database_at_start_exits_saying_so() {
    // Fault campaign: connection refused at start. systemd restarts it
    // (Restart=on-failure); nothing was accepted, so nothing is lost.
    let dir = std::env::temp_dir().join(format!("tidemark-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("s.toml");
    let port = tidemark_testkit::free_addr();
    std::fs::write(
        &cfg,
        format!(
            "name = \"refused\"\nendpoints = [\"tcp://127.0.0.1:1\"]\ndatabase_url = \"postgresql://tidemark@{port}/tidemark\"\n"
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = tidemark_testkit::bin()
        .args(["shard", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("Connection refused"), "{said}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn every_configuration_key_can_come_from_the_environment() {
    let dir = tidemark_testkit::tmp_dir().join(format!("env-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shard = dir.join("s0.toml");
    std::fs::write(
        &shard,
        "name = \"s0\"\nendpoints = [\"tcp://127.0.0.1:5556\"]\n",
    )
    .unwrap();
    let validate = |vars: &[(&str, &str)]| {
        let mut c = tidemark_testkit::bin();
        c.arg("validate").arg(&shard);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    assert!(validate(&[]).status.success());
    // A table's key: a click window shorter than the impression window is
    // refused, so the override was read.
    let out = validate(&[("TIDEMARK_SHARD_WINDOWS__CLICK", "1m")]);
    assert_eq!(out.status.code(), Some(78));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("windows"),
        "{out:?}"
    );
    assert!(validate(&[("TIDEMARK_SHARD_WINDOWS__CLICK", "3h")])
        .status
        .success());
    // A wrong value or a misspelt key names the variable.
    let out = validate(&[("TIDEMARK_SHARD_BATCH_EVENTS", "lots")]);
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TIDEMARK_SHARD_BATCH_EVENTS"));
    let out = validate(&[("TIDEMARK_SHARD_BATCH_EVENT", "5")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean `batch_events`?"));
    // Each process reads its own prefix only.
    assert!(validate(&[("TIDEMARK_PROFILES_MAX_IDS", "lots")])
        .status
        .success());
}

/// Under `Type=notify` a shard says READY=1 once started and WATCHDOG=1
/// while its loop turns (a fake NOTIFY_SOCKET standing for systemd's), and
/// `/readyz` beside `/metrics` says it is ready.
#[test]
fn a_shard_notifies_systemd_and_answers_readyz() {
    use std::os::unix::net::UnixDatagram;
    let dir = tidemark_testkit::tmp_dir().join(format!("notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let db = tidemark_testkit::TestDb::new("notify");
    let addr = tidemark_testkit::free_addr();
    let endpoint = tidemark_testkit::exact::free_endpoint();
    let mut shard = tidemark_testkit::Proc::start_env(
        "shard",
        &db,
        "nt",
        &endpoint,
        format!("metrics_addr = \"{addr}\"\n"),
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 3 {
        let n = sock.recv(&mut buf).expect("a notification within 30 s");
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(got, ["READY=1", "WATCHDOG=1", "WATCHDOG=1"]);
    let ready = tidemark_testkit::try_get(&addr, "/readyz");
    assert_eq!(ready.as_deref(), Some("ready shard\n"));
    shard.stop();
}
