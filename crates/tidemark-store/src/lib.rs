//! PostgreSQL for Tidemark: what every owner of tables shares.
//!
//! Owns: starting and stopping the private cluster (SPEC 9), the `sql/`
//! migrations (every owner's schema, applied in one order), connections and
//! pools, error classes, [`LockGrace`] and the observation stream (written by
//! shards, read by learners and export). Each owner's own statements are in its `store` module (the
//! shard's buffer, the profile process's tables, the reader's profile
//! columns). Knows nothing of ZeroMQ or of the learner.

#![warn(missing_docs)]

pub mod cluster;
mod migrate;
pub mod observations;

pub use cluster::{Cluster, ClusterError, Status};
pub use migrate::{latest_version, migrate, MIGRATIONS};
/// The connection `connect` returns.
pub use tokio_postgres::Client;

use tokio_postgres::error::SqlState;

/// A database error, with what to do about it (`class`).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An error from the server or the connection.
    #[error("database: {}", describe(.0))]
    Db(#[from] tokio_postgres::Error),
    /// A migration failed.
    #[error("migration {version} failed: {}", describe(.source))]
    Migration {
        /// The migration's version.
        version: i32,
        /// The server's error.
        source: tokio_postgres::Error,
    },
    /// The database is newer than this binary.
    #[error("the database has schema version {0}, newer than this binary knows; upgrade tidemark")]
    SchemaTooNew(i32),
    /// The database URL cannot be parsed, or its TLS files read.
    #[error("bad database url: {0}")]
    Url(String),
    /// The connection pool failed (not the server).
    #[error("connection pool: {0}")]
    Pool(String),
    /// A connection was lost or stopped answering; the work is tried again
    /// on a new one.
    #[error("connection lost: {0}")]
    Lost(String),
    /// A lock this process needs is held by another session (perhaps its
    /// own predecessor's, lost): waited for within `lock_grace`.
    #[error("lock held: {0}")]
    Held(String),
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> StoreError {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::Db(e),
            other => StoreError::Pool(other.to_string()),
        }
    }
}

/// What every session that writes sets (SPEC 12, v1.3): no statement waits
/// on a lock for more than 10 s (the error is transient: the work is tried
/// again, so an operator's idle transaction delays it, never wedges it),
/// and none runs for more than 10 minutes.
pub const WRITER_SESSION: &str = "SET lock_timeout = '10s'; SET statement_timeout = '10min'";

/// How long DDL (creating or dropping a partition) waits for a lock (SPEC
/// 12). `CREATE TABLE … PARTITION OF` and `DROP TABLE` want an exclusive
/// lock on the parent; while they wait, every insert and read of the table
/// queues behind them. An operator's idle transaction holding the parent
/// would stall the whole process; with this bound it costs one second of
/// queueing per attempt, the DDL fails with 55P03 (transient) and is
/// retried later.
pub const DDL_LOCK_TIMEOUT: &str = "1s";

/// Runs `sql` (DDL, one or more statements) in one transaction whose
/// statements wait at most [`DDL_LOCK_TIMEOUT`] for a lock.
pub async fn ddl(c: &tokio_postgres::Client, sql: &str) -> Result<(), StoreError> {
    let batch = format!("BEGIN; SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'; {sql}; COMMIT");
    if let Err(e) = c.batch_execute(&batch).await {
        // A failed batch leaves its transaction open and aborted.
        let _ = c.batch_execute("ROLLBACK").await;
        return Err(e.into());
    }
    Ok(())
}

/// Housekeeping DDL put off because another session held a lock (see
/// [`ddl`]): tried again after a back-off (5 s, doubling to a minute), since
/// each attempt makes the table's users queue for up to
/// [`DDL_LOCK_TIMEOUT`]; logged when it first happens and then at most once
/// a minute, with how often it happened meanwhile, so a long idle
/// transaction is seen without flooding the log.
#[derive(Debug, Default)]
pub struct LockWaits {
    last: Option<std::time::Instant>,
    since: u64,
    retry_at: Option<std::time::Instant>,
    backoff: std::time::Duration,
}

impl LockWaits {
    /// Whether housekeeping may try again now.
    pub fn ready(&self) -> bool {
        self.retry_at.is_none_or(|t| std::time::Instant::now() >= t)
    }

    /// Housekeeping went through: no back-off any more.
    pub fn done(&mut self) {
        self.retry_at = None;
        self.backoff = std::time::Duration::ZERO;
    }

    /// Notes that `what` waited out [`DDL_LOCK_TIMEOUT`] and was put off.
    pub fn put_off(&mut self, what: &str) {
        self.since += 1;
        let now = std::time::Instant::now();
        self.backoff = (self.backoff * 2).clamp(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(60),
        );
        self.retry_at = Some(now + self.backoff);
        if self
            .last
            .is_none_or(|t| now.duration_since(t).as_secs() >= 60)
        {
            tracing::warn!(
                what,
                times = self.since,
                "housekeeping waited {DDL_LOCK_TIMEOUT} for a lock another session holds \
                 (an idle transaction on the table?); put off, intake goes on"
            );
            self.last = Some(now);
            self.since = 0;
        }
    }
}

/// Creates `child` (schema-qualified) as a partition of `parent` for
/// `bounds` (`FOR VALUES …`) without an exclusive lock on the parent: the
/// table is made on its own (`LIKE` the parent, its check constraints
/// included, as attaching demands; its partitioned indexes are made by the
/// attach; `create` is the `CREATE …
/// TABLE` head and `options` its `WITH (…)`, if any), `then` run on it (its
/// own indexes), and it is attached, which takes only SHARE UPDATE EXCLUSIVE
/// on the parent: inserts and reads of the parent, and an operator's open
/// transaction on it, neither wait for it nor make it wait. The child gets
/// the parent's per-column statistics targets (`SET STATISTICS`), which
/// neither `LIKE` nor attaching copies. Idempotent; under [`ddl`]'s lock
/// bound.
pub async fn create_partition(
    c: &tokio_postgres::Client,
    create: &str,
    parent: &str,
    child: &str,
    bounds: &str,
    options: &str,
    then: &str,
) -> Result<(), StoreError> {
    let attach = format!("ALTER TABLE {parent} ATTACH PARTITION {child} {bounds}");
    let sql = format!(
        "{create} IF NOT EXISTS {child} (LIKE {parent} INCLUDING ALL EXCLUDING INDEXES) {options};
         {then};
         DO $attach$ DECLARE a record; BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = '{child}'::regclass) THEN
             -- Only before attaching: on a partition in use, the ALTER
             -- would queue behind its autovacuum.
             FOR a IN SELECT attname, attstattarget FROM pg_attribute
                      WHERE attrelid = '{parent}'::regclass AND attnum > 0
                        AND NOT attisdropped AND attstattarget >= 0 LOOP
               EXECUTE format('ALTER TABLE {child} ALTER COLUMN %I SET STATISTICS %s',
                              a.attname, a.attstattarget);
             END LOOP;
             EXECUTE $sql${attach}$sql$;
           END IF;
         END $attach$"
    );
    ddl(c, &sql).await
}

/// What to do about a database error: retry what may pass, stop on the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The connection or server went away, or a conflict: retry with back-off.
    Transient,
    /// The server is short of a resource (class 53, e.g. a full disk): retry,
    /// never split the batch, since every part would fail alike.
    Resource,
    /// What was asked is refused (classes 22 and 23, program limits such as
    /// 54000): split the batch until the refused events are found.
    Data,
    /// Anything else: retry; if it repeats on a healthy connection, treat as data.
    Unknown,
}

impl StoreError {
    /// Classifies an error for retrying or isolating.
    pub fn class(&self) -> ErrorClass {
        let e = match self {
            // A migration cut off by a lost connection is as transient as
            // any statement: it runs in one transaction, so it is tried
            // again whole (SPEC 12).
            StoreError::Db(e) | StoreError::Migration { source: e, .. } => e,
            // The pool timed out or was closed: the server may come back.
            StoreError::Pool(_) | StoreError::Lost(_) | StoreError::Held(_) => {
                return ErrorClass::Transient
            }
            _ => return ErrorClass::Unknown,
        };
        if e.is_closed() {
            return ErrorClass::Transient;
        }
        let Some(code) = e.code() else {
            // No SQLSTATE: an IO or protocol error on the connection.
            return ErrorClass::Transient;
        };
        let c = code.code();
        // 55P03: a lock not had within `lock_timeout` (DDL, or a row, behind
        // another session's transaction): later it may be. 57014: a
        // statement cancelled (its `statement_timeout`, or an operator's
        // pg_cancel_backend), never an error in what was asked.
        if c.starts_with("08")
            || c.starts_with("57P")
            || c.starts_with("40")
            || c == "55P03"
            || c == "57014"
        {
            ErrorClass::Transient
        } else if c.starts_with("53") {
            ErrorClass::Resource
        } else if c.starts_with("22") || c.starts_with("23") || c.starts_with("54") {
            ErrorClass::Data
        } else {
            ErrorClass::Unknown
        }
    }

    /// Whether the error is a lock not had within `lock_timeout` (see [`ddl`]).
    pub fn is_lock_timeout(&self) -> bool {
        self.sqlstate() == Some("55P03")
    }

    /// The SQLSTATE, when the server gave one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            StoreError::Db(e) | StoreError::Migration { source: e, .. } => {
                e.code().map(|c| c.code())
            }
            _ => None,
        }
    }
}

/// The server's own words for an error, which `tokio_postgres` keeps out of `Display`.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
        if let Some(d) = db.detail() {
            s.push_str(&format!("; {d}"));
        }
        if let Some(w) = db.where_() {
            s.push_str(&format!("; where: {w}"));
        }
        return s;
    }
    match std::error::Error::source(e) {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    }
}

/// A process's own advisory lock found held when it reconnects: for
/// [`LockGrace::LIMIT`] that may be its own lost session (a terminated
/// backend still exiting, or a vanished client the server's keepalives have
/// not yet noticed, within about 35 s), so the refusal is a retryable error;
/// after that the lock is another process's.
#[derive(Debug, Default)]
pub struct LockGrace {
    since: Option<std::time::Instant>,
}

impl LockGrace {
    /// How long a held lock is taken for the process's own lost session.
    pub const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

    /// The lock was found held by backend `pid`: an error to retry with
    /// back-off while within the grace, `None` once past it.
    pub fn refused(&mut self, lock: &str, pid: i32) -> Option<StoreError> {
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        (since.elapsed() < Self::LIMIT).then(|| {
            StoreError::Held(format!(
                "{lock} is still held (pid {pid}), perhaps by this process's lost session; waiting up to {}s",
                Self::LIMIT.as_secs()
            ))
        })
    }

    /// The lock was taken.
    pub fn taken(&mut self) {
        self.since = None;
    }
}

/// Start-up against a database that is away, or whose sessions are cut
/// while a process starts (a restart, a failover): a transient error is
/// tried again with back-off (0.2 s doubling to 5 s) for up to
/// [`Starting::LIMIT`], after which the process exits with it as before.
#[derive(Debug)]
pub struct Starting {
    since: std::time::Instant,
    wait: std::time::Duration,
}

impl Default for Starting {
    fn default() -> Self {
        Starting {
            since: std::time::Instant::now(),
            wait: std::time::Duration::from_millis(200),
        }
    }
}

impl Starting {
    /// How long start-up keeps trying: enough for a restart or a cut
    /// session, short enough that a database that is not there is reported
    /// within half a minute (systemd restarts the unit, `Restart=on-failure`).
    pub const LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

    /// After `e`, how long to wait before trying again; `None` when `e` is
    /// not transient or the limit has passed.
    fn again(&mut self, e: &StoreError) -> Option<std::time::Duration> {
        if e.class() != ErrorClass::Transient || self.since.elapsed() >= Self::LIMIT {
            return None;
        }
        let wait = self.wait;
        self.wait = (self.wait * 2).min(std::time::Duration::from_secs(5));
        Some(wait)
    }

    /// Runs `attempt` until it succeeds or fails for good (an error `store`
    /// finds no transient [`StoreError`] in, or the limit passed), each
    /// retry logged and shown to `retried`; `None` when `stop` completes
    /// first.
    pub async fn run<T, E, F>(
        mut stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        mut attempt: impl FnMut() -> F,
        store: impl Fn(&E) -> Option<&StoreError>,
        mut retried: impl FnMut(&StoreError),
    ) -> Option<Result<T, E>>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        let mut starting = Starting::default();
        loop {
            let e = tokio::select! {
                r = attempt() => match r {
                    Ok(v) => return Some(Ok(v)),
                    Err(e) => e,
                },
                () = &mut stop => return None,
            };
            let Some((s, wait)) = store(&e).and_then(|s| Some((s, starting.again(s)?))) else {
                return Some(Err(e));
            };
            retried(s);
            tracing::warn!(error = %s, "starting: database unavailable, retrying in {wait:?}");
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stop => return None,
            }
        }
    }
}

/// A connection string read as libpq reads it, TLS settings included, with
/// Tidemark's TCP defaults (`tidemark_tls::Target::tcp_defaults`).
fn target(url: &str) -> Result<tidemark_tls::Target, StoreError> {
    let mut t = tidemark_tls::parse(url).map_err(|e| StoreError::Url(e.to_string()))?;
    t.tcp_defaults();
    Ok(t)
}

/// Opens one connection and drives it on the current tokio runtime.
pub async fn connect(url: &str) -> Result<Client, StoreError> {
    open(url, None).await
}

/// [`connect`], naming the connection in `pg_stat_activity.application_name`
/// so an operator (or a benchmark) can tell a process's connections apart.
pub async fn connect_as(url: &str, name: &str) -> Result<Client, StoreError> {
    open(url, Some(name)).await
}

async fn open(url: &str, name: Option<&str>) -> Result<Client, StoreError> {
    let mut target = target(url)?;
    if let Some(name) = name {
        target.config.application_name(name);
    }
    let (client, conn) = target.config.connect(target.tls).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection closed: {e}");
        }
    });
    // The server's side of the keepalives: it ends the session of a client
    // that vanished within about 35 s, and the advisory lock a shard or the
    // profile process held goes with it (a SET, not startup `options`, which
    // poolers such as PgBouncer refuse). No effect over a unix socket.
    // And while a statement runs (a lock wait included), the server checks
    // every 2 s that the client is still there (PostgreSQL 14+): a process
    // killed mid-statement leaves no session holding its locks (SPEC 12).
    client
        .batch_execute(
            "SET tcp_keepalives_idle = 15; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 4; \
             SET client_connection_check_interval = '2s'",
        )
        .await?;
    Ok(client)
}

/// A pool of connections for callers that work concurrently (the learner
/// reading many shard streams; profile readers).
pub type Pool = deadpool_postgres::Pool;

/// A connection taken from a [`Pool`]; it dereferences to a `Client` and
/// goes back to the pool when dropped.
pub type PooledClient = deadpool_postgres::Object;

/// A pool of at most `size` connections to `url`, connecting lazily; a
/// connection found closed is replaced when next taken.
pub fn pool(url: &str, size: usize) -> Result<Pool, StoreError> {
    let target = target(url)?;
    let manager = deadpool_postgres::Manager::from_config(
        target.config,
        target.tls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| StoreError::Pool(e.to_string()))
}

/// Starts the embedded cluster if needed (blocking while it starts), creates
/// its database and applies migrations. Returns the migrations applied now.
pub async fn up(cluster: &Cluster, port: Option<u16>) -> Result<Vec<i32>, UpError> {
    cluster.up(port)?;
    ensure_database(&cluster.url_for("postgres"), cluster::DATABASE).await?;
    let mut client = connect(&cluster.url()).await?;
    // The password TCP asks for (SPEC 9): set whatever the port, so a port
    // opened later finds it. Only its SCRAM verifier reaches the server (no
    // statement log or error can show the password), and not even that is
    // logged. Serialised: several `up`s at once would update the role's row
    // at once.
    let verifier = postgres_protocol::password::scram_sha_256(cluster.password()?.as_bytes());
    set_verifier(&mut client, &verifier).await?;
    Ok(migrate(&mut client).await?)
}

async fn set_verifier(client: &mut Client, verifier: &str) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({PASSWORD_LOCK}); SET LOCAL log_statement = 'none'"
    ))
    .await?;
    // The verifier holds letters, digits and `$:+/=` only: quoting is plain.
    tx.batch_execute(&format!("ALTER ROLE CURRENT_USER PASSWORD '{verifier}'"))
        .await?;
    Ok(tx.commit().await?)
}

/// The advisory lock that serialises setting the embedded role's password.
const PASSWORD_LOCK: i64 = 0x7464_6d6b_7077_6400; // "tdmkpwd"

/// Why the embedded database could not be brought up.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    /// The cluster did not start.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The database could not be created or migrated.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Creates `database` on the server of `admin_url` if it does not exist.
pub async fn ensure_database(admin_url: &str, database: &str) -> Result<bool, StoreError> {
    let client = connect(admin_url).await?;
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&database])
        .await?
        .is_some();
    if exists {
        return Ok(false);
    }
    let sql = format!("CREATE DATABASE {}", quote_ident(database));
    match client.batch_execute(&sql).await {
        Ok(()) => Ok(true),
        // Another process created it between the check and here (which of the
        // two errors depends on how far its CREATE had got).
        Err(e)
            if e.code() == Some(&SqlState::DUPLICATE_DATABASE)
                || e.code() == Some(&SqlState::UNIQUE_VIOLATION) =>
        {
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Drops `database` (disconnecting its sessions) and creates it empty.
pub async fn recreate_database(admin_url: &str, database: &str) -> Result<(), StoreError> {
    let client = connect(admin_url).await?;
    let name = quote_ident(database);
    // Separate statements: CREATE DATABASE cannot run in the implicit transaction of a batch.
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    Ok(())
}

/// Quotes an SQL string literal.
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Quotes an SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A uuid sent as its 16 bytes, read from 32 hex digits (a txid, SPEC 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgUuid(pub [u8; 16]);

impl PgUuid {
    /// The uuid of 32 hex digits (either case), if `hex` is that.
    pub fn from_hex(hex: &str) -> Option<PgUuid> {
        let b = hex.as_bytes();
        if b.len() != 32 {
            return None;
        }
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            *o = digit(b[2 * i])? << 4 | digit(b[2 * i + 1])?;
        }
        Some(PgUuid(out))
    }
}

impl tokio_postgres::types::ToSql for PgUuid {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        bytes::BufMut::put_slice(out, &self.0);
        Ok(tokio_postgres::types::IsNull::No)
    }
    tokio_postgres::types::accepts!(UUID);
    tokio_postgres::types::to_sql_checked!();
}

/// A timestamptz given as milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgTime(pub i64);

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
pub const PG_EPOCH_US: i64 = 946_684_800_000_000;

impl tokio_postgres::types::ToSql for PgTime {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        bytes::BufMut::put_i64(out, self.0 * 1000 - PG_EPOCH_US);
        Ok(tokio_postgres::types::IsNull::No)
    }
    tokio_postgres::types::accepts!(TIMESTAMPTZ);
    tokio_postgres::types::to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::PgUuid;

    #[test]
    fn a_uuid_is_read_from_32_hex_digits_only() {
        let u = PgUuid::from_hex("00ff10Ab000000000000000000000001").unwrap();
        assert_eq!(&u.0[..4], &[0x00, 0xff, 0x10, 0xab]);
        assert_eq!(u.0[15], 1);
        for bad in [
            "",
            "00ff",
            "0g000000000000000000000000000000",
            &"0".repeat(33),
        ] {
            assert_eq!(PgUuid::from_hex(bad), None, "{bad}");
        }
        // Not a byte boundary inside a multi-byte character.
        assert_eq!(PgUuid::from_hex(&format!("é{}", "0".repeat(30))), None);
    }
}
