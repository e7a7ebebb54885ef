//! Reading the observation stream (SPEC 5), for learners and exports.

use tokio_postgres::Client;

use crate::StoreError;

/// One observation as a learner reads it.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Its number in its shard's gap-free sequence.
    pub seq: i64,
    /// The target it labels.
    pub target: String,
    /// The label.
    pub label: bool,
    /// `provisional`, `late` or `final` (SPEC 5, v1.3).
    pub kind: String,
    /// The bid's features, as JSON text.
    pub features: String,
    /// The transaction it belongs to (its rows of one target share it).
    pub txid: String,
}

/// Observations in this database, over every shard.
pub async fn count(c: &Client) -> Result<i64, StoreError> {
    Ok(
        c.query_one("SELECT count(*) FROM tidemark.observations", &[])
            .await?
            .get(0),
    )
}

/// Observations of `target` in this database, over every shard.
pub async fn count_target(c: &Client, target: &str) -> Result<i64, StoreError> {
    Ok(c.query_one(
        "SELECT count(*) FROM tidemark.observations WHERE target = $1",
        &[&target],
    )
    .await?
    .get(0))
}

/// The last `seq` a shard has emitted (0 before its first observation): a
/// reader's backlog is this minus its position.
pub async fn head(c: &Client, shard: &str) -> Result<i64, StoreError> {
    Ok(c.query_one(
        "SELECT coalesce(max(seq), 0) FROM tidemark.observations WHERE shard = $1",
        &[&shard],
    )
    .await?
    .get(0))
}

/// Shards that have emitted into this database.
pub async fn shards(c: &Client) -> Result<Vec<String>, StoreError> {
    Ok(
        c.query("SELECT name FROM tidemark.shards ORDER BY name", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    )
}

/// Up to `limit` observations of `shard` after `after_seq`, in `seq` order.
pub async fn read(
    c: &Client,
    shard: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<Observation>, StoreError> {
    Ok(c.query(
        "SELECT seq, target, label, features::text, kind, txid FROM tidemark.observations
             WHERE shard = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        &[&shard, &after_seq, &limit],
    )
    .await?
    .iter()
    .map(|r| Observation {
        seq: r.get(0),
        target: r.get(1),
        label: r.get::<_, i16>(2) == 1,
        features: r.get(3),
        kind: r.get(4),
        txid: r.get(5),
    })
    .collect())
}

/// The last `seq` a shard's stream holds (`None`: no observation yet).
pub async fn last_seq(c: &Client, shard: &str) -> Result<Option<i64>, StoreError> {
    Ok(c.query_one(
        "SELECT max(seq) FROM tidemark.observations WHERE shard = $1",
        &[&shard],
    )
    .await?
    .get(0))
}

/// The feature names used by the observations of `targets`, sorted, each
/// with whether every value it has (of the kinds hashed) is a number.
pub async fn feature_names(
    c: &Client,
    targets: &[String],
    shard: Option<&str>,
) -> Result<Vec<(String, bool)>, StoreError> {
    Ok(c.query(
        "SELECT f.key, coalesce(bool_and(jsonb_typeof(f.value) = 'number')
                 FILTER (WHERE jsonb_typeof(f.value) IN ('number', 'string', 'boolean')), false)
             FROM tidemark.observations o, jsonb_each(o.features) f
             WHERE o.target = ANY($1) AND ($2::text IS NULL OR o.shard = $2)
             GROUP BY f.key ORDER BY f.key",
        &[&targets, &shard],
    )
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect())
}

/// One row of an export page.
#[derive(Debug, Clone)]
pub struct Exported {
    /// Its shard.
    pub shard: String,
    /// Its number in the shard's stream.
    pub seq: i64,
    /// Its target.
    pub target: String,
    /// Its transaction.
    pub txid: String,
    /// The label.
    pub label: bool,
    /// `provisional`, `late` or `final` (SPEC 5).
    pub kind: String,
    /// The bid's features, as JSON text.
    pub features: String,
}

/// The observations of `targets` in `(shard, seq)` order (the order a
/// learner reads a shard's stream in) after a cursor
/// `(shard, seq)`, for streaming exports: only matured ones (`kind <>
/// 'provisional'`, SPEC 5) unless `provisional`.
pub async fn page(
    c: &Client,
    targets: &[String],
    shard: Option<&str>,
    after: (&str, i64),
    limit: i64,
    provisional: bool,
) -> Result<Vec<Exported>, StoreError> {
    Ok(c.query(
        "SELECT shard, seq, target, txid, label, kind, features::text FROM tidemark.observations
             WHERE target = ANY($1) AND ($2::text IS NULL OR shard = $2) AND (shard, seq) > ($3, $4)
               AND ($6 OR kind <> 'provisional')
             ORDER BY shard, seq LIMIT $5",
        &[&targets, &shard, &after.0, &after.1, &limit, &provisional],
    )
    .await?
    .iter()
    .map(|r| Exported {
        shard: r.get(0),
        seq: r.get(1),
        target: r.get(2),
        txid: r.get(3),
        label: r.get::<_, i16>(4) == 1,
        kind: r.get(5),
        features: r.get(6),
    })
    .collect())
}

/// Records how far `consumer` has read `shard` (never moving it back).
pub async fn record_position(
    c: &Client,
    consumer: &str,
    shard: &str,
    seq: i64,
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO tidemark.consumers (consumer, shard, seq) VALUES ($1, $2, $3)
         ON CONFLICT (consumer, shard) DO UPDATE
             SET seq = greatest(consumers.seq, excluded.seq), updated_at = now()",
        &[&consumer, &shard, &seq],
    )
    .await?;
    Ok(())
}

/// Deletes up to `limit` of `shard`'s oldest observations emitted before
/// `before_ms` that every registered consumer has read. Observations are
/// emitted in `seq` order, so the deleted ones are always a prefix of the
/// stream. Returns how many went.
pub async fn prune(c: &Client, shard: &str, before_ms: i64, limit: i64) -> Result<u64, StoreError> {
    let cutoff = crate::PgTime(before_ms);
    Ok(c.execute(
        "WITH readable AS (
                 SELECT coalesce(min(seq), 9223372036854775807) AS upto
                 FROM tidemark.consumers WHERE shard = $1
             ), victims AS (
                 SELECT o.seq FROM tidemark.observations o, readable r
                 WHERE o.shard = $1 AND o.seq <= r.upto ORDER BY o.seq LIMIT $3
             )
             DELETE FROM tidemark.observations o USING victims v
             WHERE o.shard = $1 AND o.seq = v.seq AND o.emitted_at < $2",
        &[&shard, &cutoff, &limit],
    )
    .await?)
}

/// `(target, observations, label rate)` over every shard of the database.
pub async fn rates(c: &Client) -> Result<Vec<(String, i64, f64)>, StoreError> {
    Ok(c
        .query(
            "SELECT target, count(*), avg(label)::float8 FROM tidemark.observations GROUP BY target ORDER BY target",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}
