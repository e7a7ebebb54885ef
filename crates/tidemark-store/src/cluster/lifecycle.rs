//! Starting and stopping: `up` (initialised first if needed), `down`, `crash`
//! and `destroy`, serialised across processes by a file lock, and the
//! private directories the server needs, made fresh with mode 0700 and never
//! through a link.

use std::fs::{self, File};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};

use super::{files, io_err, Cluster, ClusterError, REPLICATION_MARKER};

impl Cluster {
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

    pub(super) fn start(&self) -> Result<(), ClusterError> {
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

    pub(super) fn lock(&self) -> Result<File, ClusterError> {
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
    pub(super) fn prepare_dirs(&self) -> Result<(), ClusterError> {
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
}
