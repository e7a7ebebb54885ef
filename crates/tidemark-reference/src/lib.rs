//! The expected observations of a shard, computed from the messages sent,
//! written from the contract alone (`docs/contract.md`), sharing no code with tidemark-shard or
//! tidemark-wire.
//!
//! This crate owns one thing: given a shard's configuration and the messages a
//! single publisher sent to it, in order, the set of observations
//! `(target, txid) -> (label, features)` that the shard must emit once every
//! window has been swept (SPEC sections 1-5 and 7). It is the oracle of the
//! differential tests, so it is written the slow and obvious way: every
//! message is validated with `serde_json::Value`, every accepted event is kept
//! in a `HashMap` keyed by txid, and populations and labels are decided per
//! transaction at the end.
//!
//! Lateness is decided from what the test observed: a message sent after the
//! test saw the shard's clock at `k` is late for every window whose sweep point
//! `created + W + grace` is `<= k`.

#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};

pub mod profiles;

/// The largest payload a shard accepts (SPEC 2): 64 KiB.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// `ts` must lie in `0 <= ts < 2^53` (SPEC 3).
const TS_LIMIT: i64 = 1 << 53;

/// Event types every shard knows (SPEC 2). `tick` is handled apart.
const BUILT_IN_TYPES: [&str; 5] = ["auction", "bid", "impression", "click", "install"];

/// Names of the targets every shard emits (SPEC 5).
const BUILT_IN_TARGETS: [&str; 3] = ["ctr", "cvr_short", "cvr_long"];

// ---------------------------------------------------------------------------
// Configuration (SPEC 7)
// ---------------------------------------------------------------------------

/// The population a configured target labels (SPEC 7, `given`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// The `ctr` population.
    Impression,
    /// The `ctr` population with `ctr` label 1 (as `cvr_*`).
    Click,
}

/// One `[[targets]]` entry (SPEC 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The target's name (the observations' `target`).
    pub name: String,
    /// Its population: impressed or clicked transactions.
    pub given: Given,
    /// The event type whose arrival makes the label 1.
    pub event: String,
    /// Label 1 only for an event strictly later than this after creation (0: from creation).
    pub after_ms: i64,
    /// Label 1 for an event at most this long after creation.
    pub until_ms: i64,
    /// Added to `until_ms` before the target is emitted.
    pub grace_ms: i64,
}

/// Four durations in milliseconds, one per built-in window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// The impression window.
    pub impression: i64,
    /// The click window.
    pub click: i64,
    /// The short install window.
    pub install_short: i64,
    /// The long install window.
    pub install_long: i64,
}

/// The parts of a shard's configuration that decide its observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Empty means every transaction.
    pub prefixes: Vec<String>,
    /// Custom event type names.
    pub custom_types: Vec<String>,
    /// The windows (SPEC 5).
    pub windows_ms: Windows,
    /// The grace added to each window.
    pub grace_ms: Windows,
    /// Only the configured extra targets, not `ctr` and `cvr_*`.
    pub targets: Vec<Target>,
    /// How far ahead of the reference an event or tick may be (SPEC 1).
    pub max_future_ms: i64,
}

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

impl Default for Config {
    /// The defaults SPEC 7 shows.
    fn default() -> Config {
        Config {
            prefixes: Vec::new(),
            custom_types: Vec::new(),
            windows_ms: Windows {
                impression: 2 * MINUTE,
                click: HOUR,
                install_short: 24 * HOUR,
                install_long: 7 * DAY,
            },
            grace_ms: Windows {
                impression: 30 * SECOND,
                click: 5 * MINUTE,
                install_short: 6 * HOUR,
                install_long: 6 * HOUR,
            },
            targets: Vec::new(),
            max_future_ms: 10 * MINUTE,
        }
    }
}

impl Config {
    /// Parses a shard's TOML config (SPEC 7): only prefixes, custom_types,
    /// max_future, `[windows]`, `[grace]`, `[[targets]]` matter; every other key is
    /// ignored; defaults as SPEC 7 shows. Durations like "500ms", "5s", "2m",
    /// "1h", "7d" (a whole number followed by one of those suffixes).
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("config: {e}"))?;
        let mut config = Config::default();

        if let Some(value) = table.get("prefixes") {
            config.prefixes = string_list("prefixes", value)?;
            check_prefixes(&config.prefixes)?;
        }
        if let Some(value) = table.get("custom_types") {
            config.custom_types = string_list("custom_types", value)?;
            for name in &config.custom_types {
                check_custom_type(name)?;
            }
        }
        if let Some(value) = table.get("max_future") {
            config.max_future_ms = duration("max_future", value)?;
        }
        if let Some(value) = table.get("windows") {
            read_windows("windows", value, &mut config.windows_ms)?;
        }
        if let Some(value) = table.get("grace") {
            read_windows("grace", value, &mut config.grace_ms)?;
        }
        let w = config.windows_ms;
        if w.impression > w.click || w.click > w.install_short || w.install_short > w.install_long {
            return Err(
                "windows: must grow from impression to click to install_short to install_long"
                    .to_string(),
            );
        }
        if let Some(value) = table.get("targets") {
            let Some(entries) = value.as_array() else {
                return Err("targets: must be an array of tables ([[targets]])".to_string());
            };
            for entry in entries {
                let target = read_target(entry)?;
                let taken = BUILT_IN_TARGETS.contains(&target.name.as_str())
                    || config.targets.iter().any(|t| t.name == target.name);
                if taken {
                    return Err(format!("targets.name: {:?} is used twice", target.name));
                }
                config.targets.push(target);
            }
        }
        Ok(config)
    }
}

/// Parses a duration such as `500ms`, `5s`, `2m`, `1h` or `7d` into milliseconds.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!("{text:?} does not start with a whole number"));
    }
    let factor = match unit {
        "ms" => 1,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        _ => return Err(format!("{text:?} needs a unit: ms, s, m, h or d")),
    };
    let number: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn duration(key: &str, value: &toml::Value) -> Result<i64, String> {
    match value.as_str() {
        Some(text) => parse_duration(text).map_err(|e| format!("{key}: {e}")),
        None => Err(format!("{key}: must be a duration string like \"5s\"")),
    }
}

fn string_list(key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    let Some(items) = value.as_array() else {
        return Err(format!("{key}: must be an array of strings"));
    };
    let mut out = Vec::new();
    for item in items {
        match item.as_str() {
            Some(s) => out.push(s.to_string()),
            None => return Err(format!("{key}: must be an array of strings")),
        }
    }
    Ok(out)
}

fn check_prefixes(prefixes: &[String]) -> Result<(), String> {
    for p in prefixes {
        if p.is_empty() || !p.chars().all(is_lower_hex) {
            return Err(format!("prefixes: {p:?} is not lowercase hex"));
        }
    }
    for (i, a) in prefixes.iter().enumerate() {
        for b in &prefixes[i + 1..] {
            if a.starts_with(b.as_str()) || b.starts_with(a.as_str()) {
                return Err(format!("prefixes: {a:?} and {b:?} overlap"));
            }
        }
    }
    Ok(())
}

fn check_custom_type(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let shape_ok = first_ok && rest_ok && name.len() <= 32;
    if !shape_ok || BUILT_IN_TYPES.contains(&name) || name.starts_with("tick") {
        return Err(format!("custom_types: {name:?} is not a valid custom type"));
    }
    Ok(())
}

fn read_windows(key: &str, value: &toml::Value, into: &mut Windows) -> Result<(), String> {
    let Some(table) = value.as_table() else {
        return Err(format!("{key}: must be a table"));
    };
    if let Some(v) = table.get("impression") {
        into.impression = duration(&format!("{key}.impression"), v)?;
    }
    if let Some(v) = table.get("click") {
        into.click = duration(&format!("{key}.click"), v)?;
    }
    if let Some(v) = table.get("install_short") {
        into.install_short = duration(&format!("{key}.install_short"), v)?;
    }
    if let Some(v) = table.get("install_long") {
        into.install_long = duration(&format!("{key}.install_long"), v)?;
    }
    Ok(())
}

/// One `[[targets]]` table. `name`, `given`, `event` and `until` are required;
/// `after` and `grace` default to zero.
fn read_target(value: &toml::Value) -> Result<Target, String> {
    let Some(table) = value.as_table() else {
        return Err("targets: each entry must be a table".to_string());
    };
    let text = |key: &str| -> Result<String, String> {
        match table.get(key).and_then(|v| v.as_str()) {
            Some(s) => Ok(s.to_string()),
            None => Err(format!("targets.{key}: required string")),
        }
    };
    let name = text("name")?;
    let given = match text("given")?.as_str() {
        "impression" => Given::Impression,
        "click" => Given::Click,
        other => {
            return Err(format!(
                "targets.given: {other:?} is neither \"impression\" nor \"click\""
            ))
        }
    };
    let event = text("event")?;
    let until_ms = match table.get("until") {
        Some(v) => duration("targets.until", v)?,
        None => return Err("targets.until: required duration".to_string()),
    };
    let after_ms = match table.get("after") {
        Some(v) => duration("targets.after", v)?,
        None => 0,
    };
    let grace_ms = match table.get("grace") {
        Some(v) => duration("targets.grace", v)?,
        None => 0,
    };
    Ok(Target {
        name,
        given,
        event,
        after_ms,
        until_ms,
        grace_ms,
    })
}

/// The share of transactions a shard with these prefixes sees (SPEC 4): the
/// sum of `16^-len(p)`; no prefixes means every transaction.
pub fn shares(prefixes: &[String]) -> f64 {
    if prefixes.is_empty() {
        return 1.0;
    }
    prefixes.iter().map(|p| 16f64.powi(-(p.len() as i32))).sum()
}

// ---------------------------------------------------------------------------
// Messages (SPEC 1-3)
// ---------------------------------------------------------------------------

/// One message as a publisher sent it, in the order sent.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Normally `[topic, payload]`; anything else is junk.
    pub frames: Vec<Vec<u8>>,
    /// A lower bound the test has *observed* on the shard's clock (SPEC 6)
    /// before this message was sent, if any. Used only to decide lateness: an
    /// event is late for a window when this bound is >= created + W + grace of
    /// that window.
    pub clock_at_least: Option<i64>,
}

/// A bid feature value (SPEC 3: string, number or bool).
#[derive(Debug, Clone, PartialEq)]
pub enum Feature {
    /// A string value.
    Str(String),
    /// A number value.
    Num(f64),
    /// A bool value.
    Bool(bool),
}

/// One observation's content.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// 0 or 1.
    pub label: i16,
    /// The bid's features, by name.
    pub features: BTreeMap<String, Feature>,
}

/// What a valid message, that the shard subscribes to, says. Type and txid
/// are borrowed from the topic frame.
#[derive(Debug)]
enum Message<'a> {
    Tick {
        ts: i64,
    },
    Event {
        kind: &'a str,
        txid: &'a str,
        created: i64,
        ts: i64,
        /// Present for bids only.
        features: Option<BTreeMap<String, Feature>>,
    },
}

fn is_lower_hex(c: char) -> bool {
    c.is_ascii_digit() || ('a'..='f').contains(&c)
}

/// The creation time of a well-formed txid (SPEC 1), else `None`.
pub fn txid_created_ms(txid: &str) -> Option<i64> {
    if txid.len() != 32 || !txid.chars().all(is_lower_hex) {
        return None;
    }
    i64::from_str_radix(&txid[20..], 16).ok()
}

/// An integer JSON number with 0 <= ts < 2^53. Numbers written with a
/// fraction or an exponent are refused.
fn valid_ts(value: Option<&serde_json::Value>) -> Option<i64> {
    let serde_json::Value::Number(n) = value? else {
        return None;
    };
    if n.is_f64() {
        return None;
    }
    let ts = n.as_i64()?;
    if (0..TS_LIMIT).contains(&ts) {
        Some(ts)
    } else {
        None
    }
}

fn has_nul(s: &str) -> bool {
    s.contains('\u{0}')
}

/// `Some(features)` when the bid's `features` are acceptable, `None` when the
/// bid must be refused. Values of other kinds than string, number and bool are
/// dropped.
fn bid_features(value: Option<serde_json::Value>) -> Option<BTreeMap<String, Feature>> {
    let mut features = BTreeMap::new();
    let map = match value {
        None => return Some(features),
        Some(serde_json::Value::Object(map)) => map,
        Some(_) => return None,
    };
    for (name, value) in map {
        let feature = match value {
            serde_json::Value::String(s) => Feature::Str(s),
            serde_json::Value::Number(n) => Feature::Num(n.as_f64()?),
            serde_json::Value::Bool(b) => Feature::Bool(b),
            _ => continue, // null, arrays, objects: dropped
        };
        if has_nul(&name) {
            return None;
        }
        match &feature {
            Feature::Str(s) if has_nul(s) => return None,
            Feature::Num(x) if !x.is_finite() => return None,
            _ => {}
        }
        features.insert(name, feature);
    }
    Some(features)
}

/// Validates one message and keeps it only if the shard subscribes to it.
fn read_message<'a>(config: &Config, frames: &'a [Vec<u8>]) -> Option<Message<'a>> {
    let [topic, payload] = frames else {
        return None;
    };
    let topic = std::str::from_utf8(topic).ok()?;
    if !topic.is_ascii() || payload.len() > MAX_PAYLOAD_BYTES {
        return None;
    }
    let payload = std::str::from_utf8(payload).ok()?;
    let serde_json::Value::Object(mut object) = serde_json::from_str(payload).ok()? else {
        return None;
    };

    if topic == "tick" {
        let serde_json::Value::String(publisher) = object.get("publisher")? else {
            return None;
        };
        if has_nul(publisher) {
            return None;
        }
        let ts = valid_ts(object.get("ts"))?;
        return Some(Message::Tick { ts });
    }

    let (kind, txid) = topic.split_once('-')?;
    let subscribed = matches!(kind, "bid" | "impression" | "click" | "install")
        || config.custom_types.iter().any(|c| c == kind);
    if !subscribed {
        return None; // auction, unknown types, "tickle", ...
    }
    let created = txid_created_ms(txid)?;
    let wanted =
        config.prefixes.is_empty() || config.prefixes.iter().any(|p| txid.starts_with(p.as_str()));
    if !wanted {
        return None;
    }
    if object.get("type").and_then(|v| v.as_str()) != Some(kind) {
        return None;
    }
    if object.get("txid").and_then(|v| v.as_str()) != Some(txid) {
        return None;
    }
    let ts = valid_ts(object.get("ts"))?;
    if let Some(serde_json::Value::String(user)) = object.get("user") {
        if has_nul(user) {
            return None;
        }
    }
    if kind == "bid" || kind == "impression" {
        if let Some(price) = object.get("price") {
            if !price.as_f64().is_some_and(f64::is_finite) {
                return None;
            }
        }
    }
    let features = if kind == "bid" {
        Some(bid_features(object.remove("features"))?)
    } else {
        None
    };
    Some(Message::Event {
        kind,
        txid,
        created,
        ts,
        features,
    })
}

// ---------------------------------------------------------------------------
// Observations (SPEC 5)
// ---------------------------------------------------------------------------

/// One accepted copy of a non-bid event.
#[derive(Debug, Clone)]
struct Arrival<'a> {
    kind: &'a str,
    /// `max(ts, created)`.
    ts_eff: i64,
    clock_at_least: Option<i64>,
}

/// Everything accepted for one transaction.
#[derive(Debug, Default)]
struct Transaction<'a> {
    created: i64,
    /// The bid copy in time for the impression sweep with the earliest
    /// `ts_eff` (the first sent on a tie), and its features.
    bid: Option<(i64, BTreeMap<String, Feature>)>,
    /// Non-bid copies, in the order sent.
    arrivals: Vec<Arrival<'a>>,
}

/// `created + a + b`, without overflow.
fn after(created: i64, a: i64, b: i64) -> i64 {
    created.saturating_add(a).saturating_add(b)
}

/// A copy is in time for a sweep at `sweep_at` unless the shard's clock was
/// known to be at or past that point before the copy was sent.
fn in_time(clock_at_least: Option<i64>, sweep_at: i64) -> bool {
    match clock_at_least {
        None => true,
        Some(k) => k < sweep_at,
    }
}

impl Transaction<'_> {
    /// The winning copy's `ts_eff` of type `kind` for a window swept at
    /// `sweep_at`: the earliest among the copies in time for it (SPEC 3).
    fn earliest(&self, kind: &str, sweep_at: i64) -> Option<i64> {
        self.arrivals
            .iter()
            .filter(|a| a.kind == kind && in_time(a.clock_at_least, sweep_at))
            .map(|a| a.ts_eff)
            .min()
    }
}

/// Every observation (target, txid) -> Expected that one shard with `config`
/// must emit once all windows have been swept, given the messages sent to it
/// in this order (a single publisher). `reference_start_ms` is the max_future
/// reference before the first tick (SPEC 1).
pub fn expected(
    config: &Config,
    sent: &[Sent],
    reference_start_ms: i64,
) -> BTreeMap<(String, String), Expected> {
    let windows = config.windows_ms;
    let grace = config.grace_ms;

    // Intake: validate, apply max_future, keep every accepted copy. A txid
    // is 32 hex digits, so it is kept as the number it spells: same order,
    // cheaper to hash and sort.
    let mut newest_tick: Option<i64> = None;
    let mut transactions: HashMap<u128, Transaction> = HashMap::new();
    for message in sent {
        let Some(read) = read_message(config, &message.frames) else {
            continue;
        };
        let reference = newest_tick.unwrap_or(reference_start_ms);
        let horizon = reference.saturating_add(config.max_future_ms);
        match read {
            Message::Tick { ts } => {
                if ts > horizon {
                    continue; // future_tick: refused
                }
                newest_tick = Some(newest_tick.map_or(ts, |t| t.max(ts)));
            }
            Message::Event {
                kind,
                txid,
                created,
                ts,
                features,
            } => {
                if created > horizon {
                    continue; // a future txid
                }
                let ts_eff = ts.max(created);
                let key = u128::from_str_radix(txid, 16).expect("a checked txid");
                let tx = transactions.entry(key).or_insert_with(|| Transaction {
                    created,
                    ..Transaction::default()
                });
                match features {
                    Some(features) => {
                        let sweep = after(created, windows.impression, grace.impression);
                        let earlier = match &tx.bid {
                            None => true,
                            Some((best, _)) => ts_eff < *best,
                        };
                        if in_time(message.clock_at_least, sweep) && earlier {
                            tx.bid = Some((ts_eff, features));
                        }
                    }
                    None => tx.arrivals.push(Arrival {
                        kind,
                        ts_eff,
                        clock_at_least: message.clock_at_least,
                    }),
                }
            }
        }
    }

    // Sweep: decide populations and labels per transaction, in txid order,
    // into one list per target (so the final map is built from sorted rows).
    let mut transactions: Vec<(u128, Transaction)> = transactions.into_iter().collect();
    transactions.sort_unstable_by_key(|(key, _)| *key);
    let mut rows: BTreeMap<&str, Vec<(String, Expected)>> = BTreeMap::new();
    for (key, tx) in transactions {
        let created = tx.created;
        let Some((_, features)) = &tx.bid else {
            continue; // an orphan, or no bid in time
        };

        let impression_end = after(created, windows.impression, 0);
        let impression_sweep = after(created, windows.impression, grace.impression);
        let shown = tx
            .earliest("impression", impression_sweep)
            .is_some_and(|ts| ts <= impression_end);
        if !shown {
            continue;
        }

        let txid = format!("{key:032x}");
        let mut emit = |target, label: bool| {
            let observation = Expected {
                label: i16::from(label),
                features: features.clone(),
            };
            rows.entry(target)
                .or_default()
                .push((txid.clone(), observation));
        };

        let click_end = after(created, windows.click, 0);
        let click_sweep = after(created, windows.click, grace.click);
        let clicked = tx
            .earliest("click", click_sweep)
            .is_some_and(|ts| ts <= click_end);
        emit("ctr", clicked);

        if clicked {
            let short_end = after(created, windows.install_short, 0);
            let short_sweep = after(created, windows.install_short, grace.install_short);
            let short = tx
                .earliest("install", short_sweep)
                .is_some_and(|ts| ts <= short_end);
            emit("cvr_short", short);

            let long_end = after(created, windows.install_long, 0);
            let long_sweep = after(created, windows.install_long, grace.install_long);
            let long = tx
                .earliest("install", long_sweep)
                .is_some_and(|ts| short_end < ts && ts <= long_end);
            emit("cvr_long", long);
        }

        for target in &config.targets {
            let in_population = match target.given {
                Given::Impression => true,
                Given::Click => clicked,
            };
            if !in_population {
                continue;
            }
            let start = after(created, target.after_ms, 0);
            let end = after(created, target.until_ms, 0);
            let sweep = after(created, target.until_ms, target.grace_ms);
            let label = tx
                .earliest(&target.event, sweep)
                .is_some_and(|ts| ts <= end && (target.after_ms <= 0 || ts > start));
            emit(target.name.as_str(), label);
        }
    }

    rows.into_iter()
        .flat_map(|(target, list)| {
            list.into_iter()
                .map(move |(txid, observation)| ((target.to_string(), txid), observation))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A fixed moment: 2026-01-01T00:00:00Z.
    const T0: i64 = 1_767_225_600_000;

    fn txid(random: &str, created: i64) -> String {
        let random = format!("{random:0<20}");
        assert_eq!(random.len(), 20);
        format!("{random}{created:012x}")
    }

    fn raw(topic: &str, payload: &str) -> Sent {
        Sent {
            frames: vec![topic.as_bytes().to_vec(), payload.as_bytes().to_vec()],
            clock_at_least: None,
        }
    }

    fn event(kind: &str, txid: &str, ts: i64) -> Sent {
        let payload = json!({"type": kind, "txid": txid, "ts": ts});
        raw(&format!("{kind}-{txid}"), &payload.to_string())
    }

    fn bid(txid: &str, ts: i64, features: serde_json::Value) -> Sent {
        let payload = json!({"type": "bid", "txid": txid, "ts": ts, "features": features});
        raw(&format!("bid-{txid}"), &payload.to_string())
    }

    fn tick(ts: i64) -> Sent {
        raw("tick", &json!({"publisher": "p", "ts": ts}).to_string())
    }

    fn late(mut sent: Sent, clock: i64) -> Sent {
        sent.clock_at_least = Some(clock);
        sent
    }

    /// bid at creation with feature app=a, impression 1 s later.
    fn shown(tx: &str, created: i64) -> Vec<Sent> {
        vec![
            bid(tx, created, json!({"app": "a"})),
            event("impression", tx, created + 1_000),
        ]
    }

    fn label(out: &BTreeMap<(String, String), Expected>, target: &str, tx: &str) -> Option<i16> {
        out.get(&(target.to_string(), tx.to_string()))
            .map(|e| e.label)
    }

    fn run(config: &Config, sent: &[Sent]) -> BTreeMap<(String, String), Expected> {
        expected(config, sent, T0)
    }

    fn app(value: &str) -> BTreeMap<String, Feature> {
        BTreeMap::from([("app".to_string(), Feature::Str(value.to_string()))])
    }

    #[test]
    fn full_funnel() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let mut sent = vec![bid(
            &tx,
            T0,
            json!({"app": "a", "n": 3, "ok": true, "x": 1.5}),
        )];
        sent.push(event("impression", &tx, T0 + 1_000));
        sent.push(event("click", &tx, T0 + 2_000));
        sent.push(event("install", &tx, T0 + 3_000));
        let out = run(&c, &sent);
        assert_eq!(out.len(), 3);
        assert_eq!(label(&out, "ctr", &tx), Some(1));
        assert_eq!(label(&out, "cvr_short", &tx), Some(1));
        assert_eq!(label(&out, "cvr_long", &tx), Some(0));
        let features = &out[&("ctr".to_string(), tx.clone())].features;
        assert_eq!(features["app"], Feature::Str("a".into()));
        assert_eq!(features["n"], Feature::Num(3.0));
        assert_eq!(features["ok"], Feature::Bool(true));
        assert_eq!(features["x"], Feature::Num(1.5));
    }

    #[test]
    fn no_click_gives_ctr_zero_only() {
        let tx = txid("ab", T0);
        let out = run(&Config::default(), &shown(&tx, T0));
        assert_eq!(out.len(), 1);
        assert_eq!(label(&out, "ctr", &tx), Some(0));
    }

    #[test]
    fn orphan_and_unshown_are_outside_every_population() {
        let c = Config::default();
        let orphan = txid("01", T0);
        let unshown = txid("02", T0);
        let sent = vec![
            event("impression", &orphan, T0 + 1),
            event("click", &orphan, T0 + 2),
            bid(&unshown, T0, json!({})),
            event("click", &unshown, T0 + 2),
            event("install", &unshown, T0 + 3),
        ];
        assert!(run(&c, &sent).is_empty());
    }

    #[test]
    fn duplicate_bids_earliest_wins_first_sent_on_tie() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let sent = vec![
            bid(&tx, T0 + 500, json!({"app": "late"})),
            bid(&tx, T0 + 100, json!({"app": "early"})),
            bid(&tx, T0 + 100, json!({"app": "tie"})),
            bid(&tx, T0 + 300, json!({"app": "middle"})),
            event("impression", &tx, T0 + 1_000),
        ];
        let out = run(&c, &sent);
        assert_eq!(out[&("ctr".to_string(), tx.clone())].features, app("early"));

        // A bid stamped before creation counts as at creation: it ties with
        // one at creation, and the first sent wins.
        let tx = txid("cd", T0);
        let sent = vec![
            bid(&tx, T0, json!({"app": "at"})),
            bid(&tx, T0 - 50, json!({"app": "before"})),
            event("impression", &tx, T0 + 1_000),
        ];
        let out = run(&c, &sent);
        assert_eq!(out[&("ctr".to_string(), tx.clone())].features, app("at"));
    }

    #[test]
    fn late_bid_copy_changes_nothing() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let sweep = T0 + c.windows_ms.impression + c.grace_ms.impression;
        let mut sent = vec![bid(&tx, T0 + 100, json!({"app": "kept"}))];
        sent.push(event("impression", &tx, T0 + 1_000));
        sent.push(late(bid(&tx, T0, json!({"app": "late"})), sweep));
        let out = run(&c, &sent);
        assert_eq!(out[&("ctr".to_string(), tx.clone())].features, app("kept"));

        // A bid only arriving late: an orphan.
        let tx = txid("cd", T0);
        let sent = vec![
            event("impression", &tx, T0 + 1_000),
            late(bid(&tx, T0, json!({})), sweep),
        ];
        assert!(run(&c, &sent).is_empty());
        // One millisecond before the sweep point is in time.
        let sent = vec![
            event("impression", &tx, T0 + 1_000),
            late(bid(&tx, T0, json!({})), sweep - 1),
        ];
        assert_eq!(label(&run(&c, &sent), "ctr", &tx), Some(0));
    }

    #[test]
    fn impression_window_boundaries() {
        let c = Config::default();
        let w = c.windows_ms.impression;
        for (offset, in_population) in [(w, true), (w + 1, false), (-5_000, true)] {
            let tx = txid("ab", T0);
            let sent = vec![
                bid(&tx, T0, json!({})),
                event("impression", &tx, T0 + offset),
            ];
            let out = run(&c, &sent);
            assert_eq!(
                out.contains_key(&("ctr".into(), tx)),
                in_population,
                "{offset}"
            );
        }
    }

    #[test]
    fn late_impression_is_outside_the_population() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let sweep = T0 + c.windows_ms.impression + c.grace_ms.impression;
        let sent = vec![
            bid(&tx, T0, json!({})),
            late(event("impression", &tx, T0 + 1_000), sweep),
        ];
        assert!(run(&c, &sent).is_empty());
    }

    #[test]
    fn click_window_boundaries() {
        let c = Config::default();
        let w = c.windows_ms.click;
        for (offset, expected_label) in [(w, 1), (w + 1, 0), (-1, 1)] {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + offset));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "ctr", &tx), Some(expected_label), "{offset}");
            let cvr = out.contains_key(&("cvr_short".into(), tx.clone()));
            assert_eq!(cvr, expected_label == 1);
        }
    }

    #[test]
    fn late_click() {
        let c = Config::default();
        let sweep_offset = c.windows_ms.click + c.grace_ms.click;
        for (clock, expected_label) in [(sweep_offset, 0), (sweep_offset - 1, 1)] {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(late(event("click", &tx, T0 + 10_000), T0 + clock));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "ctr", &tx), Some(expected_label), "{clock}");
        }
    }

    #[test]
    fn cvr_boundaries() {
        let c = Config::default();
        let s = c.windows_ms.install_short;
        let l = c.windows_ms.install_long;
        let cases = [
            (0, 1, 0),
            (s, 1, 0),
            (s + 1, 0, 1),
            (l, 0, 1),
            (l + 1, 0, 0),
        ];
        for (offset, short, long) in cases {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + 2_000));
            sent.push(event("install", &tx, T0 + offset));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "cvr_short", &tx), Some(short), "{offset}");
            assert_eq!(label(&out, "cvr_long", &tx), Some(long), "{offset}");
        }
    }

    #[test]
    fn install_late_for_short_but_in_time_for_long() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let short_sweep = T0 + c.windows_ms.install_short + c.grace_ms.install_short;
        let long_sweep = T0 + c.windows_ms.install_long + c.grace_ms.install_long;
        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        sent.push(late(event("install", &tx, T0 + 3_000), short_sweep));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "cvr_short", &tx), Some(0));
        assert_eq!(label(&out, "cvr_long", &tx), Some(0)); // in the short window

        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        let install = event("install", &tx, T0 + c.windows_ms.install_short + 1);
        sent.push(late(install, short_sweep));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "cvr_long", &tx), Some(1));

        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        let install = event("install", &tx, T0 + c.windows_ms.install_short + 1);
        sent.push(late(install, long_sweep));
        assert_eq!(label(&run(&c, &sent), "cvr_long", &tx), Some(0));
    }

    #[test]
    fn duplicate_installs_earliest_in_time_copy_decides() {
        // SPEC 3: among copies in time, the earliest ts wins. An install
        // copy inside install_short makes cvr_long 0 even if another copy
        // falls inside (install_short, install_long].
        let c = Config::default();
        let tx = txid("ab", T0);
        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        sent.push(event("install", &tx, T0 + c.windows_ms.install_short + 10));
        sent.push(event("install", &tx, T0 + 3_000));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "cvr_short", &tx), Some(1));
        assert_eq!(label(&out, "cvr_long", &tx), Some(0));
    }

    #[test]
    fn future_txid() {
        let c = Config::default();
        let horizon = T0 + c.max_future_ms;
        let at_horizon = txid("01", horizon);
        let beyond = txid("02", horizon + 1);
        let mut sent = shown(&at_horizon, horizon);
        sent.extend(shown(&beyond, horizon + 1));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "ctr", &at_horizon), Some(0));
        assert_eq!(label(&out, "ctr", &beyond), None);

        // A tick moves the reference; events before it were still refused.
        let mut sent = vec![bid(&beyond, horizon + 1, json!({}))];
        sent.push(tick(T0 + 1));
        sent.extend(shown(&beyond, horizon + 1));
        sent.push(event("click", &beyond, horizon + 2));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "ctr", &beyond), Some(1));

        // After the first tick the reference is the newest tick, not the
        // start value: a tick older than the start lowers it.
        let sent_after_old_tick: Vec<Sent> = std::iter::once(tick(T0 - HOUR))
            .chain(shown(&at_horizon, horizon))
            .collect();
        assert!(run(&c, &sent_after_old_tick).is_empty());
    }

    #[test]
    fn reference_never_decreases_and_far_ticks_are_refused() {
        let c = Config::default();
        let mf = c.max_future_ms;
        let tx = txid("ab", T0 + 2 * mf);

        // A tick too far ahead is refused: the txid stays in the future.
        let mut sent = vec![tick(T0 + mf + 1)];
        sent.extend(shown(&tx, T0 + 2 * mf));
        assert!(run(&c, &sent).is_empty());

        // Steps of at most max_future are accepted; an older tick afterwards
        // does not move the reference back.
        let mut sent = vec![tick(T0 + mf), tick(T0 + 2 * mf), tick(T0)];
        sent.extend(shown(&tx, T0 + 2 * mf));
        assert_eq!(label(&run(&c, &sent), "ctr", &tx), Some(0));

        // A malformed tick moves nothing.
        let mut sent = vec![
            raw("tick", &json!({"ts": T0 + mf}).to_string()),
            raw("tick", &json!({"publisher": 7, "ts": T0 + mf}).to_string()),
            raw("tick", &json!({"publisher": "p", "ts": 1.5}).to_string()),
            raw(
                "tick",
                &json!({"publisher": "p\u{0}", "ts": T0 + mf}).to_string(),
            ),
            raw(
                "tick_x",
                &json!({"publisher": "p", "ts": T0 + mf}).to_string(),
            ),
            raw(
                "ticks",
                &json!({"publisher": "p", "ts": T0 + mf}).to_string(),
            ),
        ];
        sent.push(tick(T0 + 2 * mf));
        sent.extend(shown(&tx, T0 + 2 * mf));
        assert!(run(&c, &sent).is_empty());
    }

    /// Each junk bid replaces the only bid of a shown and clicked
    /// transaction: accepting it would produce observations.
    #[test]
    fn junk_is_ignored() {
        let c = Config {
            custom_types: vec!["open".into()],
            ..Config::default()
        };
        let tx = txid("ab", T0);
        let other = txid("cd", T0);
        let topic = format!("bid-{tx}");
        let ok = |extra: &str| format!(r#"{{"type":"bid","txid":"{tx}","ts":{T0}{extra}}}"#);
        let mut big = ok(r#","features":{"pad":""#);
        big.push_str(&"x".repeat(MAX_PAYLOAD_BYTES));
        big.push_str(r#""}}"#);
        let junk: Vec<Sent> = vec![
            Sent {
                frames: vec![topic.clone().into_bytes(), ok("").into_bytes(), vec![]],
                clock_at_least: None,
            },
            Sent {
                frames: vec![ok("").into_bytes()],
                clock_at_least: None,
            },
            raw(&topic, "{not json"),
            raw(&topic, &format!("{} trailing", ok(""))),
            raw(&topic, "[1, 2]"),
            raw(&topic, &ok("").replace("\"bid\"", "\"impression\"")),
            raw(&topic, &ok("").replace(&tx, &other)),
            raw(&format!("bid-{other}"), &ok("")),
            raw(&format!("impression-{tx}"), &ok("")),
            raw(&topic, &format!(r#"{{"txid":"{tx}","ts":{T0}}}"#)),
            raw(&topic, &format!(r#"{{"type":"bid","ts":{T0}}}"#)),
            raw(&topic, &format!(r#"{{"type":"bid","txid":"{tx}"}}"#)),
            raw(&topic, &ok(r#","features":{"app":"a\u0000b"}"#)),
            raw(&topic, &ok(r#","features":{"a\u0000":"b"}"#)),
            raw(&topic, &ok(r#","user":"u\u0000""#)),
            raw(&topic, &ok(r#","price":"1.5""#)),
            raw(&topic, &ok(r#","price":1e999"#)),
            raw(&topic, &ok(r#","features":{"x":1e999}"#)),
            raw(&topic, &ok(r#","features":[1]"#)),
            raw(&topic, &ok(r#","features":"app""#)),
            raw(&topic, &ok(r#","features":null"#)),
            raw(&topic, &ok("").replace(&T0.to_string(), &format!("{T0}.5"))),
            raw(&topic, &ok("").replace(&T0.to_string(), &format!("{T0}.0"))),
            raw(&topic, &ok("").replace(&T0.to_string(), "1.767225600e12")),
            raw(
                &topic,
                &ok("").replace(&T0.to_string(), &format!("\"{T0}\"")),
            ),
            raw(&topic, &ok("").replace(&T0.to_string(), "-1")),
            raw(&topic, &ok("").replace(&T0.to_string(), "9007199254740992")),
            raw(
                &topic,
                &ok("").replace(&T0.to_string(), "99999999999999999999999"),
            ),
            raw(&topic, &ok(&format!(r#","ts":{T0}.5"#))), // a duplicate key: last wins
            raw(&topic, &big),
            Sent {
                frames: vec![topic.clone().into_bytes(), {
                    let mut bytes = ok(r#","features":{"app":""#).into_bytes();
                    bytes.extend([0xff, 0xfe]);
                    bytes.extend(br#""}}"#);
                    bytes
                }],
                clock_at_least: None,
            },
            raw(&topic.to_uppercase(), &ok("").to_uppercase()),
            raw(&format!("auction-{tx}"), &ok("").replace("bid", "auction")),
            raw(
                &format!("bid-{tx}0"),
                &ok("").replace(&tx, &format!("{tx}0")),
            ),
            raw(&format!("bid-{}", &tx[1..]), &ok("").replace(&tx, &tx[1..])),
            raw(&format!("bid {tx}"), &ok("")),
        ];
        let mut sent = vec![event("impression", &tx, T0 + 1_000)];
        sent.push(event("click", &tx, T0 + 2_000));
        for j in junk {
            let mut one = sent.clone();
            one.push(j.clone());
            let out = run(&c, &one);
            assert!(
                out.is_empty(),
                "accepted {:?}",
                String::from_utf8_lossy(&j.frames[0])
            );
        }

        // The same bid, well-formed, is accepted (the junk was junk).
        let mut one = sent.clone();
        one.push(raw(&topic, &ok("")));
        assert_eq!(label(&run(&c, &one), "ctr", &tx), Some(1));
        // A payload of exactly 64 KiB is accepted.
        let mut exact = ok(r#","features":{"pad":""#);
        let fill = MAX_PAYLOAD_BYTES - exact.len() - 3;
        exact.push_str(&"x".repeat(fill));
        exact.push_str(r#""}}"#);
        assert_eq!(exact.len(), MAX_PAYLOAD_BYTES);
        let mut one = sent.clone();
        one.push(raw(&topic, &exact));
        assert_eq!(label(&run(&c, &one), "ctr", &tx), Some(1));
    }

    #[test]
    fn junk_responses_do_not_label() {
        let c = Config {
            custom_types: vec!["open".into()],
            targets: vec![Target {
                name: "open_1h".into(),
                given: Given::Impression,
                event: "open".into(),
                after_ms: 0,
                until_ms: HOUR,
                grace_ms: 0,
            }],
            ..Config::default()
        };
        let tx = txid("ab", T0);
        let click = format!(r#"{{"type":"click","txid":"{tx}","ts":{}}}"#, T0 + 5);
        let junk = vec![
            raw(
                &format!("click-{tx}"),
                &click.replace(&(T0 + 5).to_string(), "1e3"),
            ),
            raw(&format!("click-{tx}"), &click.replace("click", "install")),
            raw(
                &format!("click-{tx}"),
                &click.replace('}', r#","user":"\u0000"}"#),
            ),
            raw(&format!("install-{tx}"), &click),
            raw(&format!("open-{tx}"), &click),
            raw(&format!("shut-{tx}"), &click.replace("click", "shut")),
        ];
        for j in junk {
            let mut sent = shown(&tx, T0);
            sent.push(j);
            let out = run(&c, &sent);
            assert_eq!(label(&out, "ctr", &tx), Some(0));
            assert_eq!(label(&out, "open_1h", &tx), Some(0));
        }
        // Unused fields are ignored; so is `price` on a click, and `user`
        // that is not a string.
        let mut sent = shown(&tx, T0);
        let with_extra = click.replace(
            '}',
            r#","price":"free","user":5,"ids":{"x":"\u0000"},"more":[null]}"#,
        );
        sent.push(raw(&format!("click-{tx}"), &with_extra));
        sent.push(event("open", &tx, T0 + 6));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "ctr", &tx), Some(1));
        assert_eq!(label(&out, "open_1h", &tx), Some(1));
    }

    #[test]
    fn odd_feature_values_are_dropped_not_refused() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let features = json!({"app": "a", "n": null, "l": [1], "o": {"k": "v"}, "f": false});
        let sent = vec![bid(&tx, T0, features), event("impression", &tx, T0 + 1)];
        let out = run(&c, &sent);
        let got = &out[&("ctr".to_string(), tx)].features;
        let want = BTreeMap::from([
            ("app".to_string(), Feature::Str("a".into())),
            ("f".to_string(), Feature::Bool(false)),
        ]);
        assert_eq!(got, &want);

        // A bid without features has empty features.
        let tx = txid("cd", T0);
        let payload = json!({"type": "bid", "txid": tx, "ts": T0, "price": 1.25});
        let sent = vec![
            raw(&format!("bid-{tx}"), &payload.to_string()),
            event("impression", &tx, T0 + 1),
        ];
        let out = run(&c, &sent);
        assert!(out[&("ctr".to_string(), tx)].features.is_empty());
    }

    #[test]
    fn custom_target_with_after() {
        let c = Config {
            custom_types: vec!["open".into()],
            targets: vec![
                Target {
                    name: "open_late".into(),
                    given: Given::Click,
                    event: "open".into(),
                    after_ms: HOUR,
                    until_ms: 2 * HOUR,
                    grace_ms: MINUTE,
                },
                Target {
                    name: "open_any".into(),
                    given: Given::Impression,
                    event: "open".into(),
                    after_ms: 0,
                    until_ms: 2 * HOUR,
                    grace_ms: MINUTE,
                },
            ],
            ..Config::default()
        };
        let cases = [
            (HOUR, 0, 1),
            (HOUR + 1, 1, 1),
            (2 * HOUR, 1, 1),
            (2 * HOUR + 1, 0, 0),
            (-5, 0, 1),
        ];
        for (offset, late_label, any_label) in cases {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + 2_000));
            sent.push(event("open", &tx, T0 + offset));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "open_late", &tx), Some(late_label), "{offset}");
            assert_eq!(label(&out, "open_any", &tx), Some(any_label), "{offset}");
        }

        // Without a click, only the impression-given target is emitted.
        let tx = txid("ab", T0);
        let mut sent = shown(&tx, T0);
        sent.push(event("open", &tx, T0 + HOUR + 5));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "open_late", &tx), None);
        assert_eq!(label(&out, "open_any", &tx), Some(1));
        assert_eq!(out.len(), 2);

        // Late for the target's sweep (until + grace).
        let mut sent = shown(&tx, T0);
        let open = event("open", &tx, T0 + HOUR + 5);
        sent.push(late(open, T0 + 2 * HOUR + MINUTE));
        assert_eq!(label(&run(&c, &sent), "open_any", &tx), Some(0));
        let mut sent = shown(&tx, T0);
        let open = event("open", &tx, T0 + HOUR + 5);
        sent.push(late(open, T0 + 2 * HOUR + MINUTE - 1));
        assert_eq!(label(&run(&c, &sent), "open_any", &tx), Some(1));

        // A custom type not configured is not received.
        let c2 = Config {
            custom_types: vec![],
            ..c.clone()
        };
        let mut sent = shown(&tx, T0);
        sent.push(event("open", &tx, T0 + 5));
        assert_eq!(label(&run(&c2, &sent), "open_any", &tx), Some(0));
    }

    #[test]
    fn prefix_filtering() {
        let c = Config {
            prefixes: vec!["a".into(), "0f".into()],
            ..Config::default()
        };
        let ids = ["a1", "0f2", "0e3", "b4", "fa"].map(|r| txid(r, T0));
        let mut sent = vec![];
        for tx in &ids {
            sent.extend(shown(tx, T0));
        }
        let out = run(&c, &sent);
        let seen: Vec<bool> = ids
            .iter()
            .map(|tx| out.contains_key(&("ctr".to_string(), tx.clone())))
            .collect();
        assert_eq!(seen, [true, true, false, false, false]);

        // Click filtered by the same prefix rule: same txid, so received.
        let mut sent = shown(&ids[0], T0);
        sent.push(event("click", &ids[0], T0 + 5));
        assert_eq!(label(&run(&c, &sent), "ctr", &ids[0]), Some(1));
    }

    #[test]
    fn shares_sum_prefix_sizes() {
        assert_eq!(shares(&[]), 1.0);
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shares(&p(&["0", "1", "2", "3"])), 0.25);
        assert_eq!(shares(&p(&["a", "0f"])), 1.0 / 16.0 + 1.0 / 256.0);
    }

    #[test]
    fn txid_parsing() {
        assert_eq!(txid_created_ms(&txid("ab", T0)), Some(T0));
        assert_eq!(txid_created_ms(&txid("ab", 0)), Some(0));
        assert_eq!(txid_created_ms(&"f".repeat(32)), Some(0xffff_ffff_ffff));
        assert_eq!(txid_created_ms(&"F".repeat(32)), None);
        assert_eq!(txid_created_ms(&"g".repeat(32)), None);
        assert_eq!(txid_created_ms(&"0".repeat(31)), None);
        assert_eq!(txid_created_ms(&"0".repeat(33)), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("5s"), Ok(5_000));
        assert_eq!(parse_duration("2m"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("7d"), Ok(604_800_000));
        assert_eq!(parse_duration("0s"), Ok(0));
        for bad in [
            "",
            "5",
            "s",
            "1.5h",
            "-1s",
            "5 s",
            "5sec",
            "1w",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn from_toml_defaults() {
        let c = Config::from_toml("name = \"s0\"\nclock = \"event\"\nlateness = \"5s\"\n").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.windows_ms.impression, 120_000);
        assert_eq!(c.windows_ms.click, 3_600_000);
        assert_eq!(c.windows_ms.install_short, 86_400_000);
        assert_eq!(c.windows_ms.install_long, 604_800_000);
        assert_eq!(c.grace_ms.impression, 30_000);
        assert_eq!(c.grace_ms.click, 300_000);
        assert_eq!(c.grace_ms.install_short, 21_600_000);
        assert_eq!(c.grace_ms.install_long, 21_600_000);
        assert_eq!(c.max_future_ms, 600_000);
        assert!(c.prefixes.is_empty() && c.custom_types.is_empty() && c.targets.is_empty());
    }

    #[test]
    fn from_toml_overrides() {
        let text = r#"
            name = "s1"
            endpoints = ["tcp://127.0.0.1:5556"]
            prefixes = ["0", "1f"]
            database_url = "postgres://x"
            period = "1s"
            max_future = "1h"
            custom_types = ["open", "sign_up2"]
            unknown_key = { a = 1 }

            [windows]
            impression = "500ms"
            click = "2m"

            [grace]
            install_long = "1d"

            [[targets]]
            name = "open_24h"
            given = "click"
            event = "open"
            after = "1h"
            until = "24h"
            grace = "1h"

            [[targets]]
            name = "sign"
            given = "impression"
            event = "sign_up2"
            until = "2h"
        "#;
        let c = Config::from_toml(text).unwrap();
        assert_eq!(c.prefixes, ["0", "1f"]);
        assert_eq!(c.custom_types, ["open", "sign_up2"]);
        assert_eq!(c.max_future_ms, HOUR);
        assert_eq!(c.windows_ms.impression, 500);
        assert_eq!(c.windows_ms.click, 2 * MINUTE);
        assert_eq!(c.windows_ms.install_short, DAY);
        assert_eq!(c.grace_ms.install_long, DAY);
        assert_eq!(c.grace_ms.click, 5 * MINUTE);
        let open = Target {
            name: "open_24h".into(),
            given: Given::Click,
            event: "open".into(),
            after_ms: HOUR,
            until_ms: DAY,
            grace_ms: HOUR,
        };
        let sign = Target {
            name: "sign".into(),
            given: Given::Impression,
            event: "sign_up2".into(),
            after_ms: 0,
            until_ms: 2 * HOUR,
            grace_ms: 0,
        };
        assert_eq!(c.targets, [open, sign]);
    }

    #[test]
    fn from_toml_refusals_name_the_key() {
        let cases = [
            ("prefixes = [\"0\", \"01\"]", "prefixes"),
            ("prefixes = [\"A\"]", "prefixes"),
            ("prefixes = \"0\"", "prefixes"),
            ("custom_types = [\"click\"]", "custom_types"),
            ("custom_types = [\"ticker\"]", "custom_types"),
            ("custom_types = [\"Open\"]", "custom_types"),
            ("max_future = \"10\"", "max_future"),
            ("max_future = 10", "max_future"),
            ("[windows]\nclick = \"1x\"", "windows.click"),
            ("[windows]\nclick = \"1m\"", "windows"),
            ("[grace]\nimpression = \"1.5s\"", "grace.impression"),
            (
                "[[targets]]\nname = \"t\"\ngiven = \"install\"\nevent = \"open\"\nuntil = \"1h\"",
                "targets.given",
            ),
            (
                "[[targets]]\nname = \"t\"\ngiven = \"click\"\nevent = \"open\"",
                "targets.until",
            ),
            (
                "[[targets]]\nname = \"ctr\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"1h\"",
                "targets.name",
            ),
            ("this is not toml", "config"),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text).unwrap_err();
            assert!(err.starts_with(key), "{text:?} gave {err:?}");
        }
    }

    /// `n` transactions shown, every other one clicked: `2.5 n` messages.
    fn many(n: i64) -> Vec<Sent> {
        let mut sent = Vec::new();
        for i in 0..n {
            let created = T0 + i / 10;
            let tx = txid(&format!("{i:08x}"), created);
            sent.extend(shown(&tx, created));
            if i % 2 == 0 {
                sent.push(event("click", &tx, created + 10));
            }
        }
        sent
    }

    #[test]
    fn many_messages() {
        let out = run(&Config::default(), &many(20_000));
        assert_eq!(out.len(), 20_000 + 2 * 10_000);
    }

    /// A timing run: `cargo test --release -p tidemark-reference -- --ignored --nocapture`.
    #[test]
    #[ignore = "a timing run, for --release"]
    fn throughput() {
        let sent = many(1_000_000);
        let start = std::time::Instant::now();
        let out = run(&Config::default(), &sent);
        eprintln!("{} messages in {:?}", sent.len(), start.elapsed());
        assert_eq!(out.len(), 2_000_000);
    }
}
