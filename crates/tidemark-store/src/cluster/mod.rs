//! The embedded PostgreSQL cluster (SPEC 9): a private server under
//! `$TIDEMARK_HOME`, started from the server binaries installed on the machine.
//!
//! Layout, for a home `H`:
//! - `H/db.lock`: serialises `up` and `down` across processes.
//! - the cluster directory (`data/`, `server.log`, the unix socket):
//!   `H/pg` when not root; when root, PostgreSQL refuses to run, so the server runs
//!   as an unprivileged user and its directory is `/var/tmp/tidemark-<hash of H>`
//!   (reachable by that user even when `H` is in a root-only directory), with
//!   `H/pg` a symlink to it.
//!
//! The server listens on a unix socket only, in a directory only its user can
//! enter, unless a loopback TCP port is asked for; on TCP it asks for a
//! password (SCRAM), generated once into `H/db.password` (mode 0600). Its
//! directories are made fresh with mode 0700, never through a symbolic
//! link, and an existing one is used only if it is a real directory owned by
//! the server's user; their names come from a hash of `H` that does not
//! change when Tidemark is rebuilt (FNV-1a, not the standard library's
//! unspecified hasher). As root, what Tidemark reads and writes inside them
//! it reads and writes as the server's user (`files`).
//!
//! This module holds the handle ([`Cluster`]: its layout, connection
//! strings and status); by concern: `binaries` (finding and running the
//! server's), `user` (the account it runs as under root), `lifecycle` (up,
//! down, crash, destroy, the lock and the private directories), `settings`
//! (initdb and `tidemark.conf`), `access` (SCRAM on TCP and its password),
//! `tls` (the server's certificate and key), `standby` (the hot standby) and
//! `files` (reading and writing as the server's user).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

mod access;
mod binaries;
mod files;
mod lifecycle;
mod settings;
mod standby;
mod tls;
mod user;

pub use binaries::find_bindir;
pub use user::User;

use binaries::{BINDIR_GLOB_ROOT, MIN_MAJOR};
use user::unprivileged_user;

const SUPERUSER: &str = "tidemark";
/// The embedded cluster's database.
pub const DATABASE: &str = "tidemark";
/// The port number names the socket file even when no TCP port is open.
const DEFAULT_PORT: u16 = 5432;
/// In `$TIDEMARK_HOME`: the cluster keeps WAL for a hot standby.
const REPLICATION_MARKER: &str = "db.replication";

/// Why the embedded cluster cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries (version {MIN_MAJOR} or later) found: looked in \
         $TIDEMARK_PG_BINDIR, PATH, `pg_config --bindir` and {BINDIR_GLOB_ROOT}/*/bin. \
         Install them, e.g. `apt-get install postgresql` on Debian/Ubuntu \
         (or `postgresql-server` on Fedora), or set database_url to use an existing server"
    )]
    /// No server binaries were found.
    NoBinaries,
    /// Running as root with no unprivileged user for the server.
    #[error(
        "running as root, but no unprivileged user to run PostgreSQL as ({0}); create one \
         (e.g. `useradd --system postgres`) or name another with TIDEMARK_PG_USER"
    )]
    NoUser(String),
    #[error("{what} failed: {detail}")]
    /// A command (initdb, pg_ctl, ...) failed.
    Command {
        /// The command.
        what: String,
        /// Its output.
        detail: String,
    },
    /// A file or directory could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError + '_ {
    move |source| ClusterError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A handle on the embedded cluster of one `$TIDEMARK_HOME`.
#[derive(Debug, Clone)]
pub struct Cluster {
    home: PathBuf,
    dir: PathBuf,
    bindir: PathBuf,
    run_as: Option<User>,
    /// A hot standby of the home's cluster (see [`Cluster::standby`]).
    standby: bool,
}

/// Whether the server is running, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// No cluster in this home yet.
    NotInitialised,
    /// Initialised, not running.
    Stopped,
    /// Running.
    Running {
        /// Its connection string.
        url: String,
    },
}

impl Cluster {
    /// The home from `$TIDEMARK_HOME`, else `./.tidemark`.
    pub fn default_home() -> PathBuf {
        std::env::var_os("TIDEMARK_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".tidemark"))
    }

    /// Finds the binaries and works out the layout; creates `home` if needed.
    pub fn new(home: &Path) -> Result<Cluster, ClusterError> {
        fs::create_dir_all(home).map_err(io_err(home))?;
        let home = fs::canonicalize(home).map_err(io_err(home))?;
        let bindir = find_bindir().ok_or(ClusterError::NoBinaries)?;
        let root = fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false);
        let (dir, run_as) = if root {
            let user = unprivileged_user()?;
            let named = PathBuf::from(format!(
                "/var/tmp/tidemark-{:016x}",
                stable_hash(home.as_os_str().as_encoded_bytes())
            ));
            // A cluster made before names were stable is found by its link.
            let linked = fs::read_link(home.join("pg"))
                .ok()
                .filter(|d| d.starts_with("/var/tmp") && d.join("data/PG_VERSION").exists());
            (linked.unwrap_or(named), Some(user))
        } else {
            (home.join("pg"), None)
        };
        Ok(Cluster {
            home,
            dir,
            bindir,
            run_as,
            standby: false,
        })
    }

    /// The `$TIDEMARK_HOME` it belongs to.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The cluster's directory (`H/pg`, or under `/var/tmp` as root).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of the PostgreSQL binaries it runs.
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The directory holding the socket: the cluster directory, unless its path
    /// is too long for a unix socket address (108 bytes).
    fn socket_dir(&self) -> PathBuf {
        if self.dir.as_os_str().len() < 80 {
            return self.dir.clone();
        }
        let h = stable_hash(self.dir.as_os_str().as_encoded_bytes());
        std::env::temp_dir().join(format!("tidemark-sock-{h:016x}"))
    }

    /// The connection string of the `tidemark` database.
    pub fn url(&self) -> String {
        let port = self.port().unwrap_or(DEFAULT_PORT);
        format!(
            "postgresql://{SUPERUSER}@/{DATABASE}?host={}&port={port}",
            self.socket_dir().display()
        )
    }

    /// The same server, another database.
    pub fn url_for(&self, database: &str) -> String {
        self.url()
            .replacen(&format!("/{DATABASE}?"), &format!("/{database}?"), 1)
    }

    fn port(&self) -> Option<u16> {
        let conf = fs::read_to_string(self.data().join("tidemark.conf")).ok()?;
        conf.lines()
            .find_map(|l| l.strip_prefix("port = "))
            .and_then(|p| p.trim().parse().ok())
    }

    /// Whether the server runs, and where.
    pub fn status(&self) -> Result<Status, ClusterError> {
        if !self.data().join("PG_VERSION").exists() {
            return Ok(Status::NotInitialised);
        }
        let out = self.pg_ctl(&["status"])?;
        Ok(match out.status.code() {
            Some(0) => Status::Running { url: self.url() },
            _ => Status::Stopped,
        })
    }
}

/// FNV-1a: a hash that stays the same across builds and Rust releases.
fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
