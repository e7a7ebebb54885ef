//! The profile tables (SPEC 11, `sql/V0007__profiles.sql`): the run lock,
//! definitions, partitions (marks by type and hour or day, trails by UTC
//! day), and the statements the link stage and a worker run inside each of
//! their transactions, writing the rows
//! `core`'s plans decide ([`IdRow`], [`StoredPerson`], [`Merge`],
//! [`TrailRow`], re-exported here).
//!
//! Logged tables and synchronous commits: what a commit returned for is on
//! disk. Partitions are created and dropped only between batches, by the one
//! connection that holds the lock, since DDL on a partitioned table waits for
//! every writer.

mod counts;
mod lock;
mod marks;
mod packing;
mod partitions;
mod persons;
mod tables;
mod trails;

pub use counts::{add_counts, counts, quarantine};
pub use lock::{
    add_counter, add_type, clock_of, lock_holder, register, rejoin, save_status, try_lock, Saved,
};
pub use marks::{already_seen, record_seen, seen_key, take_marks, Marking, CAREFUL_BATCHES};
pub use packing::{pack_trail, packed_parts, tidy_trail};
pub use partitions::{create_partition, drop_partition, partitions, Daily};
pub use persons::{
    absorb, identifiers, insert_ids, load, log_merges, lower_first_ts, new_persons, persons_of,
    placed, upsert_ids, upsert_persons,
};
pub use trails::insert_trail;

pub use crate::core::days::DAY_MS;
pub use crate::core::{IdRow, Merge, StoredId, StoredPerson, TrailRow};

use tokio_postgres::Client;

use tidemark_store::StoreError;

/// Opens one of the process's connections, named for `pg_stat_activity`.
/// Parallel query is off in it: ingest is parallel across connections
/// already, and a lookup's parallel workers took the CPU of transactions
/// holding row locks (worker transactions p99 71-87 ms with, 48-50 ms
/// without; docs/benchmarks/profiles.md, part eight). Random reads are priced as
/// the cached, SSD-backed reads they are (`random_page_cost` 1.1, not the
/// spinning disks' 4): at the default the planner answered a batch's
/// lookup of 15,000 identifiers with a scan of the whole identifier table,
/// which grows with it (141 ms at 1.36M identifiers, against 49 ms through
/// the index; part ten).
pub async fn connect(url: &str, name: &str) -> Result<Client, StoreError> {
    let c = tidemark_store::connect_as(url, name).await?;
    c.batch_execute(&format!(
        "SET max_parallel_workers_per_gather = 0; SET random_page_cost = 1.1; {}",
        tidemark_store::WRITER_SESSION
    ))
    .await?;
    Ok(c)
}

/// A connection for packing: its waits for locks (and for older snapshots,
/// `REINDEX CONCURRENTLY`'s) end after [`tidemark_store::DDL_LOCK_TIMEOUT`],
/// to be tried again later, and its server session ends within a second of
/// the connection closing (a process stopped or killed mid-statement).
pub async fn packer(url: &str, name: &str) -> Result<Client, StoreError> {
    let c = connect(url, name).await?;
    c.batch_execute(&format!(
        "SET lock_timeout = '{}'; SET client_connection_check_interval = '1s'",
        tidemark_store::DDL_LOCK_TIMEOUT
    ))
    .await?;
    Ok(c)
}
