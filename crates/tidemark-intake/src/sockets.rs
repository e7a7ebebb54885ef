//! The two SUB sockets (SPEC 4) and the thread that reads them round-robin,
//! decodes each message, passes it through the [`Door`] and hands it to the
//! owner's [`Handler`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tidemark_wire::{Decoder, Event, Message, Reject, Tick};

use crate::clock::Socket;
use crate::config::Subscription;
use crate::curve::Kept;
use crate::door::{Door, TickRefusal, TickVerdict};
use crate::watch::{Watch, MAX_FRAME};
use crate::{wall_ms, IntakeError, RejectLog};

/// Messages read from one socket before turning to the other.
const BURST: usize = 256;
/// How long an idle round waits for a message.
const IDLE_POLL_MS: i64 = 20;
/// How often the sockets' monitors are read for dropped connections.
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// Which socket a type is read on: bids and impressions (and auctions,
/// for a process that reads them) on the high-frequency one, everything
/// else on the low-frequency one, so rare events never starve.
pub fn socket_of(type_name: &str) -> Socket {
    match type_name {
        "auction" | "bid" | "impression" => Socket::High,
        _ => Socket::Low,
    }
}

/// The subscriptions of one socket: `<type>-<prefix>` for each type and
/// prefix (or `<type>-` for every transaction), and `tick`.
pub fn subscriptions(types: &[&str], prefixes: &[String]) -> Vec<String> {
    let mut subs = Vec::new();
    for t in types {
        if prefixes.is_empty() {
            subs.push(format!("{t}-"));
        }
        for p in prefixes {
            subs.push(format!("{t}-{p}"));
        }
    }
    subs.push("tick".to_owned());
    subs
}

/// What the owner does with what the door let in. Called on the intake
/// thread only.
pub trait Handler {
    /// Before each round: `false` leaves the sockets unread for a moment
    /// (the consumer is behind; ZeroMQ's queues, then TCP, hold the backlog).
    fn ready(&mut self) -> bool {
        true
    }
    /// Before each message: `true` ends the round early, so what was
    /// gathered is handed over (`turn`) before more is read. Bounds what a
    /// round of the largest messages adds to a byte budget.
    fn full(&self) -> bool {
        false
    }
    /// An event within `max_future`.
    fn event(&mut self, which: Socket, e: Event<'_>);
    /// An event beyond `max_future` (SPEC 1): refused.
    fn future(&mut self, which: Socket, e: &Event<'_>);
    /// A tick the door took, with the reference and clock when they moved.
    fn tick(&mut self, which: Socket, t: &Tick<'_>, reference: Option<i64>, clock: Option<i64>);
    /// A tick refused (too far ahead, or under one name too many).
    fn refused_tick(&mut self, why: TickRefusal);
    /// A message the decoder refused.
    fn rejected(&mut self, r: &Reject);
    /// A connection libzmq dropped for good (a frame over the maximum
    /// message size, or another protocol error) was connected again.
    fn restored(&mut self, which: Socket, endpoint: &str);
    /// After each round, with the event clock's move if any. `false`: the
    /// consumer is gone, stop reading.
    fn turn(&mut self, clock: Option<i64>, stop: &AtomicBool) -> bool;
    /// Reading has stopped: hand over whatever is held.
    fn finish(&mut self);
}

/// The sockets of one process, connected and subscribed. Dropped, they
/// close; with `[curve]` they are unsubscribed, so publishers stop sending,
/// and left open with the ZAP handler ([`Kept`]).
pub struct Sockets {
    pair: [(Socket, Kept<zmq::Socket>); 2],
    /// What each socket of `pair` subscribed to.
    topics: [Vec<String>; 2],
    watches: [Watch; 2],
    /// The ZAP handler, with `[curve]`: held as long as the sockets.
    zap: Kept<Option<crate::curve::Zap>>,
}

impl Drop for Sockets {
    fn drop(&mut self) {
        if self.zap.is_some() {
            for ((_, sock), topics) in self.pair.iter().zip(&self.topics) {
                for t in topics {
                    let _ = sock.set_unsubscribe(t.as_bytes());
                }
            }
        }
    }
}

impl Sockets {
    /// Opens both sockets for the types read (each on [`socket_of`] its
    /// name), subscribed to the prefixes and to ticks, connected to every
    /// endpoint, refusing any frame over the wire's limit (SPEC 2) and
    /// watched for connections dropped for it.
    pub fn open(sub: &Subscription, types: &[&str]) -> Result<Sockets, IntakeError> {
        let ctx = zmq::Context::new();
        let keyed = sub.curve.is_some();
        // Bound before any socket connects: with no handler, libzmq lets
        // every key in.
        let zap = match &sub.curve {
            Some(c) => Some(
                crate::curve::Zap::start(&ctx, c)
                    .map_err(|error| IntakeError::Socket { what: "zap", error })?,
            ),
            None => {
                for ep in sub.endpoints.iter().filter(|e| !crate::curve::is_local(e)) {
                    tracing::warn!(
                        endpoint = ep.as_str(),
                        "connecting outside loopback without [curve] keys: anyone who reaches \
                         this network can publish, and read what publishers send"
                    );
                }
                None
            }
        };
        let zap = Kept::new(zap, keyed);
        type Opened = (Kept<zmq::Socket>, Vec<String>, Watch);
        let open = |which: Socket| -> Result<Opened, IntakeError> {
            let fail = |what: &'static str| move |error| IntakeError::Socket { what, error };
            let s = Kept::new(ctx.socket(zmq::SUB).map_err(fail("create"))?, keyed);
            s.set_rcvhwm(sub.rcvhwm).map_err(fail("rcvhwm"))?;
            s.set_maxmsgsize(MAX_FRAME).map_err(fail("maxmsgsize"))?;
            if let Some(c) = &sub.curve {
                s.set_curve_server(true).map_err(fail("curve_server"))?;
                s.set_curve_secretkey(&c.secret)
                    .map_err(fail("curve_secretkey"))?;
                s.set_zap_domain("tidemark").map_err(fail("zap_domain"))?;
            }
            s.set_linger(0).map_err(fail("linger"))?;
            let mine: Vec<&str> = types
                .iter()
                .copied()
                .filter(|t| socket_of(t) == which)
                .collect();
            let topics = subscriptions(&mine, &sub.prefixes);
            for topic in &topics {
                s.set_subscribe(topic.as_bytes())
                    .map_err(fail("subscribe"))?;
            }
            // Watched before connecting, so no drop goes unseen.
            let watch = Watch::new(&ctx, &s, &sub.endpoints).map_err(fail("monitor"))?;
            for ep in &sub.endpoints {
                s.connect(ep).map_err(|error| IntakeError::Connect {
                    endpoint: ep.clone(),
                    error,
                })?;
            }
            Ok((s, topics, watch))
        };
        let (high, high_topics, high_watch) = open(Socket::High)?;
        let (low, low_topics, low_watch) = open(Socket::Low)?;
        Ok(Sockets {
            pair: [(Socket::High, high), (Socket::Low, low)],
            topics: [high_topics, low_topics],
            watches: [high_watch, low_watch],
            zap,
        })
    }
}

/// The reading side of a process: what [`spawn`] runs on its thread.
pub struct Intake<H> {
    /// The wire decoder (its types are the process's).
    pub decoder: Decoder,
    /// The `max_future` door and the event clock.
    pub door: Door,
    /// Whether an event's own `ts` must also be within `max_future`
    /// (profiles, SPEC 11), besides its txid's creation time (SPEC 1).
    pub bound_ts: bool,
    /// The owner's side.
    pub handler: H,
}

/// Starts the thread `name` that reads `sockets` until `stop` is set (or
/// the handler's consumer is gone), then calls [`Handler::finish`].
pub fn spawn<H: Handler + Send + 'static>(
    name: &str,
    sockets: Sockets,
    mut intake: Intake<H>,
    stop: std::sync::Arc<AtomicBool>,
) -> Result<JoinHandle<()>, IntakeError> {
    let mut sockets = sockets;
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                intake.run(&mut sockets, &stop)
            }));
            if let Err(panic) = run {
                // What the door let in before the panic is handed over, so
                // the owner writes it before reporting the panic.
                intake.handler.finish();
                std::panic::resume_unwind(panic);
            }
            drop(sockets);
        })
        .map_err(IntakeError::Thread)
}

impl<H: Handler> Intake<H> {
    fn run(&mut self, all: &mut Sockets, stop: &AtomicBool) {
        let sockets = &all.pair;
        let mut watched = Instant::now();
        let mut topic = zmq::Message::new();
        let mut payload = zmq::Message::new();
        let mut extra = zmq::Message::new();
        let mut log = RejectLog::default();
        while !stop.load(Ordering::Relaxed) {
            if !self.handler.ready() {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut idle = true;
            // Round-robin: a flood on one socket cannot starve the other.
            for (which, sock) in sockets {
                for _ in 0..BURST {
                    if self.handler.full() {
                        break;
                    }
                    match sock.recv(&mut topic, zmq::DONTWAIT) {
                        Ok(()) => {
                            idle = false;
                            let frames = read_rest(sock, &topic, &mut payload, &mut extra);
                            crate::fault::inject("intake_panic", &payload);
                            // With keys, the door checks a tick's name
                            // against the key that sent it.
                            let sender = (self.door.checks_senders() && &topic[..] == b"tick")
                                .then(|| topic.gets("User-Id").unwrap_or_default().to_owned());
                            self.handle(*which, &topic, &payload, frames, sender, &mut log);
                        }
                        Err(zmq::Error::EAGAIN) => break,
                        Err(e) => {
                            tracing::warn!("zmq receive: {e}");
                            break;
                        }
                    }
                }
            }
            let now = Instant::now();
            if now.duration_since(watched) >= WATCH_EVERY {
                watched = now;
                for ((which, sock), watch) in sockets.iter().zip(&mut all.watches) {
                    for endpoint in watch.check(sock, now) {
                        tracing::warn!(
                            endpoint,
                            "a connection was dropped for an oversized frame or another \
                             protocol error; connected again"
                        );
                        self.handler.restored(*which, &endpoint);
                    }
                }
            }
            let clock = self.door.advance(now);
            if !self.handler.turn(clock, stop) {
                return;
            }
            if idle {
                let mut items = [
                    sockets[0].1.as_poll_item(zmq::POLLIN),
                    sockets[1].1.as_poll_item(zmq::POLLIN),
                ];
                let _ = zmq::poll(&mut items, IDLE_POLL_MS);
            }
        }
        self.handler.finish();
    }

    fn handle(
        &mut self,
        which: Socket,
        topic: &[u8],
        payload: &[u8],
        frames: usize,
        sender: Option<String>,
        log: &mut RejectLog,
    ) {
        let decoded = if frames == 2 {
            self.decoder.decode(topic, payload)
        } else {
            Err(Reject::FrameCount(frames))
        };
        match decoded {
            Ok(Message::Event(e)) => {
                let limit = self.door.limit();
                let created = e.txid.created_ms() as i64;
                if created > limit || (self.bound_ts && e.ts > limit) {
                    self.handler.future(which, &e);
                    log.log("future", topic, "beyond max_future of the reference");
                } else {
                    self.handler.event(which, e);
                }
            }
            Ok(Message::Tick(t)) => {
                let (now, wall) = (Instant::now(), wall_ms());
                match self
                    .door
                    .tick_from(sender.as_deref(), which, &t.publisher, t.ts, now, wall)
                {
                    TickVerdict::Refused(why) => {
                        self.handler.refused_tick(why);
                        let what = match why {
                            TickRefusal::Future => "a tick too far ahead of the newest one heard",
                            TickRefusal::TooManyPublishers => {
                                "a tick under a new publisher name while max_publishers names count"
                            }
                            TickRefusal::Foreign => "a tick under a name other than its key's",
                        };
                        log.log(why.reason(), topic, what);
                    }
                    TickVerdict::Accepted { reference, clock } => {
                        self.handler.tick(which, &t, reference, clock);
                    }
                }
            }
            Err(r) => {
                self.handler.rejected(&r);
                log.log(r.reason(), topic, &r.to_string());
            }
        }
    }
}

/// Reads the remaining frames of a message; returns how many it had in all.
pub fn read_rest(
    sock: &zmq::Socket,
    topic: &zmq::Message,
    payload: &mut zmq::Message,
    extra: &mut zmq::Message,
) -> usize {
    if !topic.get_more() {
        return 1;
    }
    // The rest of a multipart message is already here: ZeroMQ delivers whole messages.
    if sock.recv(payload, 0).is_err() {
        return 1;
    }
    let mut frames = 2;
    let mut more = payload.get_more();
    while more {
        if sock.recv(extra, 0).is_err() {
            break;
        }
        frames += 1;
        more = extra.get_more();
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_cover_prefixes_and_ticks() {
        assert_eq!(
            subscriptions(&["bid", "impression"], &["0".into(), "a1".into()]),
            ["bid-0", "bid-a1", "impression-0", "impression-a1", "tick"]
        );
        assert_eq!(subscriptions(&["click"], &[]), ["click-", "tick"]);
    }

    /// Closing in the middle of handshakes from keys that are not listed
    /// aborted the process about one round in thirty (see [`Kept`]). Run in
    /// a child process: an abort must fail this test, not end the others,
    /// and what the rounds leave open stays there.
    #[test]
    fn dropping_while_unlisted_keys_knock_never_aborts() {
        const CHILD: &str = "TIDEMARK_TEST_KNOCKING_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let name = "sockets::tests::dropping_while_unlisted_keys_knock_never_aborts";
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--test-threads", "1"])
                .env(CHILD, "1")
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "the rounds ended with {status}");
            return;
        }
        let fleet = zmq::CurveKeyPair::new().unwrap();
        let ctx = zmq::Context::new();
        let mut endpoints = Vec::new();
        let mut publishers = Vec::new();
        for _ in 0..16 {
            let key = zmq::CurveKeyPair::new().unwrap();
            let s = ctx.socket(zmq::PUB).unwrap();
            s.set_curve_serverkey(&fleet.public_key).unwrap();
            s.set_curve_publickey(&key.public_key).unwrap();
            s.set_curve_secretkey(&key.secret_key).unwrap();
            s.set_linger(0).unwrap();
            s.bind("tcp://127.0.0.1:*").unwrap();
            endpoints.push(s.get_last_endpoint().unwrap().unwrap());
            publishers.push(s);
        }
        let sub = Subscription {
            endpoints,
            prefixes: Vec::new(),
            clock: crate::config::ClockKind::Wall,
            lateness: Duration::from_secs(5),
            publisher_timeout: Duration::from_secs(30),
            max_future: Duration::from_secs(600),
            rcvhwm: 1000,
            max_publishers: 16,
            curve: Some(crate::curve::Curve {
                secret: fleet.secret_key,
                publishers: Vec::new(),
            }),
        };
        for round in 0..40u64 {
            let sockets = Sockets::open(&sub, &["impression", "click"]).unwrap();
            std::thread::sleep(Duration::from_millis(round % 8 * 25));
            drop(sockets);
        }
    }

    #[test]
    fn rare_types_are_read_on_their_own_socket() {
        for t in ["auction", "bid", "impression"] {
            assert_eq!(socket_of(t), Socket::High);
        }
        for t in ["click", "install", "open", "tick"] {
            assert_eq!(socket_of(t), Socket::Low);
        }
    }
}
