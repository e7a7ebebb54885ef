//! Emission: a target's observations for a creation-time range inserted
//! into `tidemark.observations` in one statement, numbered in
//! `(created_at, txid)` order; and, for when the database refuses the set,
//! the selection in that order and one transaction's observation at a time.
//!
//! An early target (SPEC 5) emits in three steps ([`Emission`]): its
//! provisional rows, its late rows (each recorded in `early` in the same
//! statement, so it is emitted once), and at its window's end the final
//! rows of the members that have no late row.

use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use super::Layout;
use crate::phases::{Emission, TargetSql};
use tidemark_store::{PgTime, StoreError};

impl Layout {
    /// Emits one target's observations of one kind for creation times
    /// `(lo, hi]`, numbered from `next_seq`, stamped with the sweep's
    /// `clock`. `unclicked` is the current watermark below which only `long`
    /// holds rows. Returns `(rows, positives)`.
    pub async fn emit(
        &self,
        tx: &impl GenericClient,
        (target, emission): (&TargetSql, Emission),
        (lo, hi, unclicked): (i64, i64, i64),
        (next_seq, clock): (i64, i64),
    ) -> Result<(i64, i64), StoreError> {
        self.emit_where(
            tx,
            (target, emission),
            (lo, hi, unclicked),
            (next_seq, clock),
            None,
        )
        .await
    }

    /// The transactions an emission selects for creation times `(lo, hi]` as
    /// `(txid, created_ms)` in emission order: for emitting row by row when
    /// the database refused the set.
    pub async fn selection(
        &self,
        tx: &impl GenericClient,
        (target, emission): (&TargetSql, Emission),
        lo: i64,
        hi: i64,
        unclicked: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let sql = format!(
            "SELECT txid, (extract(epoch FROM created_at) * 1000)::bigint, $4::text FROM ({rows}) p
             WHERE {selected} ORDER BY created_at, txid",
            rows = self.candidates(&self.label_column(target), ""),
            selected = self.selected(target, emission, "$4"),
        );
        Ok(tx
            .query(
                &sql,
                &[&PgTime(lo), &PgTime(hi), &PgTime(unclicked), &target.name],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Emits one transaction's observation of one kind as number `seq`.
    /// Returns `(rows, positives)`, each 0 or 1.
    pub async fn emit_one(
        &self,
        tx: &impl GenericClient,
        (target, emission): (&TargetSql, Emission),
        (txid, created_ms): (&str, i64),
        unclicked: i64,
        (seq, clock): (i64, i64),
    ) -> Result<(i64, i64), StoreError> {
        self.emit_where(
            tx,
            (target, emission),
            (created_ms - 1, created_ms, unclicked),
            (seq, clock),
            Some(txid),
        )
        .await
    }

    /// Records that an early target's transaction needs no more rows: its
    /// late row was refused by the database and set aside, so neither a
    /// later sweep nor its window's end may emit for it again.
    pub async fn settle_early(
        &self,
        tx: &impl GenericClient,
        target: &str,
        (txid, created_ms): (&str, i64),
    ) -> Result<(), StoreError> {
        tx.execute(
            &format!(
                "INSERT INTO {} (target, txid, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                self.t("early")
            ),
            &[&target, &txid, &PgTime(created_ms)],
        )
        .await?;
        Ok(())
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

    /// `, <event column> AS label_ts`: the earliest event of the target's type.
    fn label_column(&self, target: &TargetSql) -> String {
        let col = &self.event_columns[self.column(&target.event).expect("a buffered event type")];
        format!(", {col} AS label_ts")
    }

    /// The condition a candidate row `p` meets to be emitted: in the
    /// target's population, and for an early target's steps, with or
    /// without a qualifying event and a late row. `name` is the parameter
    /// holding the target's name.
    fn selected(&self, target: &TargetSql, emission: Emission, name: &str) -> String {
        let mut all = vec!["true".to_owned()];
        if target.given_click {
            all.push(format!(
                "pop_ts IS NOT NULL AND pop_ts <= created_at + interval '{} milliseconds'",
                self.click_window_ms
            ));
        }
        let settled = format!(
            "EXISTS (SELECT 1 FROM {early} e WHERE e.target = {name} AND e.txid = p.txid)",
            early = self.t("early")
        );
        match emission {
            Emission::Final | Emission::Provisional => {}
            Emission::Late => {
                all.push(labelled(target));
                all.push(format!("NOT {settled}"));
            }
            Emission::FinalZero => {
                all.push(format!("NOT ({})", labelled(target)));
                all.push(format!("NOT {settled}"));
            }
        }
        all.join(" AND ")
    }

    async fn emit_where(
        &self,
        tx: &impl GenericClient,
        (target, emission): (&TargetSql, Emission),
        (lo, hi, unclicked): (i64, i64, i64),
        (next_seq, clock): (i64, i64),
        only: Option<&str>,
    ) -> Result<(i64, i64), StoreError> {
        let only_txid = if only.is_some() { " AND txid = $9" } else { "" };
        let (label, kind, delay) = match emission {
            Emission::Final => (
                format!("CASE WHEN {} THEN 1 ELSE 0 END", labelled(target)),
                "final",
                "NULL::bigint",
            ),
            Emission::Provisional => ("0".into(), "provisional", "NULL::bigint"),
            Emission::Late => (
                "1".into(),
                "late",
                "(extract(epoch FROM label_ts - created_at) * 1000)::bigint",
            ),
            Emission::FinalZero => ("0".into(), "final", "NULL::bigint"),
        };
        // Late rows are recorded in the same statement: emitted once.
        let settle = if emission == Emission::Late {
            format!(
                ", settled AS (INSERT INTO {early} (target, txid, created_at)
                               SELECT $6, txid, created_at FROM ins)",
                early = self.t("early")
            )
        } else {
            String::new()
        };
        let sql = format!(
            "WITH p AS ({rows}), ins AS (
                 INSERT INTO tidemark.observations
                     (shard, seq, target, txid, label, features, rate, created_at, kind, delay_ms,
                      clock_ms)
                 SELECT $4, $5 + row_number() OVER (ORDER BY created_at, txid) - 1, $6, txid,
                        {label}, features, $7, created_at, '{kind}', {delay}, $8
                 FROM p WHERE {selected}
                 RETURNING txid, created_at, label
             ){settle}
             SELECT count(*), count(*) FILTER (WHERE label = 1) FROM ins",
            rows = self.candidates(
                &format!(", features{}", self.label_column(target)),
                only_txid
            ),
            selected = self.selected(target, emission, "$6"),
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
            &clock,
        ];
        if let Some(txid) = &only {
            params.push(txid);
        }
        let r = tx.query_one(&sql, &params).await?;
        Ok((r.get(0), r.get(1)))
    }
}

/// The target's label-1 condition on a candidate's `label_ts`: its
/// earliest event of the type falls in `(after, until]` after creation.
fn labelled(target: &TargetSql) -> String {
    let after = if target.after_ms > 0 {
        format!(
            " AND label_ts > created_at + interval '{} milliseconds'",
            target.after_ms
        )
    } else {
        String::new()
    };
    format!(
        "label_ts IS NOT NULL AND label_ts <= created_at + interval '{} milliseconds'{after}",
        target.until_ms
    )
}
