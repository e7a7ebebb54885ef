//! Test support: one embedded cluster per checkout, a fresh database per test.
//!
//! The cluster lives under `target/tmp/tidemark-test` and is started on first
//! use (reused if a previous run left it up: `just test` stops it afterwards).
//! Each test gets its own database cloned from a migrated template, dropped
//! when the test ends, passing or failing.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use tidemark_store::{quote_ident, Cluster};

/// The `tidemark` binary built for this test run.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    c.env("RUST_LOG", "warn");
    c
}

/// Runs the binary; panics with its output unless it exits 0.
pub fn run_ok(args: &[&str]) -> Output {
    let out = bin().args(args).output().expect("spawn tidemark");
    assert!(
        out.status.success(),
        "tidemark {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a future to completion on a private runtime in its own thread, so
/// sync helpers work from sync tests and from inside `#[tokio::test]` alike.
pub fn block_on<F: Future + Send + 'static>(f: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .join()
    .expect("runtime thread panicked")
}

pub fn test_home() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tidemark-test")
}

struct Shared {
    cluster: Cluster,
    template: String,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let home = test_home();
        run_ok(&["db", "up", "--home", home.to_str().unwrap()]);
        let cluster = Cluster::new(&home).expect("locate the test cluster");
        let template = make_template(&cluster);
        Shared { cluster, template }
    })
}

/// A migrated template database named after the migrations it holds, made once
/// per schema; also drops databases left behind by test processes that died.
fn make_template(cluster: &Cluster) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tidemark_store::MIGRATIONS.hash(&mut h);
    let name = format!("tpl_{:016x}", h.finish());
    let admin = cluster.url_for("postgres");
    let tpl_url = cluster.url_for(&name);
    let name2 = name.clone();
    block_on(async move {
        let admin = tidemark_store::connect(&admin)
            .await
            .expect("connect to the test cluster");
        admin
            .execute("SELECT pg_advisory_lock(7)", &[])
            .await
            .unwrap();
        for row in admin
            .query(
                "SELECT datname FROM pg_database WHERE datname LIKE 't\\_%'",
                &[],
            )
            .await
            .unwrap()
        {
            let db: String = row.get(0);
            let pid = db.split('_').nth(1).unwrap_or("");
            if !PathBuf::from(format!("/proc/{pid}")).exists() {
                let _ = admin
                    .batch_execute(&format!(
                        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                        quote_ident(&db)
                    ))
                    .await;
            }
        }
        let exists = admin
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name2])
            .await
            .unwrap()
            .is_some();
        if !exists {
            admin
                .batch_execute(&format!("CREATE DATABASE {}", quote_ident(&name2)))
                .await
                .unwrap();
            let mut c = tidemark_store::connect(&tpl_url).await.unwrap();
            tidemark_store::migrate(&mut c).await.unwrap();
            drop(c);
            admin
                .batch_execute(&format!(
                    "ALTER DATABASE {} IS_TEMPLATE true",
                    quote_ident(&name2)
                ))
                .await
                .unwrap();
        }
        admin
            .execute("SELECT pg_advisory_unlock(7)", &[])
            .await
            .unwrap();
    });
    name
}

/// A database of its own for one test, dropped when this value is.
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// Not ours to drop: a database on another cluster.
    external: bool,
}

impl TestDb {
    pub fn new(label: &str) -> TestDb {
        static N: AtomicU32 = AtomicU32::new(0);
        let s = shared();
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(30)
            .collect();
        let name = format!(
            "t_{}_{}_{label}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let admin = s.cluster.url_for("postgres");
        let sql = format!(
            "CREATE DATABASE {} TEMPLATE {}",
            quote_ident(&name),
            quote_ident(&s.template)
        );
        block_on(async move {
            let c = tidemark_store::connect(&admin).await.unwrap();
            // Cloning a template fails while another session is connected to it; retry briefly.
            for attempt in 0.. {
                match c.batch_execute(&sql).await {
                    Ok(()) => break,
                    Err(e) if attempt < 50 => {
                        let _ = e;
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("create test database: {e}"),
                }
            }
        });
        TestDb {
            url: s.cluster.url_for(&name),
            name,
            external: false,
        }
    }

    /// A database on a cluster the test manages itself (nothing dropped at the end).
    pub fn external(name: &str, url: &str) -> TestDb {
        TestDb {
            name: name.to_owned(),
            url: url.to_owned(),
            external: true,
        }
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        tidemark_store::connect(&self.url)
            .await
            .expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.external {
            return;
        }
        let admin = shared().cluster.url_for("postgres");
        let sql = format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&self.name)
        );
        block_on(async move {
            if let Ok(c) = tidemark_store::connect(&admin).await {
                let _ = c.batch_execute(&sql).await;
            }
        });
    }
}

/// A test publisher: an XPUB socket on an ephemeral loopback port, so a test
/// can wait until a shard's subscriptions have arrived before sending.
pub struct Publisher {
    sock: zmq::Socket,
    _ctx: zmq::Context,
    pub endpoint: String,
    subscriptions: Vec<Vec<u8>>,
    payload: String,
}

impl Publisher {
    pub fn new() -> Publisher {
        Publisher::with_sndhwm(0)
    }

    /// A publisher whose queue per subscriber holds `hwm` messages (0: no
    /// limit); beyond it PUB/SUB drops, as a real publisher does.
    pub fn with_sndhwm(hwm: i32) -> Publisher {
        let ctx = zmq::Context::new();
        let sock = ctx.socket(zmq::XPUB).unwrap();
        sock.set_sndhwm(hwm).unwrap();
        sock.set_rcvtimeo(100).unwrap();
        // Pass every subscription up, duplicates too: two sockets subscribe to `tick`.
        sock.set_xpub_verbose(true).unwrap();
        sock.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = sock.get_last_endpoint().unwrap().unwrap();
        Publisher {
            sock,
            _ctx: ctx,
            endpoint,
            subscriptions: Vec::new(),
            payload: String::new(),
        }
    }

    /// Waits until `n` subscriptions to `topic` have arrived (each shard subscribes to `tick` twice).
    pub fn wait_subscribed(&mut self, topic: &str, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let have = self
                .subscriptions
                .iter()
                .filter(|s| s.as_slice() == topic.as_bytes())
                .count();
            if have >= n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no subscription to {topic:?} after 20s"
            );
            if let Ok(m) = self.sock.recv_bytes(0) {
                if m.first() == Some(&1) {
                    self.subscriptions.push(m[1..].to_vec());
                }
            }
        }
    }

    pub fn raw(&self, frames: &[&[u8]]) {
        self.sock.send_multipart(frames, 0).unwrap();
    }

    /// Sends an event; `extra` is `"key":value` pairs (may be empty).
    pub fn event(&mut self, type_name: &str, txid: &tidemark_wire::Txid, ts: i64, extra: &str) {
        tidemark_wire::event_payload(&mut self.payload, type_name, txid, ts, extra);
        let topic = tidemark_wire::topic(type_name, txid);
        self.sock
            .send_multipart([topic.as_bytes(), self.payload.as_bytes()], 0)
            .unwrap();
    }

    pub fn tick(&self, ts: i64) {
        self.tick_sent(ts, &[]);
    }

    /// Ticks from `from` to `to` a minute of event time at a time, as a
    /// publisher steps through a quiet stretch (SPEC 3).
    pub fn tick_steps(&self, from: i64, to: i64) {
        let mut t = from;
        while t < to {
            t = (t + 60_000).min(to);
            self.tick(t);
        }
    }

    /// A tick carrying `sent` counts (`<type>-<digit>`, messages sent so far).
    pub fn tick_sent(&self, ts: i64, sent: &[(String, u64)]) {
        let p = tidemark_wire::tick_payload("test", ts, sent);
        self.sock
            .send_multipart([b"tick".as_slice(), p.as_bytes()], 0)
            .unwrap();
    }
}

/// A shard process running the built binary against a test database.
pub struct ShardProc {
    pub child: std::process::Child,
    pub config: PathBuf,
    pub name: String,
    log: PathBuf,
    /// `shard` or `profiles`.
    command: &'static str,
}

impl ShardProc {
    /// Starts `tidemark shard` with `name`, connecting to `endpoint`; `extra` is more TOML.
    pub fn start(db: &TestDb, name: &str, endpoint: &str, extra: &str) -> ShardProc {
        ShardProc::start_multi(db, name, &[endpoint], extra)
    }

    /// Starts a shard connecting to several endpoints.
    pub fn start_multi(db: &TestDb, name: &str, endpoints: &[&str], extra: &str) -> ShardProc {
        ShardProc::start_command("shard", db, name, endpoints, extra)
    }

    /// Starts `tidemark profiles` (SPEC 11) against `db`; `extra` is more TOML.
    pub fn start_profiles(db: &TestDb, name: &str, endpoint: &str, extra: &str) -> ShardProc {
        ShardProc::start_command("profiles", db, name, &[endpoint], extra)
    }

    /// Starts `tidemark profiles` connecting to several endpoints.
    pub fn start_profiles_multi(
        db: &TestDb,
        name: &str,
        endpoints: &[&str],
        extra: &str,
    ) -> ShardProc {
        ShardProc::start_command("profiles", db, name, endpoints, extra)
    }

    /// Writes a configuration (name, endpoints, the test database, `extra`)
    /// under `target/tmp/<command>` and starts `tidemark <command> --config`.
    fn start_command(
        command: &'static str,
        db: &TestDb,
        name: &str,
        endpoints: &[&str],
        extra: &str,
    ) -> ShardProc {
        let endpoint = endpoints.join("\", \"");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(command);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join(format!("{}_{name}.toml", db.name));
        let toml = format!(
            "name = \"{name}\"\nendpoints = [\"{endpoint}\"]\ndatabase_url = \"{}\"\n{extra}\n",
            db.url
        );
        std::fs::write(&config, toml).unwrap();
        ShardProc::spawn(config, name, command)
    }

    fn spawn(config: PathBuf, name: &str, command: &'static str) -> ShardProc {
        let log = config.with_extension("log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = bin()
            .env("RUST_LOG", "info")
            .args([command, "--config", config.to_str().unwrap()])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        ShardProc {
            child,
            config,
            name: name.to_owned(),
            log,
            command,
        }
    }

    /// Starts the same configuration again (after a stop or a kill).
    pub fn restart(&mut self) {
        let _ = self.child.try_wait();
        *self = ShardProc::spawn(self.config.clone(), &self.name, self.command);
    }

    /// SIGTERM, then waits; asserts a clean exit.
    pub fn stop(&mut self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "shard exited with {status}; log:\n{}",
            self.log()
        );
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ShardProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 50 ms until it returns `Some`, for at most 30 s.
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Runs one SQL query returning a single bigint (NULL as None).
pub fn query_i64(url: &str, sql: &str) -> Option<i64> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    block_on(async move {
        let c = tidemark_store::connect(&url).await.ok()?;
        let row = c.query_one(sql.as_str(), &[]).await.ok()?;
        row.get::<_, Option<i64>>(0)
    })
}

/// Rows of a query as strings (each column cast to text by the query).
pub fn query_rows(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        let rows = c.query(sql.as_str(), &[]).await.unwrap();
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<_, Option<String>>(i))
                    .collect()
            })
            .collect()
    })
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A local TCP address nothing listens on now (for a process to bind).
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `GET /metrics` from `addr`: the body (a process's Prometheus metrics).
pub fn scrape(addr: &str) -> String {
    try_scrape(addr).expect("a 200 from the metrics endpoint")
}

/// `scrape`, or `None` while nothing answers 200 there.
pub fn try_scrape(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")).then(|| body.to_owned())
}

/// The value of the sample line `series` (name and labels, as exposed).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Held by tests that load the machine hard (a flood) and by tests whose
/// timing such load disturbs (a PostgreSQL crash under ingest), so the two
/// never overlap.
pub static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Terminates, at random intervals, PostgreSQL sessions whose
/// `application_name` is LIKE `pattern`: a connection cut by a network blip,
/// an operator or a pooler. With `mid_query`, each cut waits (up to 60 ms)
/// for a moment when one of them is running a statement, so cuts fall inside
/// a process's work rather than between it.
pub struct Cutter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Cutter {
    /// Starts cutting every `min_ms..max_ms` (uniform).
    pub fn start(url: &str, pattern: &str, min_ms: u64, max_ms: u64, mid_query: bool) -> Cutter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sql = format!(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::bigint FROM pg_stat_activity
             WHERE application_name LIKE '{}' AND pid <> pg_backend_pid(){}",
            pattern.replace('\'', "''"),
            if mid_query {
                " AND state = 'active'"
            } else {
                ""
            }
        );
        let (url, flag) = (url.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let c = tidemark_store::connect(&url).await.unwrap();
                let mut x = now_ms() as u64 | 1;
                let mut cuts = 0;
                while !flag.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let wait = min_ms + x % (max_ms - min_ms).max(1);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(60);
                    while std::time::Instant::now() < until {
                        let n: i64 = c.query_one(sql.as_str(), &[]).await.unwrap().get(0);
                        cuts += n as u64;
                        if n > 0 || !mid_query {
                            break;
                        }
                    }
                }
                cuts
            })
        });
        Cutter {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops cutting; the number of sessions terminated.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().expect("running").join().unwrap()
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
