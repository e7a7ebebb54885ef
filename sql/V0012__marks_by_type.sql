-- First-copy marks split by type (SPEC 11 v1.2 sets `dedup` per type): each
-- type's marks have partitions of their own, by creation time (an hour when
-- its `dedup` is under a day, else a day), so impressions' marks go an hour
-- after their horizon instead of waiting for the installs' 8 days.
-- Partitions are named `profile_seen_<type position>_<from>_<to>` (ms) and
-- `profile_seen_<type position>_before_<to>` for a type's catch-all.
--
-- The marks already kept move to one catch-all per type, bounded at the
-- UTC day after the newest (`max_future` bounds how far ahead that can be):
-- the profile process drops it once that day is behind the type's horizon,
-- and makes partitions of the new kind above it. The move copies every mark
-- inside the migration's transaction: on a large table the first start of
-- this version takes time in proportion to the marks kept.
ALTER TABLE tidemark.profile_seen RENAME TO profile_seen_v1;
ALTER INDEX tidemark.profile_seen_pkey RENAME TO profile_seen_v1_pkey;

CREATE TABLE tidemark.profile_seen (
    key  uuid     NOT NULL,
    type smallint NOT NULL,
    PRIMARY KEY (key, type)
) PARTITION BY RANGE (type, key);

DO $$
DECLARE
    t      smallint;
    newest uuid;
    bound  bigint;
    hex    text;
BEGIN
    FOR t, newest IN SELECT DISTINCT ON (type) type, key FROM tidemark.profile_seen_v1
                     ORDER BY type, key DESC LOOP
        bound := ('x' || left(replace(newest::text, '-', ''), 12))::bit(48)::bigint;
        bound := (bound / 86400000 + 1) * 86400000;
        hex := lpad(to_hex(bound), 12, '0');
        EXECUTE format(
            'CREATE TABLE tidemark.%I PARTITION OF tidemark.profile_seen
             FOR VALUES FROM (%s, MINVALUE) TO (%s, %L)',
            'profile_seen_' || t || '_before_' || bound, t, t,
            left(hex, 8) || '-' || substr(hex, 9, 4) || '-0000-0000-000000000000');
    END LOOP;
END $$;

INSERT INTO tidemark.profile_seen (key, type) SELECT key, type FROM tidemark.profile_seen_v1;
DROP TABLE tidemark.profile_seen_v1;
