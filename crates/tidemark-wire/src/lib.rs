//! The wire contract (SPEC 1-3): transaction ids, event types, topics and payloads.
//!
//! Owns: txid generation and parsing, decoding and validating a received
//! message with a named reason for every rejection, encoding messages for
//! publishers, and what configuration files share: the duration syntax, and
//! TOML errors that name the key, its line and the nearest known key; and
//! instants as people write them (RFC 3339, with the UTC calendar behind it).
//! Knows nothing of sockets, databases or clocks: publishers and bidders can
//! link it without pulling in ZeroMQ or PostgreSQL.

#![warn(missing_docs)]

mod conf;
mod decode;
mod duration;
mod encode;
pub mod fuzz;
mod instant;
mod txid;
mod types;

pub use conf::{env_vars, parse_toml, parse_toml_env};
pub use decode::{
    Decoder, Event, Features, Identity, Message, Reject, Tick, MAX_FRAME, MAX_PAYLOAD, MAX_TOPIC,
};
pub use duration::{parse_duration, HumanDuration};
pub use encode::{event_payload, tick_payload, topic};
pub use instant::{format_instant, parse_instant, Civil};
pub use txid::{Txid, MAX_CREATED_MS, RANDOM_DIGITS, TXID_LEN};
pub use types::{BadTypeName, EventType, Types};
