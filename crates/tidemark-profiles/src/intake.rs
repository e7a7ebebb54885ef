//! ZeroMQ intake for the profile process: the shard's two sockets read
//! round-robin (SPEC 4), the shard's decoder and clocks (SPEC 1, 6), and each
//! event's identifiers judged (SPEC 11). Chunks go to the coordinator over a
//! bounded channel: when it is full, intake stops reading and ZeroMQ's queues
//! hold the backlog.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tidemark_profile::{Config, Identities};
use tidemark_shard::clock::{EventClock, Socket};
use tidemark_shard::intake::{read_rest, subscriptions, wall_ms, RejectLog};
use tidemark_wire::{Decoder, Message, Reject, Txid};
use tokio::sync::mpsc;

/// Events per chunk handed over.
const CHUNK_EVENTS: usize = 4096;
/// Longest an event waits in intake before its chunk is handed over.
const CHUNK_AGE: Duration = Duration::from_millis(20);
/// Messages read from one socket before turning to the other.
const BURST: usize = 256;

/// One event as the profile process reads it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Index of its type in the configuration's `types`.
    pub type_index: usize,
    /// Its transaction.
    pub txid: Txid,
    /// The txid's creation time, ms.
    pub created: i64,
    /// Its own time, ms.
    pub ts: i64,
    /// Its identifiers.
    pub ids: Identities,
}

/// Events in arrival order and the clocks as they stood after them.
#[derive(Debug, Default)]
pub struct Chunk {
    /// The events.
    pub events: Vec<Event>,
    /// The process clock, when it moved.
    pub clock: Option<i64>,
    /// The newest tick heard (the `max_future` reference), when it moved.
    pub reference: Option<i64>,
}

/// Counts by reason that intake decides (rejects, future events and ticks),
/// drained by the coordinator into `tidemark.profile_counts`.
pub type Tally = Arc<Mutex<BTreeMap<String, i64>>>;

/// Why intake could not start.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// A socket could not be set up or connected.
    #[error("zmq ({what}): {error}")]
    Socket {
        /// The step refused, or the endpoint.
        what: String,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// The thread could not start.
    #[error("spawn intake thread: {0}")]
    Thread(std::io::Error),
}

/// Opens both sockets and starts the intake thread.
pub fn spawn(
    config: &Config,
    saved_clock: Option<i64>,
    saved_reference: Option<i64>,
    tally: Tally,
    out: mpsc::Sender<Chunk>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, IntakeError> {
    let ctx = zmq::Context::new();
    let high: Vec<&str> = config
        .types
        .iter()
        .map(String::as_str)
        .filter(|t| matches!(*t, "auction" | "bid" | "impression"))
        .collect();
    let low: Vec<&str> = config
        .types
        .iter()
        .map(String::as_str)
        .filter(|t| !high.contains(t))
        .collect();
    let open = |types: &[&str]| -> Result<zmq::Socket, IntakeError> {
        let fail = |what: &str| {
            let what = what.to_owned();
            move |error| IntakeError::Socket { what, error }
        };
        let s = ctx.socket(zmq::SUB).map_err(fail("create"))?;
        s.set_rcvhwm(config.rcvhwm).map_err(fail("rcvhwm"))?;
        s.set_linger(0).map_err(fail("linger"))?;
        for sub in subscriptions(types, &config.prefixes) {
            s.set_subscribe(sub.as_bytes()).map_err(fail("subscribe"))?;
        }
        for ep in &config.endpoints {
            s.connect(ep).map_err(fail(&format!("connect {ep}")))?;
        }
        Ok(s)
    };
    let sockets = [(Socket::High, open(&high)?), (Socket::Low, open(&low)?)];
    let mut state = Intake {
        decoder: Decoder::new(config.known.clone()),
        types: config.types.clone(),
        event_clock: config.event_clock,
        clock: EventClock::new(config.lateness, config.publisher_timeout, saved_clock),
        max_future: config.max_future.as_millis() as i64,
        newest_tick: None,
        saved_reference: saved_reference.unwrap_or(i64::MIN),
        tally,
        chunk: Chunk::default(),
        started: Instant::now(),
        out,
        log: RejectLog::default(),
    };
    std::thread::Builder::new()
        .name("profile-intake".into())
        .spawn(move || {
            state.run(&sockets, &stop);
            drop(sockets);
            drop(ctx);
        })
        .map_err(IntakeError::Thread)
}

struct Intake {
    decoder: Decoder,
    types: Vec<String>,
    event_clock: bool,
    clock: EventClock,
    max_future: i64,
    newest_tick: Option<i64>,
    saved_reference: i64,
    tally: Tally,
    chunk: Chunk,
    started: Instant,
    out: mpsc::Sender<Chunk>,
    log: RejectLog,
}

impl Intake {
    fn run(&mut self, sockets: &[(Socket, zmq::Socket); 2], stop: &AtomicBool) {
        let mut topic = zmq::Message::new();
        let mut payload = zmq::Message::new();
        let mut extra = zmq::Message::new();
        while !stop.load(Ordering::Relaxed) {
            let mut idle = true;
            for (which, sock) in sockets {
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
            self.advance();
            if !self.hand_over(false, stop) {
                return;
            }
            if idle {
                let mut items = [
                    sockets[0].1.as_poll_item(zmq::POLLIN),
                    sockets[1].1.as_poll_item(zmq::POLLIN),
                ];
                let _ = zmq::poll(&mut items, 20);
            }
        }
        self.hand_over(true, stop);
    }

    fn advance(&mut self) {
        if self.event_clock {
            if let Some(v) = self.clock.advance(Instant::now()) {
                self.chunk.clock = Some(v);
            }
        } else {
            self.chunk.clock = Some(wall_ms());
        }
    }

    fn count(&self, reason: &str) {
        let mut t = self.tally.lock().expect("tally lock");
        *t.entry(reason.to_owned()).or_default() += 1;
    }

    fn handle(&mut self, which: Socket, topic: &[u8], payload: &[u8], frames: usize) {
        let decoded = if frames == 2 {
            self.decoder.decode(topic, payload)
        } else {
            Err(Reject::FrameCount(frames))
        };
        match decoded {
            Ok(Message::Event(e)) => {
                let name = self.decoder.types().name(e.kind);
                let Some(type_index) = self.types.iter().position(|t| t == name) else {
                    return; // subscribed by a shared prefix only; not read
                };
                let created = e.txid.created_ms() as i64;
                let limit = self.reference() + self.max_future;
                if created > limit || e.ts > limit {
                    self.count("future");
                    self.log
                        .log("future", topic, "txid or ts beyond max_future");
                    return;
                }
                self.chunk.events.push(Event {
                    type_index,
                    txid: e.txid,
                    created,
                    ts: e.ts,
                    ids: Identities::read(e.identity.user, e.identity.ids),
                });
            }
            Ok(Message::Tick(t)) => {
                if t.ts > self.reference() + self.max_future {
                    self.count("future_tick");
                    self.log.log("future_tick", topic, "a tick too far ahead");
                    return;
                }
                if self.newest_tick.is_none_or(|n| t.ts > n) {
                    self.newest_tick = Some(t.ts);
                    self.chunk.reference = Some(t.ts);
                }
                if self.event_clock {
                    if let Some(v) = self.clock.tick(which, &t.publisher, t.ts, Instant::now()) {
                        self.chunk.clock = Some(v);
                    }
                }
            }
            Err(r) => {
                self.count(&format!("rejected_{}", r.reason()));
                self.log.log(r.reason(), topic, &r.to_string());
            }
        }
    }

    /// As in a shard (SPEC 1): wall time, or under the event clock the newest
    /// tick heard (before the first: the larger of wall time and the saved one).
    fn reference(&self) -> i64 {
        match (self.event_clock, self.newest_tick) {
            (true, Some(t)) => t,
            (true, None) => wall_ms().max(self.saved_reference),
            (false, _) => wall_ms(),
        }
    }

    /// Hands the chunk over when full or old enough; blocks while the
    /// coordinator is behind (back-pressure). `false` once it is gone.
    fn hand_over(&mut self, last: bool, stop: &AtomicBool) -> bool {
        let empty = self.chunk.events.is_empty()
            && self.chunk.clock.is_none()
            && self.chunk.reference.is_none();
        if empty {
            self.started = Instant::now();
            return true;
        }
        if !last && self.chunk.events.len() < CHUNK_EVENTS && self.started.elapsed() < CHUNK_AGE {
            return true;
        }
        let mut chunk = std::mem::take(&mut self.chunk);
        self.started = Instant::now();
        loop {
            match self.out.try_send(chunk) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
                Err(mpsc::error::TrySendError::Full(c)) => {
                    if stop.load(Ordering::Relaxed) && !last {
                        self.chunk = c;
                        return true;
                    }
                    chunk = c;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
}
