//! A PostgreSQL connection string read as libpq reads it, TLS included.
//!
//! tokio-postgres knows `sslmode` disable, prefer and require, and no
//! certificate files. Operators write libpq's strings: this crate takes
//! `sslmode` (all six values), `sslrootcert`, `sslcert` and `sslkey` out of a
//! URL or a `key=value` string, hands the rest to tokio-postgres, and builds
//! the rustls connector that does what libpq would:
//!
//! - `disable`: no TLS. `allow`, `prefer` (the default): TLS if the server
//!   offers it. `require`: TLS or no connection.
//! - The server's chain is checked against the root certificates whenever a
//!   root file exists (`sslrootcert`, else `~/.postgresql/root.crt`), as libpq
//!   does; `verify-ca` and `verify-full` refuse to connect without one, and
//!   `verify-full` also checks that the certificate names the host.
//! - A client certificate (`sslcert`/`sslkey`, else `~/.postgresql/postgresql.crt`
//!   and `.key` when they exist) is presented when the server asks.
//!
//! Where we differ from libpq: `allow` is served as `prefer` (TLS first);
//! the `PGSSLMODE`-style environment variables are not read (tokio-postgres
//! reads no `PG*` variable either: everything is in the string); not served
//! are `sslrootcert=system`, `sslcrl` and `sslpassword`.

mod parse;
mod verify;

pub use parse::{decode as query_decode, list as query_list};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
pub use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No TLS.
    Disable,
    /// TLS if offered (libpq tries plain first; served as `Prefer`).
    Allow,
    /// TLS if offered.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, and the server's chain checked against the root certificates.
    VerifyCa,
    /// `VerifyCa`, and the certificate must name the host connected to.
    VerifyFull,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, Error> {
        Ok(match s {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => return Err(Error::Mode(other.to_owned())),
        })
    }

    fn verifies(self) -> bool {
        matches!(self, Mode::VerifyCa | Mode::VerifyFull)
    }
}

/// Why a connection string cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// tokio-postgres refused the rest of the string.
    #[error("invalid database URL: {0}")]
    Url(String),
    /// An unknown `sslmode`.
    #[error("invalid sslmode {0:?} (disable, allow, prefer, require, verify-ca or verify-full)")]
    Mode(String),
    /// A verifying mode without a root certificate file.
    #[error("sslmode={mode} needs the server's root certificate: {path} does not exist (give sslrootcert=FILE)")]
    NoRoot {
        /// The mode asked for.
        mode: &'static str,
        /// Where the file was looked for.
        path: String,
    },
    /// A certificate or key file could not be read.
    #[error("{what} {path}: {error}")]
    File {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: String,
        /// What went wrong.
        error: String,
    },
    /// A setting this crate does not serve.
    #[error("{0}")]
    Unsupported(String),
    /// rustls refused the certificates or keys.
    #[error("TLS setup: {0}")]
    Rustls(String),
}

/// A connection string, read: what tokio-postgres connects to and the TLS
/// connector to pass it.
#[derive(Clone)]
pub struct Target {
    /// Host, port, user, database and every other setting, with `sslmode`
    /// as tokio-postgres knows it.
    pub config: tokio_postgres::Config,
    /// The connector (never used when the mode is `disable`).
    pub tls: MakeRustlsConnect,
    /// The `sslmode` asked for.
    pub mode: Mode,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// Tidemark's defaults for what the string leaves unset, for processes
    /// that run for months against servers on other hosts:
    ///
    /// - a TCP connection attempt gives up after 10 s;
    /// - TCP keepalives after 15 s idle, every 5 s, and a 120 s TCP user
    ///   timeout: a connection whose peer vanished (a host cut off sends no
    ///   reset) errs within about a minute when idle, two when data waits,
    ///   instead of TCP's 15 minutes, and the caller's retry takes over.
    ///
    /// (Over a unix socket none of this applies.)
    pub fn tcp_defaults(&mut self) {
        use std::time::Duration;
        let c = &mut self.config;
        if c.get_connect_timeout().is_none() {
            c.connect_timeout(Duration::from_secs(10));
        }
        if c.get_tcp_user_timeout().is_none() {
            c.tcp_user_timeout(Duration::from_secs(120));
        }
        if c.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            c.keepalives_idle(Duration::from_secs(15));
            c.keepalives_interval(Duration::from_secs(5));
        }
    }
}

/// Reads a connection string (a `postgres://` URL or `key=value` pairs).
pub fn parse(url: &str) -> Result<Target, Error> {
    let (rest, ssl) = parse::split(url);
    let mut config: tokio_postgres::Config =
        rest.parse().map_err(|e| Error::Url(format!("{e}")))?;
    // libpq would take its default socket for an empty entry of a host
    // list; tokio-postgres would try a host named "".
    if config.get_hosts().iter().any(|h| match h {
        tokio_postgres::config::Host::Tcp(name) => name.is_empty(),
        tokio_postgres::config::Host::Unix(path) => path.as_os_str().is_empty(),
    }) {
        return Err(Error::Url("an empty entry in the host list".into()));
    }
    let get = |k: &str| {
        ssl.iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let mode = match get("sslmode") {
        Some(m) => Mode::parse(&m)?,
        None => Mode::Prefer,
    };
    config.ssl_mode(match mode {
        Mode::Disable => tokio_postgres::config::SslMode::Disable,
        Mode::Allow | Mode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    if mode == Mode::Disable {
        // No TLS: no certificate or key file is read (an encrypted default
        // key must not break plain connections).
        return Ok(Target {
            config,
            tls: MakeRustlsConnect::new(verify::config(None, false, None)?),
            mode,
        });
    }
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".postgresql"));
    let default = |name: &str| home.as_ref().map(|h| h.join(name));
    let root = match get("sslrootcert") {
        Some(s) if s == "system" => {
            return Err(Error::Unsupported(
                "sslrootcert=system is not supported: give the root certificate's file".into(),
            ))
        }
        Some(s) => Some(PathBuf::from(s)),
        None => default("root.crt"),
    };
    let roots = match root.filter(|p| p.exists()) {
        Some(p) => Some(read_roots(&p)?),
        None if mode.verifies() => {
            return Err(Error::NoRoot {
                mode: if mode == Mode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                },
                path: get("sslrootcert").unwrap_or_else(|| "~/.postgresql/root.crt".into()),
            })
        }
        None => None,
    };
    let cert = get("sslcert")
        .map(PathBuf::from)
        .or_else(|| default("postgresql.crt").filter(|p| p.exists()));
    let key = get("sslkey")
        .map(PathBuf::from)
        .or_else(|| default("postgresql.key"));
    let client = match cert {
        Some(c) => {
            let key = key.ok_or_else(|| Error::Unsupported("sslcert without sslkey".into()))?;
            Some((read_certs(&c, "sslcert")?, read_key(&key)?))
        }
        None => None,
    };
    let tls = verify::config(roots, mode == Mode::VerifyFull, client)?;
    Ok(Target {
        config,
        tls: MakeRustlsConnect::new(tls),
        mode,
    })
}

fn file_error<'a>(what: &'static str, path: &'a Path) -> impl Fn(String) -> Error + 'a {
    move |error| Error::File {
        what,
        path: path.display().to_string(),
        error,
    }
}

fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path)(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path)(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(what, path)("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn read_roots(path: &Path) -> Result<rustls::RootCertStore, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path, "sslrootcert")? {
        roots
            .add(c)
            .map_err(|e| file_error("sslrootcert", path)(e.to_string()))?;
    }
    Ok(roots)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error("sslkey", path)(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{parse, Error, Mode};
    use tokio_postgres::config::SslMode;

    #[test]
    fn modes_map_to_what_tokio_postgres_knows() {
        for (asked, mode, ssl) in [
            ("", Mode::Prefer, SslMode::Prefer),
            ("?sslmode=disable", Mode::Disable, SslMode::Disable),
            ("?sslmode=allow", Mode::Allow, SslMode::Prefer),
            ("?sslmode=require", Mode::Require, SslMode::Require),
        ] {
            let t = parse(&format!("postgres://u@h/db{asked}")).unwrap();
            assert_eq!((t.mode, t.config.get_ssl_mode()), (mode, ssl), "{asked}");
        }
    }

    #[test]
    fn verifying_without_a_root_file_is_refused_by_name() {
        let e = parse("postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent/root.crt")
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoRoot {
                    mode: "verify-ca",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("/nonexistent/root.crt"));
        let e = parse("host=h sslmode=verify-full sslrootcert=system").unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        let e = parse("postgres://h/db?sslmode=on").unwrap_err();
        assert!(e.to_string().contains("invalid sslmode \"on\""), "{e}");
        let e = parse("postgres://h/db?sslmode=require&sslcert=/nonexistent/c.crt&sslkey=/k")
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::File {
                    what: "sslcert",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn other_settings_still_reach_tokio_postgres() {
        let t = parse("postgres://u@h:5433/db?sslmode=disable&application_name=x").unwrap();
        assert_eq!(t.config.get_application_name(), Some("x"));
        assert_eq!(t.config.get_ports(), &[5433]);
        // libpq's host list of sockets, one server on each.
        let t = parse("postgresql://u@/db?host=/a,/b&port=5432,5433").unwrap();
        let unix = |p: &str| tokio_postgres::config::Host::Unix(p.into());
        assert_eq!(t.config.get_hosts(), &[unix("/a"), unix("/b")]);
        assert_eq!(t.config.get_ports(), &[5432, 5433]);
        assert!(matches!(
            parse("postgresql://u@/db?host=/a,,/b"),
            Err(Error::Url(_))
        ));
        assert!(matches!(
            parse("postgres://h/db?nonsense=1"),
            Err(Error::Url(_))
        ));
    }
}
