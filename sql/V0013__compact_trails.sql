-- Compact trail rows (issue 24): a trail row and its covering index entry
-- each carried the type's name, the txid's 32 hex digits as text and, for
-- nearly every event, a one-element list repeating the identifier the row is
-- under. Now:
--   type  the type's position in profile_types (2 bytes, not ~8–12),
--   txid  a uuid: the same 32 hex digits as 16 bytes (SPEC 1 fixes the form;
--         read back as hex without dashes, the order of the text kept),
--   ids   NULL when the event carried only the identifier the row is under;
--         empty (as before) when the list lives in profile_trail_wide.
-- `tidemark.profile_trail_events` decodes rows for people (still one per
-- event under the identifier it counted for).
--
-- Existing rows are rewritten in place (one pass per partition, inside the
-- migration's transaction: time in proportion to the trail kept).
CREATE FUNCTION tidemark.profile_type_position(text) RETURNS smallint
    LANGUAGE sql STABLE AS $$ SELECT position FROM tidemark.profile_types WHERE name = $1 $$;

DROP INDEX tidemark.profile_trail_id_ts;
ALTER TABLE tidemark.profile_trail
    ALTER COLUMN ids DROP NOT NULL,
    ALTER COLUMN type TYPE smallint USING tidemark.profile_type_position(type),
    ALTER COLUMN txid TYPE uuid USING txid::uuid,
    ALTER COLUMN ids TYPE text[] USING CASE WHEN ids = ARRAY[id] THEN NULL ELSE ids END;
CREATE INDEX profile_trail_id_ts ON tidemark.profile_trail (id, ts) INCLUDE (type, txid, ids);

ALTER TABLE tidemark.profile_trail_wide
    ALTER COLUMN type TYPE smallint USING tidemark.profile_type_position(type),
    ALTER COLUMN txid TYPE uuid USING txid::uuid;

DROP FUNCTION tidemark.profile_type_position(text);

-- For people: trail rows decoded (type name, txid as hex, every identifier
-- the event carried). Readers in code use the table and its index.
CREATE VIEW tidemark.profile_trail_events AS
SELECT t.id, t.ts, y.name AS type, replace(t.txid::text, '-', '') AS txid,
       CASE WHEN t.ids IS NULL THEN ARRAY[t.id]
            WHEN cardinality(t.ids) = 0 THEN w.ids
            ELSE t.ids END AS ids
FROM tidemark.profile_trail t
JOIN tidemark.profile_types y ON y.position = t.type
LEFT JOIN tidemark.profile_trail_wide w
       ON cardinality(t.ids) = 0 AND (w.id, w.ts, w.type, w.txid) = (t.id, t.ts, t.type, t.txid);
