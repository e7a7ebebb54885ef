//! A shard's buffer: the SQL behind intake, phases and subsetting.
//!
//! Each shard owns the schema `shard_<name>`, every table of it unlogged:
//! - `events`: append-only, one row per accepted event of a transaction not yet
//!   consolidated, range-partitioned by creation time, written with binary
//!   `COPY`. A partition is dropped whole once the impression phase has passed it.
//! - `txns`: one consolidated row per transaction that got a bid and an
//!   impression in time, partitioned by creation time, dropped whole once no
//!   target given `impression` needs it, after the clicked rows were copied out.
//! - `long`: the few clicked transactions still waiting for installs and
//!   custom events; rows are deleted when the last phase passes them.
//! - `early`: `(target, txid)` of each late observation an early target
//!   (SPEC 5) has emitted, so it is emitted once; forgotten with `long`.
//! - `sentinel`: one row; an empty sentinel after a restart means PostgreSQL
//!   crashed and emptied every unlogged table.
//!
//! By concern: `schema` (the tables, partitions and their row counts),
//! `copy` (intake: binary `COPY` of fresh events, merges of late ones),
//! `tiers` (consolidation, clicked rows kept, long rows forgotten) and
//! `emit` (observations). Every statement on the buffer is in one of them;
//! this module holds the names they share ([`Layout`]).

mod copy;
mod emit;
mod schema;
mod tiers;

pub use copy::{EventRow, MergeRow};
pub use schema::Partition;
pub use tiers::Consolidated;

/// Names and constants of one shard's buffer.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The shard's name.
    pub shard: String,
    /// Its schema, `shard_<name>`.
    pub schema: String,
    /// Columns of consolidated rows holding event times beyond the bid and
    /// impression: `click_ts`, `install_ts`, then one per custom type.
    pub event_columns: Vec<String>,
    /// The type name each of `event_columns` holds.
    pub event_types: Vec<String>,
    /// Clicks at most this long after creation put a transaction in the clicked population.
    pub click_window_ms: i64,
    /// The share of transactions the shard samples, stored with each observation.
    pub rate: f64,
    /// Buffer partitions skip the WAL (always, but for benchmarks comparing the two).
    pub unlogged: bool,
    /// Columns of `event_columns` that label an early target: indexed in
    /// `long` where set, for the sweeps' look for arrived late labels.
    pub early_columns: Vec<String>,
}

impl Layout {
    /// `custom_types` are validated type names; the shard name a validated identifier.
    pub fn new(shard: &str, custom_types: &[&str], click_window_ms: i64, rate: f64) -> Layout {
        let mut event_types = vec!["click".to_owned(), "install".to_owned()];
        event_types.extend(custom_types.iter().map(|t| t.to_string()));
        Layout {
            shard: shard.to_owned(),
            schema: format!("shard_{shard}"),
            event_columns: event_types.iter().map(|t| format!("{t}_ts")).collect(),
            event_types,
            click_window_ms,
            rate,
            unlogged: true,
            early_columns: Vec::new(),
        }
    }

    /// The index in `event_columns` of the column holding a type's earliest time.
    pub fn column(&self, type_name: &str) -> Option<usize> {
        self.event_types.iter().position(|t| t == type_name)
    }

    /// A table of the shard's schema, qualified: `shard_<name>.<table>`.
    fn t(&self, table: &str) -> String {
        format!("{}.{}", self.schema, table)
    }
}
