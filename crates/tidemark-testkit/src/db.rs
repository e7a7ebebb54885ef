//! One embedded cluster per checkout, a fresh database per test.
//!
//! The cluster lives under `<target>/tmp/tidemark-test` and is started on
//! first use (reused if a previous run left it up). Each test gets its own
//! database cloned from a migrated template, dropped when the test ends,
//! passing or failing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use tidemark_store::Cluster;

use crate::{block_on, run_ok, store};

pub fn test_home() -> PathBuf {
    crate::tmp_dir().join("tidemark-test")
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
    block_on(async move { store::make_template(&admin, &tpl_url, &name2).await });
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
        let (db, template) = (name.clone(), s.template.clone());
        block_on(async move { store::clone_template(&admin, &db, &template).await });
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
        let name = self.name.clone();
        block_on(async move { store::drop_database(&admin, &name).await });
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
