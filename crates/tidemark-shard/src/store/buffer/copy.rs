//! Intake's statements: fresh events appended with one binary `COPY`
//! (the wire format written here, row by row), and later events of
//! consolidated transactions merged into their rows (the earliest time per
//! column wins).

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::SinkExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use super::Layout;
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

impl Layout {
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
