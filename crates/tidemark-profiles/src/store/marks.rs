//! First-copy marks (`profile_seen`): their keys, taking them at the start
//! of a transaction, and looking them up.

use tokio_postgres::{GenericClient, Transaction};

use tidemark_store::StoreError;

/// The smallest seen key at `ms`: the creation time as the first 12 hex digits.
pub(super) fn seen_key_prefix(ms: i64) -> String {
    hyphenate(&format!("{ms:012x}"), &"0".repeat(20))
}

/// `8-4-4-4-12`: how PostgreSQL prints a uuid, of 32 hex digits given in
/// two parts. One allocation: a key is made for every event.
fn hyphenate(a: &str, b: &str) -> String {
    let mut out = String::with_capacity(36);
    for (i, c) in a.chars().chain(b.chars()).enumerate() {
        if matches!(i, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(c);
    }
    out
}

/// The `profile_seen` key of a txid (32 lowercase hex digits): its creation
/// time first, as PostgreSQL prints the uuid.
pub fn seen_key(txid: &str) -> String {
    let (random, created) = txid.split_at(20);
    hyphenate(created, random)
}

/// Records `(key, type position)` pairs, each once; returns, per pair, whether
/// this call recorded it (the first copy). Keys are [`seen_key`]s. Sorted
/// before insertion, so concurrent workers lock keys in one order and cannot
/// deadlock.
pub async fn record_seen(
    tx: &Transaction<'_>,
    pairs: &[(String, i16)],
) -> Result<Vec<bool>, StoreError> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let (keys, types): (Vec<&str>, Vec<i16>) = pairs.iter().map(|(k, t)| (k.as_str(), *t)).unzip();
    let rows = tx
        .query(
            "INSERT INTO tidemark.profile_seen (key, type)
             SELECT k::uuid, t FROM unnest($1::text[], $2::smallint[]) AS u(k, t) ORDER BY 1, 2
             ON CONFLICT DO NOTHING RETURNING key::text, type",
            &[&keys, &types],
        )
        .await?;
    let new: std::collections::HashSet<(String, i16)> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(pairs.iter().map(|p| new.contains(p)).collect())
}

/// Batches whose marks go straight to `ON CONFLICT` after the last copy
/// met: copies come in runs (a replay, a publisher's retries), and each
/// plain insert that meets one is work thrown away.
pub const CAREFUL_BATCHES: u32 = 16;

/// How the next batch's marks are taken ([`take_marks`]): one per
/// connection (a worker's link group shares its worker's).
#[derive(Debug, Default)]
pub struct Marking {
    careful: u32,
}

/// Takes the first-copy marks of `pairs`, as [`record_seen`] does, as the
/// first statement of `tx`. Most events are first copies, and a plain
/// `INSERT` costs about half of `INSERT … ON CONFLICT DO NOTHING` (which
/// probes the index before each speculative insertion and logs its
/// confirmation; docs/benchmarks/profiles.md, "Plain marks"). So the marks are
/// inserted plainly unless one of the last [`CAREFUL_BATCHES`] batches met
/// a copy; the unique index still decides, and waits for a concurrent writer of the
/// same mark as `ON CONFLICT` would. Returns `None` when a mark was already
/// taken: `tx` is then aborted, having done nothing else, and the caller
/// rolls it back and begins again. Copies within `pairs` are all first
/// copies when the mark is new, as with [`record_seen`].
pub async fn take_marks(
    tx: &Transaction<'_>,
    pairs: &[(String, i16)],
    how: &mut Marking,
) -> Result<Option<Vec<bool>>, StoreError> {
    if pairs.is_empty() {
        return Ok(Some(Vec::new()));
    }
    if how.careful > 0 {
        let first = record_seen(tx, pairs).await?;
        how.careful = if first.contains(&false) {
            CAREFUL_BATCHES
        } else {
            how.careful - 1
        };
        return Ok(Some(first));
    }
    let distinct: std::collections::BTreeSet<(&str, i16)> =
        pairs.iter().map(|(k, t)| (k.as_str(), *t)).collect();
    let (keys, types): (Vec<&str>, Vec<i16>) = distinct.into_iter().unzip();
    let inserted = tx
        .execute(
            "INSERT INTO tidemark.profile_seen (key, type)
             SELECT k::uuid, t FROM unnest($1::text[], $2::smallint[]) AS u(k, t) ORDER BY 1, 2",
            &[&keys, &types],
        )
        .await;
    match inserted {
        Ok(_) => Ok(Some(vec![true; pairs.len()])),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            how.careful = CAREFUL_BATCHES;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Which `(key, type)` pairs a first copy already took, without taking any.
pub async fn already_seen(
    c: &impl GenericClient,
    pairs: &[(String, i16)],
) -> Result<Vec<bool>, StoreError> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let (keys, types): (Vec<&str>, Vec<i16>) = pairs.iter().map(|(k, t)| (k.as_str(), *t)).unzip();
    let rows = c
        .query(
            "SELECT s.key::text, s.type FROM tidemark.profile_seen s
             JOIN unnest($1::text[], $2::smallint[]) AS u(k, t) ON s.key = u.k::uuid AND s.type = u.t",
            &[&keys, &types],
        )
        .await?;
    let old: std::collections::HashSet<(String, i16)> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(pairs.iter().map(|p| old.contains(p)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_keys_put_creation_time_first_as_postgresql_prints_a_uuid() {
        let txid = "0123456789abcdef0123456789abcdef";
        assert_eq!(seen_key(txid), "456789ab-cdef-0123-4567-89abcdef0123");
        assert_eq!(
            seen_key_prefix(0x18b_cafe_0000),
            "018bcafe-0000-0000-0000-000000000000"
        );
    }
}
