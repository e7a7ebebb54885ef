//! Trail entries: chunks of one row per identifier and day, or rows of
//! their own (sql/V0013–V0015).

use tidemark_reader::store::is_wide;
use tokio_postgres::Transaction;

use tidemark_store::{PgUuid, StoreError};

use crate::core::days::day_of;
use crate::core::TrailRow;

/// Appends trail entries (their days' partitions exist) as chunks
/// (sql/V0015): one row per identifier, day and identifier list for the
/// whole call. An event whose list is too long for an index entry (or whose
/// txid is not 32 hex digits, which intake never lets through) is a row,
/// compact as migration 13 says: the type's position, the txid as a uuid,
/// `ids` empty when the list is written to `profile_trail_wide`.
pub async fn insert_trail(tx: &Transaction<'_>, rows: &[TrailRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut chunked: Vec<Chunked> = Vec::with_capacity(rows.len());
    let mut other = Vec::new();
    for r in rows {
        match PgUuid::from_hex(&r.txid) {
            Some(txid) if !is_wide(&r.ids) => {
                let alone = r.ids.len() == 1 && r.ids[0] == r.id;
                let ids = (!alone).then_some(r.ids.as_slice());
                chunked.push(Chunked {
                    r,
                    day: day_of(r.ts),
                    ids,
                    txid,
                });
            }
            _ => other.push(r),
        }
    }
    insert_chunks(tx, &mut chunked).await?;
    insert_rows(tx, &other).await
}

/// An event on its way into a chunk.
struct Chunked<'a> {
    r: &'a TrailRow,
    day: i64,
    /// `None`: the row's identifier alone.
    ids: Option<&'a [String]>,
    txid: PgUuid,
}

impl Chunked<'_> {
    /// Chunk first (identifier, day, list), then order within it.
    fn key(&self) -> (&str, i64, Option<&[String]>, i64, i16, [u8; 16]) {
        (
            &self.r.id,
            self.day,
            self.ids,
            self.r.ts,
            self.r.type_pos,
            self.txid.0,
        )
    }
}

/// Writes chunks: events sorted by [`Chunked::key`], one row per run of
/// equal (identifier, day, list), its arrays sliced server-side from flat
/// ones (elements of fixed width, so a slice costs what it holds).
async fn insert_chunks(tx: &Transaction<'_>, events: &mut [Chunked<'_>]) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    events.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
    let (mut id, mut base, mut lists) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    let mut off = Vec::with_capacity(events.len());
    let mut ty = Vec::with_capacity(events.len());
    let mut txid = Vec::with_capacity(events.len());
    let mut last: Option<(&str, i64, Option<&[String]>)> = None;
    for (i, e) in events.iter().enumerate() {
        let chunk = (e.r.id.as_str(), e.day, e.ids);
        if last != Some(chunk) {
            last = Some(chunk);
            id.push(chunk.0);
            base.push(chunk.1);
            lists.push(chunk.2.map(array_literal));
            // 1-based, inclusive: PostgreSQL's array slices.
            lo.push(i as i32 + 1);
            hi.push(i as i32);
        }
        *hi.last_mut().expect("pushed above") += 1;
        // Within a day: fits an integer.
        off.push((e.r.ts - e.day) as i32);
        ty.push(e.r.type_pos);
        txid.push(e.txid);
    }
    tx.execute(
        "INSERT INTO tidemark.profile_trail_chunks (id, base, ids, off, type, txid)
         SELECT g.id, g.base, g.ids::text[], ($6::integer[])[g.lo:g.hi],
                ($7::smallint[])[g.lo:g.hi], ($8::uuid[])[g.lo:g.hi]
         FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[], $5::integer[])
              AS g(id, base, ids, lo, hi)",
        &[&id, &base, &lists, &lo, &hi, &off, &ty, &txid],
    )
    .await?;
    Ok(())
}

/// Writes trail rows (events that carried other identifiers).
async fn insert_rows(tx: &Transaction<'_>, rows: &[&TrailRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    // Each row's identifiers as one array literal, cast per row: slicing one
    // flattened text[] instead costs a scan from its start per row (text
    // elements have no fixed width), seconds for a 25,000-row statement.
    let mut id = Vec::with_capacity(rows.len());
    let mut ts = Vec::with_capacity(rows.len());
    let mut ty = Vec::with_capacity(rows.len());
    let mut txid = Vec::with_capacity(rows.len());
    let mut ids: Vec<Option<String>> = Vec::with_capacity(rows.len());
    let mut wide = Vec::new();
    for &r in rows {
        id.push(r.id.as_str());
        ts.push(r.ts);
        ty.push(r.type_pos);
        txid.push(r.txid.as_str());
        ids.push(if r.ids.len() == 1 && r.ids[0] == r.id {
            None
        } else if is_wide(&r.ids) {
            wide.push(r);
            Some("{}".to_string())
        } else {
            Some(array_literal(&r.ids))
        });
    }
    tx.execute(
        "INSERT INTO tidemark.profile_trail (id, ts, type, txid, ids)
         SELECT u.id, u.ts, u.ty, u.txid::uuid, u.ids::text[]
         FROM unnest($1::text[], $2::bigint[], $3::smallint[], $4::text[], $5::text[])
              AS u(id, ts, ty, txid, ids)",
        &[&id, &ts, &ty, &txid, &ids],
    )
    .await?;
    for r in wide {
        tx.execute(
            "INSERT INTO tidemark.profile_trail_wide (id, ts, type, txid, ids)
             VALUES ($1, $2, $3, $4::text::uuid, $5) ON CONFLICT DO NOTHING",
            &[&r.id, &r.ts, &r.type_pos, &r.txid, &r.ids],
        )
        .await?;
    }
    Ok(())
}

/// A PostgreSQL array literal of `items`, each quoted (`{"a","b"}`), with
/// `"` and `\` escaped as the array input syntax wants.
fn array_literal(items: &[String]) -> String {
    let mut out = String::with_capacity(2 + items.iter().map(|i| i.len() + 3).sum::<usize>());
    out.push('{');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_literals_quote_and_escape_every_item() {
        let items = ["user:a".to_string(), r#"k:{x, "y"} \ z"#.to_string()];
        assert_eq!(array_literal(&items), r#"{"user:a","k:{x, \"y\"} \\ z"}"#);
        assert_eq!(array_literal(&[]), "{}");
    }
}
