//! The profile tables as they are read (SPEC 11, `sql/V0007__profiles.sql`):
//! the one Rust spelling of a stored profile's columns, of the counter and
//! type definitions and of the trail's layout. The profile process writes
//! with these definitions (it depends on this crate); bidders read with them.

use std::error::Error;
use tidemark_person::{Decayed, Person, TypeStats};
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{GenericClient, Row};

/// The columns of `tidemark.profiles` (alias `p`) that make a [`Person`],
/// in the order [`person_at`] decodes them.
pub const PROFILE_COLUMNS: &str =
    "p.master, p.size, p.counter_values, p.counter_refs, p.counts, p.firsts, p.lasts";

/// The person in [`PROFILE_COLUMNS`] starting at column `at`, or `None`
/// when an outer join found none. Arrays are by position: element i is
/// position i + 1. `master_first` is not a column of the profile (it is the
/// master's row in `profile_ids`): the caller reads it if it needs it.
pub fn person_at(r: &Row, at: usize, master_first: i64) -> Option<Person> {
    let master: Option<String> = r.get(at);
    let values: Vec<f64> = r.get::<_, Option<_>>(at + 2).unwrap_or_default();
    let refs: Vec<i64> = r.get::<_, Option<_>>(at + 3).unwrap_or_default();
    let counts: Vec<i64> = r.get::<_, Option<_>>(at + 4).unwrap_or_default();
    let firsts: Vec<i64> = r.get::<_, Option<_>>(at + 5).unwrap_or_default();
    let lasts: Vec<i64> = r.get::<_, Option<_>>(at + 6).unwrap_or_default();
    let size: Option<i32> = r.get(at + 1);
    Some(Person {
        master: master?,
        size: size.map_or(1, i64::from),
        master_first,
        counters: values
            .into_iter()
            .zip(refs)
            .map(|(value, reference)| Decayed { value, reference })
            .collect(),
        types: counts
            .into_iter()
            .zip(firsts)
            .zip(lasts)
            .map(|((count, first), last)| TypeStats { count, first, last })
            .collect(),
    })
}

/// A counter as stored: `(position, name, event, half_life_ms)`.
pub type StoredCounter = (i16, String, String, i64);

/// The stored definitions: types `(position, name)` and counters, each by
/// position.
pub async fn definitions(
    c: &impl GenericClient,
) -> Result<(Vec<(i16, String)>, Vec<StoredCounter>), tokio_postgres::Error> {
    let types = c
        .query(
            "SELECT position, name FROM tidemark.profile_types ORDER BY position",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let counters = c
        .query(
            "SELECT position, name, event, half_life_ms FROM tidemark.profile_counters ORDER BY position",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    Ok((types, counters))
}

/// The profile of each of `$1`'s identifiers, in order: [`PROFILE_COLUMNS`],
/// then whether the identifier is blocklisted. One join per identifier.
/// Built once: every bidder lookup prepares it (cached by text).
pub(crate) static GET: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {PROFILE_COLUMNS}, i.blocklisted_at IS NOT NULL
         FROM unnest($1::text[]) WITH ORDINALITY AS q(id, n)
         LEFT JOIN tidemark.profile_ids i ON i.id = q.id
         LEFT JOIN tidemark.profiles p ON p.person = i.person
         ORDER BY q.n"
    )
});

/// Whether a [`get_query`] row's identifier is blocklisted.
pub(crate) fn blocklisted(r: &Row) -> bool {
    r.get::<_, Option<bool>>(7).unwrap_or(false)
}

/// Identifier lists longer than this (bytes, with per-element overhead) are
/// stored in `profile_trail_wide`, and the trail row's `ids` is empty (no
/// event carries none): a B-tree entry holds about 2.7 kB.
pub const WIDE_IDS_BYTES: usize = 1500;

/// Whether a trail row's identifier list goes to `profile_trail_wide`.
pub fn is_wide(ids: &[String]) -> bool {
    ids.iter().map(|i| i.len() + 8).sum::<usize>() > WIDE_IDS_BYTES
}

/// The identifiers of the person holding `$1` (or `$1` alone), then the
/// trail rows in `[$2, $3)`, in one statement so a day packed meanwhile is
/// read wholly before or wholly after: `id = ANY(...)` on the `(id, ts)`
/// index of each day's `profile_trail` partition, one range scan per
/// identifier; and on `(id, base)` of `profile_trail_packed` (one row per
/// identifier and packed day, sql/V0014) and of `profile_trail_chunks`
/// (rows per identifier and day as workers wrote them, sql/V0015), for the
/// days that may hold times in range (`$4`: a day before `$2`), whose
/// events the caller filters by time. Columns: id, ts (a packed row's or
/// chunk's base), then a row's type position, txid and `ids` (NULL for
/// "just `id`", empty when the list is in `profile_trail_wide`, one more
/// query), or a packed row's or chunk's offsets, type positions and txids
/// (with a chunk's `ids`: NULL for "just `id`", else every event's list). Unordered: the caller orders by (ts, type,
/// txid) and names types.
pub const TRAIL_QUERY: &str =
    "SELECT t.id, t.ts, t.type, t.txid, t.ids, NULL::integer[], NULL::smallint[], NULL::uuid[]
     FROM tidemark.profile_trail t
     WHERE t.id = ANY(coalesce(
               (SELECT array_agg(o.id) FROM tidemark.profile_ids me
                JOIN tidemark.profile_ids o ON o.person = me.person WHERE me.id = $1),
               ARRAY[$1]))
       AND t.ts >= $2 AND t.ts < $3
     UNION ALL
     SELECT p.id, p.base, NULL, NULL, NULL, p.off, p.type, p.txid
     FROM tidemark.profile_trail_packed p
     WHERE p.id = ANY(coalesce(
               (SELECT array_agg(o.id) FROM tidemark.profile_ids me
                JOIN tidemark.profile_ids o ON o.person = me.person WHERE me.id = $1),
               ARRAY[$1]))
       AND p.base > $4 AND p.base < $3
     UNION ALL
     SELECT k.id, k.base, NULL, NULL, k.ids, k.off, k.type, k.txid
     FROM tidemark.profile_trail_chunks k
     WHERE k.id = ANY(coalesce(
               (SELECT array_agg(o.id) FROM tidemark.profile_ids me
                JOIN tidemark.profile_ids o ON o.person = me.person WHERE me.id = $1),
               ARRAY[$1]))
       AND k.base > $4 AND k.base < $3";

/// The identifier lists too long for the trail index, by (id, ts, type, txid).
pub(crate) const WIDE_QUERY: &str =
    "SELECT w.id, w.ts, w.type, w.txid, w.ids FROM tidemark.profile_trail_wide w
     JOIN unnest($1::text[], $2::bigint[], $3::smallint[], $4::text[]) AS u(id, ts, type, txid)
       ON (w.id, w.ts, w.type, w.txid) = (u.id, u.ts, u.type, u.txid::uuid)";

/// A uuid column read back as the 32 lowercase hex digits a txid is
/// (SPEC 1), which is how trails store txids.
pub(crate) struct Txid(pub String);

impl<'a> FromSql<'a> for Txid {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Txid, Box<dyn Error + Sync + Send>> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        if raw.len() != 16 {
            return Err(format!("a uuid of {} bytes", raw.len()).into());
        }
        let hex = raw
            .iter()
            .flat_map(|b| {
                [
                    HEX[(b >> 4) as usize] as char,
                    HEX[(b & 15) as usize] as char,
                ]
            })
            .collect();
        Ok(Txid(hex))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }
}

/// The profile process's clock as saved, if a process ever ran.
pub(crate) async fn clock(c: &impl GenericClient) -> Result<Option<i64>, tokio_postgres::Error> {
    let r = c
        .query_one("SELECT max(clock_ms) FROM tidemark.profile_process", &[])
        .await?;
    Ok(r.get(0))
}

/// Whether the server is a streaming standby, and how far behind its
/// primary in ms: caught up and streaming, the receiver's silence beyond
/// half its `wal_receiver_timeout` (it pings its primary then, so a longer
/// silence means it stalled); else the age of the last transaction it
/// replayed; NULL on a primary. The same expression as
/// `tidemark.profile_status.replica_lag_ms` (sql/V0017).
pub const LAG_QUERY: &str = "SELECT pg_is_in_recovery(),
    CASE WHEN NOT pg_is_in_recovery() THEN NULL
         ELSE coalesce(
             (SELECT greatest(0,
                         (extract(epoch FROM clock_timestamp() - r.last_msg_receipt_time) * 1000)::bigint
                         - (SELECT setting::bigint / 2 FROM pg_settings
                            WHERE name = 'wal_receiver_timeout'))
              FROM pg_stat_wal_receiver r
              WHERE r.status = 'streaming' AND r.last_msg_receipt_time IS NOT NULL
                AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()),
             (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::bigint)
    END";
