//! Why publishing stops ([`PublishError`]; the proxy's errors too), and
//! the helpers that attach what was being done to a ZeroMQ or IO error.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why publishing stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A socket or one of its options was refused.
    #[error("zmq socket ({what}): {error}")]
    Socket {
        /// The step refused.
        what: &'static str,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// An endpoint could not be bound or connected.
    #[error("{option} {endpoint}: {error}")]
    Endpoint {
        /// `--bind` or `--connect`.
        option: &'static str,
        /// The endpoint as given.
        endpoint: String,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// `ZMQ_XPUB_NODROP` could not be set.
    #[error("cannot set ZMQ_XPUB_NODROP: {0}")]
    NoDrop(std::io::Error),
    /// Sending a message failed.
    #[error("send: {0}")]
    Send(zmq::Error),
    /// A file (replay input or `--write` output) could not be read or written.
    #[error("{path}: {error}")]
    File {
        /// The file.
        path: PathBuf,
        /// The IO error.
        error: std::io::Error,
    },
    /// `--speed 0` without `--span`.
    #[error("--speed 0 (as fast as possible) needs --span, the event time to generate")]
    NeedsSpan,
    /// The profile database could not be read (`--profiles`).
    #[error("--profiles: {0}")]
    Profiles(String),
    /// The metrics endpoint could not start (`--metrics-addr`).
    #[error("{0}")]
    Metrics(String),
    /// Subscribers did not take every queued message within `--drain`.
    #[error("gave up after {:.1}s (--drain): a subscriber did not take every queued message, so some were lost", .0.as_secs_f64())]
    Undrained(Duration),
}

pub(crate) fn socket(what: &'static str) -> impl FnOnce(zmq::Error) -> PublishError {
    move |error| PublishError::Socket { what, error }
}

pub(crate) fn endpoint<'a>(
    option: &'static str,
    ep: &'a str,
) -> impl FnOnce(zmq::Error) -> PublishError + 'a {
    move |error| PublishError::Endpoint {
        option,
        endpoint: ep.to_owned(),
        error,
    }
}

pub(super) fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |error| PublishError::File {
        path: path.to_owned(),
        error,
    }
}
