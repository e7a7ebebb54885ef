//! The expected state of a profile process (SPEC 11), computed from the
//! messages it received, written from the contract alone (`docs/contract.md`), sharing no code with
//! tidemark-person, tidemark-profiles or tidemark-reader.
//!
//! It is the oracle of the profile differential tests, so it is written the
//! slow and obvious way: every message is validated with `serde_json::Value`,
//! every event counted is kept whole in one list, persons are plain
//! `BTreeSet`s of identifiers, masters and counters are computed from scratch
//! at query time (counters naively, one `f64` term per event).
//!
//! Its parts: `setup` (the configuration), `wire` (what is received, what
//! is rejected, the identifiers an event carries), `state` (what the process
//! knows), `receive` (one message, its checks in order), `links` (persons,
//! merges, the cap and the blocklist), `read` (`profile get`, `trail`).
//!
//! # Readings of SPEC 11 (where it leaves room, this module decides)
//!
//! * **Order of checks** for a received message: wire (SPEC 1-3), future
//!   (txid creation time or `ts` more than `max_future` ahead of the
//!   reference), stale (txid creation time `< clock - dedup` of its type), duplicate
//!   (the (type, txid) was already taken), identifiers. Rejected, future and
//!   stale copies do not take their (type, txid); a first copy left without
//!   identifiers does (it was "the event"; later copies are duplicates).
//! * **Receiving**: a message is received when its topic starts with
//!   `<type>-<prefix>` for a type in `types` (not `tick`) and one of the
//!   process's prefixes (any, when there are none), as ZeroMQ prefix matching
//!   does; others are silently not received (not counted). A received type
//!   that is neither built-in nor a configured custom type is rejected. Only
//!   `type`, `txid`, `ts`, `user` and `ids` are used; a bid's `features` and
//!   `price` are not checked.
//! * **Too many**: an event (within `max_future`) carrying more than
//!   `max_ids_per_event` identifiers as sent (a present `user`, each key of
//!   an `ids` object, an `ids` of another kind as one) is counted
//!   `too_many_ids` and ignored whole, before `stale` and `duplicate`.
//! * **Identifiers**: a present `user` that is not a string (including `null`)
//!   is one bad identifier; a present `ids` that is not an object (including
//!   `null`) is one bad identifier; each bad entry of `ids` is one.
//! * **Link order**: the event's link list is `L = [user, ids sorted by
//!   kind]` (sorted by *kind*, which is not the same as sorting the full
//!   identifiers: `a1:x < a:x` bytewise, yet kind `a < a1`). Links form a
//!   star: step `i = 1..len(L)` links `L[i]` to the *anchor*, the first
//!   identifier of `L` that is not blocklisted at that moment; the step is
//!   skipped when `L[i]` is blocklisted or the anchor is not before `L[i]` in
//!   `L`. With no blocklisting that is `L[0]-L[1]`, `L[0]-L[2]`, ...; a
//!   blocklisted identifier links nothing but the others still link together.
//! * **Refusal**: a link between two distinct persons of sizes `a` and `b` is
//!   refused when `a + b > max_ids`; each refused step counts one
//!   `links_refused`. "The person at the cap" is the larger of the two (both
//!   when they are the same size). The refusal is charged (one refusal each)
//!   to every identifier of the event (blocklisted or not) that is in that
//!   person at that moment, at most once per (identifier, other person)
//!   *within one event*. An identifier whose refusals exceed
//!   `blocklist_after` is blocklisted at once (later steps of the same event
//!   see it); its refusals keep counting if it is charged again.
//! * **Merges**: a merge joins the step's person into the anchor's, which
//!   stays the same person, however much it grows, for the rest of the
//!   event: two steps refused against it charge an identifier once.
//! * **Persons**: every identifier carried by an accepted event exists
//!   (a singleton person at first), whether or not its links were refused.
//!   Its first ts is the smallest `ts` of the accepted events carrying it.
//! * **Counted for**: the person holding `user:<value>` when the event has a
//!   good `user`, else the one holding its bytewise-smallest identifier, once
//!   all its link steps are done.

#[cfg(test)]
mod fixtures;
mod links;
mod read;
mod receive;
mod setup;
mod state;
mod wire;

pub use setup::{CounterSpec, Setup};
pub use state::Profiles;
