//! What the profile oracle's tests share: a setup with two counters, a
//! message sent as a publisher sends it, and the oracle's answers read back.

use serde_json::{json, Value};

use super::setup::DAY_MS;
pub(super) use super::setup::HOUR_MS as HOUR;
use super::{CounterSpec, Profiles, Setup};

/// A fixed moment: 2026-01-01T00:00:00Z.
pub(super) const T0: i64 = 1_767_225_600_000;

pub(super) fn txid(random: &str, created: i64) -> String {
    let random = format!("{random:0<20}");
    assert_eq!(random.len(), 20);
    format!("{random}{created:012x}")
}

pub(super) fn setup() -> Setup {
    Setup {
        counters: vec![
            CounterSpec {
                name: "clk_1h".to_string(),
                event: "click".to_string(),
                half_life_ms: HOUR,
            },
            CounterSpec {
                name: "ins_1d".to_string(),
                event: "install".to_string(),
                half_life_ms: DAY_MS,
            },
        ],
        ..Setup::default()
    }
}

/// Sends `{"type", "txid", "ts"}` plus the fields of `extra`, reference and
/// clock far enough that nothing is future or stale.
pub(super) fn send(p: &mut Profiles, kind: &str, tx: &str, ts: i64, extra: Value) {
    let mut body = json!({"type": kind, "txid": tx, "ts": ts});
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    let topic = format!("{kind}-{tx}");
    p.receive(
        topic.as_bytes(),
        body.to_string().as_bytes(),
        T0 + DAY_MS,
        None,
    );
}

pub(super) fn count(p: &Profiles, reason: &str) -> u64 {
    p.counts()[reason]
}

pub(super) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}
