//! The profile process's side of intake (the sockets, the door and the
//! reading thread are `tidemark-intake`'s): each accepted event's
//! identifiers judged (SPEC 11) and counts by reason kept for the
//! coordinator. Chunks go to the coordinator over a bounded channel: when it
//! is full, intake stops reading and ZeroMQ's queues hold the backlog.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tidemark_intake::{
    wall_ms, ClockKind, Door, Handler, Intake, IntakeError, Socket, Sockets, TickRefusal,
};
use tidemark_person::Identities;
use tidemark_wire::{Decoder, Event as WireEvent, Reject, Tick, Types};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::core::Event;

/// Events per chunk handed over.
const CHUNK_EVENTS: usize = 4096;
/// Bytes of events per chunk handed over: real events (1-2 KiB) fill
/// `CHUNK_EVENTS` first, the largest allowed (64 KiB) fill this.
const CHUNK_BYTES: usize = 4 << 20;
/// Longest an event waits in intake before its chunk is handed over.
const CHUNK_AGE: Duration = Duration::from_millis(20);

/// Events in arrival order and the clocks as they stood after them.
#[derive(Debug, Default)]
pub struct Chunk {
    /// The events.
    pub events: Vec<Event>,
    /// What they hold ([`Event::bytes`]).
    pub bytes: usize,
    /// The process clock, when it moved.
    pub clock: Option<i64>,
    /// The newest tick heard (the `max_future` reference), when it moved.
    pub reference: Option<i64>,
}

/// Counts by reason that intake decides (rejects, future events and ticks),
/// drained by the coordinator into `tidemark.profile_counts`.
pub type Tally = Arc<Mutex<BTreeMap<String, i64>>>;

/// Opens both sockets and starts the intake thread.
pub fn spawn(
    config: &Config,
    saved_clock: Option<i64>,
    saved_reference: Option<i64>,
    tally: Tally,
    out: mpsc::Sender<Chunk>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, IntakeError> {
    let types: Vec<&str> = config.types.iter().map(String::as_str).collect();
    let sockets = Sockets::open(&config.subscription, &types)?;
    let intake = Intake {
        decoder: Decoder::new(config.known.clone()),
        // SPEC 11: an event's own `ts` is bounded too.
        door: Door::new(&config.subscription, saved_clock, saved_reference),
        bound_ts: true,
        handler: Profiles {
            types: config.types.clone(),
            max_ids_per_event: config.max_ids_per_event,
            wall_clock: config.subscription.clock == ClockKind::Wall,
            known: config.known.clone(),
            tally,
            chunk: Chunk::default(),
            started: Instant::now(),
            // As the coordinator judged before this run's first tick.
            clock: saved_clock,
            out,
        },
    };
    tidemark_intake::spawn("profile-intake", sockets, intake, stop)
}

struct Profiles {
    types: Vec<String>,
    max_ids_per_event: usize,
    wall_clock: bool,
    /// Names the types of decoded events.
    known: Types,
    tally: Tally,
    chunk: Chunk,
    started: Instant,
    out: mpsc::Sender<Chunk>,
    /// The process clock as intake knows it now (event clock): what an
    /// event accepted now is stamped with.
    clock: Option<i64>,
}

impl Profiles {
    fn count(&self, reason: &str) {
        let mut t = self.tally.lock().expect("tally lock");
        *t.entry(reason.to_owned()).or_default() += 1;
    }

    /// The index of an event's type among those read; `None` for a type
    /// subscribed by a shared prefix only.
    fn type_index(&self, e: &WireEvent<'_>) -> Option<usize> {
        let name = self.known.name(e.kind);
        self.types.iter().position(|t| t == name)
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
        if !last && !self.full() && self.started.elapsed() < CHUNK_AGE {
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

impl Handler for Profiles {
    fn full(&self) -> bool {
        self.chunk.events.len() >= CHUNK_EVENTS || self.chunk.bytes >= CHUNK_BYTES
    }

    fn event(&mut self, _: Socket, e: WireEvent<'_>) {
        let Some(type_index) = self.type_index(&e) else {
            return;
        };
        let Some(ids) =
            Identities::read_at_most(e.identity.user, e.identity.ids, self.max_ids_per_event)
        else {
            return self.count("too_many_ids");
        };
        let event = Event {
            type_index,
            txid: e.txid,
            created: e.txid.created_ms() as i64,
            ts: e.ts,
            ids,
            raw: e.payload.into(),
            seq: 0,
            accepted: if self.wall_clock {
                Some(wall_ms())
            } else {
                self.clock
            },
        };
        self.chunk.bytes += event.bytes();
        self.chunk.events.push(event);
    }

    fn future(&mut self, _: Socket, e: &WireEvent<'_>) {
        if self.type_index(e).is_some() {
            self.count("future");
        }
    }

    fn tick(&mut self, _: Socket, _: &Tick<'_>, reference: Option<i64>, clock: Option<i64>) {
        if reference.is_some() {
            self.chunk.reference = reference;
        }
        if clock.is_some() {
            self.chunk.clock = clock;
            self.clock = clock;
        }
    }

    fn refused_tick(&mut self, why: TickRefusal) {
        self.count(why.reason());
    }

    fn rejected(&mut self, r: &Reject) {
        self.count(&format!("rejected_{}", r.reason()));
    }

    fn restored(&mut self, _: Socket, _: &str) {
        self.count("connections_restored");
    }

    fn turn(&mut self, clock: Option<i64>, stop: &AtomicBool) -> bool {
        if self.wall_clock {
            self.chunk.clock = Some(wall_ms());
        } else if clock.is_some() {
            self.chunk.clock = clock;
            self.clock = clock;
        }
        self.hand_over(false, stop)
    }

    fn finish(&mut self) {
        // The last hand-over waits for room whatever `stop` says.
        self.hand_over(true, &AtomicBool::new(true));
    }
}
