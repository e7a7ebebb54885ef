//! The cluster's configuration: `initdb` with the options Tidemark needs,
//! and `tidemark.conf`, the settings Tidemark owns (included from
//! `postgresql.conf`, rewritten whole by every `up`).

use std::fs;

use super::tls::{TLS_CERT, TLS_KEY};
use super::{files, io_err, Cluster, ClusterError, DEFAULT_PORT, REPLICATION_MARKER, SUPERUSER};

impl Cluster {
    pub(super) fn initdb(&self) -> Result<(), ClusterError> {
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

    /// Writes the settings Tidemark owns; returns whether they changed.
    pub(super) fn write_conf(&self, tcp_port: Option<u16>) -> Result<bool, ClusterError> {
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
}

/// Whether `tidemark.conf` (as `write_conf` writes it) opens a TCP port.
pub(super) fn on_tcp(conf: &str) -> bool {
    conf.contains("listen_addresses = '127.0.0.1'")
}
