//! The expected observations of a shard, computed from the messages sent to
//! it: SPEC sections 1-5 and 7 written out plainly, as the oracle of the
//! differential tests and of `tidemark-bench e2e`.
//!
//! Owns nothing the system runs. It shares no code with `tidemark-shard` or
//! `tidemark-wire`: it validates messages itself, with `serde_json::Value`,
//! and decides populations and labels per transaction in memory, the slow and
//! obvious way, so that a fault in the shard cannot hide in shared code.

use std::collections::{BTreeMap, HashMap};

/// Which population a configured target labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    Impression,
    Click,
}

/// A configured target (`[[targets]]`, SPEC 7).
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub given: Given,
    pub event: String,
    pub after_ms: i64,
    pub until_ms: i64,
    pub grace_ms: i64,
}

/// Window lengths or graces, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub impression: i64,
    pub click: i64,
    pub install_short: i64,
    pub install_long: i64,
}

/// What of a shard's configuration decides its observations.
#[derive(Debug, Clone)]
pub struct Config {
    /// Empty: every transaction.
    pub prefixes: Vec<String>,
    pub custom_types: Vec<String>,
    pub windows_ms: Windows,
    pub grace_ms: Windows,
    /// The configured targets beyond `ctr`, `cvr_short`, `cvr_long`.
    pub targets: Vec<Target>,
    pub max_future_ms: i64,
}

fn duration_ms(key: &str, v: &toml::Value) -> Result<i64, String> {
    let s = v
        .as_str()
        .ok_or(format!("{key}: expected a duration string"))?;
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or(format!("{key}: {s:?} has no unit"))?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().map_err(|_| format!("{key}: {s:?}"))?;
    let per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{key}: unknown unit in {s:?}")),
    };
    Ok(n * per)
}

impl Config {
    /// Reads a shard's TOML configuration; keys that do not decide
    /// observations are ignored. Defaults as SPEC 7 shows.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let doc: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        let strings = |key: &str| -> Vec<String> {
            doc.get(key)
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let table = |name: &str, d: Windows| -> Result<Windows, String> {
            let mut w = d;
            if let Some(t) = doc.get(name).and_then(|v| v.as_table()) {
                for (k, v) in t {
                    let ms = duration_ms(&format!("{name}.{k}"), v)?;
                    match k.as_str() {
                        "impression" => w.impression = ms,
                        "click" => w.click = ms,
                        "install_short" => w.install_short = ms,
                        "install_long" => w.install_long = ms,
                        _ => return Err(format!("{name}.{k}: unknown")),
                    }
                }
            }
            Ok(w)
        };
        const H: i64 = 3_600_000;
        let windows_ms = table(
            "windows",
            Windows {
                impression: 2 * 60_000,
                click: H,
                install_short: 24 * H,
                install_long: 7 * 24 * H,
            },
        )?;
        let grace_ms = table(
            "grace",
            Windows {
                impression: 30_000,
                click: 5 * 60_000,
                install_short: 6 * H,
                install_long: 6 * H,
            },
        )?;
        let mut targets = Vec::new();
        if let Some(list) = doc.get("targets").and_then(|v| v.as_array()) {
            for t in list {
                let get = |k: &str| t.get(k);
                let text = |k: &str| -> Result<String, String> {
                    get(k)
                        .and_then(|v| v.as_str())
                        .map(str::to_owned)
                        .ok_or(format!("targets.{k} missing"))
                };
                let dur = |k: &str, d: i64| -> Result<i64, String> {
                    get(k).map_or(Ok(d), |v| duration_ms(&format!("targets.{k}"), v))
                };
                targets.push(Target {
                    name: text("name")?,
                    given: match text("given")?.as_str() {
                        "impression" => Given::Impression,
                        "click" => Given::Click,
                        g => return Err(format!("targets.given: {g:?}")),
                    },
                    event: text("event")?,
                    after_ms: dur("after", 0)?,
                    until_ms: dur("until", 0)?,
                    grace_ms: dur("grace", 0)?,
                });
            }
        }
        Ok(Config {
            prefixes: strings("prefixes"),
            custom_types: strings("custom_types"),
            windows_ms,
            grace_ms,
            targets,
            max_future_ms: match doc.get("max_future") {
                Some(v) => duration_ms("max_future", v)?,
                None => 10 * 60_000,
            },
        })
    }
}

/// One message as a publisher sent it, in the order sent.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Normally `[topic, payload]`; anything else is junk.
    pub frames: Vec<Vec<u8>>,
    /// A lower bound the test observed on the shard's clock before sending
    /// this message. An event is late for a window when this bound is at or
    /// past `created + W + grace` of that window.
    pub clock_at_least: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Feature {
    Str(String),
    Num(f64),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub label: i16,
    pub features: BTreeMap<String, Feature>,
}

/// An accepted event, reduced to what decides observations.
struct Event {
    kind: String,
    created: i64,
    /// Clamped: never before creation (SPEC 5).
    ts: i64,
    features: Option<BTreeMap<String, Feature>>,
    clock_at_least: Option<i64>,
}

const MAX_PAYLOAD: usize = 64 * 1024;
const BUILT_IN: [&str; 5] = ["auction", "bid", "impression", "click", "install"];

fn is_txid(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn has_nul(s: &str) -> bool {
    s.contains('\0')
}

/// `Some(ts)` for an integer in `0 ≤ ts < 2^53`.
fn valid_ts(v: &serde_json::Value) -> Option<i64> {
    let ts = v.as_i64()?;
    (0..(1i64 << 53)).contains(&ts).then_some(ts)
}

/// JSON text spelling a number too large for a double (serde_json refuses
/// to parse such a document at all, so this is checked on the raw text).
fn overflows(payload: &str) -> bool {
    // A document serde_json cannot parse only because of a number's range.
    matches!(serde_json::from_str::<serde_json::Value>(payload), Err(e) if e.to_string().contains("number out of range"))
}

enum Parsed {
    Tick(i64),
    Event(Event),
    Ignored,
}

fn parse(config: &Config, sent: &Sent) -> Parsed {
    let [topic, payload] = sent.frames.as_slice() else {
        return Parsed::Ignored;
    };
    if payload.len() > MAX_PAYLOAD {
        return Parsed::Ignored;
    }
    let (Ok(topic), Ok(text)) = (std::str::from_utf8(topic), std::str::from_utf8(payload)) else {
        return Parsed::Ignored;
    };
    if overflows(text) {
        return Parsed::Ignored;
    }
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Parsed::Ignored;
    };
    let str_field = |k: &str| obj.get(k).and_then(|v| v.as_str());
    if topic == "tick" {
        let (Some("tick"), Some(publisher), Some(ts)) = (
            str_field("type"),
            str_field("publisher"),
            obj.get("ts").and_then(valid_ts),
        ) else {
            return Parsed::Ignored;
        };
        if has_nul(publisher) {
            return Parsed::Ignored;
        }
        return Parsed::Tick(ts);
    }
    let Some((kind, txid)) = topic.split_once('-') else {
        return Parsed::Ignored;
    };
    let known = BUILT_IN.contains(&kind) || config.custom_types.iter().any(|c| c == kind);
    if !known || !is_txid(txid) {
        return Parsed::Ignored;
    }
    if str_field("type") != Some(kind) || str_field("txid") != Some(txid) {
        return Parsed::Ignored;
    }
    let Some(ts) = obj.get("ts").and_then(valid_ts) else {
        return Parsed::Ignored;
    };
    if let Some(u) = obj.get("user") {
        if !u.is_null() && u.as_str().is_none_or(has_nul) {
            return Parsed::Ignored;
        }
    }
    if let Some(p) = obj.get("price") {
        if !p.is_null() && p.as_f64().is_none_or(|x| !x.is_finite()) {
            return Parsed::Ignored;
        }
    }
    let mut features = None;
    if kind == "bid" {
        let Some(serde_json::Value::Object(f)) = obj.get("features") else {
            return Parsed::Ignored;
        };
        let mut kept = BTreeMap::new();
        for (name, v) in f {
            let value = match v {
                serde_json::Value::String(s) => {
                    if has_nul(s) {
                        return Parsed::Ignored;
                    }
                    Feature::Str(s.clone())
                }
                serde_json::Value::Bool(b) => Feature::Bool(*b),
                serde_json::Value::Number(n) => match n.as_f64() {
                    Some(x) if x.is_finite() => Feature::Num(x),
                    _ => return Parsed::Ignored,
                },
                _ => continue,
            };
            if has_nul(name) {
                return Parsed::Ignored;
            }
            kept.insert(name.clone(), value);
        }
        features = Some(kept);
    }
    let created = i64::from_str_radix(&txid[20..], 16).expect("hex");
    Parsed::Event(Event {
        kind: kind.to_owned(),
        created,
        ts: ts.max(created),
        features,
        clock_at_least: sent.clock_at_least,
    })
}

/// Whether an event is in time for a phase swept at `created + sweep_after`.
fn in_time(e: &Event, sweep_after: i64) -> bool {
    e.clock_at_least.is_none_or(|k| k < e.created + sweep_after)
}

/// Every observation `(target, txid) -> Expected` one shard with `config`
/// must emit once every window has been swept, given the messages sent to it
/// in this order by one publisher. `reference_start_ms` is the `max_future`
/// reference before the first tick (SPEC 1).
pub fn expected(
    config: &Config,
    sent: &[Sent],
    reference_start_ms: i64,
) -> BTreeMap<(String, String), Expected> {
    let mut reference: Option<i64> = None;
    let mut by_txid: HashMap<String, Vec<Event>> = HashMap::new();
    for s in sent {
        let now = reference.unwrap_or(reference_start_ms);
        match parse(config, s) {
            Parsed::Tick(ts) => {
                if ts <= now + config.max_future_ms {
                    reference = Some(reference.map_or(ts, |r| r.max(ts)));
                }
            }
            Parsed::Event(e) => {
                let txid = std::str::from_utf8(&s.frames[0]).expect("checked")[e.kind.len() + 1..]
                    .to_owned();
                let subscribed = e.kind != "auction"
                    && (config.prefixes.is_empty()
                        || config.prefixes.iter().any(|p| txid.starts_with(p.as_str())));
                if subscribed && e.created <= now + config.max_future_ms {
                    by_txid.entry(txid).or_default().push(e);
                }
            }
            Parsed::Ignored => {}
        }
    }
    let (w, g) = (config.windows_ms, config.grace_ms);
    let mut out = BTreeMap::new();
    for (txid, events) in &by_txid {
        let imp_sweep = w.impression + g.impression;
        // Earliest in-time bid; on a tie the first sent.
        let mut bid: Option<&Event> = None;
        for e in events
            .iter()
            .filter(|e| e.kind == "bid" && in_time(e, imp_sweep))
        {
            if bid.is_none_or(|b| e.ts < b.ts) {
                bid = Some(e);
            }
        }
        let Some(bid) = bid else { continue };
        // Copies of one (type, txid) are one event (SPEC 3): among the copies
        // in time for a phase swept at `sweep`, the earliest `ts` is the
        // event's. Its time after creation, if there is one.
        let first = |kind: &str, sweep: i64| {
            events
                .iter()
                .filter(|e| e.kind == kind && in_time(e, sweep))
                .map(|e| e.ts - e.created)
                .min()
        };
        if first("impression", imp_sweep).is_none_or(|dt| dt > w.impression) {
            continue;
        }
        // Label 1: that event has `after < dt <= until` (`after` < 0: from creation on).
        let seen = |kind: &str, after: i64, until: i64, sweep: i64| {
            first(kind, sweep).is_some_and(|dt| dt > after && dt <= until)
        };
        let features = bid.features.clone().unwrap_or_default();
        let mut emit = |target: &str, label: bool| {
            out.insert(
                (target.to_owned(), txid.clone()),
                Expected {
                    label: i16::from(label),
                    features: features.clone(),
                },
            );
        };
        let clicked = seen("click", -1, w.click, w.click + g.click);
        emit("ctr", clicked);
        if clicked {
            emit(
                "cvr_short",
                seen(
                    "install",
                    -1,
                    w.install_short,
                    w.install_short + g.install_short,
                ),
            );
            emit(
                "cvr_long",
                seen(
                    "install",
                    w.install_short,
                    w.install_long,
                    w.install_long + g.install_long,
                ),
            );
        }
        for t in &config.targets {
            if t.given == Given::Click && !clicked {
                continue;
            }
            let after = if t.after_ms > 0 { t.after_ms } else { -1 };
            emit(
                &t.name,
                seen(&t.event, after, t.until_ms, t.until_ms + t.grace_ms),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
custom_types = ["open"]
[windows]
impression = "10s"
click = "60s"
install_short = "120s"
install_long = "300s"
[grace]
impression = "5s"
click = "10s"
install_short = "10s"
install_long = "10s"
[[targets]]
name = "o"
given = "click"
event = "open"
after = "5s"
until = "30s"
grace = "1s"
"#;
    const C: i64 = 1_700_000_000_000;

    fn tx(n: u32) -> String {
        format!("{n:020x}{C:012x}")
    }

    fn ev(kind: &str, x: &str, dt: i64, extra: &str) -> Sent {
        Sent {
            frames: vec![
                format!("{kind}-{x}").into_bytes(),
                format!(r#"{{"type":"{kind}","txid":"{x}","ts":{}{extra}}}"#, C + dt).into_bytes(),
            ],
            clock_at_least: None,
        }
    }

    fn bid(x: &str, dt: i64, v: &str) -> Sent {
        ev(
            "bid",
            x,
            dt,
            &format!(r#","features":{{"v":"{v}","n":1.5,"b":true,"z":null}}"#),
        )
    }

    fn run(sent: &[Sent]) -> BTreeMap<(String, String), Expected> {
        expected(&Config::from_toml(CONFIG).unwrap(), sent, C)
    }

    fn label(out: &BTreeMap<(String, String), Expected>, t: &str, x: &str) -> Option<i16> {
        out.get(&(t.to_owned(), x.to_owned())).map(|e| e.label)
    }

    #[test]
    fn windows_and_populations() {
        let (a, b, c, d) = (tx(1), tx(2), tx(3), tx(4));
        let out = run(&[
            bid(&a, 0, "a"),
            ev("impression", &a, 10_000, ""),
            ev("click", &a, 60_000, ""),
            ev("install", &a, 120_001, ""),
            ev("open", &a, 5_001, ""),
            bid(&b, 0, "b"),
            ev("impression", &b, 10_001, ""),
            bid(&c, 0, "c"),
            ev("impression", &c, 1, ""),
            ev("click", &c, 60_001, ""),
            ev("impression", &d, 1, ""),
        ]);
        assert_eq!(label(&out, "ctr", &a), Some(1));
        assert_eq!(label(&out, "cvr_short", &a), Some(0));
        assert_eq!(label(&out, "cvr_long", &a), Some(1));
        assert_eq!(label(&out, "o", &a), Some(1));
        assert_eq!(label(&out, "ctr", &b), None, "impression after its window");
        assert_eq!(label(&out, "ctr", &c), Some(0), "click 1 ms too late");
        assert_eq!(label(&out, "cvr_short", &c), None);
        assert_eq!(label(&out, "ctr", &d), None, "no bid: orphan");
        let f = &out[&("ctr".to_owned(), a.clone())].features;
        assert_eq!(f.len(), 3, "null is dropped");
        assert_eq!(f["n"], Feature::Num(1.5));
    }

    #[test]
    fn copies_are_one_event_whose_time_is_the_earliest() {
        let a = tx(1);
        let out = run(&[
            bid(&a, 0, "a"),
            ev("impression", &a, 100, ""),
            ev("click", &a, 1_000, ""),
            // The earliest install is in the short window: the later copy in
            // the long window is the same event, not a second install.
            ev("install", &a, 200_000, ""),
            ev("install", &a, 100_000, ""),
            // The earliest open is before `after`.
            ev("open", &a, 4_000, ""),
            ev("open", &a, 6_000, ""),
        ]);
        assert_eq!(label(&out, "cvr_short", &a), Some(1));
        assert_eq!(label(&out, "cvr_long", &a), Some(0));
        assert_eq!(label(&out, "o", &a), Some(0));
    }

    #[test]
    fn earliest_bid_wins_then_first_sent() {
        let (a, b) = (tx(1), tx(2));
        let out = run(&[
            bid(&a, 50, "later"),
            bid(&a, 20, "earliest"),
            ev("impression", &a, 100, ""),
            bid(&b, -5, "first"),
            bid(&b, -9, "second"),
            ev("impression", &b, 100, ""),
        ]);
        let v = |x: &str| out[&("ctr".to_owned(), x.to_owned())].features["v"].clone();
        assert_eq!(v(&a), Feature::Str("earliest".into()));
        assert_eq!(
            v(&b),
            Feature::Str("first".into()),
            "both clamp to creation"
        );
    }

    #[test]
    fn late_future_and_junk_change_nothing() {
        let a = tx(1);
        let mut late = ev("click", &a, 1_000, "");
        late.clock_at_least = Some(C + 70_000);
        let far = format!("{:020x}{:012x}", 9, C + 3_600_000);
        let out = run(&[
            bid(&a, 0, "a"),
            ev("impression", &a, 100, ""),
            late,
            Sent {
                frames: vec![
                    b"tick".to_vec(),
                    format!(
                        r#"{{"type":"tick","publisher":"p","ts":{}}}"#,
                        C + 86_400_000
                    )
                    .into_bytes(),
                ],
                clock_at_least: None,
            },
            bid(&far, 0, "far"),
            ev("impression", &far, 1, ""),
            Sent {
                frames: vec![b"click".to_vec()],
                clock_at_least: None,
            },
            ev("bid", &tx(5), 0, r#","features":{"v":"a\u0000"}"#),
            ev("impression", &tx(5), 1, ""),
            ev("bid", &tx(6), 0, r#","features":{"n":1e999}"#),
            ev("impression", &tx(6), 1, ""),
        ]);
        assert_eq!(label(&out, "ctr", &a), Some(0));
        assert_eq!(out.len(), 1, "{out:?}");
    }
}
