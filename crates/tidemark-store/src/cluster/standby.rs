//! The hot standby of a home's cluster: its own directory and socket, a
//! copy of the primary made with `pg_basebackup -R`, streaming from it and
//! answering read-only queries; promoted to a primary in a failover drill.

use std::fs;
use std::path::PathBuf;

use super::{io_err, Cluster, ClusterError, DEFAULT_PORT, REPLICATION_MARKER, SUPERUSER};

impl Cluster {
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
}
