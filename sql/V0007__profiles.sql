-- Profiles (SPEC 11): what each person did, for bidders to read at bid time.
-- Logged tables: profiles are long-lived state, and nothing committed is lost
-- on a database crash. One profile process owns the database (advisory lock);
-- within it, workers split persons so no two ever update one person at once.

-- The positions of event types and counters in each profile's arrays
-- (PostgreSQL arrays are 1-based: position 1 is element [1]). Appended to,
-- never renumbered: a stored array stays readable as definitions grow.
CREATE TABLE tidemark.profile_types (
    position smallint PRIMARY KEY CHECK (position > 0),
    name     text     NOT NULL UNIQUE
);

-- A counter's half-life is fixed once defined: a process configured with
-- another half-life for an existing name refuses to start.
CREATE TABLE tidemark.profile_counters (
    position     smallint    PRIMARY KEY CHECK (position > 0),
    name         text        NOT NULL UNIQUE,
    event        text        NOT NULL,
    half_life_ms bigint      NOT NULL CHECK (half_life_ms > 0),
    defined_at   timestamptz NOT NULL DEFAULT now()
);

CREATE SEQUENCE tidemark.profile_person_seq;

-- Identifier -> person: the lookups table (seed 001). `first_ts` is the
-- earliest `ts` of an event carrying the identifier (the master rule).
CREATE TABLE tidemark.profile_ids (
    id       text   PRIMARY KEY,
    person   bigint NOT NULL,
    first_ts bigint NOT NULL
) WITH (fillfactor = 90);
CREATE INDEX profile_ids_person ON tidemark.profile_ids (person);

-- One row per person. Counter i is `counter_values[i]` at `counter_refs[i]`
-- (ms): its value at t is counter_values[i] * 2^(-(t - counter_refs[i]) / half_life).
-- Per type position j: counts[j] events, first and last `ts` (0 when none).
-- Shorter arrays than the definitions mean zeros. fillfactor leaves room for
-- HOT updates: a profile is rewritten in place, its index untouched.
CREATE TABLE tidemark.profiles (
    person         bigint             PRIMARY KEY,
    master         text               NOT NULL,
    size           integer            NOT NULL,
    counter_values double precision[] NOT NULL,
    counter_refs   bigint[]           NOT NULL,
    counts         bigint[]           NOT NULL,
    firsts         bigint[]           NOT NULL,
    lasts          bigint[]           NOT NULL
) WITH (fillfactor = 70);

-- First copy wins (SPEC 11): one row per (type, txid) counted or judged,
-- kept for `dedup` of creation time. The key is the txid with its creation
-- time first (hex digits 21-32, then 1-20), so the index grows at its right
-- edge and each UTC day of creation is one partition, dropped whole.
-- `type` is a profile_types position.
CREATE TABLE tidemark.profile_seen (
    key  uuid     NOT NULL,
    type smallint NOT NULL,
    PRIMARY KEY (key, type)
) PARTITION BY RANGE (key);

-- Trails (SPEC 11, `trail`): every event counted, under the identifier it
-- counted for (its `user`, else its smallest), so a merge of persons never
-- rewrites a row: a person's trail is one index range scan per identifier per
-- UTC day (partition) touched. The index carries the whole row, so once
-- (auto)vacuum has marked a day's pages all-visible the scan reads the
-- person's entries, adjacent in the index, and no scattered heap pages.
CREATE TABLE tidemark.profile_trail (
    id   text   NOT NULL,
    ts   bigint NOT NULL,
    type text   NOT NULL,
    txid text   NOT NULL,
    -- Empty when the list is in profile_trail_wide (below).
    ids  text[] NOT NULL
) PARTITION BY RANGE (ts);
CREATE INDEX profile_trail_id_ts ON tidemark.profile_trail (id, ts) INCLUDE (type, txid, ids);

-- An event may carry more identifiers than one index entry holds (SPEC 11
-- bounds each, not their number): its trail row then has `ids` empty (no
-- event carries none) and the list lives here, so a hostile but valid event can never stop the process.
-- Rows leave with their day.
CREATE TABLE tidemark.profile_trail_wide (
    id   text   NOT NULL,
    ts   bigint NOT NULL,
    type text   NOT NULL,
    txid text   NOT NULL,
    ids  text[] NOT NULL,
    PRIMARY KEY (id, ts, type, txid)
);

-- The process that owns the database, its clock and max_future reference.
CREATE TABLE tidemark.profile_process (
    name         text        PRIMARY KEY,
    clock_ms     bigint,
    reference_ms bigint,
    config       jsonb       NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    pid          integer,
    host         text
);

-- Counts by reason, per worker (each worker adds to its own rows in the
-- transaction that applies its events, so they are exact across crashes).
-- Worker 0 also carries intake's rejects.
CREATE TABLE tidemark.profile_counts (
    worker smallint NOT NULL,
    reason text     NOT NULL,
    n      bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (worker, reason)
);

-- Events applied, the clock, and counts by reason: a client can tell when
-- ingest has caught up.
CREATE VIEW tidemark.profile_status AS
SELECT p.name,
       p.clock_ms,
       to_timestamp(p.clock_ms / 1000.0) AS clock,
       coalesce((SELECT sum(n) FROM tidemark.profile_counts WHERE reason = 'applied'), 0)::bigint
           AS events_applied,
       coalesce((SELECT jsonb_object_agg(reason, total ORDER BY reason)
                 FROM (SELECT reason, sum(n)::bigint AS total
                       FROM tidemark.profile_counts GROUP BY reason) r), '{}') AS counts,
       (SELECT count(*) FROM tidemark.profiles) AS persons,
       p.started_at,
       p.updated_at
FROM tidemark.profile_process p;

-- A decayed counter's value at `at_ms`. PostgreSQL raises an error where C
-- would underflow to 0, so vanishing terms are 0 before they are computed.
CREATE FUNCTION tidemark.decayed(value float8, ref_ms bigint, half_life_ms bigint, at_ms bigint)
RETURNS float8 LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
               WHEN coalesce(value, 0) = 0 OR e < -1000 THEN 0.0::float8
               WHEN e > 1000 THEN 'Infinity'::float8
               ELSE value * power(2.0::float8, e)
           END
    FROM (SELECT -(at_ms - ref_ms)::float8 / half_life_ms AS e) x
$$;

-- A profile in SQL, as `tidemark profile get` prints it (SPEC 11), for each
-- identifier asked, at `at_ms`.
CREATE FUNCTION tidemark.profile_get(ids text[], at_ms bigint)
RETURNS TABLE (id text, master text, size integer, counters jsonb,
               counts jsonb, first jsonb, last jsonb)
LANGUAGE sql STABLE AS $$
    SELECT q.id,
           coalesce(p.master, q.id),
           coalesce(p.size, 1),
           (SELECT coalesce(jsonb_object_agg(c.name,
                       tidemark.decayed(p.counter_values[c.position], p.counter_refs[c.position],
                                        c.half_life_ms, at_ms) ORDER BY c.position), '{}')
            FROM tidemark.profile_counters c),
           (SELECT coalesce(jsonb_object_agg(t.name, p.counts[t.position]), '{}')
            FROM tidemark.profile_types t WHERE p.counts[t.position] > 0),
           (SELECT coalesce(jsonb_object_agg(t.name, p.firsts[t.position]), '{}')
            FROM tidemark.profile_types t WHERE p.counts[t.position] > 0),
           (SELECT coalesce(jsonb_object_agg(t.name, p.lasts[t.position]), '{}')
            FROM tidemark.profile_types t WHERE p.counts[t.position] > 0)
    FROM unnest(ids) WITH ORDINALITY AS q(id, n)
    LEFT JOIN tidemark.profile_ids i ON i.id = q.id
    LEFT JOIN tidemark.profiles p ON p.person = i.person
    ORDER BY q.n
$$;
