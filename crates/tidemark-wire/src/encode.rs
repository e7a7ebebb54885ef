//! Encoding messages, for publishers (`tidemark publish`) and tests.

use std::fmt::Write;

use crate::Txid;

/// The topic frame of an event: `<type>-<txid>`.
pub fn topic(type_name: &str, txid: &Txid) -> String {
    let mut t = String::with_capacity(type_name.len() + 33);
    t.push_str(type_name);
    t.push('-');
    t.push_str(txid.as_str());
    t
}

/// Writes an event payload `{"type":..,"txid":..,"ts":..}` into `out`, followed by
/// `extra` (already-encoded `"key":value` pairs, may be empty), and closes the object.
/// `type_name` must be a valid type name (no characters JSON would escape).
pub fn event_payload(out: &mut String, type_name: &str, txid: &Txid, ts: i64, extra: &str) {
    out.clear();
    let _ = write!(out, r#"{{"type":"{type_name}","txid":"{txid}","ts":{ts}"#);
    if !extra.is_empty() {
        out.push(',');
        out.push_str(extra);
    }
    out.push('}');
}

/// A tick payload. `sent` pairs are `(<type>-<digit>, count)`.
pub fn tick_payload(publisher: &str, ts: i64, sent: &[(String, u64)]) -> String {
    let sent: serde_json::Map<String, serde_json::Value> = sent
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::from(*v)))
        .collect();
    serde_json::json!({"type": "tick", "publisher": publisher, "ts": ts, "sent": sent}).to_string()
}
