//! `tidemark proxy`: an XSUB/XPUB forwarder so publishers and shards need to
//! know one address. Subscriptions travel upstream, so filtering still happens
//! at the publishers. Its own loop (not `zmq_proxy`) forwards whole messages
//! and counts them by kind as it goes; every queue is bounded (`hwm`
//! messages per connection each way, frames of at most the transport limit),
//! so a stalled shard or an oversized frame costs memory the configuration
//! sets, never more.
//!
//! With keys (SPEC 2), it is a CURVE server to its publishers, letting in
//! only the keys it lists and passing a tick on only under the name listed
//! with the key that sent it, and a CURVE client (a publisher listed as a
//! `forwarder`) to the fleet's shards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use tidemark_intake::curve::{Client, Curve, Kept, Zap};
use tidemark_intake::watch::{Watch, MAX_FRAME};

use crate::publisher::{endpoint, socket, PublishError};

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

/// Where a proxy reads and writes, and with which keys.
#[derive(Debug, Clone, Default)]
pub struct ProxyOptions {
    /// Publisher endpoints to connect to.
    pub publishers: Vec<String>,
    /// Endpoints to bind for publishers that connect.
    pub frontend: Vec<String>,
    /// Endpoints to bind for shards.
    pub backend: Vec<String>,
    /// Serve Prometheus metrics here (`host:port`).
    pub metrics_addr: Option<String>,
    /// Messages each connection may queue in each direction.
    pub hwm: i32,
    /// On the publishers' side: the proxy's own secret key and the
    /// publishers it lets in.
    pub listen: Option<Curve>,
    /// On the shards' side: the proxy's key pair and the fleet's public key.
    pub forward: Option<Client>,
}

/// What the proxy refuses, counted under `tidemark_proxy_refused_total{reason}`.
const REFUSALS: [&str; 3] = ["unlisted_key", "foreign_tick", "oversize"];

/// Runs the forwarder until the process ends; with `metrics_addr`, serves
/// `tidemark_proxy_messages_total{kind}`, `..._refused_total{reason}` and
/// `tidemark_proxy_connections_restored_total` there. Every connection
/// queues at most `hwm` messages each way, and no frame over the wire's
/// transport limit (SPEC 2) is read; one over the payload's or topic's limit
/// below it is dropped alone, counted `oversize`.
pub fn run(o: &ProxyOptions) -> Result<(), PublishError> {
    let ctx = zmq::Context::new();
    let mut sockets = Sockets::open(&ctx, o)?;
    let counts = Arc::new(Counts::default());
    let _endpoint = match &o.metrics_addr {
        Some(addr) => Some(serve_metrics(addr, counts.clone())?),
        None => None,
    };
    sockets.forward_forever(&counts)
}

/// What the proxy has counted since it started.
struct Counts {
    /// Messages by kind, as `KINDS` names them.
    messages: Vec<AtomicU64>,
    /// Refusals by reason, as `REFUSALS` names them.
    refused: [AtomicU64; 3],
    /// Publishers' connections dropped for an oversized frame, connected again.
    restored: AtomicU64,
}

impl Default for Counts {
    fn default() -> Counts {
        Counts {
            messages: KINDS.iter().map(|_| AtomicU64::new(0)).collect(),
            refused: Default::default(),
            restored: AtomicU64::new(0),
        }
    }
}

/// The proxy's sockets: `up`, the XSUB publishers send to, and `down`, the
/// XPUB shards subscribe to.
struct Sockets {
    // Fields drop in this order, the reverse of their opening (the
    // monitor first, the ZAP handler last).
    /// Notices a publisher's connection dropped for an oversized frame.
    watch: Watch,
    /// With keys: the names each listed key's ticks may carry (`true`: a
    /// forwarder's key, any name).
    names: Option<HashMap<String, bool>>,
    down: zmq::Socket,
    up: Kept<zmq::Socket>,
    /// With keys: the handler that lets in only the listed ones.
    zap: Kept<Option<Zap>>,
}

impl Sockets {
    /// Opens both sides with their bounds and keys, connects to the
    /// publishers and binds the endpoints.
    fn open(ctx: &zmq::Context, o: &ProxyOptions) -> Result<Sockets, PublishError> {
        // Bound before any socket connects: with no handler, libzmq lets every key in.
        let keyed = o.listen.is_some();
        let zap = match &o.listen {
            Some(c) => Some(Zap::start(ctx, c).map_err(socket("zap"))?),
            None => None,
        };
        // With keys, never closed, on any path out (see `Kept`).
        let zap = Kept::new(zap, keyed);
        let up = Kept::new(ctx.socket(zmq::XSUB).map_err(socket("create"))?, keyed);
        let down = ctx.socket(zmq::XPUB).map_err(socket("create"))?;
        bound_queues(&up, &down, o.hwm)?;
        set_keys(&up, &down, o)?;
        // Which names each listed key's ticks may carry (`None`: any, a forwarder).
        let names: Option<HashMap<String, bool>> = o.listen.as_ref().map(|c| {
            c.publishers
                .iter()
                .map(|p| (p.name.clone(), p.forwarder))
                .collect()
        });
        let watch = Watch::new(ctx, &up, &o.publishers).map_err(socket("monitor"))?;
        for ep in &o.publishers {
            up.connect(ep).map_err(endpoint("--publishers", ep))?;
        }
        for ep in &o.frontend {
            up.bind(ep).map_err(endpoint("--frontend", ep))?;
        }
        for ep in &o.backend {
            down.bind(ep).map_err(endpoint("--backend", ep))?;
        }
        tracing::info!(
            xsub_connect = ?o.publishers,
            xsub_bind = ?o.frontend,
            xpub_bind = ?o.backend,
            hwm = o.hwm,
            "proxy forwarding"
        );
        Ok(Sockets {
            watch,
            names,
            down,
            up,
            zap,
        })
    }

    /// Forwards both ways, a burst from each side in turn, until an error.
    fn forward_forever(&mut self, counts: &Counts) -> Result<(), PublishError> {
        let mut watched = Instant::now();
        let mut frames = Vec::with_capacity(2);
        tidemark_metrics::alive::ready();
        loop {
            tidemark_metrics::alive::beat();
            let mut items = [
                self.up.as_poll_item(zmq::POLLIN),
                self.down.as_poll_item(zmq::POLLIN),
            ];
            zmq::poll(&mut items, 200).map_err(socket("poll"))?;
            let ready = [items[0].is_readable(), items[1].is_readable()];
            if ready[0] {
                self.forward_publications(counts, &mut frames)?;
            }
            if ready[1] {
                self.forward_subscriptions(counts, &mut frames)?;
            }
            if let Some(z) = &*self.zap {
                counts.refused[0].store(z.refused(), Ordering::Relaxed);
            }
            let now = Instant::now();
            if now.duration_since(watched) >= Duration::from_millis(200) {
                watched = now;
                for ep in self.watch.check(&self.up, now) {
                    tracing::warn!(
                        endpoint = ep,
                        "a publisher's connection was dropped for an oversized frame; connected again"
                    );
                    counts.restored.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Forwards up to `BURST` messages from the publishers to the shards,
    /// counting what it refuses.
    fn forward_publications(
        &self,
        counts: &Counts,
        frames: &mut Vec<zmq::Message>,
    ) -> Result<(), PublishError> {
        for _ in 0..BURST {
            let names = self.names.as_ref();
            match forward(&self.up, &self.down, &counts.messages, names, true, frames)
                .map_err(socket("forward"))?
            {
                Forwarded::Nothing => break,
                Forwarded::One => {}
                Forwarded::ForeignTick => {
                    counts.refused[1].fetch_add(1, Ordering::Relaxed);
                }
                Forwarded::Oversize => {
                    counts.refused[2].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Forwards up to `BURST` subscription changes from the shards to the
    /// publishers.
    fn forward_subscriptions(
        &self,
        counts: &Counts,
        frames: &mut Vec<zmq::Message>,
    ) -> Result<(), PublishError> {
        for _ in 0..BURST {
            if forward(&self.down, &self.up, &counts.messages, None, false, frames)
                .map_err(socket("forward"))?
                == Forwarded::Nothing
            {
                break;
            }
        }
        Ok(())
    }
}

/// Bounds every queue: `hwm` messages per connection each way, no linger,
/// and frames of at most the transport limit from publishers.
fn bound_queues(up: &zmq::Socket, down: &zmq::Socket, hwm: i32) -> Result<(), PublishError> {
    for s in [up, down] {
        s.set_rcvhwm(hwm).map_err(socket("rcvhwm"))?;
        s.set_sndhwm(hwm).map_err(socket("sndhwm"))?;
        s.set_linger(0).map_err(socket("linger"))?;
    }
    up.set_maxmsgsize(MAX_FRAME).map_err(socket("maxmsgsize"))?;
    // Shards send only subscriptions: a type, a prefix and a flag byte.
    down.set_maxmsgsize(1024).map_err(socket("maxmsgsize"))?;
    Ok(())
}

/// A CURVE server towards the publishers and a client towards the shards,
/// as `o` has keys for each; a warning for each keyless side reaching
/// beyond this host.
fn set_keys(up: &zmq::Socket, down: &zmq::Socket, o: &ProxyOptions) -> Result<(), PublishError> {
    match &o.listen {
        Some(c) => {
            up.set_curve_server(true).map_err(socket("curve_server"))?;
            up.set_curve_secretkey(&c.secret)
                .map_err(socket("curve_secretkey"))?;
            up.set_zap_domain("tidemark")
                .map_err(socket("zap_domain"))?;
        }
        None => warn_open("publishers", o.publishers.iter().chain(&o.frontend)),
    }
    match &o.forward {
        Some(c) => c.apply(down).map_err(socket("curve keys"))?,
        None => warn_open("shards", o.backend.iter()),
    }
    Ok(())
}

/// Serves the proxy's counts at `addr` until the endpoint is dropped.
fn serve_metrics(
    addr: &str,
    counts: Arc<Counts>,
) -> Result<tidemark_metrics::Endpoint, PublishError> {
    tidemark_metrics::serve(addr, "proxy", move || {
        let c = &counts;
        let mut v: Vec<_> = KINDS
            .iter()
            .zip(c.messages.iter())
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
            c.restored.load(Ordering::Relaxed) as f64,
        ));
        for (reason, n) in REFUSALS.iter().zip(c.refused.iter()) {
            v.push(tidemark_metrics::counter(
                "refused",
                "handshakes and messages refused, by reason",
                &[("reason", reason)],
                n.load(Ordering::Relaxed) as f64,
            ));
        }
        v
    })
    .map_err(|e| PublishError::Metrics(e.to_string()))
}

/// Warns at start that a side without keys reaches beyond this host.
fn warn_open<'a>(side: &str, endpoints: impl Iterator<Item = &'a String>) {
    for ep in endpoints.filter(|e| !tidemark_intake::curve::is_local(e)) {
        tracing::warn!(
            endpoint = ep.as_str(),
            side,
            "an endpoint outside loopback without CURVE keys: anyone who reaches this \
             network can publish, and read what publishers send"
        );
    }
}

/// What one call of [`forward`] did.
#[derive(Debug, PartialEq, Eq)]
enum Forwarded {
    /// No message was waiting.
    Nothing,
    /// A message went on.
    One,
    /// A tick under a name its key is not listed with was dropped.
    ForeignTick,
    /// A message with a frame over its limit (topic 128 bytes, payload
    /// 64 KiB) but within the transport's was dropped, alone (SPEC 2).
    Oversize,
}

/// Moves one whole message from `from` to `to`, counting it by kind. With
/// `names` (keys listed), a tick goes on only if its `publisher` is the
/// name its connection's key is listed with (`User-Id`), or that key is a
/// forwarder's. From the publishers' side (`from_publishers`), a message
/// whose topic or payload is over its limit is dropped alone. `frames` is
/// the caller's buffer, kept across calls so a message costs no allocation.
fn forward(
    from: &zmq::Socket,
    to: &zmq::Socket,
    counts: &[AtomicU64],
    names: Option<&HashMap<String, bool>>,
    from_publishers: bool,
    frames: &mut Vec<zmq::Message>,
) -> zmq::Result<Forwarded> {
    frames.clear();
    let mut frame = zmq::Message::new();
    match from.recv(&mut frame, zmq::DONTWAIT) {
        Ok(()) => {}
        Err(zmq::Error::EAGAIN) => return Ok(Forwarded::Nothing),
        Err(e) => return Err(e),
    }
    // A whole message is already here (ZeroMQ delivers them whole), so
    // reading it all before sending any of it costs no wait.
    frames.push(frame);
    while frames.last().is_some_and(|f| f.get_more()) {
        let mut next = zmq::Message::new();
        from.recv(&mut next, 0)?;
        frames.push(next);
    }
    if from_publishers && oversize(frames) {
        return Ok(Forwarded::Oversize);
    }
    let kind = kind(&frames[0]);
    counts[kind].fetch_add(1, Ordering::Relaxed);
    if let (Some(names), "tick") = (names, KINDS[kind]) {
        let user = frames[0].gets("User-Id").unwrap_or_default().to_owned();
        let forwarder = names.get(&user).copied().unwrap_or(false);
        if !forwarder && tick_name(frames.get(1).map(|f| &f[..])).as_deref() != Some(user.as_str())
        {
            return Ok(Forwarded::ForeignTick);
        }
    }
    let last = frames.len() - 1;
    for (i, f) in frames.drain(..).enumerate() {
        to.send(f, if i < last { zmq::SNDMORE } else { 0 })?;
    }
    Ok(Forwarded::One)
}

/// Whether a message's topic (its first frame) or another frame is over
/// its limit (SPEC 2).
fn oversize(frames: &[zmq::Message]) -> bool {
    let mut sizes = frames.iter().map(|f| f.len());
    let topic = sizes.next().unwrap_or(0);
    topic > tidemark_wire::MAX_TOPIC || sizes.any(|n| n > tidemark_wire::MAX_PAYLOAD)
}

/// The `publisher` of a tick's payload, if it has one.
fn tick_name(payload: Option<&[u8]>) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Tick {
        publisher: String,
    }
    serde_json::from_slice::<Tick>(payload?)
        .ok()
        .map(|t| t.publisher)
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

    #[test]
    fn a_tick_is_named_by_its_publisher_field_only() {
        let name = |p: &str| tick_name(Some(p.as_bytes()));
        assert_eq!(
            name(r#"{"type":"tick","publisher":"a","ts":1}"#).as_deref(),
            Some("a")
        );
        assert_eq!(name(r#"{"type":"tick","ts":1}"#), None);
        assert_eq!(name(r#"{"publisher":7}"#), None);
        assert_eq!(name("not json"), None);
        assert_eq!(tick_name(None), None);
    }
}
