//! The profile process as the benchmarks run it: its configuration (the
//! counters), started as a child, and the publisher that feeds it Zipf
//! persons at an offered rate, linked or not, some events sent twice.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_market::Zipf;
use tidemark_testkit::Rng;
use tidemark_wire::Txid;

/// How many events after its original a copy is sent: seconds later, so
/// the copy falls in a later batch and meets the original's first-copy mark
/// (a copy within one batch is dropped before the database).
const COPY_AFTER: u64 = 200_000;

/// What the benchmark publisher offers: events/s, Zipf persons, whether
/// every event links a device to a member id, and the share sent twice.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    /// Events per second.
    pub rate: f64,
    /// Distinct persons.
    pub persons: usize,
    /// Devices linked to member ids.
    pub linked: bool,
    /// The share of events sent again later (copies).
    pub copies: f64,
}

/// Publishes impressions, clicks and installs (70/20/10) of Zipf persons at
/// `offer.rate` events/s until `stop`; counts what it sent in `sent` (copies
/// not included: each is an event already counted). With `offer.linked`
/// every event links: its `user` is one of the person's devices (`p<k>` or
/// `p<k>.<j>`) and it carries `"ids": {"member": "m<k>"}`. With `clock`
/// (start ms, speed-up) events are created and stamped on an event clock
/// running that many times faster than the wall, ticked every 50 ms.
/// With `offer.copies`, that share of the events is sent again
/// [`COPY_AFTER`] events later, as a publisher's retry would.
pub(crate) fn publisher(
    endpoint: String,
    offer: Offer,
    clock: Option<(i64, f64)>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    let Offer {
        rate,
        persons,
        linked,
        copies,
    } = offer;
    std::thread::spawn(move || {
        let zipf = Zipf::new(persons, 1.1);
        let mut retries: std::collections::VecDeque<(u64, String, String)> = Default::default();
        let ctx = zmq::Context::new();
        let sock = ctx.socket(zmq::PUB).expect("socket");
        sock.set_sndhwm(0).expect("hwm");
        sock.bind(&endpoint).expect("bind");
        std::thread::sleep(Duration::from_millis(500));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let start = Instant::now();
        let mut n: u64 = 0;
        let mut payload = String::new();
        let mut ticked = start;
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            let now = match clock {
                Some((t0, speed)) => t0 + (start.elapsed().as_secs_f64() * speed * 1e3) as i64,
                None => tidemark_market::now_ms(),
            };
            if clock.is_some() && ticked.elapsed() >= Duration::from_millis(50) {
                let tick = tidemark_wire::tick_payload("bench", now, &[]);
                sock.send_multipart([b"tick".as_slice(), tick.as_bytes()], 0)
                    .expect("send");
                ticked = Instant::now();
            }
            if n >= due {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
            for _ in 0..(due - n).min(1000) {
                let r = rng.next() % 10;
                let t = if r < 7 {
                    "impression"
                } else if r < 9 {
                    "click"
                } else {
                    "install"
                };
                let txid = Txid::new(
                    u128::from(rng.next()) << 16 | u128::from(n as u16),
                    now as u64,
                );
                let person = zipf.rank(rng.unit());
                payload.clear();
                use std::fmt::Write;
                let _ = write!(
                    payload,
                    r#"{{"type":"{t}","txid":"{}","ts":{now},"user":"p{person}"#,
                    txid.as_str()
                );
                if linked {
                    match rng.next() % u64::from(tidemark_market::persons::devices(person as u32)) {
                        0 => {}
                        j => {
                            let _ = write!(payload, ".{j}");
                        }
                    }
                    let _ = write!(payload, r#"","ids":{{"member":"m{person}"}}}}"#);
                } else {
                    payload.push_str("\"}");
                }
                let topic = format!("{t}-{}", txid.as_str());
                sock.send_multipart([topic.as_bytes(), payload.as_bytes()], 0)
                    .expect("send");
                if copies > 0.0 && rng.unit() < copies {
                    retries.push_back((n + COPY_AFTER, topic, payload.clone()));
                }
                while let Some((_, topic, payload)) = retries.front().filter(|r| r.0 <= n) {
                    sock.send_multipart([topic.as_bytes(), payload.as_bytes()], 0)
                        .expect("send");
                    retries.pop_front();
                }
                n += 1;
            }
            sent.store(n, Ordering::Relaxed);
        }
    })
}

pub(crate) fn spawn_profiles(
    bin: &Path,
    dir: &Path,
    url: &str,
    endpoint: &str,
    extra: &str,
) -> anyhow::Result<Child> {
    let config = dir.join("profiles.toml");
    // `extra`'s keys first: they are top-level, and the counters are tables.
    let file = tidemark_testkit::config::Config::new()
        .set("name", "bench")
        .set("endpoints", [endpoint])
        .set("database_url", url)
        .counter("imp_1h", "impression", "1h")
        .counter("imp_7d", "impression", "7d")
        .counter("clk_7d", "click", "7d")
        .counter("ins_30d", "install", "30d");
    std::fs::write(&config, format!("{extra}\n{file}"))?;
    let log = std::fs::File::create(dir.join("profiles.log"))?;
    Ok(Command::new(bin)
        .args(["profiles", "--config"])
        .arg(&config)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}
