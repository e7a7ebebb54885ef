//! `tidemark proxy`: an XSUB/XPUB forwarder so publishers and shards need to
//! know one address. Subscriptions travel upstream, so filtering still happens
//! at the publishers. With a metrics address, every message is also copied
//! to a capture socket and counted by kind (the copy costs the proxy about as
//! much as forwarding).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// Runs the forwarder until the process ends; with `metrics_addr`, serves
/// `tidemark_proxy_messages_total{kind}` there.
pub fn run(
    xsub_connect: &[String],
    xsub_bind: &[String],
    xpub_bind: &[String],
    metrics_addr: Option<&str>,
) -> Result<(), PublishError> {
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
    let mut up = ctx.socket(zmq::XSUB).map_err(socket("create"))?;
    let mut down = ctx.socket(zmq::XPUB).map_err(socket("create"))?;
    for s in [&up, &down] {
        s.set_rcvhwm(0).map_err(socket("rcvhwm"))?;
        s.set_sndhwm(0).map_err(socket("sndhwm"))?;
    }
    for ep in xsub_connect {
        up.connect(ep).map_err(endpoint("--publishers", ep))?;
    }
    for ep in xsub_bind {
        up.bind(ep).map_err(endpoint("--frontend", ep))?;
    }
    for ep in xpub_bind {
        down.bind(ep).map_err(endpoint("--backend", ep))?;
    }
    tracing::info!(?xsub_connect, ?xsub_bind, ?xpub_bind, "proxy forwarding");
    let Some(addr) = metrics_addr else {
        return zmq::proxy(&up, &down).map_err(socket("proxy"));
    };
    let counts: Arc<Vec<AtomicU64>> = Arc::new(KINDS.iter().map(|_| AtomicU64::new(0)).collect());
    let mut capture = ctx.socket(zmq::PAIR).map_err(socket("create"))?;
    capture.set_sndhwm(0).map_err(socket("sndhwm"))?;
    capture
        .bind("inproc://tidemark-proxy-capture")
        .map_err(endpoint("capture", "inproc://tidemark-proxy-capture"))?;
    let reader = ctx.socket(zmq::PAIR).map_err(socket("create"))?;
    reader.set_rcvhwm(0).map_err(socket("rcvhwm"))?;
    reader
        .connect("inproc://tidemark-proxy-capture")
        .map_err(endpoint("capture", "inproc://tidemark-proxy-capture"))?;
    let c = counts.clone();
    std::thread::spawn(move || {
        // One frame at a time: a message's first frame names its kind.
        let mut first = true;
        while let Ok(frame) = reader.recv_bytes(0) {
            if first {
                c[kind(&frame)].fetch_add(1, Ordering::Relaxed);
            }
            first = !reader.get_rcvmore().unwrap_or(false);
        }
    });
    let c = counts.clone();
    let _endpoint = tidemark_metrics::serve(addr, "proxy", move || {
        KINDS
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
            .collect()
    })
    .map_err(|e| PublishError::Metrics(e.to_string()))?;
    zmq::proxy_with_capture(&mut up, &mut down, &mut capture).map_err(socket("proxy"))
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
