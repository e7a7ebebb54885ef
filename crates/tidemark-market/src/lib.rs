//! The publishing side: a synthetic market that generates the events of RTB
//! transactions in event-time order, a ZeroMQ publisher that paces them onto
//! the wire with heartbeats (`tidemark publish`), and the XSUB/XPUB proxy
//! (`tidemark proxy`).
//!
//! The market's installs come after a delay that depends on the bid's app
//! and exchange, a mixture of exponentials whose preset (`Delays`, `default`
//! or the Criteo-like `criteo`, most installs after the short window) is the
//! market's; from a chosen event time a fifth of the apps may shift
//! (`Shift`: their install propensity or their delays). `delays` says the
//! model; `truth` carries every transaction's true probabilities under it.
//!
//! Owns: event generation and publishing. Knows nothing of shards; speaks
//! the wire contract of `tidemark-wire`, and reads profiles only as a bidder
//! does, through `tidemark-reader` (its synthetic bidder).

#![warn(missing_docs)]

pub mod delays;
pub mod market;
pub mod persons;
pub mod proxy;
pub mod publisher;
pub mod truth;

pub use delays::{Delays, Shift};
pub use market::{Market, MarketConfig, Out, Zipf};
pub use persons::{true_person, Quality};
pub use publisher::{publish, PublishError, PublishOptions, PublishReport, Source};
pub use tidemark_reader::ProfileRate;
pub use truth::Truth;

/// Wall time in milliseconds since the Unix epoch: where a market's event
/// time starts unless told otherwise.
pub use tidemark_metrics::wall_ms as now_ms;

/// Where a market's event time starts so that it ends near wall time (and
/// profiles read "now" afterwards): now minus its span, or minus its wall
/// duration times its speed; now if neither is known.
pub fn start_ending_now(
    span_ms: Option<i64>,
    duration: Option<std::time::Duration>,
    speed: f64,
) -> i64 {
    let lasts_ms = span_ms.or_else(|| duration.map(|d| (d.as_secs_f64() * 1000.0 * speed) as i64));
    now_ms() - lasts_ms.unwrap_or(0)
}
