//! Events as the property test and the core's unit tests make them: the
//! layout of three types and one counter, messages as published and as
//! intake hands them over.

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tidemark_person::{CounterSlot, Identities};
use tidemark_wire::Txid;

use crate::core::{Event, Layout};

/// 2026-01-01T00:00:00Z: every txid's creation time.
pub const T0: i64 = 1_767_225_600_000;

/// The half-life of the one counter.
pub const HOUR: i64 = 3_600_000;

/// The configured types, stored at positions 1, 2, 3.
pub const TYPES: [&str; 3] = ["impression", "click", "install"];

/// Types impression, click, install at positions 1-3; one counter, `clk`,
/// of clicks with a one-hour half-life; weight 1.
pub fn layout() -> Layout {
    Layout {
        type_pos: vec![1, 2, 3],
        types: 3,
        counters: vec![CounterSlot {
            type_slot: Some(1),
            half_life_ms: HOUR,
        }],
        weight: 1.0,
    }
}

/// The name of the type `layout` stores at `position`.
pub fn type_name(layout: &Layout, position: i16) -> &'static str {
    let i = layout.type_pos.iter().position(|p| *p == position);
    TYPES[i.expect("a configured type")]
}

/// One message as published: its type (index in [`TYPES`]), the random
/// part of its txid (created at [`T0`]), `ts`, and `user` and `ids` as sent.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Index in [`TYPES`].
    pub type_index: usize,
    /// The txid's random part.
    pub n: u128,
    /// Its `ts`.
    pub ts: i64,
    /// `user` as sent, if present.
    pub user: Option<Value>,
    /// `ids` as sent, if present.
    pub ids: Option<Value>,
    /// Its txid's creation time.
    pub created: i64,
    /// How far the clock moved on just before it was received (0: not at
    /// all; the clock starts at [`T0`] with the first move).
    pub tick: i64,
}

impl Msg {
    /// Its txid.
    pub fn txid(&self) -> Txid {
        Txid::new(self.n, self.created as u64)
    }

    /// The event as intake hands it over.
    pub fn event(&self) -> Event {
        let raw = |v: &Value| RawValue::from_string(v.to_string()).expect("JSON");
        let (user, ids) = (self.user.as_ref().map(raw), self.ids.as_ref().map(raw));
        let txid = self.txid();
        Event {
            type_index: self.type_index,
            txid,
            created: txid.created_ms() as i64,
            ts: self.ts,
            ids: Identities::read(user.as_deref(), ids.as_deref()),
            raw: self.wire().1.into(),
            seq: 0,
            accepted: None,
        }
    }

    /// Topic and payload, as published.
    pub fn wire(&self) -> (String, String) {
        let t = TYPES[self.type_index];
        let txid = self.txid();
        let mut body = json!({"type": t, "txid": txid.as_str(), "ts": self.ts});
        if let Some(u) = &self.user {
            body["user"] = u.clone();
        }
        if let Some(i) = &self.ids {
            body["ids"] = i.clone();
        }
        (format!("{t}-{}", txid.as_str()), body.to_string())
    }
}

/// An event of type `type_index` (in [`TYPES`]), txid `n`, at `ts`, with a
/// `user` (if given) and `ids` (kind, value).
pub fn ev(type_index: usize, n: u128, ts: i64, user: Option<&str>, ids: &[(&str, &str)]) -> Event {
    let ids = (!ids.is_empty()).then(|| {
        let map: serde_json::Map<String, Value> =
            ids.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        Value::Object(map)
    });
    Msg {
        type_index,
        n,
        ts,
        user: user.map(|u| json!(u)),
        ids,
        created: T0,
        tick: 0,
    }
    .event()
}

/// `e` with its txid's creation time as `at`.
pub fn created(mut e: Event, at: i64) -> Event {
    e.created = at;
    e
}
