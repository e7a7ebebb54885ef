-- Packed trail days (issue 24): once a day of trail rows is behind the
-- clock (an hour past its end), the profile process moves the rows of
-- events that carried only the identifier they are under (nearly all) into
-- one row per identifier and day: parallel arrays of the events' offsets
-- from the partition's start, type positions and txids, ordered by (ts,
-- type, txid). About 25 bytes per event against 170, and a trail read
-- fetches a handful of rows, not one per event. Events that carried other
-- identifiers, and late events written after the day was packed, stay in
-- `profile_trail`; a read takes both in one statement.
CREATE TABLE tidemark.profile_trail_packed (
    id   text       NOT NULL,
    -- The start of the `profile_trail` partition the events came from.
    base bigint     NOT NULL,
    off  integer[]  NOT NULL,
    type smallint[] NOT NULL,
    txid uuid[]     NOT NULL
) PARTITION BY RANGE (base);
CREATE INDEX profile_trail_packed_id_base ON tidemark.profile_trail_packed (id, base);

-- Which `profile_trail` partitions were packed, committed with the packing;
-- `tidied` once the day's freed space was returned (VACUUM, and its index
-- built again). A row leaves with its day.
CREATE TABLE tidemark.profile_trail_packed_parts (
    base      bigint      PRIMARY KEY,
    until     bigint      NOT NULL,
    events    bigint      NOT NULL,
    packed_at timestamptz NOT NULL DEFAULT now(),
    tidied    boolean     NOT NULL DEFAULT false
);

CREATE OR REPLACE VIEW tidemark.profile_trail_events AS
SELECT t.id, t.ts, y.name AS type, replace(t.txid::text, '-', '') AS txid,
       CASE WHEN t.ids IS NULL THEN ARRAY[t.id]
            WHEN cardinality(t.ids) = 0 THEN w.ids
            ELSE t.ids END AS ids
FROM tidemark.profile_trail t
JOIN tidemark.profile_types y ON y.position = t.type
LEFT JOIN tidemark.profile_trail_wide w
       ON cardinality(t.ids) = 0 AND (w.id, w.ts, w.type, w.txid) = (t.id, t.ts, t.type, t.txid)
UNION ALL
SELECT p.id, p.base + u.off, y.name, replace(u.txid::text, '-', ''), ARRAY[p.id]
FROM tidemark.profile_trail_packed p
CROSS JOIN LATERAL unnest(p.off, p.type, p.txid) AS u(off, type, txid)
JOIN tidemark.profile_types y ON y.position = u.type;
