//! `tidemark publish`: puts events on a ZeroMQ PUB socket, paced in event
//! time, with a heartbeat (`tick`) at least every 250 ms of wall time.
//!
//! It never drops: the send high-water mark is unlimited, so a slow
//! subscriber makes messages queue here (paced by `speed`) rather than vanish.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tidemark_wire::{event_payload, tick_payload, topic, Txid};

use crate::market::{Market, MarketConfig, Out};

/// Where events come from.
pub enum Source {
    Synthetic(MarketConfig),
    /// JSON lines, one event payload each, in time order.
    Replay(PathBuf),
}

pub struct PublishOptions {
    pub bind: Vec<String>,
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
}

#[derive(Debug, Default, Clone)]
pub struct PublishReport {
    pub events: u64,
    pub ticks: u64,
    pub elapsed: Duration,
    /// Event time everything before which was published.
    pub through_ms: i64,
    pub by_type: Vec<(String, u64)>,
}

const TICK_EVERY: Duration = Duration::from_millis(250);

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

struct Wire {
    sock: zmq::Socket,
    sent: Sent,
    events: u64,
    ticks: u64,
    name: String,
}

impl Wire {
    fn event(&mut self, type_name: &str, txid: &Txid, payload: &[u8]) -> Result<(), String> {
        let t = topic(type_name, txid);
        self.sock
            .send(t.as_bytes(), zmq::SNDMORE)
            .map_err(|e| format!("send: {e}"))?;
        self.sock
            .send(payload, 0)
            .map_err(|e| format!("send: {e}"))?;
        self.sent.add(type_name, txid);
        self.events += 1;
        Ok(())
    }

    fn tick(&mut self, ts: i64) -> Result<(), String> {
        let p = tick_payload(&self.name, ts, &self.sent.pairs());
        self.sock
            .send("tick", zmq::SNDMORE)
            .map_err(|e| format!("send: {e}"))?;
        self.sock
            .send(p.as_bytes(), 0)
            .map_err(|e| format!("send: {e}"))?;
        self.ticks += 1;
        Ok(())
    }
}

/// Publishes until the duration passes, the source ends, or `stop` is set.
pub fn publish(
    opts: &PublishOptions,
    source: Source,
    stop: &AtomicBool,
) -> Result<PublishReport, String> {
    let ctx = zmq::Context::new();
    let sock = ctx.socket(zmq::PUB).map_err(|e| format!("zmq: {e}"))?;
    sock.set_sndhwm(0).map_err(|e| format!("sndhwm: {e}"))?;
    sock.set_linger(5_000).map_err(|e| format!("linger: {e}"))?;
    for ep in &opts.bind {
        sock.bind(ep).map_err(|e| format!("--bind {ep}: {e}"))?;
    }
    for ep in &opts.connect {
        sock.connect(ep)
            .map_err(|e| format!("--connect {ep}: {e}"))?;
    }
    std::thread::sleep(opts.warmup);
    let mut wire = Wire {
        sock,
        sent: Sent::default(),
        events: 0,
        ticks: 0,
        name: opts.publisher.clone(),
    };
    let started = Instant::now();
    let through = match source {
        Source::Synthetic(cfg) => synthetic(opts, cfg, &mut wire, stop, started)?,
        Source::Replay(path) => replay(opts, &path, &mut wire, stop, started)?,
    };
    wire.tick(through)?;
    Ok(PublishReport {
        events: wire.events,
        ticks: wire.ticks,
        elapsed: started.elapsed(),
        through_ms: through,
        by_type: wire.sent.by_type(),
    })
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
) -> Result<i64, String> {
    if opts.speed <= 0.0 {
        return Err("--speed must be greater than 0 for the synthetic market".into());
    }
    let mut market = Market::new(cfg, opts.start_ms);
    let mut out = Out::default();
    let mut payload = String::new();
    let mut through = opts.start_ms;
    let mut last_tick = Instant::now() - TICK_EVERY;
    while !done(opts, stop, started) {
        let now_ms = opts.start_ms + (started.elapsed().as_secs_f64() * 1000.0 * opts.speed) as i64;
        let mut caught_up = true;
        for _ in 0..4096 {
            if !market.next_until(now_ms, &mut out) {
                break;
            }
            event_payload(&mut payload, &out.type_name, &out.txid, out.ts, &out.extra);
            wire.event(&out.type_name, &out.txid, payload.as_bytes())?;
            through = out.ts - 1;
            caught_up = false;
        }
        if caught_up {
            through = now_ms;
        }
        if last_tick.elapsed() >= TICK_EVERY {
            wire.tick(through)?;
            last_tick = Instant::now();
        }
        if caught_up {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(through)
}

fn replay(
    opts: &PublishOptions,
    path: &PathBuf,
    wire: &mut Wire,
    stop: &AtomicBool,
    started: Instant,
) -> Result<i64, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut first_ts: Option<i64> = None;
    let mut through = 0;
    let mut last_tick = Instant::now() - TICK_EVERY;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        if done(opts, stop, started) {
            break;
        }
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("{}:{}: skipped, not JSON: {e}", path.display(), n + 1);
                continue;
            }
        };
        let (Some(t), Some(x), Some(ts)) =
            (v["type"].as_str(), v["txid"].as_str(), v["ts"].as_i64())
        else {
            tracing::warn!(
                "{}:{}: skipped, needs type, txid and ts",
                path.display(),
                n + 1
            );
            continue;
        };
        let Some(txid) = Txid::parse(x) else {
            tracing::warn!("{}:{}: skipped, bad txid {x:?}", path.display(), n + 1);
            continue;
        };
        let first = *first_ts.get_or_insert(ts);
        if opts.speed > 0.0 {
            // Wait until this event's time comes round.
            let due = Duration::from_secs_f64(((ts - first).max(0) as f64 / opts.speed) / 1000.0);
            while started.elapsed() < due && !done(opts, stop, started) {
                if last_tick.elapsed() >= TICK_EVERY {
                    wire.tick(through)?;
                    last_tick = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(1).min(due - started.elapsed().min(due)));
            }
        }
        wire.event(t, &txid, line.as_bytes())?;
        through = through.max(ts - 1);
        if last_tick.elapsed() >= TICK_EVERY {
            wire.tick(through)?;
            last_tick = Instant::now();
        }
    }
    Ok(through + 1)
}
