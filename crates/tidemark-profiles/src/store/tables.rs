//! [`Connection`] and [`ProfileTables`] over PostgreSQL: a `tokio_postgres`
//! client and its transactions, each method one of this module's siblings'
//! statements.

use std::collections::HashMap;

use tidemark_store::StoreError;
use tokio_postgres::{Client, Transaction};

use super::Marking;
use crate::core::{Counts, IdRow, Merge, Placed, StoredId, StoredPerson, TrailRow};
use crate::tables::{Connection, ProfileTables};

impl Connection for Client {
    type Tx<'a> = Transaction<'a>;

    async fn begin(&mut self) -> Result<Transaction<'_>, StoreError> {
        Ok(self.transaction().await?)
    }

    fn is_closed(&self) -> bool {
        Client::is_closed(self)
    }

    async fn placed(&self, ids: &[&str]) -> Result<Placed, StoreError> {
        Ok(super::placed(self, ids)
            .await?
            .into_iter()
            .map(|(id, person, first_ts, blocklisted)| (id, (person, first_ts, blocklisted)))
            .collect())
    }

    async fn persons_of(&self, ids: &[&str]) -> Result<HashMap<String, i64>, StoreError> {
        Ok(super::persons_of(self, ids).await?.into_iter().collect())
    }
}

impl ProfileTables for Transaction<'_> {
    async fn take_marks(
        &self,
        pairs: &[(String, i16)],
        how: &mut Marking,
    ) -> Result<Option<Vec<bool>>, StoreError> {
        super::take_marks(self, pairs, how).await
    }

    async fn already_seen(&self, pairs: &[(String, i16)]) -> Result<Vec<bool>, StoreError> {
        super::already_seen(self, pairs).await
    }

    async fn load(&self, ids: &[&str]) -> Result<Vec<StoredId>, StoreError> {
        super::load(self, ids).await
    }

    async fn new_persons(&self, n: usize) -> Result<Vec<i64>, StoreError> {
        super::new_persons(self, n).await
    }

    async fn absorb(&self, absorbed: &[i64], into: &[i64]) -> Result<(), StoreError> {
        super::absorb(self, absorbed, into).await
    }

    async fn upsert_ids(&self, rows: &[IdRow]) -> Result<(), StoreError> {
        super::upsert_ids(self, rows).await
    }

    async fn upsert_persons(
        &self,
        persons: &[StoredPerson],
        counters: usize,
        types: usize,
    ) -> Result<(), StoreError> {
        super::upsert_persons(self, persons, counters, types).await
    }

    async fn log_merges(&self, merges: &[Merge]) -> Result<(), StoreError> {
        super::log_merges(self, merges).await
    }

    async fn insert_trail(&self, rows: &[TrailRow]) -> Result<(), StoreError> {
        super::insert_trail(self, rows).await
    }

    async fn insert_ids(&self, ids: &[&str], first_ts: &[i64]) -> Result<Vec<i64>, StoreError> {
        super::insert_ids(self, ids, first_ts).await
    }

    async fn lower_first_ts(&self, ids: &[&str], first_ts: &[i64]) -> Result<(), StoreError> {
        super::lower_first_ts(self, ids, first_ts).await
    }

    async fn add_counts(&self, row: i16, counts: &Counts) -> Result<(), StoreError> {
        super::add_counts(self, row, counts.iter().map(|(k, v)| (*k, *v))).await
    }

    async fn quarantine(
        &self,
        topic: &str,
        payload: &str,
        reason: &str,
        sqlstate: Option<&str>,
        max: i64,
    ) -> Result<bool, StoreError> {
        super::quarantine(self, topic, payload, reason, sqlstate, max).await
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(Transaction::commit(self).await?)
    }

    async fn rollback(self) -> Result<(), StoreError> {
        Ok(Transaction::rollback(self).await?)
    }
}
