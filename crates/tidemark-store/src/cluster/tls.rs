//! TLS: the certificate and key the server serves, copied into its data
//! directory as its user, the key readable by it alone.

use std::fs;
use std::path::Path;

use super::{files, io_err, Cluster, ClusterError};

/// The server's certificate and key in the data directory ([`Cluster::use_tls`]).
pub(super) const TLS_CERT: &str = "server.crt";
pub(super) const TLS_KEY: &str = "server.key";

impl Cluster {
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
}
