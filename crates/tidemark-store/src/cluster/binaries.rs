//! The server's binaries: found on the machine (`$TIDEMARK_PG_BINDIR`,
//! PATH, `pg_config`, then `/usr/lib/postgresql/*/bin`, version 15 or later)
//! and run for a cluster, as the server's user when there is one, with
//! their failures turned into errors that carry their output.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::{io_err, Cluster, ClusterError};

/// Where to find the server binaries, in order, after `$TIDEMARK_PG_BINDIR`.
pub(super) const BINDIR_GLOB_ROOT: &str = "/usr/lib/postgresql";
/// The oldest major version of the server Tidemark runs.
pub(super) const MIN_MAJOR: u32 = 15;

impl Cluster {
    pub(super) fn pg_ctl(&self, args: &[&str]) -> Result<Output, ClusterError> {
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(args)
            .output()
            .map_err(io_err(&self.bindir))
    }

    /// A server binary, run as the server's user, from a directory that user can enter.
    pub(super) fn command(&self, program: &str) -> Command {
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

    pub(super) fn checked(&self, out: Output, what: &str) -> Result<(), ClusterError> {
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
