//! Schema migrations: the files in `sql/`, embedded in the binary, applied in
//! order, each once, recorded in `tidemark.schema_migrations`.

use tokio_postgres::Client;

use crate::StoreError;

/// `(version, name, sql)`, in version order. Forward-only: never edit one that shipped.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "observations",
        include_str!("../../../sql/V0001__observations.sql"),
    ),
    (2, "shards", include_str!("../../../sql/V0002__shards.sql")),
    (
        3,
        "inspection views",
        include_str!("../../../sql/V0003__inspection_views.sql"),
    ),
    (
        4,
        "consumers",
        include_str!("../../../sql/V0004__consumers.sql"),
    ),
    (
        5,
        "quarantine",
        include_str!("../../../sql/V0005__quarantine.sql"),
    ),
    (
        6,
        "counter_families",
        include_str!("../../../sql/V0006__counter_families.sql"),
    ),
    (
        7,
        "profiles",
        include_str!("../../../sql/V0007__profiles.sql"),
    ),
    (
        8,
        "bridging",
        include_str!("../../../sql/V0008__bridging.sql"),
    ),
    (
        9,
        "profile_quarantine",
        include_str!("../../../sql/V0009__profile_quarantine.sql"),
    ),
    (
        10,
        "refusals_bigint",
        include_str!("../../../sql/V0010__refusals_bigint.sql"),
    ),
    (
        11,
        "replica_lag",
        include_str!("../../../sql/V0011__replica_lag.sql"),
    ),
    (
        12,
        "marks_by_type",
        include_str!("../../../sql/V0012__marks_by_type.sql"),
    ),
    (
        13,
        "compact_trails",
        include_str!("../../../sql/V0013__compact_trails.sql"),
    ),
    (
        14,
        "packed_trails",
        include_str!("../../../sql/V0014__packed_trails.sql"),
    ),
    (
        15,
        "trail_chunks",
        include_str!("../../../sql/V0015__trail_chunks.sql"),
    ),
    (
        16,
        "payload_statistics",
        include_str!("../../../sql/V0016__payload_statistics.sql"),
    ),
    (
        17,
        "replica_staleness",
        include_str!("../../../sql/V0017__replica_staleness.sql"),
    ),
    (
        18,
        "observation_kinds",
        include_str!("../../../sql/V0018__observation_kinds.sql"),
    ),
];

/// Any key works as long as only migrations use it.
const MIGRATION_LOCK: i64 = 0x7469_6465_6d61_726b; // "tidemark"

/// Applies every migration not yet applied, in one transaction, under an
/// advisory lock so concurrent starts apply each exactly once. Returns the
/// versions applied by this call.
pub async fn migrate(client: &mut Client) -> Result<Vec<i32>, StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS tidemark;
         CREATE TABLE IF NOT EXISTS tidemark.schema_migrations (
             version    integer     PRIMARY KEY,
             name       text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
    )
    .await?;
    let done: Vec<i32> = tx
        .query("SELECT version FROM tidemark.schema_migrations", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if let Some(newer) = done.iter().find(|v| **v > latest_version()) {
        return Err(StoreError::SchemaTooNew(*newer));
    }
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|e| StoreError::Migration {
                version: *version,
                source: e,
            })?;
        tx.execute(
            "INSERT INTO tidemark.schema_migrations (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
        applied.push(*version);
    }
    tx.commit().await?;
    Ok(applied)
}

/// The newest schema version this binary knows.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}
