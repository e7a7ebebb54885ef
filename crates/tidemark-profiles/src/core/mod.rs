//! The profile process's decisions (SPEC 11), without IO: what a batch
//! keeps, which of its events go to the link stage and which ride along,
//! which worker counts each of the rest, and what a link-stage transaction
//! or a worker's transaction writes.
//!
//! Owns: the plan's vocabulary ([`Event`] as read, [`StoredId`] and
//! [`StoredPerson`] as loaded,
//! [`IdRow`], [`Merge`] and [`TrailRow`] as written), the [`Layout`] of the
//! stored arrays, `batch` (judging a batch, splitting it between the link
//! stage and the workers, routing by person), `links` (a link-stage chunk:
//! links in arrival order, riders, the `max_ids` cap, refusals charged,
//! blocklisting, merges and masters), `work` (a worker's share:
//! first copies counted, persons folded, new identifiers, lowered first ts,
//! trail rows), `pace` (how many events the next transaction takes), and
//! `days` (which time partitions a table needs and which it can drop).
//! Each decision is a plain function over what the database
//! answered (first-copy marks, stored identifiers with their persons, fresh
//! person numbers) returning a *plan*: plain data that the executors
//! (`crate::links::apply`, `Worker::apply`, the coordinator) write with
//! the statements of [`crate::store`], in one transaction. They decide
//! nothing; this module runs no statement and knows no runtime, so each
//! decision is unit-tested here, and the whole pipeline is property-tested
//! against `tidemark-reference` over an in-memory database (`sim`), as the
//! shard's `phases::plan` decides what `Layout::sweep` runs.

mod batch;
pub mod days;
mod event;
mod links;
mod pace;
mod work;

use std::collections::BTreeMap;

use tidemark_person::{CounterSlot, Person};

pub use batch::{
    carried, groups, has_links, judge, primaries, reassemble, route, split, touched, unmoved,
    Placed, Touched,
};
pub use event::Event;
pub use links::{Caps, Entry, LinkPlan, LinkStage};
pub use pace::Pace;
pub use work::{Known, Share, Work};

/// Counts by reason (`applied`, `duplicate`, `merges`, ...), as added to
/// `tidemark.profile_counts`.
pub type Counts = BTreeMap<&'static str, i64>;

/// Where each configured type and counter lives in the stored arrays.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Per configured type (by index in `types`): its stored position.
    pub type_pos: Vec<i16>,
    /// Stored types in all (array length).
    pub types: usize,
    /// Per stored counter position - 1: the type position - 1 feeding it
    /// (`None` for a stored counter this run does not configure) and its half-life.
    pub counters: Vec<CounterSlot>,
    /// `1/rate` (SPEC 11).
    pub weight: f64,
}

impl Layout {
    /// Counts one event for a person (SPEC 11).
    pub fn count(&self, p: &mut Person, e: &Event) {
        let slot = self.type_pos[e.type_index] as usize - 1;
        p.count(&self.counters, slot, e.ts, self.weight);
    }

    /// A trail row: the event under the identifier it counted for.
    pub fn trail_row(&self, id: &str, e: &Event) -> TrailRow {
        TrailRow {
            id: id.to_owned(),
            ts: e.ts,
            type_pos: self.type_pos[e.type_index],
            txid: e.txid.as_str().to_owned(),
            ids: e
                .ids
                .sorted()
                .iter()
                .map(|i| i.as_str().to_owned())
                .collect(),
        }
    }
}

/// A person as stored: its number and its profile (arrays by position:
/// element i of each array is position i + 1).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredPerson {
    /// Its number.
    pub person: i64,
    /// What is known of it.
    pub profile: Person,
}

/// An identifier as stored, with its person.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredId {
    /// The identifier.
    pub id: String,
    /// Earliest `ts` of an event carrying it.
    pub first_ts: i64,
    /// Refusals charged to it.
    pub refusals: i64,
    /// Whether it is blocklisted.
    pub blocklisted: bool,
    /// Its person.
    pub person: StoredPerson,
}

/// An identifier row to write whole (new) or update (known).
#[derive(Debug, Clone, PartialEq)]
pub struct IdRow {
    /// The identifier.
    pub id: String,
    /// Its person.
    pub person: i64,
    /// Earliest `ts` of an event carrying it.
    pub first_ts: i64,
    /// Refusals charged to it.
    pub refusals: i64,
    /// Whether it is blocklisted (the time is set when it first becomes so).
    pub blocklisted: bool,
}

/// One merge, for `tidemark.profile_merges`.
#[derive(Debug, Clone, PartialEq)]
pub struct Merge {
    /// The causing event's `ts`.
    pub ts: i64,
    /// Its txid.
    pub txid: String,
    /// The surviving master.
    pub master: String,
    /// The absorbed person's master.
    pub absorbed: String,
}

/// One trail row: the event under the identifier it counted for.
#[derive(Debug, Clone, PartialEq)]
pub struct TrailRow {
    /// The identifier it counted for.
    pub id: String,
    /// Its `ts`.
    pub ts: i64,
    /// Its type's `profile_types` position (how the row stores it).
    pub type_pos: i16,
    /// Its txid.
    pub txid: String,
    /// Every identifier it carried, sorted.
    pub ids: Vec<String>,
}
