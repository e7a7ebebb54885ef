//! The wire checks of a profile process (SPEC 1-3, 11): which messages it
//! receives (its types and prefixes, as ZeroMQ prefix matching does), which
//! it rejects, and the identifiers an event carries, good and bad.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::setup::Setup;
use crate::names::{is_lower_hex, is_name};

/// The largest payload accepted (SPEC 2): 64 KiB.
pub(super) const MAX_PAYLOAD: usize = 64 * 1024;

/// `ts` must lie in `0 <= ts < 2^53` (SPEC 3).
const TS_END: i64 = 1 << 53;

/// Built-in event types other than `tick` (SPEC 2).
const BUILT_INS: [&str; 5] = ["auction", "bid", "impression", "click", "install"];

/// The outcome of the wire checks (SPEC 1-3) for one message.
pub(super) enum Wire {
    /// Not subscribed to: as if never sent.
    NotReceived,
    /// Received and refused.
    Rejected,
    /// A well-formed event.
    Event(Decoded),
}

/// A well-formed event as received: its type and txid (from the topic),
/// the creation time its txid spells, its `ts` and its whole payload.
pub(super) struct Decoded {
    pub(super) kind: String,
    pub(super) txid: String,
    pub(super) created: i64,
    pub(super) ts: i64,
    pub(super) body: Map<String, Value>,
}

/// 1-256 bytes without U+0000.
fn is_value(value: &str) -> bool {
    !value.is_empty() && value.len() <= 256 && !value.contains('\u{0}')
}

/// The outcome of the wire checks for one message received on `topic`.
pub(super) fn decode(setup: &Setup, topic: &[u8], payload: &[u8]) -> Wire {
    // Which subscription (`<type>-<prefix>`) lets the topic in, if any.
    let mut received = None;
    for kind in &setup.types {
        if kind == "tick" {
            continue;
        }
        let head = format!("{kind}-");
        let Some(rest) = topic.strip_prefix(head.as_bytes()) else {
            continue;
        };
        let wanted = setup.prefixes.is_empty()
            || setup
                .prefixes
                .iter()
                .any(|p| rest.starts_with(p.as_bytes()));
        if wanted {
            received = Some((kind.clone(), rest));
            break;
        }
    }
    let Some((kind, rest)) = received else {
        return Wire::NotReceived;
    };

    let decodable = BUILT_INS.contains(&kind.as_str()) || setup.custom_types.contains(&kind);
    if !decodable || rest.len() != 32 || !rest.iter().all(|b| is_lower_hex(char::from(*b))) {
        return Wire::Rejected;
    }
    let txid = String::from_utf8(rest.to_vec()).expect("hex is ASCII");
    let created = i64::from_str_radix(&txid[20..], 16).expect("12 hex digits fit");

    if payload.len() > MAX_PAYLOAD {
        return Wire::Rejected;
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(payload) else {
        return Wire::Rejected;
    };
    if body.get("type") != Some(&Value::String(kind.clone())) {
        return Wire::Rejected;
    }
    if body.get("txid") != Some(&Value::String(txid.clone())) {
        return Wire::Rejected;
    }
    let ts = match body.get("ts") {
        Some(Value::Number(n)) if !n.is_f64() => n.as_i64(),
        _ => None,
    };
    let Some(ts) = ts.filter(|ts| (0..TS_END).contains(ts)) else {
        return Wire::Rejected;
    };
    Wire::Event(Decoded {
        kind,
        txid,
        created,
        ts,
        body,
    })
}

/// The good identifiers of an event in link order (`user`, then `ids`
/// sorted by kind), and how many bad ones it carried.
pub(super) fn identifiers(body: &Map<String, Value>) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    match body.get("user") {
        None => {}
        Some(Value::String(value)) if is_value(value) => out.push(format!("user:{value}")),
        Some(_) => bad += 1,
    }
    match body.get("ids") {
        None => {}
        Some(Value::Object(ids)) => {
            // serde_json's Map is a BTreeMap here: iteration is by kind, bytewise.
            let mut by_kind: BTreeMap<&str, &Value> = BTreeMap::new();
            for (kind, value) in ids {
                by_kind.insert(kind.as_str(), value);
            }
            for (kind, value) in by_kind {
                match value {
                    Value::String(value) if is_name(kind) && kind != "user" && is_value(value) => {
                        out.push(format!("{kind}:{value}"))
                    }
                    _ => bad += 1,
                }
            }
        }
        Some(_) => bad += 1,
    }
    (out, bad)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{count, send, setup, txid, T0};
    use super::super::Profiles;

    #[test]
    fn bad_identifiers_are_dropped_and_the_others_kept() {
        let mut p = Profiles::new(setup());
        let ids = json!({
            "Bad": "x", "member": "m1", "user": "u", "idfa": "", "ok": 3,
            "nul": "a\u{0}b", "long": "x".repeat(257), "k23456789012345678901234567890123": "v",
            "fine": "y".repeat(256),
        });
        send(
            &mut p,
            "click",
            &txid("c1", T0),
            T0,
            json!({"user": 5, "ids": ids}),
        );
        assert_eq!(count(&p, "bad_identifier"), 8);
        assert_eq!(count(&p, "applied"), 1);
        let fine = format!("fine:{}", "y".repeat(256));
        assert_eq!(p.person("member:m1"), vec![fine, "member:m1".to_string()]);
        assert_eq!(p.get("member:m1", T0)["counts"], json!({"click": 1}));
        assert_eq!(p.get("user:u", T0)["size"], json!(1));

        // Left with no identifier: counted and ignored, but it was the event.
        let tx = txid("c2", T0);
        send(&mut p, "click", &tx, T0, json!({"ids": ["member", "m1"]}));
        send(&mut p, "click", &txid("c3", T0), T0, json!({}));
        assert_eq!(count(&p, "bad_identifier"), 9);
        assert_eq!(count(&p, "no_identifier"), 2);
        send(&mut p, "click", &tx, T0, json!({"user": "later"}));
        assert_eq!(count(&p, "duplicate"), 1);
        assert_eq!(p.get("user:later", T0)["counts"], json!({}));

        // A good user with a non-object ids: counted once, user kept.
        send(
            &mut p,
            "click",
            &txid("c4", T0),
            T0,
            json!({"user": "u", "ids": null}),
        );
        assert_eq!(count(&p, "bad_identifier"), 10);
        assert_eq!(p.get("user:u", T0)["counts"], json!({"click": 1}));
        assert_eq!(count(&p, "applied"), 2);
    }
}
