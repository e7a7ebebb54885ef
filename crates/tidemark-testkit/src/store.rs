//! The kit's SQL: test databases made from a migrated template and dropped,
//! and the statement that cuts connections.

use tidemark_store::quote_ident;

/// Makes the template `name` at `tpl_url` if it does not exist (migrated,
/// then marked a template), under an advisory lock so concurrent test
/// binaries make it once; drops databases of test processes that died.
pub(crate) async fn make_template(admin: &str, tpl_url: &str, name: &str) {
    let admin = tidemark_store::connect(admin)
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
        if !std::path::PathBuf::from(format!("/proc/{pid}")).exists() {
            let _ = admin
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    quote_ident(&db)
                ))
                .await;
        }
    }
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await
        .unwrap()
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE {}", quote_ident(name)))
            .await
            .unwrap();
        let mut c = tidemark_store::connect(tpl_url).await.unwrap();
        tidemark_store::migrate(&mut c).await.unwrap();
        drop(c);
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} IS_TEMPLATE true",
                quote_ident(name)
            ))
            .await
            .unwrap();
    }
    admin
        .execute("SELECT pg_advisory_unlock(7)", &[])
        .await
        .unwrap();
}

/// Creates the database `name` as a copy of `template`.
pub(crate) async fn clone_template(admin: &str, name: &str, template: &str) {
    let sql = format!(
        "CREATE DATABASE {} TEMPLATE {}",
        quote_ident(name),
        quote_ident(template)
    );
    let c = tidemark_store::connect(admin).await.unwrap();
    // Cloning a template fails while another session is connected to it; retry briefly.
    for attempt in 0.. {
        match c.batch_execute(&sql).await {
            Ok(()) => break,
            Err(_) if attempt < 50 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("create test database: {e}"),
        }
    }
}

/// Drops the database `name`, sessions and all (nothing if unreachable).
pub(crate) async fn drop_database(admin: &str, name: &str) {
    let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quote_ident(name));
    if let Ok(c) = tidemark_store::connect(admin).await {
        let _ = c.batch_execute(&sql).await;
    }
}

/// Terminates the sessions of the connected database whose
/// `application_name` is LIKE `pattern` (only those running a statement,
/// with `mid_query`); returns how many. Other tests' processes, on other
/// databases of the shared cluster, may carry the same name.
pub(crate) fn cut_statement(pattern: &str, mid_query: bool) -> String {
    format!(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::bigint FROM pg_stat_activity
         WHERE application_name LIKE '{}' AND datname = current_database()
           AND pid <> pg_backend_pid(){}",
        pattern.replace('\'', "''"),
        if mid_query {
            " AND state = 'active'"
        } else {
            ""
        }
    )
}

/// One observation row as a shard wrote it.
pub(crate) struct Row {
    pub target: String,
    pub txid: String,
    pub label: i16,
    pub features: serde_json::Value,
    pub seq: i64,
    pub kind: String,
    pub delay_ms: Option<i64>,
}

/// A shard's observations in `seq` order.
pub(crate) async fn observations(url: &str, shard: &str) -> Vec<Row> {
    let c = tidemark_store::connect(url).await.unwrap();
    c.query(
        "SELECT target, txid, label, features, seq, kind, delay_ms FROM tidemark.observations
         WHERE shard = $1 ORDER BY seq",
        &[&shard],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| Row {
        target: r.get(0),
        txid: r.get(1),
        label: r.get(2),
        features: r.get(3),
        seq: r.get(4),
        kind: r.get(5),
        delay_ms: r.get(6),
    })
    .collect()
}

/// The sum of a shard's counter, as one bigint.
pub(crate) fn counter_query(shard: &str, name: &str) -> String {
    format!(
        "SELECT coalesce(sum(value), 0)::bigint FROM tidemark.shard_counters WHERE shard = '{}' AND name = '{}'",
        shard.replace('\'', "''"),
        name.replace('\'', "''")
    )
}

/// A shard's saved clock, as one bigint.
pub(crate) fn clock_query(shard: &str) -> String {
    format!(
        "SELECT clock_ms FROM tidemark.shards WHERE name = '{}'",
        shard.replace('\'', "''")
    )
}

/// Broken person invariants, one row each: an identifier without a person,
/// a person whose master is not one of its identifiers, a wrong size.
pub(crate) const BROKEN_PERSONS: &str =
    "SELECT 'orphan ' || i.id FROM tidemark.profile_ids i LEFT JOIN tidemark.profiles p USING (person)
       WHERE p.person IS NULL
     UNION ALL SELECT 'masterless ' || p.person FROM tidemark.profiles p
       LEFT JOIN tidemark.profile_ids m ON m.id = p.master AND m.person = p.person WHERE m.id IS NULL
     UNION ALL SELECT 'size ' || p.person FROM tidemark.profiles p
       WHERE p.size <> (SELECT count(*) FROM tidemark.profile_ids i WHERE i.person = p.person)";

/// The identifiers of the person holding `id`, bytewise.
pub(crate) fn members_query(id: &str) -> String {
    format!(
        "SELECT o.id FROM tidemark.profile_ids me JOIN tidemark.profile_ids o USING (person)
         WHERE me.id = '{}' ORDER BY o.id COLLATE \"C\"",
        id.replace('\'', "''")
    )
}

/// The blocklist: `(identifier, refusals)`.
pub(crate) const BLOCKLIST: &str =
    "SELECT identifier, refusals::text FROM tidemark.profile_blocklist ORDER BY 1";

/// Identifiers charged refusals: `(id, refusals)`, bytewise.
pub(crate) const REFUSALS: &str =
    "SELECT id, refusals::text FROM tidemark.profile_ids WHERE refusals > 0 ORDER BY id COLLATE \"C\"";

/// The merge log: `(ts, txid, master, absorbed)`.
pub(crate) const MERGES: &str =
    "SELECT ts::text, txid, master, absorbed FROM tidemark.profile_merges";

/// An operator's transaction left open: a session that holds what it
/// took (a row, a table lock) until the test ends it.
/// An open transaction on a connection of its own (and a runtime that
/// drives it between calls).
pub struct Operator {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Operator {
    /// Connects to `url` and runs `BEGIN; <sql>`, leaving the transaction open.
    pub fn begin(url: &str, sql: &str) -> Operator {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(tidemark_store::connect(url)).unwrap();
        rt.block_on(client.batch_execute(&format!("BEGIN; {sql}")))
            .unwrap();
        Operator { rt, client }
    }

    /// Commits: what it held is let go.
    pub fn commit(self) {
        self.rt
            .block_on(self.client.batch_execute("COMMIT"))
            .unwrap();
    }
}
