-- Registered readers of the observation stream: how far each has read each
-- shard. A shard's retention never deletes observations a registered
-- consumer has not read yet.
CREATE TABLE tidemark.consumers (
    consumer   text        NOT NULL,
    shard      text        NOT NULL,
    seq        bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, shard)
);
