//! `tidemark proxy`: an XSUB/XPUB forwarder so publishers and shards need to
//! know one address. Subscriptions travel upstream, so filtering still happens
//! at the publishers. Its own loop (not `zmq_proxy`) forwards whole messages
//! and counts them by kind as it goes; every queue is bounded (`hwm`
//! messages per connection each way, frames of at most the wire's limit),
//! so a stalled shard or an oversized frame costs memory the configuration
//! sets, never more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::publisher::PublishError;

/// What the proxy counts: messages by the type in their topic, ticks,
/// anything else, and subscription changes travelling upstream.
const KINDS: [&str; 9] = [
    "auction",
    "bid",
    "impression",
    "click",
    "install",
    "tick",
    "other",
    "subscribe",
    "unsubscribe",
];

fn kind(first_frame: &[u8]) -> usize {
    match first_frame.first() {
        Some(1) => return 7,
        Some(0) => return 8,
        _ => {}
    }
    let head = first_frame
        .split(|b| *b == b'-')
        .next()
        .unwrap_or(first_frame);
    KINDS[..6]
        .iter()
        .position(|k| k.as_bytes() == head)
        .unwrap_or(6)
}

/// Messages each connection may queue in each direction by default: on a
/// publisher's side, once its queue is full the proxy stops reading it and
/// TCP, then the publisher's own high-water mark, hold the rest; on a
/// shard's side, PUB/SUB drops for a subscriber that far behind.
pub const DEFAULT_HWM: i32 = 100_000;

/// Messages forwarded from one side before turning to the other.
const BURST: usize = 256;

/// Runs the forwarder until the process ends; with `metrics_addr`, serves
/// `tidemark_proxy_messages_total{kind}` and
/// `tidemark_proxy_connections_restored_total` there. Every connection
/// queues at most `hwm` messages each way, and no frame over the wire's
/// limit (SPEC 2) is read.
pub fn run(
    xsub_connect: &[String],
    xsub_bind: &[String],
    xpub_bind: &[String],
    metrics_addr: Option<&str>,
    hwm: i32,
) -> Result<(), PublishError> {
    use tidemark_intake::watch::{Watch, MAX_FRAME};
    let socket = |what: &'static str| move |error| PublishError::Socket { what, error };
    let endpoint = |option: &'static str, ep: &str| {
        let endpoint = ep.to_owned();
        move |error| PublishError::Endpoint {
            option,
            endpoint,
            error,
        }
    };
    let ctx = zmq::Context::new();
    let up = ctx.socket(zmq::XSUB).map_err(socket("create"))?;
    let down = ctx.socket(zmq::XPUB).map_err(socket("create"))?;
    for s in [&up, &down] {
        s.set_rcvhwm(hwm).map_err(socket("rcvhwm"))?;
        s.set_sndhwm(hwm).map_err(socket("sndhwm"))?;
        s.set_linger(0).map_err(socket("linger"))?;
    }
    up.set_maxmsgsize(MAX_FRAME).map_err(socket("maxmsgsize"))?;
    // Shards send only subscriptions: a type, a prefix and a flag byte.
    down.set_maxmsgsize(1024).map_err(socket("maxmsgsize"))?;
    let mut watch = Watch::new(&ctx, &up, xsub_connect).map_err(socket("monitor"))?;
    for ep in xsub_connect {
        up.connect(ep).map_err(endpoint("--publishers", ep))?;
    }
    for ep in xsub_bind {
        up.bind(ep).map_err(endpoint("--frontend", ep))?;
    }
    for ep in xpub_bind {
        down.bind(ep).map_err(endpoint("--backend", ep))?;
    }
    tracing::info!(
        ?xsub_connect,
        ?xsub_bind,
        ?xpub_bind,
        hwm,
        "proxy forwarding"
    );
    let counts: Arc<Vec<AtomicU64>> = Arc::new(KINDS.iter().map(|_| AtomicU64::new(0)).collect());
    let restored = Arc::new(AtomicU64::new(0));
    let _endpoint = match metrics_addr {
        Some(addr) => {
            let (c, r) = (counts.clone(), restored.clone());
            let e = tidemark_metrics::serve(addr, "proxy", move || {
                let mut v: Vec<_> = KINDS
                    .iter()
                    .zip(c.iter())
                    .map(|(k, n)| {
                        tidemark_metrics::counter(
                            "messages",
                            "messages forwarded, by the kind their topic names",
                            &[("kind", k)],
                            n.load(Ordering::Relaxed) as f64,
                        )
                    })
                    .collect();
                v.push(tidemark_metrics::counter(
                    "connections_restored",
                    "connections to publishers dropped for an oversized frame, connected again",
                    &[],
                    r.load(Ordering::Relaxed) as f64,
                ));
                v
            })
            .map_err(|e| PublishError::Metrics(e.to_string()))?;
            Some(e)
        }
        None => None,
    };
    let mut watched = Instant::now();
    loop {
        let mut items = [up.as_poll_item(zmq::POLLIN), down.as_poll_item(zmq::POLLIN)];
        zmq::poll(&mut items, 200).map_err(socket("poll"))?;
        let ready = [items[0].is_readable(), items[1].is_readable()];
        if ready[0] {
            for _ in 0..BURST {
                if !forward(&up, &down, &counts).map_err(socket("forward"))? {
                    break;
                }
            }
        }
        if ready[1] {
            for _ in 0..BURST {
                if !forward(&down, &up, &counts).map_err(socket("forward"))? {
                    break;
                }
            }
        }
        let now = Instant::now();
        if now.duration_since(watched) >= Duration::from_millis(200) {
            watched = now;
            for ep in watch.check(&up, now) {
                tracing::warn!(
                    endpoint = ep,
                    "a publisher's connection was dropped for an oversized frame; connected again"
                );
                restored.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Moves one whole message from `from` to `to`, counting it by kind;
/// `false` when none was waiting.
fn forward(from: &zmq::Socket, to: &zmq::Socket, counts: &[AtomicU64]) -> zmq::Result<bool> {
    let mut frame = zmq::Message::new();
    match from.recv(&mut frame, zmq::DONTWAIT) {
        Ok(()) => {}
        Err(zmq::Error::EAGAIN) => return Ok(false),
        Err(e) => return Err(e),
    }
    counts[kind(&frame)].fetch_add(1, Ordering::Relaxed);
    loop {
        let more = frame.get_more();
        to.send(frame, if more { zmq::SNDMORE } else { 0 })?;
        if !more {
            return Ok(true);
        }
        frame = zmq::Message::new();
        from.recv(&mut frame, 0)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_counted_by_its_topic_and_subscriptions_apart() {
        assert_eq!(KINDS[kind(b"bid-0123")], "bid");
        assert_eq!(KINDS[kind(b"click-ab")], "click");
        assert_eq!(KINDS[kind(b"tick")], "tick");
        assert_eq!(KINDS[kind(b"signup-ab")], "other");
        assert_eq!(KINDS[kind(b"\x01bid-0")], "subscribe");
        assert_eq!(KINDS[kind(b"\x00bid-0")], "unsubscribe");
    }
}
