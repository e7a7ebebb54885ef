//! Several hosts: network namespaces joined by a bridge, made and
//! removed by the test. The test's own namespace is the publisher host
//! (10.213.0.1); hosts `a` and `b` (.2, .3) each run a shard and its own
//! PostgreSQL listening on that host's address only; host `l` (.4) runs the
//! learner, which reads both over TCP. Host `a` is cut off (its cable pulled
//! at the bridge) for a few seconds and brought back.
//!
//! What the design promises, checked here: the publisher queues what `a`
//! cannot take (its per-subscriber queue, `--sndhwm`, far exceeds a few
//! seconds of traffic) and TCP delivers it when `a` is back, so both shards'
//! observations are exactly the reference's: nothing lost on either host.
//! The learner, finding `a` silent, gives up on it after `source_timeout`,
//! goes on learning `b` meanwhile, and catches up on `a` when it is back:
//! every observation of both hosts learned once. (A cut longer than the
//! queue holds blocks the publisher, which never drops: docs/operations.md.)
//!
//! Needs root (namespaces, veth pairs); CI runs as root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tidemark_testkit::exact::{
    assert_same, config_text, counter, expected, finish, market, observed, replay, sent_of,
    wait_all_swept,
};
use tidemark_testkit::{query_i64, wait_for, TestDb};

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the ip command (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces and the bridge; removed when dropped (deleting a
/// namespace deletes the veth ends inside it, and with them their peers).
struct Net {
    tag: String,
}

impl Net {
    const HOSTS: [&'static str; 3] = ["a", "b", "l"];

    fn ns(&self, host: &str) -> String {
        format!("{}{host}", self.tag)
    }

    fn up() -> Net {
        let net = Net {
            tag: format!("tm{}", std::process::id()),
        };
        net.remove();
        let sw = net.ns("sw");
        ip(&["netns", "add", &sw]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        for (i, host) in ["p"].iter().chain(Net::HOSTS.iter()).enumerate() {
            let (end, port) = (format!("{}{host}0", net.tag), format!("{}{host}1", net.tag));
            ip(&["link", "add", &end, "type", "veth", "peer", "name", &port]);
            ip(&["link", "set", &port, "netns", &sw]);
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &sw, "link", "set", &port, "up"]);
            let addr = format!("10.213.0.{}/24", i + 1);
            if *host == "p" {
                // The publisher host is the test's own namespace.
                ip(&["addr", "add", &addr, "dev", &end]);
                ip(&["link", "set", &end, "up"]);
                continue;
            }
            let ns = net.ns(host);
            ip(&["netns", "add", &ns]);
            ip(&["link", "set", &end, "netns", &ns]);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &end]);
            ip(&["-n", &ns, "link", "set", &end, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    /// Pulls (or plugs back) a host's cable at the bridge: inside the host
    /// nothing changes, its own address still answers it.
    fn cable(&self, host: &str, plugged: bool) {
        let port = format!("{}{host}1", self.tag);
        ip(&[
            "-n",
            &self.ns("sw"),
            "link",
            "set",
            &port,
            if plugged { "up" } else { "down" },
        ]);
    }

    fn remove(&self) {
        for host in ["sw", "a", "b", "l"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(host)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &format!("{}p0", self.tag)])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A process on a host, killed if the test ends before stopping it.
struct Proc(Option<Child>, PathBuf);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `tidemark ARGS` inside a host's namespace (`ip netns exec` execs it: the
/// child's pid is the process's).
fn in_host(ns: &str, args: &[&str], log: &Path) -> Proc {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tidemark")])
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Proc(Some(child), log.to_owned())
}

fn run_in_host(ns: &str, args: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tidemark")])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stop(mut p: Proc) {
    let mut child = p.0.take().expect("running");
    let log = p.1.clone();
    tidemark_testkit::signal(child.id(), "TERM");
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "exited with {status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// A PostgreSQL of a host's own, listening on the host's address only
/// (and on its private socket, which only the test uses to check).
struct HostDb {
    home: PathBuf,
    /// The URL the host's processes and the learner use: TCP to the host.
    tcp: String,
    /// The test's view, through the socket.
    db: TestDb,
}

fn host_db(dir: &Path, ns: &str, addr: &str) -> HostDb {
    let home = dir.join(format!("{ns}-home"));
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    let home_s = home.to_str().unwrap();
    run_in_host(ns, &["db", "up", "--home", home_s]);
    let socket = cluster.url();
    // listen_addresses in postgresql.auto.conf wins over tidemark.conf; the
    // network of the hosts may connect (trust: the namespaces are private).
    tidemark_testkit::block_on({
        let (socket, addr) = (socket.clone(), addr.to_owned());
        async move {
            let c = tidemark_store::connect(&socket).await.unwrap();
            c.batch_execute(&format!("ALTER SYSTEM SET listen_addresses = '{addr}'"))
                .await
                .unwrap();
        }
    });
    let hba = home.join("pg/data/pg_hba.conf");
    let mut text = std::fs::read_to_string(&hba).unwrap();
    text.push_str("host all all 10.213.0.0/24 trust\n");
    std::fs::write(&hba, text).unwrap();
    run_in_host(ns, &["db", "down", "--home", home_s]);
    run_in_host(ns, &["db", "up", "--home", home_s]);
    let port = socket
        .rsplit("port=")
        .next()
        .and_then(|p| p.split('&').next())
        .unwrap()
        .to_owned();
    HostDb {
        tcp: format!("postgresql://tidemark@{addr}:{port}/tidemark"),
        db: TestDb::external(ns, &socket),
        home,
    }
}

impl Drop for HostDb {
    fn drop(&mut self) {
        if let Ok(c) = tidemark_store::Cluster::new(&self.home) {
            let _ = c.destroy();
        }
    }
}

fn positions(db: &TestDb) -> i64 {
    query_i64(
        &db.url,
        "SELECT coalesce(sum(seq), 0)::bigint FROM tidemark.consumers WHERE consumer = 'learner'",
    )
    .unwrap_or(0)
}

#[test]
fn several_hosts_one_cut_off_and_brought_back() {
    if not_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hosts");
    std::fs::create_dir_all(&dir).unwrap();
    sweep_leftovers(&dir);
    let net = Net::up();
    let (a_ns, b_ns, l_ns) = (net.ns("a"), net.ns("b"), net.ns("l"));
    let a = host_db(&dir, &a_ns, "10.213.0.2");
    let b = host_db(&dir, &b_ns, "10.213.0.3");
    let m = market("hosts", "2m", 300.0, &[]);
    let endpoint = "tcp://10.213.0.1:5599";
    let halves: [Vec<String>; 2] = [
        "01234567".chars().map(String::from).collect(),
        "89abcdef".chars().map(String::from).collect(),
    ];
    let mut shards = Vec::new();
    for ((name, ns, host), prefixes) in [("a", &a_ns, &a), ("b", &b_ns, &b)]
        .into_iter()
        .zip(&halves)
    {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "name = \"{name}\"\nendpoints = [\"{endpoint}\"]\ndatabase_url = \"{}\"\n{}",
                host.tcp,
                config_text(prefixes, "", "")
            ),
        )
        .unwrap();
        let log = dir.join(format!("{name}.log"));
        shards.push(in_host(
            ns,
            &["shard", "--config", config.to_str().unwrap()],
            &log,
        ));
    }
    let learner_toml = dir.join("learner.toml");
    let checkpoints = dir.join("checkpoints");
    let _ = std::fs::remove_dir_all(&checkpoints);
    tidemark_testkit::config::Config::new()
        .set("checkpoint_dir", checkpoints.as_path())
        .set("checkpoint_interval", "300ms")
        .set("bits", 16usize)
        .set("batch", 500usize)
        .set("poll", "100ms")
        .set("source_timeout", "2s")
        .push(
            "sources",
            &[("name", &"a"), ("database_url", &a.tcp.as_str())],
        )
        .push(
            "sources",
            &[("name", &"b"), ("database_url", &b.tcp.as_str())],
        )
        .write(&learner_toml);
    let learner_log = dir.join("learner.log");
    let learner = in_host(
        &l_ns,
        &["learn", "--config", learner_toml.to_str().unwrap()],
        &learner_log,
    );

    let mut publisher = Some(replay(&m.path, endpoint, "10"));
    // Killed if the test fails before it ends.
    struct Guard<'a>(&'a mut Option<Child>);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let guard = Guard(&mut publisher);
    wait_for("both hosts learned from", || {
        (positions(&a.db) > 0 && positions(&b.db) > 0).then_some(())
    });
    net.cable("a", false);
    // Cut off: the publisher host cannot reach a's database any more.
    let reach = |addr: &str| {
        std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_millis(300))
            .is_ok()
    };
    let a_port = a
        .tcp
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    assert!(!reach(&format!("10.213.0.2:{a_port}")), "a is cut off");
    assert!(reach(&format!("10.213.0.3:{a_port}")), "b is not");
    let (a_at_cut, b_at_cut) = (positions(&a.db), positions(&b.db));
    std::thread::sleep(Duration::from_secs(5));
    let (a_late, b_late) = (positions(&a.db), positions(&b.db));
    net.cable("a", true);
    eprintln!("positions over the cut: a {a_at_cut} -> {a_late}, b {b_at_cut} -> {b_late}");
    assert_eq!(
        a_late, a_at_cut,
        "nothing registered on a while it was cut off"
    );
    assert!(b_late > b_at_cut, "the learner went on with b meanwhile");

    finish(guard.0.take().expect("running"));
    drop(guard);
    let mut total = 0;
    for ((name, host), prefixes) in [("a", &a), ("b", &b)].into_iter().zip(&halves) {
        wait_all_swept(&host.db, name, &m);
        let config = config_text(prefixes, "", "");
        assert_same(
            &format!("host {name}"),
            &observed(&host.db, name),
            &expected(&config, &sent_of(&m.lines)),
        );
        total += query_i64(&host.db.url, "SELECT max(seq) FROM tidemark.observations").unwrap();
        // Nothing lost on the wire, so nothing counted lost either.
        assert_eq!(counter(&host.db, name, "lost_estimate"), 0, "host {name}");
    }
    // Every observation of both hosts learned, once: positions reach each
    // stream's end and the rows learned add up to them.
    let deadline = Instant::now() + Duration::from_secs(60);
    while positions(&a.db) + positions(&b.db) < total {
        assert!(Instant::now() < deadline, "the learner did not catch up");
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(learner);
    let log = std::fs::read_to_string(&learner_log).unwrap();
    assert!(
        log.contains("source_timeout") && log.contains("database is back"),
        "{log}"
    );
    let latest = tidemark_checkpoint::latest(&checkpoints).unwrap();
    let c = tidemark_checkpoint::Checkpoint::read(&latest, false).unwrap();
    let learned: u64 = c.targets.iter().map(|t| t.trained).sum();
    assert_eq!(
        learned as i64, total,
        "rows learned = observations of both hosts"
    );
    for shard in shards {
        stop(shard);
    }
}

/// What a run killed outright left: its hosts' clusters (still running in
/// namespaces no one reaches), its namespaces and the publisher host's link.
fn sweep_leftovers(dir: &Path) {
    // Tagged with the pid of the test process that made them: another run
    // still alive keeps its own.
    let stale = |name: &str, suffixes: &[&str]| {
        name.strip_prefix("tm").is_some_and(|rest| {
            suffixes.iter().any(|s| {
                rest.strip_suffix(s).is_some_and(|n| {
                    !n.is_empty()
                        && n.bytes().all(|b| b.is_ascii_digit())
                        && !Path::new(&format!("/proc/{n}")).exists()
                })
            })
        })
    };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ns = name.strip_suffix("-home").unwrap_or("");
        if stale(ns, &["a", "b"]) {
            if let Ok(c) = tidemark_store::Cluster::new(&e.path()) {
                let _ = c.destroy();
            }
        }
    }
    let list = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    for line in list(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if stale(name, &["sw", "a", "b", "l"]) {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
    for line in list(&["-o", "link", "show"]).lines() {
        // "12: tm123p0@if11: <...>"
        let name = line.split(':').nth(1).unwrap_or("").trim();
        let name = name.split('@').next().unwrap_or("");
        if stale(name, &["p0"]) {
            let _ = Command::new("ip").args(["link", "del", name]).status();
        }
    }
}

fn not_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
        .unwrap_or(true)
}
