//! Counts by reason (`tidemark.profile_counts`) and the quarantine of
//! events the database refused on their own.

use tokio_postgres::{GenericClient, Transaction};

use tidemark_store::StoreError;

/// Taken by [`quarantine`] for its transaction ("tdmkqrnt").
const QUARANTINE_LOCK: i64 = 0x7464_6d6b_7172_6e74;

/// Adds to a worker's counts by reason.
pub async fn add_counts<'a>(
    c: &impl GenericClient,
    worker: i16,
    counts: impl IntoIterator<Item = (&'a str, i64)>,
) -> Result<(), StoreError> {
    let (reasons, ns): (Vec<&str>, Vec<i64>) = counts.into_iter().filter(|(_, n)| *n != 0).unzip();
    if reasons.is_empty() {
        return Ok(());
    }
    c.execute(
        "INSERT INTO tidemark.profile_counts (worker, reason, n)
         SELECT $1, r, n FROM unnest($2::text[], $3::bigint[]) AS u(r, n)
         ON CONFLICT (worker, reason) DO UPDATE SET n = tidemark.profile_counts.n + EXCLUDED.n",
        &[&worker, &reasons, &ns],
    )
    .await?;
    Ok(())
}

/// Keeps an event the database refused on its own in
/// `tidemark.profile_quarantine` unless it already holds `max` rows;
/// returns whether it was kept. Concurrent callers (link groups run on
/// several connections) are serialised by an advisory lock held to `tx`'s
/// end, so the count they see is the count they add to. Not a table lock:
/// an operator's open transaction that deleted rows would hold ingest
/// behind it.
pub async fn quarantine(
    tx: &Transaction<'_>,
    topic: &str,
    payload: &str,
    reason: &str,
    sqlstate: Option<&str>,
    max: i64,
) -> Result<bool, StoreError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&QUARANTINE_LOCK])
        .await?;
    let n = tx
        .execute(
            "INSERT INTO tidemark.profile_quarantine (topic, payload, reason, sqlstate)
             SELECT $1, $2, $3, $4
             WHERE (SELECT count(*) FROM tidemark.profile_quarantine) < $5",
            &[&topic, &payload.as_bytes(), &reason, &sqlstate, &max],
        )
        .await?;
    Ok(n == 1)
}

/// Counts by reason over all workers.
pub async fn counts(c: &impl GenericClient) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = c
        .query(
            "SELECT reason, sum(n)::bigint FROM tidemark.profile_counts GROUP BY reason ORDER BY reason",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
