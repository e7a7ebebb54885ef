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
