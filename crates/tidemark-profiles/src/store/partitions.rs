//! The time partitions of `profile_seen` (by type and span) and
//! `profile_trail` (by UTC day): their names, bounds, creation and
//! dropping, between batches.

use tokio_postgres::Client;

use tidemark_store::StoreError;

use super::marks::seen_key_prefix;
use crate::core::days::{Part, DAY_MS};

/// A partitioned table, or one type's part of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Daily {
    /// `profile_seen`'s partitions of one type (its position), by the
    /// txid's creation time.
    Seen(i16),
    /// `profile_trail`, by the event's UTC day.
    Trail,
}

impl Daily {
    fn table(self) -> &'static str {
        match self {
            Daily::Seen(_) => "profile_seen",
            Daily::Trail => "profile_trail",
        }
    }

    /// The partition bound at `ms`, as the table's partition key.
    fn bound(self, ms: i64) -> String {
        match self {
            Daily::Seen(t) => format!("{t}, '{}'", seen_key_prefix(ms)),
            Daily::Trail => ms.to_string(),
        }
    }

    /// The partition bound below everything.
    fn lowest(self) -> String {
        match self {
            Daily::Seen(t) => format!("{t}, MINVALUE"),
            Daily::Trail => "MINVALUE".into(),
        }
    }

    /// A partition's table name, unqualified: `profile_seen_<type>_<from>_<to>`
    /// and `profile_seen_<type>_before_<to>` in ms; `profile_trail_<day>` and
    /// `profile_trail_before_<day>` in days since the epoch.
    pub(super) fn name(self, p: Part) -> String {
        let t = self.table();
        match (self, p) {
            (Daily::Seen(ty), Part::Span(from, to)) => format!("{t}_{ty}_{from}_{to}"),
            (Daily::Seen(ty), Part::Before(to)) => format!("{t}_{ty}_before_{to}"),
            (Daily::Trail, Part::Span(from, to)) if from % DAY_MS == 0 && to == from + DAY_MS => {
                format!("{t}_{}", from / DAY_MS)
            }
            (Daily::Trail, Part::Span(from, to)) => format!("{t}_{from}_{to}"),
            (Daily::Trail, Part::Before(to)) => format!("{t}_before_{}", to / DAY_MS),
        }
    }

    /// The table and partition a name is, if it is one of `table`'s.
    fn parse(table: &str, name: &str) -> Option<(Daily, Part)> {
        let rest = name.strip_prefix(table)?.strip_prefix('_')?;
        let n = |s: &str| s.parse::<i64>().ok();
        let words: Vec<&str> = rest.split('_').collect();
        if table == "profile_seen" {
            let part = match words[1..] {
                ["before", to] => Part::Before(n(to)?),
                [from, to] => Part::Span(n(from)?, n(to)?),
                _ => return None,
            };
            return Some((Daily::Seen(words[0].parse().ok()?), part));
        }
        let part = match words[..] {
            ["before", day] => Part::Before(n(day)? * DAY_MS),
            [day] => Part::Span(n(day)? * DAY_MS, (n(day)? + 1) * DAY_MS),
            [from, to] => Part::Span(n(from)?, n(to)?),
            _ => return None,
        };
        Some((Daily::Trail, part))
    }
}

/// Every profile partition's storage options. Marks and trails are only
/// inserted, and their keys are alike from day to day, so their statistics
/// keep their shape as a partition grows: analyzed when it grew by a fifth
/// (a handful of times over its life) rather than after every 2% (the
/// embedded cluster's default for the churning shard buffers), which under
/// ingest is every autovacuum round. V0016 says the same of the tables.
pub(super) const PARTITION_OPTIONS: &str = "WITH (autovacuum_analyze_scale_factor = 0.2)";

/// The partitions of `profile_seen` (every type's) and `profile_trail`
/// (a day of `profile_trail_chunks` counts as its day's, so a day whose
/// trail partition went without its chunks' is still seen and retired).
pub async fn partitions(c: &Client) -> Result<Vec<(Daily, Part)>, StoreError> {
    let rows = c
        .query(
            "SELECT p.relname, c.relname FROM pg_inherits i
             JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
             WHERE i.inhparent IN ('tidemark.profile_seen'::regclass,
                                   'tidemark.profile_trail'::regclass,
                                   'tidemark.profile_trail_chunks'::regclass)",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| Daily::parse(r.get(0), r.get(1)))
        .collect())
}

/// Creates a partition (idempotent).
pub async fn create_partition(c: &Client, which: Daily, p: Part) -> Result<(), StoreError> {
    let t = which.table();
    let range = match p {
        Part::Span(from, to) => format!(
            "FOR VALUES FROM ({}) TO ({})",
            which.bound(from),
            which.bound(to)
        ),
        Part::Before(to) => format!(
            "FOR VALUES FROM ({}) TO ({})",
            which.lowest(),
            which.bound(to)
        ),
    };
    if which == Daily::Trail {
        // First: a trail partition found on a restart promises its chunks'.
        let bases = match p {
            Part::Span(from, _) => format!("FOR VALUES FROM ({from}) TO ({})", from + 1),
            Part::Before(to) => format!("FOR VALUES FROM (MINVALUE) TO ({to})"),
        };
        tidemark_store::create_partition(
            c,
            "CREATE TABLE",
            "tidemark.profile_trail_chunks",
            &format!("tidemark.{}", chunks_name(p)),
            &bases,
            PARTITION_OPTIONS,
            "SELECT 1",
        )
        .await?;
    }
    tidemark_store::create_partition(
        c,
        "CREATE TABLE",
        &format!("tidemark.{t}"),
        &format!("tidemark.{}", which.name(p)),
        &range,
        PARTITION_OPTIONS,
        "SELECT 1",
    )
    .await
}

/// Drops a partition (idempotent), and for trails its chunks, its packed
/// rows and those days' wide identifier lists.
pub async fn drop_partition(c: &Client, which: Daily, p: Part) -> Result<(), StoreError> {
    let mut sql = format!("DROP TABLE IF EXISTS tidemark.{}", which.name(p));
    if which == Daily::Trail {
        sql += &format!(
            "; DROP TABLE IF EXISTS tidemark.{}; DROP TABLE IF EXISTS tidemark.{}",
            packed_name(p),
            chunks_name(p)
        );
    }
    tidemark_store::ddl(c, &sql).await?;
    if which == Daily::Trail {
        let (from, to) = match p {
            Part::Span(from, to) => (from, to),
            Part::Before(to) => (i64::MIN, to),
        };
        c.execute(
            "DELETE FROM tidemark.profile_trail_wide WHERE ts >= $1 AND ts < $2",
            &[&from, &to],
        )
        .await?;
        c.execute(
            "DELETE FROM tidemark.profile_trail_packed_parts WHERE base >= $1 AND base < $2",
            &[&from, &to],
        )
        .await?;
    }
    Ok(())
}

/// The `profile_trail_packed` partition holding a trail partition's packed
/// rows: `profile_trail_packed_<day>`, or by its bounds in ms.
pub(super) fn packed_name(p: Part) -> String {
    Daily::Trail
        .name(p)
        .replacen("profile_trail", "profile_trail_packed", 1)
}

/// The `profile_trail_chunks` partition (sql/V0015) of a trail partition's
/// days: `profile_trail_chunks_<day>`, or by its bounds in ms.
pub(super) fn chunks_name(p: Part) -> String {
    Daily::Trail
        .name(p)
        .replacen("profile_trail", "profile_trail_chunks", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_read_back_as_the_partitions_they_name() {
        let cases = [
            (Daily::Seen(3), Part::Span(7_200_000, 10_800_000)),
            (Daily::Seen(12), Part::Before(DAY_MS)),
            (Daily::Trail, Part::Span(20_000 * DAY_MS, 20_001 * DAY_MS)),
            (Daily::Trail, Part::Span(DAY_MS + 5, 2 * DAY_MS)),
            (Daily::Trail, Part::Before(3 * DAY_MS)),
        ];
        for (which, p) in cases {
            let name = which.name(p);
            assert_eq!(
                Daily::parse(which.table(), &name),
                Some((which, p)),
                "{name}"
            );
        }
        assert_eq!(
            Daily::Trail.name(Part::Before(3 * DAY_MS)),
            "profile_trail_before_3"
        );
        assert_eq!(Daily::parse("profile_seen", "profile_seen_wide_1_2"), None);
    }
}
