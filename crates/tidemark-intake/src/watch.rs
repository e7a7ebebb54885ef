//! Connections libzmq gives up on, restored. A connecting socket whose peer
//! breaks the protocol (a frame over the maximum message size, SPEC 2) is
//! disconnected and, unlike after a network error, never reconnected
//! (libzmq issue 4196): one oversized message would silence the publisher
//! behind that endpoint for good. A [`Watch`] reads the socket's monitor:
//! after a network error libzmq reports `DISCONNECTED` then
//! `CONNECT_RETRIED` (it retries by itself); a `DISCONNECTED` with no retry
//! is a connection it dropped for good, which the watch restores by
//! disconnecting and connecting the endpoint again.

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

/// The maximum message size every socket reading the wire sets: a frame
/// is a topic or a payload, and a payload is the larger limit.
pub const MAX_FRAME: i64 = tidemark_wire::MAX_PAYLOAD as i64;

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
            let Some(state) = self
                .endpoints
                .get_mut(String::from_utf8_lossy(endpoint).as_ref())
            else {
                continue;
            };
            *state = next(*state, event, now);
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
}
