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
//! - `sentinel`: one row; an empty sentinel after a restart means PostgreSQL
//!   crashed and emptied every unlogged table.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::SinkExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient};

use crate::phases::TargetSql;
use tidemark_store::{PgTime, StoreError, PG_EPOCH_US};

/// One event to append to the fresh tier.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow<'a> {
    /// The transaction id.
    pub txid: &'a str,
    /// The transaction's creation time, ms.
    pub created_ms: i64,
    /// The event type's name.
    pub type_name: &'a str,
    /// Event time, already clamped to be no earlier than creation.
    pub ts_ms: i64,
    /// Arrival order within the shard, to break ties between equal `ts`.
    pub arrival: i64,
    /// A bid's features as JSON text.
    pub features: Option<&'a str>,
    /// A bid's or impression's price.
    pub price: Option<f64>,
    /// The bid's `user`.
    pub user: Option<&'a str>,
}

/// Merges into an already consolidated transaction: the earliest time per column.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeRow {
    /// The transaction id.
    pub txid: String,
    /// The transaction's creation time, ms.
    pub created_ms: i64,
    /// `(column index in Layout::event_columns, ts_ms)`.
    pub ts: Vec<(usize, i64)>,
}

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
}

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
        }
    }

    /// The index in `event_columns` of the column holding a type's earliest time.
    pub fn column(&self, type_name: &str) -> Option<usize> {
        self.event_types.iter().position(|t| t == type_name)
    }

    fn t(&self, table: &str) -> String {
        format!("{}.{}", self.schema, table)
    }

    /// Creates the schema and tables if missing; adds columns for new custom types.
    pub async fn ensure_schema(&self, c: &Client) -> Result<(), StoreError> {
        let cols: String = self
            .event_columns
            .iter()
            .map(|c| format!(", {c} timestamptz"))
            .collect();
        let (s, events, txns, long, sentinel) = (
            &self.schema,
            self.t("events"),
            self.t("txns"),
            self.t("long"),
            self.t("sentinel"),
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
             CREATE UNLOGGED TABLE IF NOT EXISTS {sentinel} (alive boolean PRIMARY KEY);"
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
                 WHERE schemaname = $1 AND relname <> 'sentinel'
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
                rfc3339(from_ms),
                rfc3339(to_ms)
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

    /// Appends events with one binary `COPY`. The rows' partitions must exist.
    pub async fn copy_events(
        &self,
        c: &impl GenericClient,
        rows: &[EventRow<'_>],
    ) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        // (`copy_in` is the connection's; inside a transaction it is part of it.)
        let sink = c
            .client()
            .copy_in::<_, Bytes>(&format!(
                "COPY {} (txid, created_at, type, ts, arrival, features, price, uid) FROM STDIN (FORMAT binary)",
                self.t("events")
            ))
            .await?;
        futures_util::pin_mut!(sink);
        let mut buf = BytesMut::with_capacity(1 << 20);
        buf.put_slice(b"PGCOPY\n\xff\r\n\0");
        buf.put_i32(0);
        buf.put_i32(0);
        for r in rows {
            buf.put_i16(8);
            put_text(&mut buf, Some(r.txid));
            put_time(&mut buf, r.created_ms);
            put_text(&mut buf, Some(r.type_name));
            put_time(&mut buf, r.ts_ms);
            buf.put_i32(8);
            buf.put_i64(r.arrival);
            match r.features {
                Some(f) => {
                    buf.put_i32(f.len() as i32 + 1);
                    buf.put_u8(1); // jsonb binary format version
                    buf.put_slice(f.as_bytes());
                }
                None => buf.put_i32(-1),
            }
            match r.price {
                Some(p) => {
                    buf.put_i32(8);
                    buf.put_f64(p);
                }
                None => buf.put_i32(-1),
            }
            put_text(&mut buf, r.user);
            if buf.len() > (1 << 20) {
                sink.send(buf.split().freeze()).await?;
            }
        }
        buf.put_i16(-1);
        sink.send(buf.freeze()).await?;
        Ok(sink.finish().await?)
    }

    /// Merges later events into consolidated rows of `txns` (`long = false`)
    /// or `long`; returns the indices in `rows` of those that had no row
    /// (their transaction is not in any population).
    pub async fn merge(
        &self,
        c: &impl GenericClient,
        long: bool,
        rows: &[MergeRow],
    ) -> Result<Vec<usize>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ncol = self.event_columns.len();
        let txids: Vec<&str> = rows.iter().map(|r| r.txid.as_str()).collect();
        let created: Vec<PgTime> = rows.iter().map(|r| PgTime(r.created_ms)).collect();
        // One array per column, NULL where the row brings nothing for it.
        let mut cols: Vec<Vec<Option<PgTime>>> = vec![vec![None; rows.len()]; ncol];
        for (i, r) in rows.iter().enumerate() {
            for &(col, ts) in &r.ts {
                let slot = &mut cols[col][i];
                *slot = Some(PgTime(slot.map_or(ts, |t| t.0.min(ts))));
            }
        }
        let table = self.t(if long { "long" } else { "txns" });
        let mut set = String::new();
        let mut unnest = String::from("unnest($1::text[], $2::timestamptz[]");
        for (i, col) in self.event_columns.iter().enumerate() {
            if i > 0 {
                set.push_str(", ");
            }
            let _ = write!(set, "{col} = least(t.{col}, u.c{i})");
            let _ = write!(unnest, ", ${}::timestamptz[]", i + 3);
        }
        let aliases: String = (0..ncol).map(|i| format!(", c{i}")).collect();
        let sql = format!(
            "UPDATE {table} t SET {set}
             FROM {unnest}) AS u(txid, created_at{aliases})
             WHERE t.txid = u.txid AND t.created_at = u.created_at
             RETURNING t.txid"
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&txids, &created];
        for col in &cols {
            params.push(col);
        }
        let found: std::collections::HashSet<String> = c
            .query(&sql, &params)
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok((0..rows.len())
            .filter(|i| !found.contains(&rows[*i].txid))
            .collect())
    }

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

    /// Forgets long-wait transactions created at or before `hi`: no phase needs them.
    pub async fn forget(&self, tx: &impl GenericClient, hi: i64) -> Result<u64, StoreError> {
        Ok(tx
            .execute(
                &format!("DELETE FROM {} WHERE created_at <= $1", self.t("long")),
                &[&PgTime(hi)],
            )
            .await?)
    }
}

fn put_text(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            buf.put_i32(s.len() as i32);
            buf.put_slice(s.as_bytes());
        }
        None => buf.put_i32(-1),
    }
}

fn put_time(buf: &mut BytesMut, ms: i64) {
    buf.put_i32(8);
    buf.put_i64(ms * 1000 - PG_EPOCH_US);
}

/// `YYYY-MM-DD HH:MM:SS.mmm+00` for SQL literals.
pub fn rfc3339(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms.div_euclid(1000));
    format!(
        "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{:03}+00",
        ms.rem_euclid(1000)
    )
}

/// `YYYYMMDDtHHMMSS`, for partition names.
fn utc_stamp(ms: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms.div_euclid(1000));
    format!("{y:04}{mo:02}{d:02}t{h:02}{mi:02}{s:02}")
}

/// UTC calendar fields of a Unix time in seconds (Howard Hinnant's algorithm).
fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(rfc3339(0), "1970-01-01 00:00:00.000+00");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14 22:13:20.123+00");
        assert_eq!(utc_stamp(951_782_400_000), "20000229t000000");
        assert_eq!(rfc3339(-1), "1969-12-31 23:59:59.999+00");
    }
}
