-- Issue 23: the refusals charged to an identifier are counted in 64 bits
-- (and saturate): a publisher repeating one refused link could otherwise
-- wrap a 32-bit count within hours. The view reading the column is made
-- again around the change (PostgreSQL will not retype a column a view uses).
-- Retyping rewrites tidemark.profile_ids once, under its exclusive lock.
DROP VIEW tidemark.profile_blocklist;

ALTER TABLE tidemark.profile_ids ALTER COLUMN refusals TYPE bigint;

CREATE VIEW tidemark.profile_blocklist AS
SELECT id AS identifier, blocklisted_at, refusals
FROM tidemark.profile_ids
WHERE blocklisted_at IS NOT NULL;
