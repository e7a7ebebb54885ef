//! A synthetic market: transactions arrive at a steady rate of event time; each
//! gets a bid, and with learnable probabilities an impression, a click and an
//! install, at delays scaled to the attribution windows (the install's delay
//! learnable too: by app and exchange, `crate::delays`, which also shifts a
//! fifth of the apps at a chosen time). A share of events is duplicated
//! (publisher retries). Deterministic for a seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tidemark_features::sigmoid;
use tidemark_wire::Txid;

use crate::delays::{DelayModel, Delays, Shift};
use crate::persons::Seen;
use crate::truth::{within, Truth};

/// Shape of the market. Times are milliseconds of event time.
#[derive(Debug, Clone)]
pub struct MarketConfig {
    /// Seed of every random draw: the same seed gives the same market.
    pub seed: u64,
    /// Transactions (bids) per second of event time.
    pub tps: f64,
    /// Share of bids that win an impression.
    pub impression_rate: f64,
    /// Base click-through rate (features move it up and down).
    pub ctr: f64,
    /// Base install rate given a click.
    pub cvr: f64,
    /// Share of events sent twice.
    pub duplicate_rate: f64,
    /// Windows the delays are scaled to.
    pub click_window_ms: i64,
    /// The short install window the install delays are scaled to.
    pub install_short_ms: i64,
    /// The long install window: only the truth (`crate::truth`) reads it.
    pub install_long_ms: i64,
    /// The install delays' preset (`crate::delays`).
    pub delays: Delays,
    /// Event time after the market's start from which a fifth of the apps
    /// shift (by creation time), if ever.
    pub shift_at_ms: Option<i64>,
    /// What the shift changes (only with `shift_at_ms`).
    pub shift: Shift,
    /// Custom event types, each following a click with probability `custom_rate`.
    pub custom_types: Vec<String>,
    /// Probability that a clicked transaction gets each custom event.
    pub custom_rate: f64,
    /// Events go out up to this much event time after their own `ts`, so
    /// later-stamped events may overtake them (bounded disorder).
    pub disorder_ms: i64,
    /// A duplicate's `ts` differs from the original's by up to this much
    /// either way (never before creation). A bid's copy says `"retry": true`
    /// in its features, so which copy won is visible downstream.
    pub duplicate_shift_ms: i64,
    /// Persons behind the transactions (0: events carry no `user`). Each has
    /// a persistent activity (Zipf, `person_skew`) and click and install
    /// propensities of its own, so recency and frequency carry signal.
    pub persons: u32,
    /// Zipf exponent of persons' activity.
    pub person_skew: f64,
    /// Persons' click logit offsets are uniform in ±this (installs': ±⅔ of it).
    pub person_effect: f64,
    /// Persons use several devices and log in, and a few identifiers are
    /// shared across persons (`crate::persons`); else `user` is `p<k>`.
    pub linked: bool,
}

impl Default for MarketConfig {
    fn default() -> Self {
        MarketConfig {
            seed: 1,
            tps: 1000.0,
            impression_rate: 0.3,
            ctr: 0.05,
            cvr: 0.1,
            duplicate_rate: 0.01,
            click_window_ms: 3_600_000,
            install_short_ms: 86_400_000,
            install_long_ms: 7 * 86_400_000,
            delays: Delays::Default,
            shift_at_ms: None,
            shift: Shift::Propensity,
            custom_types: Vec::new(),
            custom_rate: 0.3,
            disorder_ms: 0,
            duplicate_shift_ms: 2000,
            persons: 0,
            person_skew: 1.1,
            person_effect: 1.5,
            linked: false,
        }
    }
}

/// One event ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Out {
    /// The event type's name.
    pub type_name: String,
    /// Its transaction.
    pub txid: Txid,
    /// Its event time, ms since the epoch.
    pub ts: i64,
    /// Event time at which it goes out: `ts` plus its disorder delay. Every
    /// event sent later has `ts >= send_at - disorder_ms`.
    pub send_at: i64,
    /// `"key":value` pairs beyond type, txid and ts.
    pub extra: String,
    /// The true person it is about, if persons are on.
    pub person: Option<u32>,
    /// Its `user` (the device it was seen on), empty if none.
    pub user: String,
    /// A bid's: where in `extra` more features may be inserted (just before
    /// the features object's closing brace).
    pub features_end: Option<usize>,
}

impl Out {
    /// Adds `"name":value` to a bid's features (what a bidder read from the
    /// person's profile). No-op for other events.
    pub fn add_feature(&mut self, name: &str, value: f64) {
        let Some(at) = self.features_end else { return };
        self.insert_feature(&format!(r#","{name}":{value}"#), at);
    }

    /// Adds a categorical feature to a bid (see `add_feature`).
    pub fn add_text_feature(&mut self, name: &str, value: &str) {
        let Some(at) = self.features_end else { return };
        let value = serde_json::Value::from(value);
        self.insert_feature(&format!(r#","{name}":{value}"#), at);
    }

    fn insert_feature(&mut self, text: &str, at: usize) {
        self.extra.insert_str(at, text);
        self.features_end = Some(at + text.len());
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    send_at: i64,
    order: u64,
    ts: i64,
    kind: u8,
    txid: Txid,
    /// The click model's score ×1000, which sets the bid price.
    score_milli: i32,
    retry: bool,
    person: u32,
    seen: Seen,
}

const APPS: u32 = 2000;
const CAMPAIGNS: u32 = 50;
const COUNTRIES: [&str; 8] = ["us", "br", "ar", "mx", "de", "in", "jp", "fr"];
const EXCHANGES: [&str; 5] = ["adx", "mopub", "unity", "applovin", "inmobi"];
const OSES: [&str; 3] = ["android", "ios", "other"];
const SIZES: [&str; 4] = ["320x50", "300x250", "728x90", "interstitial"];

/// Ranks `0..n` drawn with P(rank k) ∝ 1/(k+1)^s, by inverse CDF: who is
/// active how often (persons, in the market and the benchmarks).
#[derive(Debug, Clone, Default)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// `n` ranks with exponent `s`.
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 1..=n {
            total += (k as f64).powf(-s);
            cdf.push(total);
        }
        cdf.iter_mut().for_each(|c| *c /= total);
        Zipf { cdf }
    }

    /// The rank at `u` in `[0, 1)`.
    pub fn rank(&self, u: f64) -> usize {
        self.cdf
            .partition_point(|c| *c < u)
            .min(self.cdf.len().saturating_sub(1))
    }

    /// Whether there are no ranks.
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }
}

/// A deterministic generator of transactions' events in send order.
pub struct Market {
    cfg: MarketConfig,
    rng: SmallRng,
    heap: BinaryHeap<Reverse<Pending>>,
    next_created: f64,
    order: u64,
    /// Per-feature-value effects on the click logit, drawn from the seed.
    app_effect: Vec<f32>,
    campaign_effect: Vec<f32>,
    /// The click logit's interaction of country and exchange.
    country_exchange: Vec<f32>,
    /// Persons' activity CDF and their click and install logit offsets.
    person_cdf: Zipf,
    person_click: Vec<f32>,
    person_install: Vec<f32>,
    /// Install delays by app and exchange, and the shift.
    delays: DelayModel,
    /// Transactions generated so far.
    pub transactions: u64,
    /// When set, the truth of every transaction with an impression is
    /// appended here as it is generated (the caller drains it).
    pub truths: Option<Vec<Truth>>,
}

impl Market {
    /// Starts generating transactions created from `start_ms` on.
    pub fn new(cfg: MarketConfig, start_ms: i64) -> Market {
        let mut rng = SmallRng::seed_from_u64(cfg.seed);
        // Apps are numbered by popularity; the long tail's rates sit closer
        // to the average, as a market's do (and as the few rows each gets
        // could never tell apart anyway).
        let app_effect = (0..APPS)
            .map(|k| rng.random_range(-1.2f32..1.2) / (1.0 + k as f32 / 50.0))
            .collect();
        let campaign_effect = (0..CAMPAIGNS)
            .map(|_| rng.random_range(-1.5f32..1.5))
            .collect();
        let person_cdf = Zipf::new(cfg.persons as usize, cfg.person_skew);
        let e = cfg.person_effect.max(1e-6) as f32;
        let person_click = (0..cfg.persons).map(|_| rng.random_range(-e..e)).collect();
        let person_install = (0..cfg.persons)
            .map(|_| rng.random_range(-e * 2.0 / 3.0..e * 2.0 / 3.0))
            .collect();
        // Its own stream, so that adding it left every other draw as it was.
        let mut irng = SmallRng::seed_from_u64(cfg.seed ^ 0x5eed_1e7e);
        let country_exchange = (0..COUNTRIES.len() * EXCHANGES.len())
            .map(|_| irng.random_range(-0.9f32..0.9))
            .collect();
        let delays = DelayModel::new(
            cfg.seed,
            cfg.delays,
            cfg.install_short_ms,
            (APPS as usize, EXCHANGES.len()),
            cfg.shift_at_ms.map(|at| (start_ms + at, cfg.shift)),
        );
        Market {
            delays,
            cfg,
            rng,
            country_exchange,
            truths: None,
            person_cdf,
            person_click,
            person_install,
            heap: BinaryHeap::new(),
            next_created: start_ms as f64,
            order: 0,
            app_effect,
            campaign_effect,
            transactions: 0,
        }
    }

    /// The next event with time at or before `until_ms`, in time order.
    pub fn next_until(&mut self, until_ms: i64, out: &mut Out) -> bool {
        // Create transactions until the next one would start after `until`.
        while (self.next_created as i64) <= until_ms
            && self
                .heap
                .peek()
                .is_none_or(|Reverse(p)| p.send_at >= self.next_created as i64)
        {
            let created = self.next_created as i64;
            self.new_transaction(created);
            self.next_created += 1000.0 / self.cfg.tps;
        }
        match self.heap.peek() {
            Some(Reverse(p)) if p.send_at <= until_ms => {}
            _ => return false,
        }
        let Reverse(p) = self.heap.pop().expect("peeked");
        self.render(p, out);
        true
    }

    fn push(&mut self, ts: i64, kind: u8, txid: Txid, score_milli: i32, person: (u32, Seen)) {
        self.push_copy(ts, kind, txid, score_milli, false, person);
        if self.rng.random_bool(self.cfg.duplicate_rate) {
            let shift = self.cfg.duplicate_shift_ms;
            let created = txid.created_ms() as i64;
            let at = (ts + self.rng.random_range(-shift..=shift)).max(created);
            self.push_copy(at, kind, txid, score_milli, true, person);
        }
    }

    fn push_copy(
        &mut self,
        ts: i64,
        kind: u8,
        txid: Txid,
        score_milli: i32,
        retry: bool,
        (person, seen): (u32, Seen),
    ) {
        self.order += 1;
        let delay = if self.cfg.disorder_ms > 0 {
            self.rng.random_range(0..=self.cfg.disorder_ms)
        } else {
            0
        };
        self.heap.push(Reverse(Pending {
            send_at: ts + delay,
            order: self.order,
            ts,
            kind,
            txid,
            score_milli,
            retry,
            person,
            seen,
        }));
    }

    fn new_transaction(&mut self, created: i64) {
        self.transactions += 1;
        let digits = self.rng.random::<u128>();
        let txid = Txid::new(digits, created as u64);
        // Clicks and installs follow the bid's features, so there is something to learn.
        let score = self.click_score(&txid);
        let score_milli = (score * 1000.0) as i32;
        let (person, click_bias, install_bias) = if self.person_cdf.is_empty() {
            ((u32::MAX, Seen::default()), 0.0, 0.0)
        } else {
            let k = self.person_cdf.rank(self.rng.random());
            let seen = if self.cfg.linked {
                Seen::draw(&mut self.rng, k as u32)
            } else {
                Seen::default()
            };
            (
                (k as u32, seen),
                f64::from(self.person_click[k]),
                f64::from(self.person_install[k]),
            )
        };
        let bid_at = created + self.rng.random_range(0..100);
        self.push(bid_at, KIND_BID, txid, score_milli, person);
        if !self.rng.random_bool(self.cfg.impression_rate) {
            return;
        }
        let imp_at = created + self.rng.random_range(50..2000);
        self.push(imp_at, KIND_IMPRESSION, txid, score_milli, person);
        let p_click = sigmoid(logit(self.cfg.ctr) + score + click_bias);
        let click_mean = self.cfg.click_window_ms as f64 / 20.0;
        let mut truth = Truth {
            txid,
            person: (person.0 != u32::MAX).then_some(person.0),
            ctr: p_click * within(click_mean, imp_at, created + self.cfg.click_window_ms),
            cvr: None,
            click_delay_ms: None,
            install_delay_ms: None,
            p_install: 0.0,
        };
        let f = Self::features(&txid);
        let install = self.delays.install(f[0], f[3], created);
        let p_install = sigmoid(logit(self.cfg.cvr) + 0.5 * score + install_bias + install.logit);
        truth.p_install = p_click
            * p_install
            * install.delay.click_then_install(
                click_mean,
                (created + self.cfg.click_window_ms - imp_at) as f64,
                (created + self.cfg.install_long_ms - imp_at) as f64,
            );
        if self.rng.random_bool(p_click) {
            let click_at = imp_at + self.exp(click_mean) as i64;
            self.push(click_at, KIND_CLICK, txid, score_milli, person);
            truth.click_delay_ms = Some(click_at - created);
            let delay = &install.delay;
            let short = delay.within(click_at, created + self.cfg.install_short_ms);
            let long = delay.within(click_at, created + self.cfg.install_long_ms);
            truth.cvr = Some((p_install * short, p_install * (long - short)));
            // Whether and when it installs (and its duplicate) come from a
            // stream of the transaction's own, so that whether it installs,
            // which the shift may change, leaves every other draw as it was.
            let mut own = SmallRng::seed_from_u64(digits as u64 ^ (digits >> 64) as u64);
            std::mem::swap(&mut self.rng, &mut own);
            if self.rng.random_bool(p_install) {
                let at = click_at + delay.sample(self.rng.random()) as i64;
                self.push(at, KIND_INSTALL, txid, score_milli, person);
                truth.install_delay_ms = Some(at - created);
            }
            std::mem::swap(&mut self.rng, &mut own);
            for i in 0..self.cfg.custom_types.len() {
                if self.rng.random_bool(self.cfg.custom_rate) {
                    let at = click_at + self.exp(self.cfg.click_window_ms as f64 / 4.0) as i64;
                    self.push(at, KIND_CUSTOM + i as u8, txid, score_milli, person);
                }
            }
        }
        if let Some(t) = self.truths.as_mut() {
            t.push(truth);
        }
    }

    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.rng.random::<f64>()).ln()
    }

    /// Feature values are a function of the txid's random digits, so the bid
    /// can be rendered later from the txid alone.
    fn features(txid: &Txid) -> [u32; 8] {
        let hex = &txid.as_str()[..16];
        let mut x = u64::from_str_radix(hex, 16).expect("hex");
        let mut next = |m: u32| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % u64::from(m)) as u32
        };
        // Zipf-like apps: a few apps get most traffic.
        let u = next(1 << 20) as f64 / f64::from(1 << 20);
        let app = ((APPS as f64).powf(u) as u32).min(APPS - 1);
        [
            app,
            next(CAMPAIGNS),
            next(COUNTRIES.len() as u32),
            next(EXCHANGES.len() as u32),
            next(OSES.len() as u32),
            next(SIZES.len() as u32),
            next(11),
            next(2),
        ]
    }

    fn render(&mut self, p: Pending, out: &mut Out) {
        out.txid = p.txid;
        out.ts = p.ts;
        out.send_at = p.send_at;
        out.extra.clear();
        out.type_name.clear();
        out.features_end = None;
        out.person = (p.person != u32::MAX).then_some(p.person);
        out.user.clear();
        match p.kind {
            KIND_BID => {
                out.type_name.push_str("bid");
                let f = Self::features(&p.txid);
                let _ = write!(
                    out.extra,
                    r#""features":{{"app":"app{}","campaign":"c{}","country":"{}","exchange":"{}","os":"{}","size":"{}","user_clicks":{},"wifi":{},"hour":"{}","bidfloor":{:.2}{}}},"price":{:.3}"#,
                    f[0],
                    f[1],
                    COUNTRIES[f[2] as usize],
                    EXCHANGES[f[3] as usize],
                    OSES[f[4] as usize],
                    SIZES[f[5] as usize],
                    f[6],
                    f[7] == 1,
                    (p.ts / 3_600_000) % 24,
                    0.1 + f64::from(f[6]) * 0.05,
                    if p.retry { r#","retry":true"# } else { "" },
                    0.5 + f64::from(p.score_milli.rem_euclid(1000)) / 1000.0,
                );
                out.features_end = out.extra.find("},\"price\"");
            }
            KIND_IMPRESSION => {
                out.type_name.push_str("impression");
                out.extra.push_str(r#""price":0.42"#);
            }
            KIND_CLICK => out.type_name.push_str("click"),
            KIND_INSTALL => out.type_name.push_str("install"),
            k => out
                .type_name
                .push_str(&self.cfg.custom_types[usize::from(k - KIND_CUSTOM)]),
        }
        if let Some(person) = out.person {
            p.seen.write_user(person, &mut out.user);
            let sep = if out.extra.is_empty() { "" } else { "," };
            let _ = write!(out.extra, r#"{sep}"user":"{}""#, out.user);
            p.seen.write_ids(person, &mut out.extra);
        }
    }

    /// The click logit offset of a transaction, from its features.
    pub fn click_score(&self, txid: &Txid) -> f64 {
        let f = Self::features(txid);
        f64::from(self.app_effect[f[0] as usize])
            + f64::from(self.campaign_effect[f[1] as usize])
            + [0.3, -0.2, -0.5][f[4] as usize]
            + 0.08 * f64::from(f[6])
            + f64::from(self.country_exchange[(f[2] * EXCHANGES.len() as u32 + f[3]) as usize])
    }
}

const KIND_BID: u8 = 0;
const KIND_IMPRESSION: u8 = 1;
const KIND_CLICK: u8 = 2;
const KIND_INSTALL: u8 = 3;
const KIND_CUSTOM: u8 = 4;

fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

impl Default for Out {
    fn default() -> Self {
        Out {
            type_name: String::new(),
            txid: Txid::new(0, 0),
            ts: 0,
            send_at: 0,
            extra: String::new(),
            person: None,
            user: String::new(),
            features_end: None,
        }
    }
}

#[cfg(test)]
mod tests;
