-- Trail chunks (issue 24): a worker writes the events of one transaction
-- as one row per identifier they are under, UTC day and identifier list, in
-- the packed layout: parallel arrays of offsets from `base` (the day's
-- start), type positions and txids, ordered by (ts, type, txid). `ids` is
-- the list every event of the chunk carried, NULL when that is the row's
-- identifier alone (lists too long for an index entry stay rows of
-- `profile_trail` with `profile_trail_wide`). Skewed traffic repeats
-- identifiers within a transaction, so this writes a third of the heap rows
-- and index entries one row per event did (Zipf persons). Packing (V0014)
-- merges a day's chunks of one identifier alone (and such rows) into one row
-- per identifier in `profile_trail_packed`; chunks with a list, and chunks
-- written after the day was packed (late events), stay chunks.
CREATE TABLE tidemark.profile_trail_chunks (
    id   text       NOT NULL,
    base bigint     NOT NULL,
    ids  text[],
    off  integer[]  NOT NULL,
    type smallint[] NOT NULL,
    txid uuid[]     NOT NULL
) PARTITION BY RANGE (base);
CREATE INDEX profile_trail_chunks_id_base ON tidemark.profile_trail_chunks (id, base);

-- Each day's `profile_trail` partition gets its chunks' partition.
DO $$
DECLARE
    p record;
BEGIN
    -- Bounds print as FROM ('<ms>') TO ('<ms>'), or FROM (MINVALUE).
    FOR p IN SELECT c.relname,
                    btrim(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(([^)]*)\)'), chr(39)) AS lo,
                    btrim(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(([^)]*)\)'), chr(39)) AS hi
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'tidemark.profile_trail'::regclass
    LOOP
        EXECUTE format('CREATE TABLE tidemark.%I PARTITION OF tidemark.profile_trail_chunks FOR VALUES FROM (%s) TO (%s)',
                       replace(p.relname, 'profile_trail', 'profile_trail_chunks'), p.lo,
                       CASE WHEN p.lo = 'MINVALUE' THEN p.hi ELSE (p.lo::bigint + 1)::text END);
    END LOOP;
END $$;

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
SELECT p.id, p.base + u.off, y.name, replace(u.txid::text, '-', ''), coalesce(p.ids, ARRAY[p.id])
FROM (SELECT id, base, NULL::text[] AS ids, off, type, txid FROM tidemark.profile_trail_packed
      UNION ALL SELECT id, base, ids, off, type, txid FROM tidemark.profile_trail_chunks) p
CROSS JOIN LATERAL unnest(p.off, p.type, p.txid) AS u(off, type, txid)
JOIN tidemark.profile_types y ON y.position = u.type;
