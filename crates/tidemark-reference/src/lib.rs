//! The oracle of the differential tests: what Tidemark must output, computed
//! from the messages sent, written from the contract alone
//! (`docs/contract.md`), sharing no code with the crates it checks
//! (tidemark-wire, tidemark-shard, tidemark-person, tidemark-profiles,
//! tidemark-reader).
//!
//! It owns two models, each written the slow and obvious way: a shard's
//! observations ([`expected`], SPEC 1-5 and 7, in the private module
//! `shard`, whose items are re-exported here) and a profile process's state
//! ([`profiles`], SPEC 11).

#![warn(missing_docs)]

mod names;
pub mod profiles;
mod shard;

pub use shard::{
    expected, parse_duration, shares, txid_created_ms, Config, Expected, Feature, Given, Kind,
    Sent, Target, Windows, MAX_PAYLOAD_BYTES,
};
