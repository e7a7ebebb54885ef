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
    PRIMARY KEY (shard, seq),
    UNIQUE (shard, target, txid)
);

COMMENT ON TABLE tidemark.observations IS
    'One row per eligible (target, txid): the bid features and a 0/1 label (SPEC 5)';
