//! Connections libzmq gives up on, restored. A connecting socket whose peer
//! breaks the protocol (a frame over the maximum message size, SPEC 2) is
//! disconnected and, unlike after a network error, never reconnected
//! (libzmq issue 4196): one oversized message would silence the publisher
//! behind that endpoint for good. A [`Watch`] reads the socket's monitor:
//! after a network error libzmq reports `DISCONNECTED` then
//! `CONNECT_RETRIED` (it retries by itself); a `DISCONNECTED` with no retry
//! is a connection it dropped for good, which the watch restores by
//! disconnecting and connecting the endpoint again.
//!
//! Since SPEC 2 v1.3 only a frame over the transport limit (1 MiB) is
//! refused this way; a payload over 64 KiB below it is read and refused
//! alone by the decoder. The monitor names an endpoint given by host name
//! (`tcp://feed.local:5555`) by the address it resolved to
//! (`tcp://10.0.0.7:5555`), so the watch maps a reported address back to
//! the configured endpoint that resolves to it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CONNECTED: u16 = 0x0001;
const CONNECT_RETRIED: u16 = 0x0004;
const DISCONNECTED: u16 = 0x0200;

/// How long after a `DISCONNECTED` a retry must have been reported for the
/// connection to count as libzmq's to restore (both are reported by the
/// same I/O thread in one go, so this is ample).
const RETRY_WITHIN: Duration = Duration::from_millis(500);

/// The maximum message size every socket reading the wire sets: the
/// transport limit (SPEC 2), above the payload's and the topic's limits.
pub const MAX_FRAME: i64 = tidemark_wire::MAX_FRAME as i64;

/// What the watch knows of one endpoint the socket connects to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Up,
    /// Disconnected at the instant; no retry reported since.
    Dropped(Instant),
    /// libzmq is retrying by itself.
    Retrying,
}

/// Watches one connecting socket's endpoints (see the module docs).
pub struct Watch {
    monitor: zmq::Socket,
    endpoints: HashMap<String, State>,
    /// Addresses the monitor reported, mapped to the configured endpoint
    /// that resolves to them (see the module docs).
    aliases: HashMap<String, String>,
}

impl Watch {
    /// Starts monitoring `sock`, which connects to `endpoints`.
    pub fn new(ctx: &zmq::Context, sock: &zmq::Socket, endpoints: &[String]) -> zmq::Result<Watch> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let addr = format!(
            "inproc://tidemark-watch-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let events = i32::from(CONNECTED | CONNECT_RETRIED | DISCONNECTED);
        sock.monitor(&addr, events)?;
        let monitor = ctx.socket(zmq::PAIR)?;
        monitor.connect(&addr)?;
        Ok(Watch {
            monitor,
            endpoints: endpoints.iter().map(|e| (e.clone(), State::Up)).collect(),
            aliases: HashMap::new(),
        })
    }

    /// Reads what the monitor reported and restores every connection
    /// libzmq dropped for good at least `RETRY_WITHIN` ago; returns the
    /// endpoints restored.
    pub fn check(&mut self, sock: &zmq::Socket, now: Instant) -> Vec<String> {
        while let Ok(frames) = self.monitor.recv_multipart(zmq::DONTWAIT) {
            let (Some(head), Some(endpoint)) = (frames.first(), frames.get(1)) else {
                continue;
            };
            let Some(event) = head.get(..2).map(|b| u16::from_ne_bytes([b[0], b[1]])) else {
                continue;
            };
            let reported = String::from_utf8_lossy(endpoint);
            let Some(configured) = self.configured(&reported) else {
                continue;
            };
            if let Some(state) = self.endpoints.get_mut(&configured) {
                *state = next(*state, event, now);
            }
        }
        let mut restored = Vec::new();
        for (endpoint, state) in &mut self.endpoints {
            if let State::Dropped(at) = *state {
                if now.duration_since(at) >= RETRY_WITHIN {
                    let _ = sock.disconnect(endpoint);
                    match sock.connect(endpoint) {
                        Ok(()) => {
                            *state = State::Retrying;
                            restored.push(endpoint.clone());
                        }
                        Err(e) => tracing::warn!(endpoint, "restoring a dropped connection: {e}"),
                    }
                }
            }
        }
        restored
    }
}

impl Watch {
    /// The configured endpoint a reported one stands for: itself, or the
    /// endpoint given by host name that resolves to the reported address.
    fn configured(&mut self, reported: &str) -> Option<String> {
        if self.endpoints.contains_key(reported) {
            return Some(reported.to_owned());
        }
        if let Some(c) = self.aliases.get(reported) {
            return Some(c.clone());
        }
        // Resolved again on each unknown address: a name may move.
        let found = self
            .endpoints
            .keys()
            .find(|e| resolves_to(e, reported))
            .cloned()?;
        self.aliases.insert(reported.to_owned(), found.clone());
        Some(found)
    }
}

/// Whether `tcp://HOST:PORT` resolves to the address `reported`
/// (`tcp://IP:PORT`, as libzmq prints it). Other transports never do.
fn resolves_to(configured: &str, reported: &str) -> bool {
    use std::net::{SocketAddr, ToSocketAddrs};
    let (Some(host), Some(addr)) = (
        configured.strip_prefix("tcp://"),
        reported.strip_prefix("tcp://"),
    ) else {
        return false;
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        return false;
    };
    // libzmq's `tcp://*:port` or `tcp://iface;host:port` forms name a
    // source address first: the host is what follows the last `;`.
    let host = host.rsplit(';').next().unwrap_or(host);
    host.to_socket_addrs()
        .map(|mut all| all.any(|a| a == addr))
        .unwrap_or(false)
}

/// An endpoint's state after a monitor event.
fn next(state: State, event: u16, now: Instant) -> State {
    match event {
        CONNECTED => State::Up,
        CONNECT_RETRIED => State::Retrying,
        DISCONNECTED => State::Dropped(now),
        _ => state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_disconnect_without_a_retry_is_restored() {
        let t = Instant::now();
        let after = |events: &[u16]| events.iter().fold(State::Up, |s, e| next(s, *e, t));
        assert_eq!(after(&[DISCONNECTED]), State::Dropped(t));
        assert_eq!(after(&[DISCONNECTED, CONNECT_RETRIED]), State::Retrying);
        assert_eq!(
            after(&[DISCONNECTED, CONNECT_RETRIED, CONNECTED]),
            State::Up
        );
        assert_eq!(after(&[CONNECTED, 0x0800]), State::Up);
    }

    #[test]
    fn an_endpoint_given_by_host_name_owns_the_address_it_resolves_to() {
        assert!(resolves_to("tcp://localhost:5555", "tcp://127.0.0.1:5555"));
        assert!(!resolves_to("tcp://localhost:5555", "tcp://127.0.0.1:5556"));
        assert!(!resolves_to("tcp://localhost:5555", "tcp://10.9.8.7:5555"));
        assert!(resolves_to("tcp://127.0.0.1:7", "tcp://127.0.0.1:7"));
        assert!(!resolves_to("ipc:///tmp/x", "tcp://127.0.0.1:7"));
        assert!(!resolves_to("tcp://localhost:5555", "not an address"));
    }
}
