//! What the shard oracle's tests share: messages built as a publisher
//! sends them, and the oracle's answer read back.

use std::collections::BTreeMap;

use serde_json::json;

pub(super) use super::config::{HOUR, MINUTE};
use super::{expected, Config, Expected, Feature, Sent};

/// A fixed moment: 2026-01-01T00:00:00Z.
pub(super) const T0: i64 = 1_767_225_600_000;

pub(super) fn txid(random: &str, created: i64) -> String {
    let random = format!("{random:0<20}");
    assert_eq!(random.len(), 20);
    format!("{random}{created:012x}")
}

pub(super) fn raw(topic: &str, payload: &str) -> Sent {
    Sent {
        frames: vec![topic.as_bytes().to_vec(), payload.as_bytes().to_vec()],
        clock_at_least: None,
    }
}

pub(super) fn event(kind: &str, txid: &str, ts: i64) -> Sent {
    let payload = json!({"type": kind, "txid": txid, "ts": ts});
    raw(&format!("{kind}-{txid}"), &payload.to_string())
}

pub(super) fn bid(txid: &str, ts: i64, features: serde_json::Value) -> Sent {
    let payload = json!({"type": "bid", "txid": txid, "ts": ts, "features": features});
    raw(&format!("bid-{txid}"), &payload.to_string())
}

pub(super) fn tick(ts: i64) -> Sent {
    raw("tick", &json!({"publisher": "p", "ts": ts}).to_string())
}

pub(super) fn late(mut sent: Sent, clock: i64) -> Sent {
    sent.clock_at_least = Some(clock);
    sent
}

/// bid at creation with feature app=a, impression 1 s later.
pub(super) fn shown(tx: &str, created: i64) -> Vec<Sent> {
    vec![
        bid(tx, created, json!({"app": "a"})),
        event("impression", tx, created + 1_000),
    ]
}

pub(super) fn label(
    out: &BTreeMap<(String, String), Expected>,
    target: &str,
    tx: &str,
) -> Option<i16> {
    out.get(&(target.to_string(), tx.to_string()))
        .map(|e| e.label)
}

pub(super) fn run(config: &Config, sent: &[Sent]) -> BTreeMap<(String, String), Expected> {
    expected(config, sent, T0)
}

pub(super) fn app(value: &str) -> BTreeMap<String, Feature> {
    BTreeMap::from([("app".to_string(), Feature::Str(value.to_string()))])
}
