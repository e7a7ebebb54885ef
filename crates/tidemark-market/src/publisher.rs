//! `tidemark publish`: puts events on a ZeroMQ socket, paced in event time,
//! with heartbeats (`tick`) as SPEC 3 asks: one before the first event, then
//! at least every 250 ms of wall time and, faster than real time, every
//! minute of event time, stepping through quiet stretches.
//!
//! It never drops: the socket is an XPUB with `ZMQ_XPUB_NODROP`, so a full
//! subscriber queue blocks the sender instead of losing messages, and on exit
//! it waits (up to `drain`) until its queues are handed to the subscribers'
//! connections. It can also write what it would send to a file, to replay.

use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tidemark_wire::{event_payload, tick_payload, topic, Txid};

use crate::market::{Market, MarketConfig, Out};
use tidemark_reader::ProfileRate;

/// Where events come from.
pub enum Source {
    /// The synthetic market.
    Synthetic(MarketConfig),
    /// JSON lines, one event payload each, in time order (up to the
    /// publisher's disorder bound).
    Replay(PathBuf),
}

/// How and where to publish.
pub struct PublishOptions {
    /// Endpoints to bind (subscribers connect).
    pub bind: Vec<String>,
    /// Endpoints to connect to (a proxy's frontend).
    pub connect: Vec<String>,
    /// Name in ticks.
    pub publisher: String,
    /// Event milliseconds per wall millisecond; 0 replays as fast as possible.
    pub speed: f64,
    /// Event time to start the synthetic market at.
    pub start_ms: i64,
    /// Wall time to run for; `None` until the source ends or `stop`.
    pub duration: Option<Duration>,
    /// Wall time to wait after binding, so subscribers can connect first.
    pub warmup: Duration,
    /// Synthetic market: event time to generate (needed at speed 0).
    pub span_ms: Option<i64>,
    /// After the last event, keep stepping ticks through this much event
    /// time, so shards sweep every window and emit the last observations.
    pub tick_past_ms: i64,
    /// How long to wait on exit for queued messages to reach subscribers.
    pub drain: Duration,
    /// Write the events' payloads, one per line, to this file instead of
    /// publishing (a file `--replay` reads).
    pub write: Option<PathBuf>,
    /// Messages queued per subscriber before sending blocks.
    pub sndhwm: i32,
    /// A profile database (SPEC 11): before each bid goes out, its person's
    /// counters are read from it and added to the bid's features under the
    /// counters' names, as a bidder does.
    pub profiles: Option<String>,
    /// Hot standbys of `profiles` the lookups go to while they lag it by at
    /// most `max_lag` (`tidemark_reader::Reader::with_replicas`).
    pub profile_replicas: Vec<String>,
    /// See `profile_replicas`.
    pub max_lag: Duration,
    /// With `profiles`: also add the person's master identifier (its
    /// bridged identity, SPEC 11) as the categorical feature `person`, so
    /// the learner can learn each person's own propensity.
    pub profile_person: bool,
    /// With `profiles`: add every counter as read (else only what
    /// `profile_person` and `profile_rates` derive).
    pub profile_counters: bool,
    /// With `profiles`: rates derived from pairs of counters, added as
    /// numeric features (`tidemark_reader::rate`).
    pub profile_rates: Vec<ProfileRate>,
    /// Synthetic market: write the truth of every transaction with an
    /// impression to this file, tab-separated with a header
    /// (`crate::truth::TSV_HEADER`).
    pub truth: Option<PathBuf>,
    /// Serve Prometheus metrics here (`host:port`): events published by
    /// type and, with `profiles`, the bidder's lookup latency.
    pub metrics_addr: Option<String>,
    /// A replay goes on reading past the end of its file (a pipe, a growing
    /// file), ticking while idle, until stopped or `duration` passes.
    pub follow: bool,
    /// CURVE keys (SPEC 2): without them the socket is plain, and a warning
    /// names every endpoint outside loopback.
    pub curve: Option<tidemark_intake::curve::Client>,
}

/// The bidder's read path: the counters of a batch's persons, in one round trip.
struct ProfileReads {
    rt: tokio::runtime::Runtime,
    reader: tidemark_reader::Reader,
    /// Reads done, and bids that got counters.
    reads: u64,
    /// What goes into a bid (`PublishOptions::profile_person`, `profile_counters`, `profile_rates`).
    person: bool,
    counters: bool,
    rates: Vec<ProfileRate>,
}

impl ProfileReads {
    fn open(opts: &PublishOptions, url: &str) -> Result<ProfileReads, PublishError> {
        let mut names: Vec<&str> = opts.profile_rates.iter().map(|r| r.name.as_str()).collect();
        if opts.profile_person {
            names.push("person");
        }
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(PublishError::Profiles(format!(
                "two features of the bid's profile are named {:?}",
                w[0]
            )));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PublishError::Profiles(e.to_string()))?;
        let replicas: Vec<&str> = opts.profile_replicas.iter().map(String::as_str).collect();
        let reader = tidemark_reader::Reader::new(url, 1)
            .and_then(|r| r.with_replicas(&replicas, opts.max_lag))
            .map_err(|e| PublishError::Profiles(e.to_string()))?;
        Ok(ProfileReads {
            rt,
            reader,
            reads: 0,
            person: opts.profile_person,
            counters: opts.profile_counters,
            rates: opts.profile_rates.clone(),
        })
    }

    /// Adds to each bid's features what it takes from its person's profile
    /// (the counters, at the bid's own time; the person; rates derived
    /// from the counters); `at` is the batch's read time.
    fn enrich(&mut self, batch: &mut [Out], at: i64) -> Result<(), PublishError> {
        let users: Vec<String> = batch
            .iter()
            .filter(|o| o.features_end.is_some())
            .filter(|o| o.person.is_some())
            .map(|o| format!("user:{}", o.user))
            .collect();
        if users.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = users.iter().map(String::as_str).collect();
        let profiles = self
            .rt
            .block_on(self.reader.get(&ids, at))
            .map_err(|e| PublishError::Profiles(e.to_string()))?;
        self.reads += 1;
        let mut profiles = profiles.into_iter();
        for o in batch
            .iter_mut()
            .filter(|o| o.features_end.is_some() && o.person.is_some())
        {
            let p = profiles.next().expect("one profile per identifier asked");
            let counters = p.counters_at(o.ts);
            if self.counters {
                for (name, value) in &counters {
                    o.add_feature(name, *value);
                }
            }
            for r in &self.rates {
                // From the counters just decayed, not decayed again.
                match r.of(&counters) {
                    Some(v) if !(self.counters && counters.iter().any(|(n, _)| *n == r.name)) => {
                        o.add_feature(&r.name, v);
                    }
                    // No definitions yet (the profile process is starting):
                    // nothing, as for the counters.
                    None if counters.is_empty() => {}
                    _ => return Err(PublishError::Profiles(rate_misfit(r, &counters))),
                }
            }
            if self.person {
                o.add_text_feature("person", &p.master);
            }
        }
        Ok(())
    }
}

/// Why `rate` cannot go into bids whose profiles define `counters`.
fn rate_misfit(rate: &ProfileRate, counters: &[(&str, f64)]) -> String {
    let names: Vec<&str> = counters.iter().map(|(n, _)| *n).collect();
    match [&rate.clicks, &rate.views].into_iter().find(|c| !names.contains(&c.as_str())) {
        Some(missing) => format!(
            "--profile-rate {rate}: the profile database defines no counter {missing:?} (it defines {names:?})"
        ),
        None => format!("--profile-rate {rate}: a counter already goes into bids as {:?}", rate.name),
    }
}

/// Where the market's truth goes (`PublishOptions::truth`).
struct TruthFile {
    file: BufWriter<std::fs::File>,
    path: PathBuf,
    line: String,
}

impl TruthFile {
    fn create(path: &std::path::Path) -> Result<TruthFile, PublishError> {
        let f = std::fs::File::create(path).map_err(file_error(path))?;
        let mut file = BufWriter::with_capacity(1 << 20, f);
        writeln!(file, "{}", crate::truth::TSV_HEADER).map_err(file_error(path))?;
        Ok(TruthFile {
            file,
            path: path.to_owned(),
            line: String::new(),
        })
    }

    /// Writes and empties `truths`.
    fn write(&mut self, truths: &mut Vec<crate::Truth>) -> Result<(), PublishError> {
        for t in truths.drain(..) {
            self.line.clear();
            t.write_tsv(&mut self.line);
            self.line.push('\n');
            self.file
                .write_all(self.line.as_bytes())
                .map_err(file_error(&self.path))?;
        }
        Ok(())
    }
}

/// What a publisher did.
#[derive(Debug, Default, Clone)]
pub struct PublishReport {
    /// Events published.
    pub events: u64,
    /// Ticks published.
    pub ticks: u64,
    /// Wall time spent publishing.
    pub elapsed: Duration,
    /// Event time everything before which was published.
    pub through_ms: i64,
    /// Events published per type name.
    pub by_type: Vec<(String, u64)>,
    /// Wall time spent on exit waiting for queued messages to be taken.
    pub drained: Duration,
}

impl PublishReport {
    /// The report `tidemark publish` prints, one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let secs = self.elapsed.as_secs_f64();
        serde_json::json!({
            "events": self.events,
            "ticks": self.ticks,
            "seconds": secs,
            "events_per_second": self.events as f64 / secs.max(1e-9),
            "through_ms": self.through_ms,
            "drain_seconds": self.drained.as_secs_f64(),
            "by_type": self.by_type.iter().map(|(k, v)| (k.clone(), (*v).into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        })
    }
}

const TICK_EVERY: Duration = Duration::from_millis(250);
/// The most event time between two ticks (SPEC 3: a minute).
const TICK_STEP_MS: i64 = 60_000;

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

struct Wire {
    sink: Sink,
    sent: Sent,
    events: u64,
    ticks: u64,
    name: String,
    /// The last tick's event time, and when it went out.
    last_tick: Option<(i64, Instant)>,
    /// With a metrics endpoint: what it shows, and the profile reader whose
    /// lookups it times.
    board: Option<tidemark_metrics::Board>,
    lookups: Option<tidemark_reader::Reader>,
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
    fn event(&mut self, type_name: &str, txid: &Txid, payload: &[u8]) -> Result<(), PublishError> {
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
    fn post(&self) {
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

    fn tick(&mut self, ts: i64) -> Result<(), PublishError> {
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
    fn ticks_to(&mut self, through: i64) -> Result<(), PublishError> {
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

    fn last_tick_ts(&self) -> Option<i64> {
        self.last_tick.map(|(ts, _)| ts)
    }
}

/// Publishes until the duration passes, the source ends, or `stop` is set.
pub fn publish(
    opts: &PublishOptions,
    source: Source,
    stop: &AtomicBool,
) -> Result<PublishReport, PublishError> {
    let ctx = zmq::Context::new();
    let sink = match &opts.write {
        Some(path) => {
            let f = std::fs::File::create(path).map_err(file_error(path))?;
            Sink::File(BufWriter::with_capacity(1 << 20, f), path.clone())
        }
        None => {
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
            Sink::Socket(sock)
        }
    };
    let mut wire = Wire {
        sink,
        sent: Sent::default(),
        events: 0,
        ticks: 0,
        name: opts.publisher.clone(),
        last_tick: None,
        board: None,
        lookups: None,
    };
    let _endpoint = match &opts.metrics_addr {
        Some(addr) => {
            let board = tidemark_metrics::Board::default();
            let b = board.clone();
            let e = tidemark_metrics::serve(addr, "publisher", move || b.read())
                .map_err(|e| PublishError::Metrics(format!("--metrics-addr: {e}")))?;
            tracing::info!(addr = e.addr, "serving metrics at /metrics");
            wire.board = Some(board);
            Some(e)
        }
        None => None,
    };
    let started = Instant::now();
    let through = match source {
        Source::Synthetic(cfg) => synthetic(opts, cfg, &mut wire, stop, started)?,
        Source::Replay(path) => replay(opts, &path, &mut wire, stop, started)?,
    };
    // Step the ticks past the end, so shards sweep every window.
    let end = through + opts.tick_past_ms;
    let mut last = wire.last_tick_ts().unwrap_or(through).max(through);
    wire.tick(last)?;
    while last < end && !stop.load(Ordering::Relaxed) {
        last = (last + TICK_STEP_MS).min(end);
        wire.tick(last)?;
    }
    let elapsed = started.elapsed();
    wire.post();
    let drained = match wire.sink {
        Sink::File(mut f, path) => {
            f.flush().map_err(file_error(&path))?;
            Duration::ZERO
        }
        Sink::Socket(sock) => drain(sock, ctx, opts.drain)?,
    };
    Ok(PublishReport {
        events: wire.events,
        ticks: wire.ticks,
        elapsed,
        through_ms: last,
        by_type: wire.sent.by_type(),
        drained,
    })
}

/// Why publishing stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A socket or one of its options was refused.
    #[error("zmq socket ({what}): {error}")]
    Socket {
        /// The step refused.
        what: &'static str,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// An endpoint could not be bound or connected.
    #[error("{option} {endpoint}: {error}")]
    Endpoint {
        /// `--bind` or `--connect`.
        option: &'static str,
        /// The endpoint as given.
        endpoint: String,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// `ZMQ_XPUB_NODROP` could not be set.
    #[error("cannot set ZMQ_XPUB_NODROP: {0}")]
    NoDrop(std::io::Error),
    /// Sending a message failed.
    #[error("send: {0}")]
    Send(zmq::Error),
    /// A file (replay input or `--write` output) could not be read or written.
    #[error("{path}: {error}")]
    File {
        /// The file.
        path: PathBuf,
        /// The IO error.
        error: std::io::Error,
    },
    /// `--speed 0` without `--span`.
    #[error("--speed 0 (as fast as possible) needs --span, the event time to generate")]
    NeedsSpan,
    /// The profile database could not be read (`--profiles`).
    #[error("--profiles: {0}")]
    Profiles(String),
    /// The metrics endpoint could not start (`--metrics-addr`).
    #[error("{0}")]
    Metrics(String),
    /// Subscribers did not take every queued message within `--drain`.
    #[error("gave up after {:.1}s (--drain): a subscriber did not take every queued message, so some were lost", .0.as_secs_f64())]
    Undrained(Duration),
}

fn socket(what: &'static str) -> impl FnOnce(zmq::Error) -> PublishError {
    move |error| PublishError::Socket { what, error }
}

fn endpoint<'a>(option: &'static str, ep: &'a str) -> impl FnOnce(zmq::Error) -> PublishError + 'a {
    move |error| PublishError::Endpoint {
        option,
        endpoint: ep.to_owned(),
        error,
    }
}

fn file_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |error| PublishError::File {
        path: path.to_owned(),
        error,
    }
}

/// Waits until every queued message has been handed to its subscriber's
/// connection, or `bound` passes (then the rest is lost, and said so).
fn drain(sock: zmq::Socket, ctx: zmq::Context, bound: Duration) -> Result<Duration, PublishError> {
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

fn done(opts: &PublishOptions, stop: &AtomicBool, started: Instant) -> bool {
    stop.load(Ordering::Relaxed) || opts.duration.is_some_and(|d| started.elapsed() >= d)
}

fn synthetic(
    opts: &PublishOptions,
    cfg: MarketConfig,
    wire: &mut Wire,
    stop: &AtomicBool,
    started: Instant,
) -> Result<i64, PublishError> {
    if opts.speed <= 0.0 && opts.span_ms.is_none() {
        return Err(PublishError::NeedsSpan);
    }
    let end = opts.span_ms.map(|s| opts.start_ms + s);
    let mut market = Market::new(cfg, opts.start_ms);
    let mut truth = opts.truth.as_deref().map(TruthFile::create).transpose()?;
    if truth.is_some() {
        market.truths = Some(Vec::new());
    }
    let mut profiles = opts
        .profiles
        .as_deref()
        .map(|url| ProfileReads::open(opts, url))
        .transpose()?;
    wire.lookups = profiles.as_ref().map(|p| p.reader.clone());
    let mut batch: Vec<Out> = Vec::new();
    let mut payload = String::new();
    let mut through = opts.start_ms;
    wire.tick(through)?;
    while !done(opts, stop, started) {
        let mut now_ms = if opts.speed > 0.0 {
            opts.start_ms + (started.elapsed().as_secs_f64() * 1000.0 * opts.speed) as i64
        } else {
            i64::MAX
        };
        if let Some(end) = end {
            if through >= end {
                break;
            }
            now_ms = now_ms.min(end);
        }
        let mut caught_up = true;
        // A batch in time order; with --profiles its bids' persons are read
        // in one round trip before any of it goes out.
        let mut n = 0;
        while n < 4096 {
            if batch.len() <= n {
                batch.push(Out::default());
            }
            if !market.next_until(now_ms, &mut batch[n]) {
                break;
            }
            n += 1;
        }
        if let (Some(p), Some(last)) = (profiles.as_mut(), batch[..n].last()) {
            let at = last.ts;
            p.enrich(&mut batch[..n], at)?;
        }
        if let (Some(f), Some(t)) = (truth.as_mut(), market.truths.as_mut()) {
            f.write(t)?;
        }
        for out in &batch[..n] {
            // Everything that goes out before `send_at` has been sent.
            through = through.max(out.send_at - 1);
            wire.ticks_to(through)?;
            event_payload(&mut payload, &out.type_name, &out.txid, out.ts, &out.extra);
            wire.event(&out.type_name, &out.txid, payload.as_bytes())?;
            caught_up = false;
        }
        if caught_up {
            through = through.max(now_ms);
        }
        wire.ticks_to(through)?;
        if caught_up && opts.speed > 0.0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if let Some(mut f) = truth {
        f.write(market.truths.as_mut().expect("recording"))?;
        f.file.flush().map_err(file_error(&f.path))?;
    }
    if let Some(p) = profiles {
        let h = p.reader.lookup_times();
        let ms = |q| h.quantile_bound(q).map_or(0.0, |b| b * 1000.0);
        tracing::info!(
            reads = p.reads,
            mean_ms = h.sum * 1000.0 / h.count.max(1) as f64,
            p50_under_ms = ms(0.5),
            p99_under_ms = ms(0.99),
            "read bids' persons from the profile database"
        );
    }
    Ok(through)
}

/// The fields a replay needs from each line; the line itself is sent as is.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    #[serde(borrow)]
    txid: &'a str,
    ts: i64,
}

/// The head of a line written as `{"type":"…","txid":"…","ts":N,…`, as
/// `--write` and most producers write it, without a JSON parse: the replay
/// shares its two cores with the shard. Anything else goes to serde.
fn quick_head(line: &str) -> Option<Head<'_>> {
    let rest = line.strip_prefix(r#"{"type":""#)?;
    let (ty, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(r#","txid":""#)?;
    let (txid, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(r#","ts":"#)?;
    let end = rest.find([',', '}'])?;
    let ts = rest[..end].parse().ok()?;
    let plain = |s: &str| s.bytes().all(|b| b != b'\\' && b >= 0x20);
    (plain(ty) && plain(txid)).then_some(Head { ty, txid, ts })
}

/// Reads a replay file's lines on a thread of its own, in batches; with
/// `follow`, goes on reading past its end (a growing file, or a pipe such
/// as `kcat … | tidemark publish --replay /dev/stdin --follow`), one line
/// at a time so none waits for a batch to fill.
fn read_lines(
    path: &std::path::Path,
    follow: bool,
) -> Result<std::sync::mpsc::Receiver<std::io::Result<Vec<String>>>, PublishError> {
    let file = std::fs::File::open(path).map_err(file_error(path))?;
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    let batch = if follow { 1 } else { 1024 };
    std::thread::Builder::new()
        .name("replay-reader".into())
        .spawn(move || {
            let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
            loop {
                let mut lines = Vec::with_capacity(batch);
                while lines.len() < batch {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) if follow => std::thread::sleep(Duration::from_millis(50)),
                        Ok(0) => break,
                        Ok(_) => lines.push(line),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                let end = lines.len() < batch;
                if (!lines.is_empty() && tx.send(Ok(lines)).is_err()) || end {
                    return;
                }
            }
        })
        .map_err(file_error(path))?;
    Ok(rx)
}

fn replay(
    opts: &PublishOptions,
    path: &std::path::Path,
    wire: &mut Wire,
    stop: &AtomicBool,
    started: Instant,
) -> Result<i64, PublishError> {
    let lines = read_lines(path, opts.follow)?;
    let mut first_ts: Option<i64> = None;
    let mut through = i64::MIN;
    let mut n = 0u64;
    let mut skipped = 0u64;
    while !done(opts, stop, started) {
        let batch = match lines.recv_timeout(TICK_EVERY) {
            Ok(batch) => batch.map_err(file_error(path))?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // Idle (following a quiet pipe): tell shards the publisher
                // is alive, with its `sent` counts.
                if through > i64::MIN {
                    wire.ticks_to(through)?;
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        for line in batch {
            n += 1;
            if done(opts, stop, started) {
                break;
            }
            let text = line.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            let head =
                match quick_head(text).map_or_else(|| serde_json::from_str::<Head<'_>>(text), Ok) {
                    Ok(h) => h,
                    Err(e) => {
                        skipped += 1;
                        if skipped <= 10 {
                            tracing::warn!(
                                "{}:{n}: skipped, needs string type and txid and integer ts: {e}",
                                path.display()
                            );
                        }
                        continue;
                    }
                };
            let Some(txid) = Txid::parse(head.txid) else {
                skipped += 1;
                if skipped <= 10 {
                    tracing::warn!("{}:{n}: skipped, bad txid {:?}", path.display(), head.txid);
                }
                continue;
            };
            let ts = head.ts;
            let first = *first_ts.get_or_insert(ts);
            if opts.speed > 0.0 {
                // Wait until this event's time comes round, ticking meanwhile.
                let due =
                    Duration::from_secs_f64(((ts - first).max(0) as f64 / opts.speed) / 1000.0);
                while started.elapsed() < due && !done(opts, stop, started) {
                    if through > i64::MIN {
                        let now =
                            first + (started.elapsed().as_secs_f64() * 1000.0 * opts.speed) as i64;
                        wire.ticks_to(now.min(ts - 1).max(through))?;
                    }
                    std::thread::sleep(
                        Duration::from_millis(1).min(due - started.elapsed().min(due)),
                    );
                }
            }
            // Everything before this event's time has been sent (up to the file's disorder).
            through = through.max(ts - 1);
            wire.ticks_to(through)?;
            wire.event(head.ty, &txid, text.as_bytes())?;
        }
    }
    if skipped > 10 {
        tracing::warn!("{}: {skipped} lines skipped in all", path.display());
    }
    Ok(through.max(first_ts.unwrap_or(0)) + 1)
}
