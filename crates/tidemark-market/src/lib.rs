//! The publishing side: a synthetic market that generates the events of RTB
//! transactions in event-time order, a ZeroMQ publisher that paces them onto
//! the wire with heartbeats (`tidemark publish`), and the XSUB/XPUB proxy
//! (`tidemark proxy`).
//!
//! Owns: event generation and publishing. Knows nothing of shards or
//! PostgreSQL; speaks only the wire contract of `tidemark-wire`.

#![warn(missing_docs)]

pub mod market;
pub mod persons;
pub mod proxy;
pub mod publisher;
pub mod truth;

pub use market::{Market, MarketConfig, Out, Zipf};
pub use persons::{true_person, Quality};
pub use publisher::{publish, PublishError, PublishOptions, PublishReport, Source};
pub use truth::Truth;

/// Wall time in milliseconds since the Unix epoch: where a market's event
/// time starts unless told otherwise.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
