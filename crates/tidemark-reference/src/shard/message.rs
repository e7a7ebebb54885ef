//! One message as a publisher sent it (SPEC 1-3), and the checks a shard
//! makes before it keeps one: frames, topic, size, JSON shape, `ts`, the
//! values PostgreSQL could not hold, the shard's subscription (its event
//! types and prefixes), and a bid's features.

use std::collections::BTreeMap;

use super::config::Config;
use super::txid::txid_created_ms;

/// The largest payload a shard accepts (SPEC 2): 64 KiB.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// `ts` must lie in `0 <= ts < 2^53` (SPEC 3).
const TS_LIMIT: i64 = 1 << 53;

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

/// What a valid message, that the shard subscribes to, says. Type and txid
/// are borrowed from the topic frame.
#[derive(Debug)]
pub(super) enum Message<'a> {
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
pub(super) fn read_message<'a>(config: &Config, frames: &'a [Vec<u8>]) -> Option<Message<'a>> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::super::fixtures::{bid, event, label, raw, run, shown, txid, HOUR, T0};
    use super::super::{Given, Target};
    use super::*;

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
                early: false,
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
}
