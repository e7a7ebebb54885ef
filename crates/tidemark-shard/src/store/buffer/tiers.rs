//! Rows moving between the tiers as the phases pass: fresh events
//! consolidated into `txns` at the impression phase, clicked transactions
//! kept in `long` before their `txns` partition is dropped, and `long` rows
//! forgotten once no phase needs them.

use std::fmt::Write as _;

use tokio_postgres::GenericClient;

use super::Layout;
use tidemark_store::{PgTime, StoreError};

/// Counts from consolidating a creation-time range at the impression phase.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Consolidated {
    /// Transactions consolidated.
    pub transactions: i64,
    /// Of them, kept: a bid and an impression in time.
    pub kept: i64,
    /// Without a bid.
    pub orphans: i64,
    /// With a bid but no impression.
    pub unimpressed: i64,
    /// Duplicate events folded away.
    pub duplicates: i64,
}

impl Layout {
    /// Impression phase for creation times `(lo, hi]`: consolidates the fresh
    /// events of each transaction; keeps (in `txns`) those with a bid and an
    /// impression. The earliest copy of each type wins, the first received on a tie.
    pub async fn consolidate(
        &self,
        tx: &impl GenericClient,
        lo: i64,
        hi: i64,
    ) -> Result<Consolidated, StoreError> {
        let mut aggs = String::new();
        let mut cols = String::new();
        // Duplicates: rows beyond the first of each type present. Counted with
        // FILTERs rather than count(DISTINCT), which would force a sort.
        let mut present = String::from("(count(*) FILTER (WHERE type = 'bid') > 0)::int + (count(*) FILTER (WHERE type = 'impression') > 0)::int");
        for (col, ty) in self.event_columns.iter().zip(&self.event_types) {
            let _ = write!(aggs, ", min(ts) FILTER (WHERE type = '{ty}') AS {col}");
            let _ = write!(cols, ", {col}");
            let _ = write!(
                present,
                " + (count(*) FILTER (WHERE type = '{ty}') > 0)::int"
            );
        }
        let first = |what: &str, ty: &str| {
            format!("(array_agg({what} ORDER BY ts, arrival) FILTER (WHERE type = '{ty}'))[1]")
        };
        let sql = format!(
            "WITH g AS (
                 SELECT txid, created_at,
                        {features} AS features, min(ts) FILTER (WHERE type = 'bid') AS bid_ts,
                        {bid_price} AS bid_price, {uid} AS uid,
                        min(ts) FILTER (WHERE type = 'impression') AS impression_ts,
                        {imp_price} AS impression_price
                        {aggs},
                        count(*) - ({present}) AS dups
                 FROM {events}
                 WHERE created_at > $1 AND created_at <= $2
                 GROUP BY txid, created_at
             ), ins AS (
                 INSERT INTO {txns} (txid, created_at, features, bid_ts, bid_price, uid,
                                     impression_ts, impression_price {cols})
                 SELECT txid, created_at, features, bid_ts, bid_price, uid,
                        impression_ts, impression_price {cols}
                 FROM g WHERE bid_ts IS NOT NULL AND impression_ts IS NOT NULL
                 RETURNING 1
             )
             SELECT count(*), (SELECT count(*) FROM ins),
                    count(*) FILTER (WHERE bid_ts IS NULL),
                    count(*) FILTER (WHERE bid_ts IS NOT NULL AND impression_ts IS NULL),
                    coalesce(sum(dups), 0)::bigint
             FROM g",
            features = first("features", "bid"),
            bid_price = first("price", "bid"),
            uid = first("uid", "bid"),
            imp_price = first("price", "impression"),
            events = self.t("events"),
            txns = self.t("txns"),
        );
        let r = tx.query_one(&sql, &[&PgTime(lo), &PgTime(hi)]).await?;
        Ok(Consolidated {
            transactions: r.get(0),
            kept: r.get(1),
            orphans: r.get(2),
            unimpressed: r.get(3),
            duplicates: r.get(4),
        })
    }

    /// Copies transactions created in `(lo, hi]` that were clicked in time to
    /// `long`, before their `txns` partition is dropped. Returns how many.
    pub async fn keep_clicked(
        &self,
        tx: &impl GenericClient,
        lo: i64,
        hi: i64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "INSERT INTO {long} SELECT * FROM {txns}
             WHERE created_at > $1 AND created_at <= $2
               AND click_ts IS NOT NULL AND click_ts <= created_at + interval '{} milliseconds'",
            self.click_window_ms,
            long = self.t("long"),
            txns = self.t("txns"),
        );
        Ok(tx.execute(&sql, &[&PgTime(lo), &PgTime(hi)]).await?)
    }

    /// Forgets long-wait transactions created at or before `hi`, and their
    /// early targets' late rows: no phase needs them. Returns the transactions.
    pub async fn forget(&self, tx: &impl GenericClient, hi: i64) -> Result<u64, StoreError> {
        tx.execute(
            &format!("DELETE FROM {} WHERE created_at <= $1", self.t("early")),
            &[&PgTime(hi)],
        )
        .await?;
        Ok(tx
            .execute(
                &format!("DELETE FROM {} WHERE created_at <= $1", self.t("long")),
                &[&PgTime(hi)],
            )
            .await?)
    }
}
