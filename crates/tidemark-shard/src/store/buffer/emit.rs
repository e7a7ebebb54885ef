//! Emission: a target's observations for a creation-time range inserted
//! into `tidemark.observations` in one statement, numbered in
//! `(created_at, txid)` order; and, for when the database refuses the set,
//! the population in that order and one transaction's observation at a time.

use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use super::Layout;
use crate::phases::TargetSql;
use tidemark_store::{PgTime, StoreError};

impl Layout {
    /// Emits one target's observations for creation times `(lo, hi]`, numbered
    /// from `next_seq`. `unclicked` is the current watermark below which only
    /// `long` holds rows. Returns `(rows, positives)`.
    pub async fn emit(
        &self,
        tx: &impl GenericClient,
        target: &TargetSql,
        lo: i64,
        hi: i64,
        unclicked: i64,
        next_seq: i64,
    ) -> Result<(i64, i64), StoreError> {
        self.emit_where(tx, target, lo, hi, unclicked, next_seq, None)
            .await
    }

    /// The population of a target for creation times `(lo, hi]` as
    /// `(txid, created_ms)` in emission order: for emitting row by row when
    /// the database refused the set.
    pub async fn population(
        &self,
        tx: &impl GenericClient,
        target: &TargetSql,
        lo: i64,
        hi: i64,
        unclicked: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let population = self.population_filter(target);
        let sql = format!(
            "SELECT txid, (extract(epoch FROM created_at) * 1000)::bigint FROM ({rows}) p
             {population} ORDER BY created_at, txid",
            rows = self.candidates("", ""),
        );
        Ok(tx
            .query(&sql, &[&PgTime(lo), &PgTime(hi), &PgTime(unclicked)])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Emits one transaction's observation of a target as number `seq`.
    /// Returns `(rows, positives)`, each 0 or 1.
    pub async fn emit_one(
        &self,
        tx: &impl GenericClient,
        target: &TargetSql,
        txid: &str,
        created_ms: i64,
        unclicked: i64,
        seq: i64,
    ) -> Result<(i64, i64), StoreError> {
        self.emit_where(
            tx,
            target,
            created_ms - 1,
            created_ms,
            unclicked,
            seq,
            Some(txid),
        )
        .await
    }

    /// The consolidated rows created in `($1, $2]`: from `txns` above the
    /// unclicked watermark `$3`, from `long` at or below it; columns `txid,
    /// created_at, pop_ts` (the click) and `extra`; `filter` is ANDed to both.
    fn candidates(&self, extra: &str, filter: &str) -> String {
        format!(
            "SELECT txid, created_at, click_ts AS pop_ts{extra} FROM {txns}
             WHERE created_at > $1 AND created_at <= $2 AND created_at > $3{filter}
             UNION ALL
             SELECT txid, created_at, click_ts{extra} FROM {long}
             WHERE created_at > $1 AND created_at <= $2 AND created_at <= $3{filter}",
            txns = self.t("txns"),
            long = self.t("long"),
        )
    }

    fn population_filter(&self, target: &TargetSql) -> String {
        if target.given_click {
            format!(
                "WHERE pop_ts IS NOT NULL AND pop_ts <= created_at + interval '{} milliseconds'",
                self.click_window_ms
            )
        } else {
            String::new()
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn emit_where(
        &self,
        tx: &impl GenericClient,
        target: &TargetSql,
        lo: i64,
        hi: i64,
        unclicked: i64,
        next_seq: i64,
        only: Option<&str>,
    ) -> Result<(i64, i64), StoreError> {
        let col = &self.event_columns[self.column(&target.event).expect("a buffered event type")];
        let population = self.population_filter(target);
        let only_txid = if only.is_some() { " AND txid = $8" } else { "" };
        let after = if target.after_ms > 0 {
            format!(
                " AND label_ts > created_at + interval '{} milliseconds'",
                target.after_ms
            )
        } else {
            String::new()
        };
        let sql = format!(
            "WITH p AS ({rows}), ins AS (
                 INSERT INTO tidemark.observations (shard, seq, target, txid, label, features, rate, created_at)
                 SELECT $4, $5 + row_number() OVER (ORDER BY created_at, txid) - 1, $6, txid,
                        CASE WHEN label_ts IS NOT NULL
                                  AND label_ts <= created_at + interval '{until} milliseconds'{after}
                             THEN 1 ELSE 0 END,
                        features, $7, created_at
                 FROM p {population}
                 RETURNING label
             )
             SELECT count(*), count(*) FILTER (WHERE label = 1) FROM ins",
            rows = self.candidates(&format!(", features, {col} AS label_ts"), only_txid),
            until = target.until_ms,
        );
        let (lo, hi, unclicked) = (PgTime(lo), PgTime(hi), PgTime(unclicked));
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &lo,
            &hi,
            &unclicked,
            &self.shard,
            &next_seq,
            &target.name,
            &self.rate,
        ];
        if let Some(txid) = &only {
            params.push(txid);
        }
        let r = tx.query_one(&sql, &params).await?;
        Ok((r.get(0), r.get(1)))
    }
}
