//! Identifiers and persons: loading where identifiers sit, numbering new
//! persons, and writing the identifier rows, merges and profiles a plan
//! decides.

use tidemark_reader::store::PROFILE_COLUMNS;
use tokio_postgres::{GenericClient, Transaction};

use tidemark_store::StoreError;

use crate::core::{IdRow, Merge, StoredId, StoredPerson};

fn person_from(r: &tokio_postgres::Row, at: usize) -> StoredPerson {
    StoredPerson {
        person: r.get(at),
        profile: tidemark_reader::store::person_at(r, at + 1, r.get(at + 8))
            .expect("an inner join has a profile"),
    }
}

/// The stored identifiers among `ids`, with their persons, in one round trip.
/// The master's first `ts` is looked up only when the identifier is not the
/// master itself (most persons have one identifier): a quarter of the
/// statement's time (docs/benchmarks.md). Identifier rows are never deleted,
/// so a master always has one.
pub async fn load(c: &impl GenericClient, ids: &[&str]) -> Result<Vec<StoredId>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = c
        .query(
            &format!(
                "SELECT i.id, i.first_ts, i.refusals, i.blocklisted_at IS NOT NULL,
                        p.person, {PROFILE_COLUMNS},
                        CASE WHEN p.master = i.id THEN i.first_ts
                             ELSE (SELECT m.first_ts FROM tidemark.profile_ids m
                                   WHERE m.id = p.master) END
                 FROM tidemark.profile_ids i JOIN tidemark.profiles p USING (person)
                 WHERE i.id = ANY($1)"
            ),
            &[&ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StoredId {
            id: r.get(0),
            first_ts: r.get(1),
            refusals: r.get(2),
            blocklisted: r.get(3),
            person: person_from(r, 4),
        })
        .collect())
}

/// The persons of the stored identifiers among `ids`: `(id, person)`.
pub async fn persons_of(
    c: &impl GenericClient,
    ids: &[&str],
) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT id, person FROM tidemark.profile_ids WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Stored identifiers among `ids`, with their person, first ts and
/// whether they are blocklisted.
pub async fn placed(
    c: &impl GenericClient,
    ids: &[&str],
) -> Result<Vec<(String, i64, i64, bool)>, StoreError> {
    let rows = c
        .query(
            "SELECT id, person, first_ts, blocklisted_at IS NOT NULL
             FROM tidemark.profile_ids WHERE id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect())
}

/// Every identifier with its person, `(id, person)` in identifier order: how
/// the database bridged them, for scoring against a market's true persons.
pub async fn identifiers(c: &impl GenericClient) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT id, person FROM tidemark.profile_ids ORDER BY id COLLATE \"C\"",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// `n` fresh person numbers (a sequence: numbers of a rolled-back batch are
/// skipped, never reused).
pub async fn new_persons(tx: &Transaction<'_>, n: usize) -> Result<Vec<i64>, StoreError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(
            "SELECT nextval('tidemark.profile_person_seq') FROM generate_series(1, $1)",
            &[&(n as i32)],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Inserts or updates identifier rows.
pub async fn upsert_ids(tx: &Transaction<'_>, rows: &[IdRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    let id: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let person: Vec<i64> = rows.iter().map(|r| r.person).collect();
    let first: Vec<i64> = rows.iter().map(|r| r.first_ts).collect();
    let refusals: Vec<i64> = rows.iter().map(|r| r.refusals).collect();
    let blocklisted: Vec<bool> = rows.iter().map(|r| r.blocklisted).collect();
    tx.execute(
        "INSERT INTO tidemark.profile_ids AS i (id, person, first_ts, refusals, blocklisted_at)
         SELECT id, person, first_ts, refusals, CASE WHEN b THEN now() END
         FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bool[])
              AS u(id, person, first_ts, refusals, b)
         ON CONFLICT (id) DO UPDATE SET person = EXCLUDED.person, first_ts = EXCLUDED.first_ts,
             refusals = EXCLUDED.refusals,
             blocklisted_at = coalesce(i.blocklisted_at, EXCLUDED.blocklisted_at)",
        &[&id, &person, &first, &refusals, &blocklisted],
    )
    .await?;
    Ok(())
}

/// Moves every identifier of each absorbed person to its survivor, and
/// deletes the absorbed persons' rows: at most `max_ids` rows per merge.
pub async fn absorb(
    tx: &Transaction<'_>,
    absorbed: &[i64],
    into: &[i64],
) -> Result<(), StoreError> {
    if absorbed.is_empty() {
        return Ok(());
    }
    tx.execute(
        "UPDATE tidemark.profile_ids i SET person = m.w
         FROM unnest($1::bigint[], $2::bigint[]) AS m(l, w) WHERE i.person = m.l",
        &[&absorbed, &into],
    )
    .await?;
    tx.execute(
        "DELETE FROM tidemark.profiles WHERE person = ANY($1)",
        &[&absorbed],
    )
    .await?;
    Ok(())
}

/// Appends merges to the log.
pub async fn log_merges(tx: &Transaction<'_>, merges: &[Merge]) -> Result<(), StoreError> {
    if merges.is_empty() {
        return Ok(());
    }
    let ts: Vec<i64> = merges.iter().map(|m| m.ts).collect();
    let txid: Vec<&str> = merges.iter().map(|m| m.txid.as_str()).collect();
    let master: Vec<&str> = merges.iter().map(|m| m.master.as_str()).collect();
    let absorbed: Vec<&str> = merges.iter().map(|m| m.absorbed.as_str()).collect();
    tx.execute(
        "INSERT INTO tidemark.profile_merges (ts, txid, master, absorbed)
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])",
        &[&ts, &txid, &master, &absorbed],
    )
    .await?;
    Ok(())
}

/// New identifiers, each a new person; returns each one's person number, in order.
pub async fn insert_ids(
    tx: &Transaction<'_>,
    ids: &[&str],
    first_ts: &[i64],
) -> Result<Vec<i64>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(
            "INSERT INTO tidemark.profile_ids (id, person, first_ts)
             SELECT id, nextval('tidemark.profile_person_seq'), ts
             FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(id, ts, n) ORDER BY n
             RETURNING id, person",
            &[&ids, &first_ts],
        )
        .await?;
    let by_id: std::collections::HashMap<String, i64> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok(ids.iter().map(|id| by_id[*id]).collect())
}

/// Lowers identifiers' first `ts` where an earlier event carried them.
pub async fn lower_first_ts(
    tx: &Transaction<'_>,
    ids: &[&str],
    first_ts: &[i64],
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "UPDATE tidemark.profile_ids i SET first_ts = u.ts
         FROM unnest($1::text[], $2::bigint[]) AS u(id, ts)
         WHERE i.id = u.id AND u.ts < i.first_ts",
        &[&ids, &first_ts],
    )
    .await?;
    Ok(())
}

/// Writes persons whole (insert or replace), in one statement. Every
/// person's arrays have the same lengths (`counters`, `types`): they travel
/// flattened and are sliced back per row.
pub async fn upsert_persons(
    tx: &Transaction<'_>,
    persons: &[StoredPerson],
    counters: usize,
    types: usize,
) -> Result<(), StoreError> {
    if persons.is_empty() {
        return Ok(());
    }
    let mut person = Vec::with_capacity(persons.len());
    let mut master = Vec::with_capacity(persons.len());
    let mut size = Vec::with_capacity(persons.len());
    let (mut values, mut refs) = (Vec::new(), Vec::new());
    let (mut counts, mut firsts, mut lasts) = (Vec::new(), Vec::new(), Vec::new());
    for sp in persons {
        let p = &sp.profile;
        assert!(p.counters.len() == counters && p.types.len() == types);
        person.push(sp.person);
        master.push(p.master.as_str());
        size.push(p.size as i32);
        values.extend(p.counters.iter().map(|c| c.value));
        refs.extend(p.counters.iter().map(|c| c.reference));
        counts.extend(p.types.iter().map(|t| t.count));
        firsts.extend(p.types.iter().map(|t| t.first));
        lasts.extend(p.types.iter().map(|t| t.last));
    }
    let (k, t) = (counters as i64, types as i64);
    tx.execute(
        "INSERT INTO tidemark.profiles AS p
             (person, master, size, counter_values, counter_refs, counts, firsts, lasts)
         SELECT u.person, u.master, u.size,
                ($4::float8[])[(u.n - 1) * $9 + 1 : u.n * $9],
                ($5::bigint[])[(u.n - 1) * $9 + 1 : u.n * $9],
                ($6::bigint[])[(u.n - 1) * $10 + 1 : u.n * $10],
                ($7::bigint[])[(u.n - 1) * $10 + 1 : u.n * $10],
                ($8::bigint[])[(u.n - 1) * $10 + 1 : u.n * $10]
         FROM unnest($1::bigint[], $2::text[], $3::int[]) WITH ORDINALITY AS u(person, master, size, n)
         ON CONFLICT (person) DO UPDATE SET master = EXCLUDED.master, size = EXCLUDED.size,
             counter_values = EXCLUDED.counter_values, counter_refs = EXCLUDED.counter_refs,
             counts = EXCLUDED.counts, firsts = EXCLUDED.firsts, lasts = EXCLUDED.lasts",
        &[
            &person, &master, &size, &values, &refs, &counts, &firsts, &lasts, &k, &t,
        ],
    )
    .await?;
    Ok(())
}
