//! Who gets in: over the unix socket, whoever can enter its directory (the
//! server's user alone), without a password; over TCP (only when a loopback
//! port is asked for), the `tidemark` role with a password generated once
//! into `H/db.password` (mode 0600) and checked by SCRAM.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::settings::on_tcp;
use super::{files, io_err, Cluster, ClusterError, DATABASE, DEFAULT_PORT, SUPERUSER};

impl Cluster {
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

    /// Makes TCP ask for a password in a cluster made when it did not
    /// (initdb's `host … trust` lines for loopback become
    /// `scram-sha-256`; other lines, an operator's, are kept). Returns
    /// whether the file changed.
    pub(super) fn scram_on_tcp(&self) -> Result<bool, ClusterError> {
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
}
