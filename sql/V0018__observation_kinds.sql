-- Late labels learned early (SPEC 5, v1.3). An early-feedback target emits,
-- per (target, txid), a `provisional` 0 at its window's start, then either a
-- `late` 1 when the label's event arrives or a `final` 0 at its window's
-- end; every other observation is `final`. `delay_ms` is, on `late` rows,
-- the event time from the transaction's creation to the event that made the
-- label. Existing rows are all `final`: the default fills them without a
-- table rewrite. `clock_ms` is the shard's clock (event time) at the sweep
-- that emitted the row: when a learner could first have read it, which
-- evaluations replay in event time (null on rows emitted before this).
-- The check is added NOT VALID (no scan under the exclusive lock), then
-- validated under a lock that lets readers and writers go on.
ALTER TABLE tidemark.observations
    ADD COLUMN kind text NOT NULL DEFAULT 'final',
    ADD COLUMN delay_ms bigint,
    ADD COLUMN clock_ms bigint,
    ADD CONSTRAINT observations_kind CHECK (kind IN ('provisional', 'late', 'final')) NOT VALID;
ALTER TABLE tidemark.observations VALIDATE CONSTRAINT observations_kind;

COMMENT ON COLUMN tidemark.observations.kind IS
    'provisional (label 0 at the window start of an early target), late (its label 1 when the event arrives) or final (SPEC 5)';
COMMENT ON COLUMN tidemark.observations.delay_ms IS
    'late rows: event time (ms) from the transaction''s creation to the event that made the label; null elsewhere';
COMMENT ON COLUMN tidemark.observations.clock_ms IS
    'the shard''s clock (event time, ms since the epoch) at the sweep that emitted the row';
