-- Shard bookkeeping (logged: survives a PostgreSQL crash, unlike the buffers).

-- One row per shard that has ever run against this database.
CREATE TABLE tidemark.shards (
    name        text             PRIMARY KEY,
    prefixes    text[]           NOT NULL,
    rate        double precision NOT NULL,
    clock_kind  text             NOT NULL,
    -- The shard's clock (ms since the epoch); never moves back, across restarts too.
    clock_ms    bigint,
    -- Next observation sequence number: observations of this shard have seq < next_seq.
    next_seq    bigint           NOT NULL DEFAULT 1,
    config      jsonb            NOT NULL DEFAULT '{}',
    started_at  timestamptz      NOT NULL DEFAULT now(),
    updated_at  timestamptz      NOT NULL DEFAULT now(),
    pid         integer,
    host        text
);

-- One row per (shard, phase): transactions created at or before wm_ms are swept for it.
CREATE TABLE tidemark.watermarks (
    shard      text        NOT NULL REFERENCES tidemark.shards (name),
    phase      text        NOT NULL,
    offset_ms  bigint      NOT NULL,
    wm_ms      bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard, phase)
);

-- Monotone counters per shard: intake (accepted, rejected by reason, late by
-- type, ...) and phases (orphans, duplicates, dropped). Added to, never reset.
CREATE TABLE tidemark.shard_counters (
    shard      text        NOT NULL,
    name       text        NOT NULL,
    value      bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard, name)
);

-- Creation-time ranges whose buffered events were lost (a PostgreSQL crash
-- empties unlogged tables): their observations may be missing.
CREATE TABLE tidemark.gaps (
    id          bigserial   PRIMARY KEY,
    shard       text        NOT NULL,
    from_ms     bigint      NOT NULL,
    to_ms       bigint      NOT NULL,
    reason      text        NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT now()
);
