-- Issue 8: nothing the database refuses for one event can stop a shard.

-- The max_future reference (SPEC 1): the newest tick the shard heard, saved
-- with the clock so a restarted shard starts from it, not from its clock.
ALTER TABLE tidemark.shards ADD COLUMN reference_ms bigint;
-- The last database error the shard met, so a retrying shard is never silent.
ALTER TABLE tidemark.shards ADD COLUMN last_error text;
ALTER TABLE tidemark.shards ADD COLUMN last_error_at timestamptz;

-- Events that passed the door checks but that PostgreSQL refused on their own
-- (found by splitting the refused batch): the raw message, why, and when.
-- Bounded per shard (`quarantine_max`); what the bound turns away is counted
-- as `quarantine_dropped`.
CREATE TABLE tidemark.quarantine (
    id       bigserial   PRIMARY KEY,
    shard    text        NOT NULL,
    topic    text        NOT NULL,
    payload  bytea       NOT NULL,
    reason   text        NOT NULL,
    sqlstate text,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quarantine_shard ON tidemark.quarantine (shard, id);

-- Observations set aside because the database refused their row: each
-- (target, txid) that should have been emitted and was not. Counted as gaps.
CREATE TABLE tidemark.emission_gaps (
    shard      text        NOT NULL,
    target     text        NOT NULL,
    txid       text        NOT NULL,
    created_at timestamptz NOT NULL,
    reason     text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard, target, txid)
);

CREATE OR REPLACE VIEW tidemark.shard_status AS
SELECT s.name AS shard,
       s.prefixes,
       s.rate,
       s.clock_kind,
       to_timestamp(s.clock_ms / 1000.0) AS clock,
       now() - to_timestamp(s.clock_ms / 1000.0) AS clock_behind_wall,
       s.next_seq - 1 AS observations,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted
                 AND l.classid = 1952738667::oid   -- "tdmk", the shard lock class
                 AND l.objid = hashtext(s.name)::oid) AS running,
       s.started_at,
       s.updated_at,
       to_timestamp(s.reference_ms / 1000.0) AS newest_tick,
       (SELECT coalesce(sum(value), 0) FROM tidemark.shard_counters c
         WHERE c.shard = s.name AND c.name = 'quarantined')::bigint AS quarantined,
       (SELECT coalesce(sum(value), 0) FROM tidemark.shard_counters c
         WHERE c.shard = s.name AND c.name LIKE 'db\_errors\_%')::bigint AS db_errors,
       s.last_error,
       s.last_error_at
FROM tidemark.shards s;
