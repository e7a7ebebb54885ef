//! The buffer's tables: the schema and its tables made (and widened for
//! new custom types), the crash sentinel, the partitions of `events` and
//! `txns` listed, created and dropped, and how many rows each tier holds.
//! Partition bounds are instants printed by `tidemark_wire::format_instant`
//! (RFC 3339), quoted here as SQL literals.

use std::fmt::Write as _;

use tokio_postgres::{Client, GenericClient};

use super::Layout;
use tidemark_store::StoreError;
use tidemark_wire::format_instant;

/// A partition of `events` or `txns`: its table name and creation-time range `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Partition {
    /// End of the creation-time range, exclusive, ms.
    pub to_ms: i64,
    /// Start of the creation-time range, inclusive, ms.
    pub from_ms: i64,
    /// The partition's table name.
    pub table: String,
}

impl Layout {
    /// Creates the schema and tables if missing; adds columns for new custom types.
    pub async fn ensure_schema(&self, c: &Client) -> Result<(), StoreError> {
        let cols: String = self
            .event_columns
            .iter()
            .map(|c| format!(", {c} timestamptz"))
            .collect();
        let (s, events, txns, long, sentinel, early) = (
            &self.schema,
            self.t("events"),
            self.t("txns"),
            self.t("long"),
            self.t("sentinel"),
            self.t("early"),
        );
        let mut sql = format!(
            "CREATE SCHEMA IF NOT EXISTS {s};
             CREATE TABLE IF NOT EXISTS {events} (
                 txid text NOT NULL, created_at timestamptz NOT NULL, type text NOT NULL,
                 ts timestamptz NOT NULL, arrival bigint NOT NULL,
                 features jsonb, price double precision, uid text
             ) PARTITION BY RANGE (created_at);
             CREATE TABLE IF NOT EXISTS {txns} (
                 txid text NOT NULL, created_at timestamptz NOT NULL,
                 features jsonb NOT NULL, bid_ts timestamptz NOT NULL, bid_price double precision,
                 uid text, impression_ts timestamptz NOT NULL, impression_price double precision
                 {cols},
                 PRIMARY KEY (txid, created_at)
             ) PARTITION BY RANGE (created_at);
             CREATE UNLOGGED TABLE IF NOT EXISTS {long} (
                 txid text NOT NULL, created_at timestamptz NOT NULL,
                 features jsonb NOT NULL, bid_ts timestamptz NOT NULL, bid_price double precision,
                 uid text, impression_ts timestamptz NOT NULL, impression_price double precision
                 {cols},
                 PRIMARY KEY (txid, created_at)
             ) WITH (autovacuum_vacuum_scale_factor = 0.01);
             CREATE INDEX IF NOT EXISTS long_created ON {long} (created_at);
             CREATE UNLOGGED TABLE IF NOT EXISTS {sentinel} (alive boolean PRIMARY KEY);
             CREATE UNLOGGED TABLE IF NOT EXISTS {early} (
                 target text NOT NULL, txid text NOT NULL, created_at timestamptz NOT NULL,
                 PRIMARY KEY (target, txid)
             );
             CREATE INDEX IF NOT EXISTS early_created ON {early} (created_at);"
        );
        // Custom types added to the configuration after the tables were made.
        for col in &self.event_columns {
            for t in [&txns, &long] {
                let _ = write!(
                    sql,
                    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {col} timestamptz;"
                );
            }
        }
        // Early targets look for arrived labels every sweep: among the few
        // long rows that have such an event, not all of them.
        for col in &self.early_columns {
            let _ = write!(
                sql,
                "CREATE INDEX IF NOT EXISTS long_{col} ON {long} (created_at) WHERE {col} IS NOT NULL;"
            );
        }
        c.batch_execute(&sql).await?;
        Ok(())
    }

    /// Whether the sentinel row is there; inserts it. `false` on a shard seen
    /// before means its unlogged tables were emptied by a crash.
    pub async fn check_sentinel(&self, c: &impl GenericClient) -> Result<bool, StoreError> {
        let n = c
            .execute(
                &format!(
                    "INSERT INTO {} VALUES (true) ON CONFLICT DO NOTHING",
                    self.t("sentinel")
                ),
                &[],
            )
            .await?;
        Ok(n == 0)
    }

    /// Rows per tier (`events`: until the impression sweep; `txns`:
    /// impressed, until the click phases; `long`: clicked, until the last),
    /// as the statistics collector last estimated them: a catalog read,
    /// cheap however large the buffer.
    pub async fn tier_rows(&self, c: &Client) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = c
            .query(
                "SELECT CASE WHEN relname LIKE 'events%' THEN 'events'
                             WHEN relname LIKE 'txns%' THEN 'txns' ELSE 'long' END,
                        sum(n_live_tup)::bigint
                 FROM pg_stat_user_tables
                 WHERE schemaname = $1 AND relname NOT IN ('sentinel', 'early')
                 GROUP BY 1 ORDER BY 1",
                &[&self.schema],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Existing partitions of `events` or `txns`, oldest first.
    pub async fn partitions(&self, c: &Client, parent: &str) -> Result<Vec<Partition>, StoreError> {
        let rows = c
            .query(
                "SELECT child.relname,
                        (extract(epoch FROM (regexp_match(pg_get_expr(child.relpartbound, child.oid),
                            'FROM \\(''([^'']+)''\\)'))[1]::timestamptz) * 1000)::bigint,
                        (extract(epoch FROM (regexp_match(pg_get_expr(child.relpartbound, child.oid),
                            'TO \\(''([^'']+)''\\)'))[1]::timestamptz) * 1000)::bigint
                 FROM pg_inherits
                 JOIN pg_class parent ON parent.oid = pg_inherits.inhparent
                 JOIN pg_class child ON child.oid = pg_inherits.inhrelid
                 JOIN pg_namespace n ON n.oid = parent.relnamespace
                 WHERE n.nspname = $1 AND parent.relname = $2",
                &[&self.schema, &parent],
            )
            .await?;
        let mut out: Vec<Partition> = rows
            .iter()
            .map(|r| Partition {
                table: r.get(0),
                from_ms: r.get(1),
                to_ms: r.get(2),
            })
            .collect();
        out.sort_by_key(|p| p.from_ms);
        Ok(out)
    }

    /// Creates an unlogged partition `[from, to)` of `events` or `txns`.
    /// Autovacuum stays off: rows are never updated or deleted, and a running
    /// autovacuum would make the eventual `DROP` wait.
    pub async fn create_partition(
        &self,
        c: &Client,
        parent: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Partition, StoreError> {
        let name = format!("{parent}_{}", utc_stamp(from_ms));
        // Sweeps read a creation-time range a few seconds wide out of a partition
        // that arrives mostly in creation order: BRIN finds it, nearly free on
        // inserts. Multi-minmax, because clicks and installs of older
        // transactions are outliers that would widen every plain min/max range.
        let schema = &self.schema;
        tidemark_store::create_partition(
            c,
            if self.unlogged {
                "CREATE UNLOGGED TABLE"
            } else {
                "CREATE TABLE"
            },
            &format!("{schema}.{parent}"),
            &format!("{schema}.{name}"),
            &format!(
                "FOR VALUES FROM ('{}') TO ('{}')",
                format_instant(from_ms),
                format_instant(to_ms)
            ),
            "WITH (autovacuum_enabled = false)",
            &format!(
                "CREATE INDEX IF NOT EXISTS {name}_created ON {schema}.{name}
                     USING brin (created_at timestamptz_minmax_multi_ops) WITH (pages_per_range = 32)"
            ),
        )
        .await?;
        Ok(Partition {
            from_ms,
            to_ms,
            table: name,
        })
    }

    /// Buffered rows per creation-time bucket of `bucket_ms` (events not yet
    /// consolidated, consolidated and long-wait rows alike): `(bucket start, rows)`.
    pub async fn rows_by_bucket(
        &self,
        c: &Client,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let sql = format!(
            "SELECT (floor(extract(epoch FROM created_at)::float8 * 1000 / $1::float8) * $1::float8)::bigint AS b, count(*)
             FROM (SELECT created_at FROM {events} UNION ALL SELECT created_at FROM {txns}
                   UNION ALL SELECT created_at FROM {long}) x
             GROUP BY b",
            events = self.t("events"),
            txns = self.t("txns"),
            long = self.t("long"),
        );
        Ok(c.query(&sql, &[&(bucket_ms as f64)])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Drops a partition in its own short transaction (a drop holds a lock on
    /// the parent that would stall intake until commit), waiting at most
    /// `DDL_LOCK_TIMEOUT` for it. Idempotent.
    pub async fn drop_partition(&self, c: &Client, table: &str) -> Result<(), StoreError> {
        tidemark_store::ddl(c, &format!("DROP TABLE IF EXISTS {}.{table}", self.schema)).await
    }
}

/// `YYYYMMDDtHHMMSS`, for partition names.
fn utc_stamp(ms: i64) -> String {
    let c = tidemark_wire::Civil::of(ms);
    format!(
        "{:04}{:02}{:02}t{:02}{:02}{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_named_by_their_start() {
        assert_eq!(utc_stamp(951_782_400_000), "20000229t000000");
        assert_eq!(utc_stamp(1_700_000_000_123), "20231114t221320");
        assert_eq!(utc_stamp(-1), "19691231t235959");
    }
}
