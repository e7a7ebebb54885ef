//! ZeroMQ intake: two SUB sockets read round-robin on a thread of their own,
//! decoded and validated, handed to the writer in chunks.
//!
//! When the writer falls behind (a long sweep), intake stops reading and lets
//! ZeroMQ's queues, then TCP, hold the backlog: nothing is lost while the
//! publisher can buffer. If the writer stays stuck longer than `STALL_LIMIT`
//! (PostgreSQL down), intake reads on and drops what exceeds its memory bound,
//! counted as `dropped_overflow`, rather than leave the loss to publishers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tidemark_wire::{Decoder, EventType, Message, Reject, Txid};
use tokio::sync::mpsc;

use crate::clock::{EventClock, Socket};
use crate::config::{ClockKind, Config};
use crate::counters::Counters;
use crate::loss::LossEstimator;
use tidemark_store::telemetry::{Counter, Family};

/// Events per chunk handed to the writer.
const CHUNK_EVENTS: usize = 2048;
/// Longest a received event waits before its chunk is handed over.
const CHUNK_AGE: Duration = Duration::from_millis(20);
/// Messages read from one socket before turning to the other.
const BURST: usize = 256;
/// How long intake waits for a stuck writer before reading on and dropping.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// One accepted event; strings live in the chunk's arena.
#[derive(Debug, Clone, Copy)]
pub struct Ev {
    /// Its type.
    pub kind: EventType,
    /// Its transaction.
    pub txid: Txid,
    /// Its transaction's creation time, ms.
    pub created: i64,
    /// Clamped: never earlier than creation (SPEC 5).
    pub ts: i64,
    /// Arrival order within the shard (ties of equal `ts`).
    pub arrival: i64,
    features: Option<(u32, u32)>,
    /// A bid's or impression's price.
    pub price: Option<f64>,
    user: Option<(u32, u32)>,
    /// The payload as received, kept to quarantine the event should the
    /// database refuse it.
    raw: (u32, u32),
}

/// Events in arrival order, then the clock as it stood after them.
#[derive(Debug, Default)]
pub struct Chunk {
    /// The events, in arrival order.
    pub events: Vec<Ev>,
    arena: String,
    /// Set when the event clock moved; applies after every event of the chunk.
    pub clock: Option<i64>,
    /// The newest tick heard so far (the `max_future` reference), saved with the clock.
    pub reference: Option<i64>,
}

impl Chunk {
    /// A bid's features as JSON text.
    pub fn features(&self, e: &Ev) -> Option<&str> {
        e.features.map(|(a, b)| &self.arena[a as usize..b as usize])
    }

    /// The bid's `user`, if any.
    pub fn user(&self, e: &Ev) -> Option<&str> {
        e.user.map(|(a, b)| &self.arena[a as usize..b as usize])
    }

    /// The event's payload as it arrived.
    pub fn raw(&self, e: &Ev) -> &str {
        &self.arena[e.raw.0 as usize..e.raw.1 as usize]
    }

    /// The arena range of `part`: a range of the payload stored at `raw`
    /// when `part` lies within `payload` (borrowed by the decoder), else a copy.
    fn within(&mut self, raw: (u32, u32), payload: &str, part: &str) -> (u32, u32) {
        let offset = (part.as_ptr() as usize).wrapping_sub(payload.as_ptr() as usize);
        if offset <= payload.len() && part.len() <= payload.len() - offset {
            let a = raw.0 + offset as u32;
            return (a, a + part.len() as u32);
        }
        self.push_str(part)
    }

    fn push_str(&mut self, s: &str) -> (u32, u32) {
        let a = self.arena.len() as u32;
        self.arena.push_str(s);
        (a, self.arena.len() as u32)
    }

    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.clock.is_none()
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

/// Opens both sockets, connects them and starts the intake thread.
/// `saved_reference`: the newest tick the previous run heard.
pub fn spawn(
    config: &Config,
    counters: Arc<Counters>,
    clock_floor: Option<i64>,
    saved_reference: Option<i64>,
    out: mpsc::Sender<Chunk>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, IntakeError> {
    let ctx = zmq::Context::new();
    let custom: Vec<&str> = config.types.custom().map(|(_, n)| n).collect();
    let mut low_types = vec!["click", "install"];
    low_types.extend(custom);
    let open = |types: &[&str]| -> Result<zmq::Socket, IntakeError> {
        let socket = |what: &'static str| move |error| IntakeError::Socket { what, error };
        let s = ctx.socket(zmq::SUB).map_err(socket("create"))?;
        s.set_rcvhwm(config.rcvhwm).map_err(socket("rcvhwm"))?;
        s.set_linger(0).map_err(socket("linger"))?;
        for sub in subscriptions(types, &config.prefixes) {
            s.set_subscribe(sub.as_bytes())
                .map_err(socket("subscribe"))?;
        }
        for ep in &config.endpoints {
            s.connect(ep).map_err(|error| IntakeError::Connect {
                endpoint: ep.clone(),
                error,
            })?;
        }
        Ok(s)
    };
    let high = open(&["bid", "impression"])?;
    let low = open(&low_types)?;
    let mut state = Intake {
        decoder: Decoder::new(config.types.clone()),
        counters,
        clock_kind: config.clock,
        clock: EventClock::new(config.lateness, config.publisher_timeout, clock_floor),
        max_future: config.max_future.as_millis() as i64,
        newest_tick: None,
        saved_reference: saved_reference.unwrap_or(i64::MIN),
        max_chunk: config.max_pending.clamp(CHUNK_EVENTS, 1 << 20),
        arrival: wall_ms() * 1000,
        chunk: Chunk::default(),
        chunk_started: Instant::now(),
        stalled_since: None,
        loss: LossEstimator::new(config.types.clone(), &config.prefixes),
        reported_loss: 0,
        out,
        log: RejectLog::default(),
    };
    std::thread::Builder::new()
        .name("intake".into())
        .spawn(move || {
            state.run([(Socket::High, high), (Socket::Low, low)], &stop);
            drop(ctx);
        })
        .map_err(IntakeError::Thread)
}

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

struct Intake {
    decoder: Decoder,
    counters: Arc<Counters>,
    clock_kind: ClockKind,
    clock: EventClock,
    max_future: i64,
    /// The newest tick heard in this run, from any publisher on either socket.
    newest_tick: Option<i64>,
    saved_reference: i64,
    max_chunk: usize,
    arrival: i64,
    chunk: Chunk,
    chunk_started: Instant,
    /// Since when the writer's queue has been full.
    stalled_since: Option<Instant>,
    loss: LossEstimator,
    /// The loss estimate already added to the `lost_estimate` counter.
    reported_loss: u64,
    out: mpsc::Sender<Chunk>,
    log: RejectLog,
}

impl Intake {
    fn run(&mut self, sockets: [(Socket, zmq::Socket); 2], stop: &AtomicBool) {
        let mut topic = zmq::Message::new();
        let mut payload = zmq::Message::new();
        let mut extra = zmq::Message::new();
        while !stop.load(Ordering::Relaxed) {
            let writer_behind = self.chunk.events.len() >= CHUNK_EVENTS
                && self
                    .stalled_since
                    .is_some_and(|t| t.elapsed() < STALL_LIMIT);
            if writer_behind {
                // Back-pressure: leave messages in ZeroMQ's queue until there is room.
                self.hand_over(false);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut idle = true;
            // Round-robin: a flood on one socket cannot starve the other.
            for (which, sock) in &sockets {
                for _ in 0..BURST {
                    match sock.recv(&mut topic, zmq::DONTWAIT) {
                        Ok(()) => {
                            idle = false;
                            let frames = read_rest(sock, &topic, &mut payload, &mut extra);
                            self.handle(*which, &topic, &payload, frames);
                        }
                        Err(zmq::Error::EAGAIN) => break,
                        Err(e) => {
                            tracing::warn!("zmq receive: {e}");
                            break;
                        }
                    }
                }
            }
            if self.clock_kind == ClockKind::Event {
                if let Some(v) = self.clock.advance(Instant::now()) {
                    self.chunk.clock = Some(v);
                }
            }
            self.hand_over(false);
            if idle {
                let mut items = [
                    sockets[0].1.as_poll_item(zmq::POLLIN),
                    sockets[1].1.as_poll_item(zmq::POLLIN),
                ];
                let _ = zmq::poll(&mut items, 20);
            }
        }
        self.hand_over(true);
    }

    fn handle(&mut self, which: Socket, topic: &[u8], payload: &[u8], frames: usize) {
        let decoded = if frames == 2 {
            self.decoder.decode(topic, payload)
        } else {
            Err(Reject::FrameCount(frames))
        };
        match decoded {
            Ok(Message::Event(e)) => {
                self.loss.arrived(e.kind, e.txid.first_digit());
                let created = e.txid.created_ms() as i64;
                if created > self.reference() + self.max_future {
                    self.counters.per_type(Family::Future, e.kind, 1);
                    return;
                }
                if self.chunk.events.len() >= self.max_chunk {
                    self.counters.add(Counter::DroppedOverflow, 1);
                    return;
                }
                self.counters.per_type(Family::Received, e.kind, 1);
                self.arrival += 1;
                // The payload is kept whole (to quarantine the event should the
                // database refuse it); features and user borrowed from it are
                // ranges of it, copied only when the decoder rebuilt them.
                let raw = self.chunk.push_str(e.payload);
                let features = e.features.as_ref().map(|f| {
                    if f.dropped > 0 {
                        self.counters
                            .add(Counter::DroppedFeatures, u64::from(f.dropped));
                    }
                    self.chunk.within(raw, e.payload, &f.json)
                });
                let user = e
                    .user
                    .as_ref()
                    .map(|u| self.chunk.within(raw, e.payload, u));
                self.chunk.events.push(Ev {
                    kind: e.kind,
                    txid: e.txid,
                    created,
                    ts: e.ts.max(created),
                    arrival: self.arrival,
                    features,
                    price: e.price,
                    user,
                    raw,
                });
            }
            Ok(Message::Tick(t)) => {
                // A mis-stamped tick could open the door to far-future txids
                // and sweep every window: refuse it like a future event.
                if t.ts > self.reference() + self.max_future {
                    self.counters.add(Counter::FutureTick, 1);
                    self.log.log(
                        "future_tick",
                        topic,
                        "a tick too far ahead of the newest one heard",
                    );
                    return;
                }
                if self.newest_tick.is_none_or(|n| t.ts > n) {
                    self.newest_tick = Some(t.ts);
                    self.chunk.reference = self.newest_tick;
                }
                if !t.sent.is_empty() {
                    let lost = self.loss.tick(which, &t.publisher, &t.sent);
                    if lost > self.reported_loss {
                        self.counters
                            .add(Counter::LostEstimate, lost - self.reported_loss);
                        self.reported_loss = lost;
                    }
                }
                if self.clock_kind == ClockKind::Event {
                    if let Some(v) = self.clock.tick(which, &t.publisher, t.ts, Instant::now()) {
                        self.chunk.clock = Some(v);
                    }
                }
            }
            Err(r) => {
                self.counters.rejected(&r);
                self.log.log(r.reason(), topic, &r.to_string());
            }
        }
    }

    /// What `max_future` is measured from (SPEC 1): wall time under the wall
    /// clock; under the event clock the newest tick heard from any publisher
    /// on either socket, never the (oldest-tick) sweeping clock; before the
    /// first tick, the larger of wall time and the previous run's reference.
    fn reference(&self) -> i64 {
        match (self.clock_kind, self.newest_tick) {
            (ClockKind::Event, Some(t)) => t,
            (ClockKind::Event, None) => wall_ms().max(self.saved_reference),
            (ClockKind::Wall, _) => wall_ms(),
        }
    }

    /// Hands the chunk to the writer when it is big or old enough, or a clock
    /// moved; on `last`, waits for room.
    fn hand_over(&mut self, last: bool) {
        if self.chunk.is_empty() {
            self.chunk_started = Instant::now();
            return;
        }
        // A clock move rides with the events: it never forces a small chunk
        // (a replay ticks every minute of event time), and `CHUNK_AGE` bounds
        // how long it waits when the publisher is idle.
        let due = last
            || self.chunk.events.len() >= CHUNK_EVENTS
            || self.chunk_started.elapsed() >= CHUNK_AGE;
        if !due {
            return;
        }
        let chunk = std::mem::take(&mut self.chunk);
        if last {
            let _ = self.out.blocking_send(chunk);
            return;
        }
        match self.out.try_send(chunk) {
            Ok(()) => {
                self.chunk_started = Instant::now();
                self.stalled_since = None;
            }
            // The writer is behind: keep this chunk and retry on the next turn.
            Err(mpsc::error::TrySendError::Full(chunk)) => {
                self.chunk = chunk;
                self.stalled_since.get_or_insert_with(Instant::now);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// Logs rejected messages, each reason at most every 10 s, so bad input
/// cannot flood the log (the counters have every one).
#[derive(Debug, Default)]
pub struct RejectLog {
    logged: Vec<(&'static str, Instant)>,
}

impl RejectLog {
    /// Logs a rejection of `reason` unless that reason was logged in the last 10 s.
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

/// Wall time in milliseconds since the Unix epoch.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_parts_are_ranges_of_the_stored_payload_and_others_copies() {
        let mut c = Chunk::default();
        c.push_str("earlier text");
        let payload = r#"{"features":{"a":"x"},"user":"u1"}"#;
        let raw = c.push_str(payload);
        let f = c.within(raw, payload, &payload[12..21]);
        assert_eq!(&c.arena[f.0 as usize..f.1 as usize], r#"{"a":"x"}"#);
        assert!(f.1 <= raw.1, "no copy");
        let copy = String::from("u1");
        let owned = c.within(raw, payload, &copy);
        assert_eq!(&c.arena[owned.0 as usize..owned.1 as usize], "u1");
        assert_eq!(owned.0, raw.1, "copied after the payload");
        let elsewhere = "not in the payload";
        let e = c.within(raw, payload, elsewhere);
        assert_eq!(&c.arena[e.0 as usize..e.1 as usize], elsewhere);
    }

    #[test]
    fn subscriptions_cover_prefixes_and_ticks() {
        assert_eq!(
            subscriptions(&["bid", "impression"], &["0".into(), "a1".into()]),
            ["bid-0", "bid-a1", "impression-0", "impression-a1", "tick"]
        );
        assert_eq!(subscriptions(&["click"], &[]), ["click-", "tick"]);
    }
}
