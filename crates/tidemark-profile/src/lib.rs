//! Profiles (SPEC 11) without IO: what the profile process computes and what
//! a bidder may recompute or check on its side.
//!
//! Owns: the decayed counter (forward decay, rescaled so no half-life over
//! any span overflows, exact in any arrival order, 16 bytes of state),
//! identifiers (`kind:value`, validated, compared bytewise), a person
//! (identifiers with their first `ts`, counters, counts, first and last per
//! type, and the master rule), first-copy-wins deduplication, and the profile
//! process's configuration. Knows nothing of sockets, databases or runtimes.

#![warn(missing_docs)]

mod config;
mod counter;
mod dedup;
mod identifier;
mod identity;
mod person;

pub use config::{Config, ConfigError, CounterDef};
pub use counter::Decayed;
pub use dedup::{Dedup, Verdict};
pub use identifier::{BadIdentifier, Identifier};
pub use identity::Identities;
pub use person::{Person, TypeStats};
