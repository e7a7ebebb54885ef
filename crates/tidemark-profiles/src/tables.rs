//! The seam between the executors and the profile tables: the statements
//! one link-stage or worker transaction runs ([`ProfileTables`]), and the
//! connection that begins them and answers the coordinator's look-ups
//! ([`Connection`]).
//!
//! PostgreSQL implements both (`store::tables`, over `tokio_postgres`); the
//! property test's in-memory database does too (`crate::sim`), so the test
//! drives the very link stage, workers and coordinator pipeline that run in
//! production, and only the statements differ.

use std::collections::HashMap;

use tidemark_store::StoreError;

use crate::core::{Counts, IdRow, Merge, Placed, StoredId, StoredPerson, TrailRow};
use crate::store::Marking;

/// One of the process's connections to the profile tables.
pub(crate) trait Connection {
    /// A transaction on it.
    type Tx<'a>: ProfileTables
    where
        Self: 'a;

    /// Begins a transaction.
    async fn begin(&mut self) -> Result<Self::Tx<'_>, StoreError>;

    /// Whether the connection is gone (the server closed it, or it was cut).
    fn is_closed(&self) -> bool;

    /// Where `ids` sit: `(person, first ts, blocklisted)` of those stored.
    async fn placed(&self, ids: &[&str]) -> Result<Placed, StoreError>;

    /// The persons of the stored identifiers among `ids`.
    async fn persons_of(&self, ids: &[&str]) -> Result<HashMap<String, i64>, StoreError>;
}

/// The statements of one transaction on the profile tables (what each
/// writes is `store`'s to say); nothing is kept unless [`Self::commit`]
/// returns `Ok`.
pub(crate) trait ProfileTables {
    /// Takes the first-copy marks of `(seen key, type position)` pairs, as
    /// the transaction's first statement; per pair, whether this took it.
    /// `None`: a mark was taken already and the transaction is spoilt (roll
    /// it back and begin again; `how` now takes them carefully).
    async fn take_marks(
        &self,
        pairs: &[(String, i16)],
        how: &mut Marking,
    ) -> Result<Option<Vec<bool>>, StoreError>;

    /// Which pairs a first copy already took, taking none.
    async fn already_seen(&self, pairs: &[(String, i16)]) -> Result<Vec<bool>, StoreError>;

    /// The stored identifiers among `ids`, with their persons.
    async fn load(&self, ids: &[&str]) -> Result<Vec<StoredId>, StoreError>;

    /// `n` fresh person numbers.
    async fn new_persons(&self, n: usize) -> Result<Vec<i64>, StoreError>;

    /// Moves every identifier of each `absorbed[i]` to `into[i]`, and
    /// deletes the absorbed persons.
    async fn absorb(&self, absorbed: &[i64], into: &[i64]) -> Result<(), StoreError>;

    /// Writes identifier rows whole (blocklisted stays so).
    async fn upsert_ids(&self, rows: &[IdRow]) -> Result<(), StoreError>;

    /// Writes persons whole; their arrays have the layout's lengths.
    async fn upsert_persons(
        &self,
        persons: &[StoredPerson],
        counters: usize,
        types: usize,
    ) -> Result<(), StoreError>;

    /// Appends to the merge log.
    async fn log_merges(&self, merges: &[Merge]) -> Result<(), StoreError>;

    /// Appends trail entries.
    async fn insert_trail(&self, rows: &[TrailRow]) -> Result<(), StoreError>;

    /// Inserts new identifiers, each a new person; returns the persons.
    async fn insert_ids(&self, ids: &[&str], first_ts: &[i64]) -> Result<Vec<i64>, StoreError>;

    /// Lowers identifiers' first ts.
    async fn lower_first_ts(&self, ids: &[&str], first_ts: &[i64]) -> Result<(), StoreError>;

    /// Adds to the counts of `row` (a worker, or the link stage), by reason.
    async fn add_counts(&self, row: i16, counts: &Counts) -> Result<(), StoreError>;

    /// Keeps an event refused on its own unless the quarantine holds `max`
    /// rows; returns whether it was kept.
    async fn quarantine(
        &self,
        topic: &str,
        payload: &str,
        reason: &str,
        sqlstate: Option<&str>,
        max: i64,
    ) -> Result<bool, StoreError>;

    /// Commits.
    async fn commit(self) -> Result<(), StoreError>;

    /// Rolls back.
    async fn rollback(self) -> Result<(), StoreError>;
}
