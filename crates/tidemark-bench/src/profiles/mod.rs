//! Issue 10's figures: profile ingest (Zipf-skewed persons into logged
//! tables, sustained), reads through `tidemark-reader` idle and under load,
//! and trail reads over a large trail table.
//!
//! One module a subcommand: `ingest` (`profile-ingest`), `read`
//! (`profile-read`), `trail` (`trail-read`). Beside them what they, `soak`
//! and `links` share: `process` (the profile process as benchmarked and the
//! publisher feeding it), `xacts` (its transactions as `pg_stat_activity`
//! shows them), `trail_table` (a large trail table, filled and packed).

mod ingest;
mod process;
mod read;
mod trail;
mod trail_table;
mod xacts;

pub use ingest::ingest;
pub(crate) use process::{publisher, spawn_profiles, Offer};
pub use read::read_bench;
pub use trail::trail_bench;
pub use xacts::Xacts;

pub(crate) use crate::store::applied;
