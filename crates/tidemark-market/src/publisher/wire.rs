//! Where messages go: the XPUB socket (or, with `--write`, a file of
//! payload lines), and what goes with them. Frames each event as its topic
//! and payload, sends the heartbeats SPEC 3 asks for (`tick`, with the
//! `sent` counts per type and first txid digit), keeps the metrics
//! endpoint's samples, and on exit waits for the queues to drain.
//!
//! The socket never drops (`ZMQ_XPUB_NODROP`): a full subscriber queue
//! blocks the sender, so a slow shard slows the publisher instead of
//! losing events.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tidemark_wire::{tick_payload, topic, Txid};

use super::error::{endpoint, file_error, socket};
use super::{PublishError, PublishOptions};

/// The most wall time between two ticks.
pub(super) const TICK_EVERY: Duration = Duration::from_millis(250);
/// The most event time between two ticks (SPEC 3: a minute).
pub(super) const TICK_STEP_MS: i64 = 60_000;

/// Counts of sent messages per `<type>-<first digit>`, for ticks.
#[derive(Default)]
struct Sent(HashMap<String, [u64; 16]>);

impl Sent {
    fn add(&mut self, type_name: &str, txid: &Txid) {
        let digit = txid.first_digit().to_digit(16).expect("hex") as usize;
        match self.0.get_mut(type_name) {
            Some(c) => c[digit] += 1,
            None => {
                let mut c = [0; 16];
                c[digit] = 1;
                self.0.insert(type_name.to_owned(), c);
            }
        }
    }

    fn pairs(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (t, c) in &self.0 {
            for (d, n) in c.iter().enumerate().filter(|(_, n)| **n > 0) {
                out.push((format!("{t}-{d:x}"), *n));
            }
        }
        out.sort();
        out
    }

    fn by_type(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .0
            .iter()
            .map(|(t, c)| (t.clone(), c.iter().sum()))
            .collect();
        v.sort();
        v
    }
}

/// Where messages go: a socket, or a file of payload lines.
enum Sink {
    Socket(zmq::Socket),
    File(BufWriter<std::fs::File>, PathBuf),
}

/// The publisher's side of the wire: where messages go, and what went.
pub(super) struct Wire {
    sink: Sink,
    sent: Sent,
    pub(super) events: u64,
    pub(super) ticks: u64,
    name: String,
    /// The last tick's event time, and when it went out.
    last_tick: Option<(i64, Instant)>,
    /// With a metrics endpoint: what it shows, and the profile reader whose
    /// lookups it times.
    board: Option<tidemark_metrics::Board>,
    pub(super) lookups: Option<tidemark_reader::Reader>,
}

/// Sends one frame; a signal arriving during a blocked send (EINTR) is not
/// an error: the stop flag it sets is read between messages.
fn send(sock: &zmq::Socket, frame: &[u8], flags: i32) -> Result<(), PublishError> {
    loop {
        match sock.send(frame, flags) {
            Err(zmq::Error::EINTR) => continue,
            r => return r.map_err(PublishError::Send),
        }
    }
}

impl Wire {
    /// The file `opts.write` names, else an XPUB socket of `ctx` bound and
    /// connected as `opts` says, after `opts.warmup` (so subscribers can
    /// connect before anything is sent).
    pub(super) fn open(opts: &PublishOptions, ctx: &zmq::Context) -> Result<Wire, PublishError> {
        let sink = match &opts.write {
            Some(path) => {
                let f = std::fs::File::create(path).map_err(file_error(path))?;
                Sink::File(BufWriter::with_capacity(1 << 20, f), path.clone())
            }
            None => Sink::Socket(open_socket(opts, ctx)?),
        };
        Ok(Wire {
            sink,
            sent: Sent::default(),
            events: 0,
            ticks: 0,
            name: opts.publisher.clone(),
            last_tick: None,
            board: None,
            lookups: None,
        })
    }

    /// Serves what `post` shows at `addr`, until the endpoint is dropped.
    pub(super) fn serve_metrics(
        &mut self,
        addr: &str,
    ) -> Result<tidemark_metrics::Endpoint, PublishError> {
        let board = tidemark_metrics::Board::default();
        let b = board.clone();
        let e = tidemark_metrics::serve(addr, "publisher", move || b.read())
            .map_err(|e| PublishError::Metrics(format!("--metrics-addr: {e}")))?;
        tracing::info!(addr = e.addr, "serving metrics at /metrics");
        self.board = Some(board);
        Ok(e)
    }

    /// Events published per type name.
    pub(super) fn by_type(&self) -> Vec<(String, u64)> {
        self.sent.by_type()
    }

    /// Flushes the file, or waits (up to `drain`) for the socket's queues
    /// to be taken; returns how long it waited.
    pub(super) fn close(
        self,
        ctx: zmq::Context,
        drain: Duration,
    ) -> Result<Duration, PublishError> {
        match self.sink {
            Sink::File(mut f, path) => {
                f.flush().map_err(file_error(&path))?;
                Ok(Duration::ZERO)
            }
            Sink::Socket(sock) => drain_queues(sock, ctx, drain),
        }
    }

    pub(super) fn event(
        &mut self,
        type_name: &str,
        txid: &Txid,
        payload: &[u8],
    ) -> Result<(), PublishError> {
        match &mut self.sink {
            Sink::Socket(sock) => {
                let t = topic(type_name, txid);
                send(sock, t.as_bytes(), zmq::SNDMORE)?;
                send(sock, payload, 0)?;
            }
            Sink::File(f, path) => {
                f.write_all(payload)
                    .and_then(|()| f.write_all(b"\n"))
                    .map_err(file_error(path))?;
            }
        }
        self.sent.add(type_name, txid);
        self.events += 1;
        Ok(())
    }

    /// Refreshes the metrics endpoint's samples (on every tick: often
    /// enough for a scrape, rare enough to cost nothing).
    pub(super) fn post(&self) {
        let Some(board) = &self.board else {
            return;
        };
        let p = [("publisher", self.name.as_str())];
        let mut v: Vec<_> = self
            .sent
            .by_type()
            .iter()
            .map(|(t, n)| {
                tidemark_metrics::counter(
                    "events",
                    "events published, by type",
                    &[("publisher", self.name.as_str()), ("type", t.as_str())],
                    *n as f64,
                )
            })
            .collect();
        v.push(tidemark_metrics::counter(
            "ticks",
            "ticks published",
            &p,
            self.ticks as f64,
        ));
        if let Some(r) = &self.lookups {
            v.push(r.lookup_times().sample(
                "profile_lookup_duration_seconds",
                "a bid's profile lookup (one round trip for a batch of persons), seconds",
                &p,
            ));
        }
        board.post(v);
    }

    pub(super) fn tick(&mut self, ts: i64) -> Result<(), PublishError> {
        self.last_tick = Some((ts, Instant::now()));
        let Sink::Socket(sock) = &mut self.sink else {
            return Ok(());
        };
        let p = tick_payload(&self.name, ts, &self.sent.pairs());
        send(sock, b"tick", zmq::SNDMORE)?;
        send(sock, p.as_bytes(), 0)?;
        self.ticks += 1;
        self.post();
        Ok(())
    }

    /// Ticks as SPEC 3 asks before sending anything stamped after `through`
    /// (everything up to `through` has been sent): the first tick, a step
    /// at least every minute of event time, and one every `TICK_EVERY` of wall time.
    pub(super) fn ticks_to(&mut self, through: i64) -> Result<(), PublishError> {
        match self.last_tick {
            None => return self.tick(through),
            Some((last, at)) => {
                let mut last = last;
                while through - last > TICK_STEP_MS {
                    last += TICK_STEP_MS;
                    self.tick(last)?;
                }
                if through > last && at.elapsed() >= TICK_EVERY {
                    self.tick(through)?;
                } else if at.elapsed() >= TICK_EVERY {
                    // Idle: tell shards the publisher is alive.
                    self.tick(last)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn last_tick_ts(&self) -> Option<i64> {
        self.last_tick.map(|(ts, _)| ts)
    }
}

/// Waits until every queued message has been handed to its subscriber's
/// connection, or `bound` passes (then the rest is lost, and said so).
fn drain_queues(
    sock: zmq::Socket,
    ctx: zmq::Context,
    bound: Duration,
) -> Result<Duration, PublishError> {
    let started = Instant::now();
    sock.set_linger(bound.as_millis().min(i32::MAX as u128) as i32)
        .map_err(socket("linger"))?;
    tracing::info!(
        "waiting up to {:.0}s (--drain) for subscribers to take what is still queued",
        bound.as_secs_f64()
    );
    drop(sock);
    // Terminating the context blocks until the queues are empty or linger expires.
    drop(ctx);
    let waited = started.elapsed();
    if waited + Duration::from_millis(50) >= bound {
        return Err(PublishError::Undrained(waited));
    }
    Ok(waited)
}

/// An XPUB socket that never drops, with `opts`' keys (or a warning for
/// each endpoint outside loopback without them), bound and connected.
fn open_socket(opts: &PublishOptions, ctx: &zmq::Context) -> Result<zmq::Socket, PublishError> {
    let mut sock = ctx.socket(zmq::XPUB).map_err(socket("create"))?;
    sock.set_sndhwm(opts.sndhwm).map_err(socket("sndhwm"))?;
    set_nodrop(&mut sock)?;
    match &opts.curve {
        Some(c) => c.apply(&sock).map_err(socket("curve keys"))?,
        None => {
            for ep in opts.bind.iter().chain(&opts.connect) {
                if !tidemark_intake::curve::is_local(ep) {
                    tracing::warn!(
                        endpoint = ep.as_str(),
                        "publishing outside loopback without CURVE keys: anyone who \
                         reaches this network can read what is sent"
                    );
                }
            }
        }
    }
    for ep in &opts.bind {
        sock.bind(ep).map_err(endpoint("--bind", ep))?;
    }
    for ep in &opts.connect {
        sock.connect(ep).map_err(endpoint("--connect", ep))?;
    }
    std::thread::sleep(opts.warmup);
    Ok(sock)
}

/// Makes a full subscriber queue block the sender instead of dropping.
/// The `zmq` crate has no setter for this option, hence the raw call.
#[allow(unsafe_code)]
fn set_nodrop(sock: &mut zmq::Socket) -> Result<(), PublishError> {
    let on: std::os::raw::c_int = 1;
    // SAFETY: `sock` is a live socket for the whole call, and ZMQ_XPUB_NODROP
    // reads exactly one int from `optval`, which points at `on`.
    let rc = unsafe {
        zmq_sys::zmq_setsockopt(
            sock.as_mut_ptr(),
            zmq_sys::ZMQ_XPUB_NODROP as std::os::raw::c_int,
            (&on as *const std::os::raw::c_int).cast(),
            std::mem::size_of::<std::os::raw::c_int>(),
        )
    };
    if rc != 0 {
        return Err(PublishError::NoDrop(std::io::Error::last_os_error()));
    }
    Ok(())
}
