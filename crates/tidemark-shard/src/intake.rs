//! The shard's side of intake (the sockets, the door and the reading thread
//! are `tidemark-intake`'s): accepted events counted and gathered into
//! chunks whose strings share one arena, PUB/SUB loss estimated from ticks,
//! chunks handed to the writer.
//!
//! When the writer falls behind (a long sweep), intake stops reading and lets
//! ZeroMQ's queues, then TCP, hold the backlog: nothing is lost while the
//! publisher can buffer. If the writer stays stuck longer than `STALL_LIMIT`
//! (PostgreSQL down), intake reads on and drops what exceeds its memory bound,
//! counted as `dropped_overflow`, rather than leave the loss to publishers.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::telemetry::{Counter, Family};
use tidemark_intake::{wall_ms, Door, Handler, Intake, IntakeError, Socket, Sockets, TickRefusal};
use tidemark_wire::{Decoder, Event, EventType, Reject, Tick, Txid};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::counters::Counters;
use crate::loss::LossEstimator;

/// Events per chunk handed to the writer.
const CHUNK_EVENTS: usize = 2048;
/// Longest a received event waits before its chunk is handed over.
const CHUNK_AGE: Duration = Duration::from_millis(20);
/// How long intake waits for a stuck writer before reading on and dropping.
const STALL_LIMIT: Duration = Duration::from_secs(10);
/// Bytes of events a chunk gathers before it is handed over: real events
/// (1-2 KiB) fill `CHUNK_EVENTS` first; the largest allowed (64 KiB) fill
/// this, so a chunk of them costs megabytes, not a quarter of a gigabyte.
const CHUNK_BYTES: usize = 4 << 20;
/// Events (and bytes) the chunk intake fills may hold: beyond, while the
/// writer is stuck, they are dropped and counted. Each event takes at most
/// its payload (64 KiB) and parts the decoder rebuilt (as much again), so
/// the chunk's arena stays far below what its `u32` offsets can address.
const MAX_CHUNK: usize = 2 * CHUNK_EVENTS;
const MAX_CHUNK_BYTES: usize = 2 * CHUNK_BYTES;
const _: () = assert!(MAX_CHUNK_BYTES + 2 * tidemark_wire::MAX_PAYLOAD < u32::MAX as usize);

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

    /// Bytes its events hold (payloads and rebuilt parts).
    pub fn bytes(&self) -> usize {
        self.arena.len()
    }

    /// Big enough to hand over.
    fn full(&self) -> bool {
        self.events.len() >= CHUNK_EVENTS || self.arena.len() >= CHUNK_BYTES
    }

    /// As big as intake lets it grow while the writer is stuck.
    fn overfull(&self) -> bool {
        self.events.len() >= MAX_CHUNK || self.arena.len() >= MAX_CHUNK_BYTES
    }
}

/// Opens both sockets, connects them and starts the intake thread.
/// `saved_clock`: the clock the previous run reached; `saved_reference`:
/// the newest tick it heard.
pub fn spawn(
    config: &Config,
    counters: Arc<Counters>,
    saved_clock: Option<i64>,
    saved_reference: Option<i64>,
    out: mpsc::Sender<Chunk>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, IntakeError> {
    let mut types = vec!["bid", "impression", "click", "install"];
    types.extend(config.types.custom().map(|(_, n)| n));
    let sockets = Sockets::open(&config.subscription, &types)?;
    let intake = Intake {
        decoder: Decoder::new(config.types.clone()),
        door: Door::new(&config.subscription, saved_clock, saved_reference),
        bound_ts: false,
        handler: Shard {
            counters,
            arrival: wall_ms() * 1000,
            chunk: Chunk::default(),
            chunk_started: Instant::now(),
            stalled_since: None,
            loss: LossEstimator::new(
                config.types.clone(),
                &config.subscription.prefixes,
                config.subscription.publisher_timeout,
            ),
            reported_loss: 0,
            out,
        },
    };
    tidemark_intake::spawn("intake", sockets, intake, stop)
}

/// The shard's side of intake: counts, the chunk being filled, the loss
/// estimate, and back-pressure from the writer.
struct Shard {
    counters: Arc<Counters>,
    arrival: i64,
    chunk: Chunk,
    chunk_started: Instant,
    /// Since when the writer's queue has been full.
    stalled_since: Option<Instant>,
    loss: LossEstimator,
    /// The loss estimate already added to the `lost_estimate` counter.
    reported_loss: u64,
    out: mpsc::Sender<Chunk>,
}

impl Handler for Shard {
    fn full(&self) -> bool {
        // Once the writer has been stuck past the limit, intake reads on
        // and drops (counted) instead.
        self.chunk.full() && self.stalled_since.is_none_or(|t| t.elapsed() < STALL_LIMIT)
    }

    fn ready(&mut self) -> bool {
        let writer_behind = self.chunk.full()
            && self
                .stalled_since
                .is_some_and(|t| t.elapsed() < STALL_LIMIT);
        if writer_behind {
            // Back-pressure: leave messages in ZeroMQ's queue until there is room.
            self.hand_over(false);
        }
        !writer_behind
    }

    fn event(&mut self, _: Socket, e: Event<'_>) {
        self.loss.arrived(e.kind, e.txid.first_digit());
        if self.chunk.overfull() {
            self.counters.add(Counter::DroppedOverflow, 1);
            return;
        }
        let created = e.txid.created_ms() as i64;
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

    fn restored(&mut self, _: Socket, _: &str) {
        self.counters.add(Counter::ConnectionsRestored, 1);
    }

    fn future(&mut self, _: Socket, e: &Event<'_>) {
        self.loss.arrived(e.kind, e.txid.first_digit());
        self.counters.per_type(Family::Future, e.kind, 1);
    }

    fn tick(&mut self, which: Socket, t: &Tick<'_>, reference: Option<i64>, clock: Option<i64>) {
        if reference.is_some() {
            self.chunk.reference = reference;
        }
        if !t.sent.is_empty() {
            let lost = self.loss.tick(which, &t.publisher, &t.sent, Instant::now());
            if lost > self.reported_loss {
                self.counters
                    .add(Counter::LostEstimate, lost - self.reported_loss);
                self.reported_loss = lost;
            }
        }
        if clock.is_some() {
            self.chunk.clock = clock;
        }
    }

    fn refused_tick(&mut self, why: TickRefusal) {
        self.counters.add(
            match why {
                TickRefusal::Future => Counter::FutureTick,
                TickRefusal::TooManyPublishers => Counter::TooManyPublishers,
                TickRefusal::Foreign => Counter::ForeignTick,
            },
            1,
        );
    }

    fn rejected(&mut self, r: &Reject) {
        self.counters.rejected(r);
    }

    fn turn(&mut self, clock: Option<i64>, _: &AtomicBool) -> bool {
        if clock.is_some() {
            self.chunk.clock = clock;
        }
        self.hand_over(false);
        true
    }

    fn finish(&mut self) {
        self.hand_over(true);
    }
}

impl Shard {
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
        let due = last || self.chunk.full() || self.chunk_started.elapsed() >= CHUNK_AGE;
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
}
