//! Profiles (SPEC 11) without IO: what the profile process computes and what
//! a bidder may recompute or check on its side.
//!
//! Owns: the decayed counter (forward decay, rescaled so no half-life over
//! any span overflows, exact in any arrival order, 16 bytes of state),
//! identifiers (`kind:value`, validated, compared bytewise) and an event's
//! identities, a person (counters and per-type count, first and last by
//! stored position, size, and the master rule, with exact counting and
//! merging: the code the profile process runs). Knows nothing of sockets,
//! databases, files or runtimes.

#![warn(missing_docs)]

mod counter;
mod identifier;
mod identity;
mod person;

pub use counter::Decayed;
pub use identifier::{BadIdentifier, Identifier};
pub use identity::Identities;
pub use person::{CounterSlot, Person, TypeStats};
