-- The observation stream (SPEC 5): what learners consume, one row per
-- (shard, target, txid), in each shard's gap-free emission order `seq`.
-- Logged: observations survive a PostgreSQL crash; only buffers are unlogged.
CREATE TABLE tidemark.observations (
    shard      text             NOT NULL,
    seq        bigint           NOT NULL,
    target     text             NOT NULL,
    txid       text             NOT NULL,
    label      smallint         NOT NULL CHECK (label IN (0, 1)),
    features   jsonb            NOT NULL,
    rate       double precision NOT NULL,
    created_at timestamptz      NOT NULL,
    emitted_at timestamptz      NOT NULL DEFAULT now(),
    -- Learners read each shard in seq order. No unique index on (shard, target,
    -- txid): exactly-once comes from the watermarks moving in the same
    -- transaction as the emission, and a random-order index would slow every sweep.
    PRIMARY KEY (shard, seq)
);

COMMENT ON TABLE tidemark.observations IS
    'One row per eligible (target, txid): the bid features and a 0/1 label (SPEC 5)';
