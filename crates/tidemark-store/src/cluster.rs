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

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod files;

/// Where to find the server binaries, in order, after `$TIDEMARK_PG_BINDIR`.
const BINDIR_GLOB_ROOT: &str = "/usr/lib/postgresql";
const MIN_MAJOR: u32 = 15;
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

/// The server's certificate and key in the data directory ([`Cluster::use_tls`]).
const TLS_CERT: &str = "server.crt";
const TLS_KEY: &str = "server.key";

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError + '_ {
    move |source| ClusterError::Io {
        path: path.to_owned(),
        source,
    }
}

/// An unprivileged account to run the server as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The account's name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
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

    /// The hot standby of this home's cluster: its own directory (the
    /// cluster's with `-standby` appended) and socket, a copy of the primary
    /// made with `pg_basebackup -R`, streaming from it and answering
    /// read-only queries. Started with [`Cluster::start_standby`]; `status`,
    /// `url`, `down`, `crash` and `destroy` work on it as on the primary.
    pub fn standby(&self) -> Cluster {
        let mut dir = self.dir.clone().into_os_string();
        dir.push("-standby");
        Cluster {
            dir: PathBuf::from(dir),
            standby: true,
            ..self.clone()
        }
    }

    /// This home's standby when `standby`, else this cluster.
    pub fn or_standby(&self, standby: bool) -> Cluster {
        if standby {
            self.standby()
        } else {
            self.clone()
        }
    }

    /// Starts this home's hot standby (made first if needed): the primary
    /// is switched to `wal_level = replica` (a restart, once; WAL then
    /// also carries bulk loads `minimal` skips, and 1 GB of it is kept for a
    /// standby that falls behind) and must be running. Returns whether the standby was
    /// started by this call.
    pub fn start_standby(&self) -> Result<bool, ClusterError> {
        let marker = self.home.join(REPLICATION_MARKER);
        if !marker.exists() {
            fs::write(
                &marker,
                "a hot standby streams from this cluster (tidemark db up --standby)\n",
            )
            .map_err(io_err(&marker))?;
        }
        if !self.pg_ctl(&["status"])?.status.success() {
            return Err(ClusterError::Command {
                what: "starting a standby".into(),
                detail: "the primary is not running: `tidemark db up` first".into(),
            });
        }
        // Restarts the primary if its replication settings just changed.
        self.up(None)?;
        let standby = self.standby();
        let _lock = standby.lock()?;
        standby.prepare_dirs()?;
        if !standby.data().join("PG_VERSION").exists() {
            standby.base_backup(self)?;
        }
        standby.write_conf(None)?;
        if standby.pg_ctl(&["status"])?.status.success() {
            return Ok(false);
        }
        standby.start()?;
        Ok(true)
    }

    /// Copies `primary` into this (empty) standby's data directory, with
    /// `standby.signal` and `primary_conninfo` (`-R`), WAL streamed alongside.
    fn base_backup(&self, primary: &Cluster) -> Result<(), ClusterError> {
        let data = self.data();
        if data.exists() {
            fs::remove_dir_all(&data).map_err(io_err(&data))?;
        }
        let out = self
            .command("pg_basebackup")
            .arg("-D")
            .arg(&data)
            .arg("-h")
            .arg(primary.socket_dir())
            .args([
                "-p",
                &primary.port().unwrap_or(DEFAULT_PORT).to_string(),
                "-U",
                SUPERUSER,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ])
            .output()
            .map_err(io_err(&self.bindir))?;
        self.checked(out, "pg_basebackup")
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

    /// The password of the `tidemark` role on TCP, generated once into
    /// `H/db.password`, readable by its owner only.
    pub fn password(&self) -> Result<String, ClusterError> {
        let path = self.home.join("db.password");
        match fs::read_to_string(&path) {
            Ok(p) if !p.trim().is_empty() => return Ok(p.trim().to_owned()),
            // Left empty by a crash between create and write: made again.
            Ok(_) => fs::remove_file(&path).map_err(io_err(&path))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        let mut bytes = [0u8; 24];
        File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(io_err(Path::new("/dev/urandom")))?;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let password: String = bytes
            .iter()
            .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
            .collect();
        // One temporary file per process: `up`s may run at once.
        let tmp = path.with_extension(format!("password.{}.tmp", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        writeln!(f, "{password}").map_err(io_err(&tmp))?;
        // Written whole before it appears: the first link wins and every
        // caller then reads the same password.
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(password),
            // Another process's came first: that one it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => self.password(),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// The TCP connection string, password included, when a loopback port
    /// is open (`db up --port`).
    pub fn tcp_url(&self) -> Result<Option<String>, ClusterError> {
        let conf = fs::read_to_string(self.data().join("tidemark.conf")).unwrap_or_default();
        if !on_tcp(&conf) {
            return Ok(None);
        }
        let port = self.port().unwrap_or(DEFAULT_PORT);
        let password = self.password()?;
        Ok(Some(format!(
            "postgresql://{SUPERUSER}:{password}@127.0.0.1:{port}/{DATABASE}"
        )))
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

    /// Initialises the cluster if needed and starts it if stopped. Safe to call
    /// from several processes at once. `tcp_port` opens a loopback port.
    /// Returns whether this call started the server.
    pub fn up(&self, tcp_port: Option<u16>) -> Result<bool, ClusterError> {
        if self.standby {
            return Err(ClusterError::Command {
                what: "db up".into(),
                detail: "a standby is made and started from its primary (start_standby)".into(),
            });
        }
        let _lock = self.lock()?;
        self.prepare_dirs()?;
        if !self.data().join("PG_VERSION").exists() {
            self.initdb()?;
        }
        let conf_changed = self.write_conf(tcp_port)? | self.scram_on_tcp()?;
        let running = self.pg_ctl(&["status"])?.status.success();
        if running && !conf_changed {
            return Ok(false);
        }
        if running {
            self.checked(self.pg_ctl(&["stop", "-m", "fast", "-w"])?, "pg_ctl stop")?;
        }
        self.start()?;
        Ok(true)
    }

    fn start(&self) -> Result<(), ClusterError> {
        let log = self.log();
        let out = self.pg_ctl(&["start", "-w", "-t", "120", "-l", &log.to_string_lossy()])?;
        if !out.status.success() {
            let tail = files::read(self.run_as.as_ref(), &log)
                .ok()
                .flatten()
                .unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(15).collect();
            return Err(ClusterError::Command {
                what: "pg_ctl start".into(),
                detail: format!(
                    "{}\nlast lines of {}:\n{}",
                    String::from_utf8_lossy(&out.stderr).trim(),
                    log.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ),
            });
        }
        Ok(())
    }

    /// Serves TLS from now on (with the next `up`): the certificate (chain)
    /// and key are copied into the data directory, owned by the server's
    /// user and readable by it alone, as PostgreSQL demands of a key.
    /// Clients choose with `sslmode`; plain connections stay allowed.
    pub fn use_tls(&self, cert: &Path, key: &Path) -> Result<(), ClusterError> {
        let _lock = self.lock()?;
        self.prepare_dirs()?;
        if !self.data().join("PG_VERSION").exists() {
            self.initdb()?;
        }
        for (from, name) in [(cert, TLS_CERT), (key, TLS_KEY)] {
            let to = self.data().join(name);
            let bytes = fs::read(from).map_err(io_err(from))?;
            files::write(self.run_as.as_ref(), &to, &bytes).map_err(io_err(&to))?;
        }
        Ok(())
    }

    /// Stops the server if it runs. Returns whether it was running.
    pub fn down(&self) -> Result<bool, ClusterError> {
        let _lock = self.lock()?;
        if !self.data().join("PG_VERSION").exists() {
            return Ok(false);
        }
        if !self.pg_ctl(&["status"])?.status.success() {
            return Ok(false);
        }
        self.checked(
            self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "120"])?,
            "pg_ctl stop",
        )?;
        Ok(true)
    }

    /// Stops the server the way a crash would (`pg_ctl stop -m immediate`): no
    /// checkpoint, so the next start runs crash recovery and empties every
    /// unlogged table. For tests and drills.
    pub fn crash(&self) -> Result<(), ClusterError> {
        let _lock = self.lock()?;
        self.checked(
            self.pg_ctl(&["stop", "-m", "immediate", "-w"])?,
            "pg_ctl stop -m immediate",
        )
    }

    /// Makes this standby a primary (`pg_ctl promote`), starting it first
    /// if it is stopped, with or without its primary: a failover drill. It
    /// keeps what it had replayed; its old primary must not run again beside
    /// it (their histories part), so `destroy` the home afterwards.
    pub fn promote(&self) -> Result<(), ClusterError> {
        if !self.standby {
            return Err(ClusterError::Command {
                what: "promote".into(),
                detail: "only a standby is promoted".into(),
            });
        }
        let _lock = self.lock()?;
        if !self.pg_ctl(&["status"])?.status.success() {
            // Its socket directory may have been cleaned away meanwhile.
            self.prepare_dirs()?;
            self.start()?;
        }
        self.checked(
            self.pg_ctl(&["promote", "-w", "-t", "120"])?,
            "pg_ctl promote",
        )
    }

    /// Stops the server and deletes the cluster's files.
    pub fn destroy(&self) -> Result<(), ClusterError> {
        if !self.standby {
            // A standby copied from this cluster cannot follow a new one.
            self.standby().destroy()?;
            let marker = self.home.join(REPLICATION_MARKER);
            if marker.exists() {
                fs::remove_file(&marker).map_err(io_err(&marker))?;
            }
        }
        self.down()?;
        for dir in [self.dir.clone(), self.socket_dir()] {
            if dir.exists() {
                fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
            }
        }
        let link = self.home.join("pg");
        if !self.standby && fs::symlink_metadata(&link).is_ok() {
            let _ = fs::remove_file(&link);
        }
        Ok(())
    }

    fn lock(&self) -> Result<File, ClusterError> {
        // The standby's own: starting it holds it while the primary's is taken.
        let path = self.home.join(if self.standby {
            "db-standby.lock"
        } else {
            "db.lock"
        });
        let f = File::create(&path).map_err(io_err(&path))?;
        f.lock().map_err(io_err(&path))?;
        Ok(f)
    }

    /// Creates the cluster and socket directories, owned by the server's
    /// user, mode 0700: fresh, never through a link; an existing one only if
    /// it is a real directory that user owns.
    fn prepare_dirs(&self) -> Result<(), ClusterError> {
        let owner = match &self.run_as {
            Some(u) => u.uid,
            None => fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0),
        };
        for dir in [self.dir.clone(), self.socket_dir()] {
            match fs::symlink_metadata(&dir) {
                Ok(m) if m.file_type().is_dir() && m.uid() == owner => {}
                Ok(_) => {
                    return Err(ClusterError::Command {
                        what: format!("using {}", dir.display()),
                        detail: format!(
                            "it exists but is not a directory owned by uid {owner} (a link, or \
                             another user's): refusing it; remove it if it is yours"
                        ),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&dir)
                        .map_err(io_err(&dir))?;
                    if let Some(u) = &self.run_as {
                        std::os::unix::fs::chown(&dir, Some(u.uid), Some(u.gid))
                            .map_err(io_err(&dir))?;
                    }
                }
                Err(e) => return Err(io_err(&dir)(e)),
            }
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io_err(&dir))?;
        }
        if self.run_as.is_some() && !self.standby {
            let link = self.home.join("pg");
            if fs::read_link(&link).ok().as_deref() != Some(self.dir.as_path()) {
                let _ = fs::remove_file(&link);
                std::os::unix::fs::symlink(&self.dir, &link).map_err(io_err(&link))?;
            }
        }
        Ok(())
    }

    fn initdb(&self) -> Result<(), ClusterError> {
        let data = self.data();
        // A half-made data directory from an interrupted initdb would make it refuse.
        if data.exists() {
            fs::remove_dir_all(&data).map_err(io_err(&data))?;
        }
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                SUPERUSER,
                "-E",
                "UTF8",
                "--locale=C",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
            ])
            .output()
            .map_err(io_err(&self.bindir))?;
        self.checked(out, "initdb")?;
        let conf = data.join("postgresql.conf");
        let run_as = self.run_as.as_ref();
        let mut text = files::read(run_as, &conf)
            .map_err(io_err(&conf))?
            .unwrap_or_default();
        text.push_str("\ninclude_if_exists = 'tidemark.conf'\n");
        files::write(run_as, &conf, text.as_bytes()).map_err(io_err(&conf))
    }

    /// Makes TCP ask for a password in a cluster made when it did not
    /// (initdb's `host … trust` lines for loopback become
    /// `scram-sha-256`; other lines, an operator's, are kept). Returns
    /// whether the file changed.
    fn scram_on_tcp(&self) -> Result<bool, ClusterError> {
        let path = self.data().join("pg_hba.conf");
        let old = files::read(self.run_as.as_ref(), &path)
            .map_err(io_err(&path))?
            .unwrap_or_default();
        let new: String = old
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let loopback = f.len() == 5
                    && f[0] == "host"
                    && (f[3] == "127.0.0.1/32" || f[3] == "::1/128")
                    && f[4] == "trust";
                if loopback {
                    format!("{} {} {} {} scram-sha-256\n", f[0], f[1], f[2], f[3])
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        if new == old {
            return Ok(false);
        }
        files::write(self.run_as.as_ref(), &path, new.as_bytes()).map_err(io_err(&path))?;
        Ok(true)
    }

    /// Writes the settings Tidemark owns; returns whether they changed.
    fn write_conf(&self, tcp_port: Option<u16>) -> Result<bool, ClusterError> {
        let path = self.data().join("tidemark.conf");
        let old = files::read(self.run_as.as_ref(), &path)
            .map_err(io_err(&path))?
            .unwrap_or_default();
        // Keep a port asked for earlier unless a new one is given; a standby
        // listens on its own socket only (its copied settings hold the primary's port).
        let port = match self.standby {
            true => None,
            false => tcp_port.or_else(|| on_tcp(&old).then(|| self.port()).flatten()),
        };
        let replication = self.home.join(REPLICATION_MARKER).exists();
        let wal = if replication {
            "# A hot standby streams from this cluster (tidemark db up --standby).\n\
             wal_level = replica\n\
             max_wal_senders = 5\n\
             wal_keep_size = 1GB\n\
             hot_standby = on\n\
             # A silent primary is pinged after half this; readers count longer silences as lag.\n\
             wal_receiver_timeout = 10s\n"
        } else {
            "# Buffer tables are unlogged; keep WAL small for the logged rest.\n\
             wal_level = minimal\n\
             max_wal_senders = 0\n"
        };
        let listen = if port.is_some() { "127.0.0.1" } else { "" };
        let tls = if self.data().join(TLS_CERT).exists() && self.data().join(TLS_KEY).exists() {
            format!("ssl = on\nssl_cert_file = '{TLS_CERT}'\nssl_key_file = '{TLS_KEY}'\n")
        } else {
            String::new()
        };
        let conf = format!(
            "# Written by `tidemark db up`; edits are overwritten.\n\
             listen_addresses = '{listen}'\n\
             port = {port}\n\
             unix_socket_directories = '{socket}'\n\
             unix_socket_permissions = 0700\n\
             max_connections = 200\n\
             shared_buffers = 256MB\n\
             work_mem = 16MB\n\
             maintenance_work_mem = 128MB\n\
             {wal}\
             max_wal_size = 2GB\n\
             checkpoint_timeout = 15min\n\
             # Buffer tables churn: vacuum them early and often (seed 004).\n\
             autovacuum_naptime = 5s\n\
             autovacuum_vacuum_scale_factor = 0.02\n\
             autovacuum_vacuum_insert_scale_factor = 0.05\n\
             autovacuum_analyze_scale_factor = 0.02\n\
             autovacuum_vacuum_cost_limit = 2000\n\
             autovacuum_vacuum_cost_delay = 1ms\n\
             # Sessions that write only unlogged buffers turn synchronous_commit off themselves.\n\
             log_min_messages = warning\n\
             log_checkpoints = off\n\
             {tls}",
            port = port.unwrap_or(DEFAULT_PORT),
            socket = self.socket_dir().display(),
        );
        if conf == old {
            return Ok(false);
        }
        files::write(self.run_as.as_ref(), &path, conf.as_bytes()).map_err(io_err(&path))?;
        Ok(true)
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output, ClusterError> {
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(args)
            .output()
            .map_err(io_err(&self.bindir))
    }

    /// A server binary, run as the server's user, from a directory that user can enter.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bindir.join(program));
        c.current_dir(&self.dir)
            .env("LC_ALL", "C")
            .env_remove("PGDATA");
        if let Some(u) = &self.run_as {
            c.uid(u.uid)
                .gid(u.gid)
                .env("USER", &u.name)
                .env("HOME", &self.dir);
        }
        c
    }

    fn checked(&self, out: Output, what: &str) -> Result<(), ClusterError> {
        if out.status.success() {
            return Ok(());
        }
        Err(ClusterError::Command {
            what: what.to_owned(),
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// The server's bin directory: `$TIDEMARK_PG_BINDIR`, PATH, `pg_config --bindir`,
/// then the newest `/usr/lib/postgresql/<major>/bin` with major ≥ 15.
pub fn find_bindir() -> Option<PathBuf> {
    let has_server = |d: &Path| {
        d.join("postgres").is_file() && d.join("initdb").is_file() && d.join("pg_ctl").is_file()
    };
    if let Some(d) = std::env::var_os("TIDEMARK_PG_BINDIR").map(PathBuf::from) {
        return has_server(&d).then_some(d);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut candidates: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        }
    }
    let mut versioned: Vec<(u32, PathBuf)> = fs::read_dir(BINDIR_GLOB_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((major, e.path().join("bin")))
        })
        .filter(|(major, _)| *major >= MIN_MAJOR)
        .collect();
    versioned.sort();
    candidates.extend(versioned.into_iter().rev().map(|(_, p)| p));
    let found = candidates
        .into_iter()
        .find(|d| has_server(d) && server_major(d).is_some_and(|m| m >= MIN_MAJOR))?;
    // Where the server really lives (a PATH entry may hold links to a few
    // of its binaries only): pg_basebackup is found there too.
    let real = fs::canonicalize(found.join("postgres"))
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .filter(|d| has_server(d));
    Some(real.unwrap_or(found))
}

fn server_major(bindir: &Path) -> Option<u32> {
    let out = Command::new(bindir.join("postgres"))
        .arg("--version")
        .output()
        .ok()?;
    // "postgres (PostgreSQL) 15.18 (Debian ...)"
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(2)?;
    version.split('.').next()?.parse().ok()
}

/// Whether `tidemark.conf` (as `write_conf` writes it) opens a TCP port.
fn on_tcp(conf: &str) -> bool {
    conf.contains("listen_addresses = '127.0.0.1'")
}

/// FNV-1a: a hash that stays the same across builds and Rust releases.
fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `$TIDEMARK_PG_USER`, else `postgres`, as the system's user database
/// knows it (`getpwnam`: /etc/passwd, or LDAP and the like through NSS).
fn unprivileged_user() -> Result<User, ClusterError> {
    let wanted = std::env::var("TIDEMARK_PG_USER").unwrap_or_else(|_| "postgres".into());
    let found = nix::unistd::User::from_name(&wanted)
        .ok()
        .flatten()
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()));
    account(&wanted, found)
}

/// The account `wanted`, found with its uid and gid (or not). Neither root
/// nor `nobody` (uid 65534), which many daemons share: any of them could
/// then reach the cluster's files.
fn account(wanted: &str, found: Option<(u32, u32)>) -> Result<User, ClusterError> {
    let refused = |why: &str| ClusterError::NoUser(format!("{wanted}: {why}"));
    let (uid, gid) = found.ok_or_else(|| refused("no such user"))?;
    if uid == 0 {
        return Err(refused("it is root"));
    }
    if wanted == "nobody" || uid == NOBODY {
        return Err(refused("`nobody` is shared by other daemons"));
    }
    Ok(User {
        name: wanted.to_owned(),
        uid,
        gid,
    })
}

/// The overflow uid, `nobody`'s.
const NOBODY: u32 = 65534;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_runs_as_an_account_of_its_own_never_root_or_nobody() {
        assert_eq!(
            account("postgres", Some((101, 104))).unwrap(),
            User {
                name: "postgres".into(),
                uid: 101,
                gid: 104
            }
        );
        let refused = [
            ("root", Some((0, 0))),
            ("nobody", Some((65534, 65534))),
            ("other", Some((65534, 100))),
            ("absent", None),
        ];
        for (name, found) in refused {
            let e = account(name, found).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("TIDEMARK_PG_USER"), "{e}");
        }
    }
}
