//! What every process that subscribes to the wire shares (SPEC 1, 4, 6):
//! the subscription keys ([`Subscription`]), the two SUB sockets read
//! round-robin on a thread of their own ([`Sockets`], [`spawn`]), the
//! `max_future` door and the event clock ([`Door`], [`EventClock`]), the
//! rate-limited log of refused messages, wall time, back-off, and
//! [`drive`]: the one loop (select, back-off, bounded clean stop) that the
//! shard and the profile process each give their own [`Step`].
//!
//! Owns no database and no decision about what an event means: a process
//! says what it does with an accepted event through its [`Handler`], and
//! what it does with a chunk of them through its [`Step`].

#![warn(missing_docs)]

pub mod clock;
pub mod config;
pub mod curve;
pub mod door;
mod drive;
pub mod fault;
pub mod sockets;
pub mod watch;

use std::time::{Duration, Instant};

pub use clock::{EventClock, Socket};
pub use config::{validate_name, ClockKind, ConfigError, Keys, Subscription};
pub use door::{Door, TickRefusal, TickVerdict, MAX_TIME_MS};
pub use drive::{drive, Failure, Step, Stopped};
pub use sockets::{read_rest, socket_of, spawn, subscriptions, Handler, Intake, Sockets};

/// Why intake could not start.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// A socket option or the socket itself was refused.
    #[error("zmq socket ({what}): {error}")]
    Socket {
        /// The step refused.
        what: &'static str,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// An endpoint could not be connected to (a malformed address).
    #[error("endpoints: cannot connect to {endpoint}: {error}")]
    Connect {
        /// The endpoint as configured.
        endpoint: String,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// The intake thread could not be started.
    #[error("spawn intake thread: {0}")]
    Thread(std::io::Error),
}

pub use tidemark_metrics::wall_ms;

/// Logs refused messages, each reason at most every 10 s, so bad input
/// cannot flood the log (the counters have every one).
#[derive(Debug, Default)]
pub struct RejectLog {
    logged: Vec<(&'static str, Instant)>,
}

impl RejectLog {
    /// Logs a refusal of `reason` unless that reason was logged in the last 10 s.
    pub fn log(&mut self, reason: &'static str, topic: &[u8], what: &str) {
        let now = Instant::now();
        match self.logged.iter_mut().find(|(n, _)| *n == reason) {
            Some((_, at)) if now.duration_since(*at) < Duration::from_secs(10) => return,
            Some((_, at)) => *at = now,
            None => self.logged.push((reason, now)),
        }
        let shown = String::from_utf8_lossy(&topic[..topic.len().min(64)]).into_owned();
        tracing::warn!(
            reason,
            "rejected a message ({what}), topic {shown:?}; repeats of this reason are logged at most every 10s"
        );
    }
}

/// Exponential back-off between retries: 100 ms doubling to 10 s.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    /// When the failures began.
    pub since: Option<Instant>,
}

impl Backoff {
    /// No failure yet.
    pub fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(100),
            since: None,
        }
    }

    /// Back to no failure.
    pub fn reset(&mut self) {
        *self = Backoff::new();
    }

    /// The wait before the next try.
    pub fn fail(&mut self) -> Duration {
        self.since.get_or_insert_with(Instant::now);
        let d = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(10));
        d
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libzmq linked (vendor/zmq-sys, with libsodium) does CURVE: a
    /// subscriber holding the fleet's secret key (the CURVE server, though
    /// it connects) reads a publisher that knows the fleet's public key; one
    /// holding another key reads nothing, however long it waits.
    #[test]
    fn curve_works_and_a_subscriber_without_the_fleet_key_reads_nothing() {
        assert_eq!(zmq::has("curve"), Some(true));
        let fleet = zmq::CurveKeyPair::new().unwrap();
        let stranger = zmq::CurveKeyPair::new().unwrap();
        let publisher = zmq::CurveKeyPair::new().unwrap();
        let ctx = zmq::Context::new();
        let publ = ctx.socket(zmq::PUB).unwrap();
        publ.set_curve_serverkey(&fleet.public_key).unwrap();
        publ.set_curve_publickey(&publisher.public_key).unwrap();
        publ.set_curve_secretkey(&publisher.secret_key).unwrap();
        publ.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = publ.get_last_endpoint().unwrap().unwrap();
        let sub = |secret: &[u8; 32]| {
            let s = ctx.socket(zmq::SUB).unwrap();
            s.set_curve_server(true).unwrap();
            s.set_curve_secretkey(secret).unwrap();
            s.set_subscribe(b"").unwrap();
            s.set_rcvtimeo(20).unwrap();
            s.connect(&endpoint).unwrap();
            s
        };
        let (member, outsider) = (sub(&fleet.secret_key), sub(&stranger.secret_key));
        let mut got = (0, 0);
        for _ in 0..200 {
            publ.send("bid-0", 0).unwrap();
            got.0 += usize::from(member.recv_bytes(0).is_ok());
            got.1 += usize::from(outsider.recv_bytes(0).is_ok());
            if got.0 >= 10 {
                break;
            }
        }
        assert!(got.0 >= 10, "the fleet's subscriber reads: {got:?}");
        assert_eq!(got.1, 0, "a subscriber without the fleet key reads nothing");
    }

    #[test]
    fn backoff_doubles_to_ten_seconds_and_resets() {
        let mut b = Backoff::new();
        let waits: Vec<u64> = (0..9).map(|_| b.fail().as_millis() as u64).collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        );
        assert!(b.since.is_some());
        b.reset();
        assert_eq!(
            (b.fail(), b.since.is_some()),
            (Duration::from_millis(100), true)
        );
    }
}
