//! The expected observations of a shard, computed from the messages sent.
//!
//! This module owns one thing: given a shard's configuration and the
//! messages a single publisher sent to it, in order, the set of observations
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
//!
//! Its parts, in the order a message meets them: `txid` (transaction ids and
//! prefixes), `config` (SPEC 7), `message` (one message's checks),
//! `intake` (the `max_future` door and the copies kept per transaction),
//! `labels` (populations and labels, [`expected`]), `early` (what an
//! early-feedback target emits after its provisional row, SPEC 5 v1.3).

mod config;
mod early;
#[cfg(test)]
mod fixtures;
mod intake;
mod labels;
mod message;
mod txid;

pub use config::{parse_duration, Config, Given, Target, Windows};
pub use labels::{expected, Expected, Kind};
pub use message::{Feature, Sent, MAX_PAYLOAD_BYTES};
pub use txid::{shares, txid_created_ms};
