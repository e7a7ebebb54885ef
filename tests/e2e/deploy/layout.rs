//! The shipped layout run as systemd would run it, and the monitoring that
//! ships with it: alerts (promtool) and a dashboard whose every query names
//! a metric the layout's processes serve.

use std::path::Path;
use std::process::Command;

use super::{exec_line, exec_start, shipped_etc, units};

/// A process of the layout, started as its unit's `ExecStart` says.
struct Service(std::process::Child, String);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The series names a scrape can hold: each `# TYPE` family with the
/// suffixes of its type.
fn metric_families(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", ""],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for s in suffixes {
            out.insert(format!("{}{s}", name.trim_end_matches("_total")));
        }
    }
    out
}

/// The metric names a file's queries use: `tidemark_*` and `process_*`.
fn queried(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = text;
    while let Some(i) = rest.find(['t', 'p']) {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
        let w = &tail[..end];
        let before = rest[..i].chars().last();
        if !before.is_some_and(word)
            && (w.starts_with("tidemark_") || w.starts_with("process_"))
            && w.len() > 9
        {
            out.insert(w.to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    out
}

#[test]
fn the_shipped_alerts_pass_promtool_and_their_unit_tests() {
    // scripts/test.sh installs Debian's prometheus package for promtool.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts_test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool: run the tests with scripts/test.sh, or apt-get install prometheus");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_shipped_layout_runs_and_every_process_serves_its_metrics() {
    // What systemd would run, without systemd (not on this machine): each
    // unit's ExecStart with /usr/local/bin and /etc/tidemark pointing into
    // this checkout, the shipped configurations (only the checkpoint
    // directory moved), the database URL from the environment as
    // tidemark.env gives it. Fixed ports, as shipped: 5555/5556, 9399-9420.
    let _heavy = tidemark_testkit::HEAVY
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for port in [5555, 5556, 9399, 9400, 9401, 9402, 9403, 9410, 9420] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken: this test runs the layout on its shipped ports"
        );
    }
    let db = tidemark_testkit::TestDb::new("layout");
    let etc = shipped_etc("layout-etc");
    let start = |unit: &Path, instance: &str| {
        let here = |argv: Vec<String>| -> Vec<String> {
            argv.iter()
                .map(|a| {
                    a.replace("/etc/tidemark/", &format!("{}/", etc.display()))
                        .replace("%i", instance)
                })
                .collect()
        };
        // ExecStartPre: the configuration checks out with the database URL
        // tidemark.env gives, and stops the unit without it.
        if let Some(pre) = exec_line(unit, "ExecStartPre=").map(here) {
            let run = |url: Option<&str>| {
                let mut c = tidemark_testkit::bin();
                c.args(&pre[1..]).env_remove("TIDEMARK_DATABASE_URL");
                if let Some(u) = url {
                    c.env("TIDEMARK_DATABASE_URL", u);
                }
                c.output().unwrap()
            };
            let ok = run(Some(&db.url));
            assert!(
                ok.status.success(),
                "{pre:?}: {}",
                String::from_utf8_lossy(&ok.stderr)
            );
            let refused = run(None);
            assert_eq!(
                refused.status.code(),
                Some(78),
                "{pre:?} without a database URL"
            );
        }
        let argv = here(exec_start(unit));
        assert_eq!(argv[0], "/usr/local/bin/tidemark");
        let log = etc.join(format!(
            "{}{instance}.log",
            unit.file_stem().unwrap().to_string_lossy()
        ));
        let out = std::fs::File::create(&log).unwrap();
        let child = tidemark_testkit::bin()
            .env("TIDEMARK_DATABASE_URL", &db.url)
            .env("RUST_LOG", "info")
            .args(&argv[1..])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Service(child, log.display().to_string())
    };
    let unit = |name: &str| units().into_iter().find(|u| u.ends_with(name)).unwrap();
    let mut services = vec![start(&unit("tidemark-proxy.service"), "")];
    for i in 0..4 {
        services.push(start(&unit("tidemark-shard@.service"), &format!("s{i}")));
    }
    services.push(start(&unit("tidemark-profiles.service"), ""));
    services.push(start(&unit("tidemark-learner.service"), ""));

    // The shipped shards run on wall time: a live market, through the
    // proxy, as the publisher its list names, with its own keys, reading
    // persons' profiles as a bidder does (and serving its lookup times).
    let publisher_addr = tidemark_testkit::free_addr();
    let publisher = tidemark_testkit::bin()
        .args([
            "publish",
            "--connect",
            "tcp://127.0.0.1:5555",
            "--tps",
            "300",
        ])
        .args(["--duration", "6s", "--persons", "300", "--warmup", "2s"])
        .args(["--profiles", &db.url, "--metrics-addr", &publisher_addr])
        .args(["--name", "bidder-eu1", "--curve-secret-key"])
        .arg(etc.join("publishers/bidder-eu1.key"))
        .arg("--curve-server-key")
        .arg(etc.join("proxy.key.pub"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut served = tidemark_testkit::wait_for("the publisher's lookups", || {
        let t = tidemark_testkit::try_scrape(&publisher_addr)?;
        t.contains("tidemark_publisher_profile_lookup_duration_seconds_bucket")
            .then_some(t)
    });
    let out = publisher.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let scrape_until = |addr: &str, series: &str| {
        tidemark_testkit::wait_for(&format!("{series} at {addr}"), || {
            let t = tidemark_testkit::try_scrape(addr)?;
            (tidemark_testkit::metric(&t, series)? > 0.0).then_some(())
        })
    };
    scrape_until(
        "127.0.0.1:9399",
        r#"tidemark_proxy_messages_total{kind="bid"}"#,
    );
    for i in 0..4 {
        let addr = format!("127.0.0.1:{}", 9400 + i);
        let s = format!("s{i}");
        scrape_until(
            &addr,
            &format!(r#"tidemark_shard_received_events_total{{shard="{s}",type="bid"}}"#),
        );
        let events = format!(r#"tidemark_shard_buffer_rows{{shard="{s}",tier="events"}}"#);
        // Live traffic waits in the buffer for its windows.
        tidemark_testkit::wait_for("buffered rows", || {
            let n = tidemark_testkit::metric(&tidemark_testkit::try_scrape(&addr)?, &events)?;
            (n > 0.0).then_some(())
        });
    }
    scrape_until(
        "127.0.0.1:9420",
        r#"tidemark_profiles_events_total{profiles="profiles",reason="applied"}"#,
    );
    // No click window (1 h) passes in a test: the learner has nothing to
    // learn yet, and says how old its last checkpoint is.
    tidemark_testkit::wait_for("the learner's endpoint", || {
        let t = tidemark_testkit::try_scrape("127.0.0.1:9410")?;
        tidemark_testkit::metric(&t, "tidemark_learner_checkpoint_age_seconds")
    });
    // Every endpoint names its build and its process's resources.
    for (addr, component) in [
        ("127.0.0.1:9399", "proxy"),
        ("127.0.0.1:9400", "shard"),
        ("127.0.0.1:9410", "learner"),
        ("127.0.0.1:9420", "profiles"),
    ] {
        let t = tidemark_testkit::scrape(addr);
        let build = format!(r#"tidemark_build_info{{component="{component}","#);
        assert!(t.lines().any(|l| l.starts_with(&build)), "{build} in\n{t}");
        let rss = tidemark_testkit::metric(&t, "process_resident_memory_bytes");
        assert!(rss.is_some_and(|b| b > 1e6), "{addr}: {rss:?}");
        let health = tidemark_testkit::try_get(addr, "/healthz");
        assert_eq!(health, Some(format!("ok {component}\n")), "{addr}");
        let ready = tidemark_testkit::try_get(addr, "/readyz");
        assert_eq!(ready, Some(format!("ready {component}\n")), "{addr}");
        served.push_str(&t);
    }
    // Every metric the shipped alerts and dashboard query is one of these
    // processes serves (a family served with no samples yet still has its
    // `# TYPE` line).
    let families = metric_families(&served);
    for file in [
        "deploy/prometheus/alerts.yml",
        "deploy/grafana/tidemark.json",
    ] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        let names = queried(&text);
        assert!(names.len() >= 10, "{file}: {names:?}");
        // The learner's per-target figures appear with a target's first row
        // (no window passes in this test; learn.rs scrapes them).
        let later = [
            "tidemark_learner_rows_total",
            "tidemark_learner_logloss",
            "tidemark_learner_recent_logloss",
        ];
        let unknown: Vec<&String> = names
            .iter()
            .filter(|n| !families.contains(*n) && !later.contains(&n.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} queries metrics no process serves: {unknown:?}"
        );
    }
    // A clean stop of each, as `systemctl stop` sends it (SIGTERM). The
    // proxy holds nothing and ends by the signal itself, which systemd
    // counts as a clean exit too.
    for mut s in services.into_iter().rev() {
        tidemark_testkit::signal(s.0.id(), "TERM");
        let status = s.0.wait().unwrap();
        let by_term = std::os::unix::process::ExitStatusExt::signal(&status) == Some(15);
        assert!(
            status.success() || (by_term && s.1.contains("proxy")),
            "{} exited with {status}: {}",
            s.1,
            std::fs::read_to_string(&s.1).unwrap_or_default()
        );
    }
}
