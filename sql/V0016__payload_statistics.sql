-- Payload columns carry no planner statistics (issue 24). Autovacuum analyzes
-- the profile tables every few seconds under ingest (updates count toward
-- its threshold), and for array columns ANALYZE builds element statistics:
-- sorting and hashing every element of 30,000 sampled rows. No query
-- filters, joins or groups on these columns, so the statistics were never
-- read. ANALYZE was about a fifth of PostgreSQL's CPU under linked ingest
-- with trails, most of it these columns (docs/benchmarks.md). A target of
-- 0 makes ANALYZE skip the column. Partitions made later copy their
-- parent's targets (`tidemark_store::create_partition`); this recurses
-- into today's.
ALTER TABLE tidemark.profiles
    ALTER COLUMN counter_values SET STATISTICS 0,
    ALTER COLUMN counter_refs SET STATISTICS 0,
    ALTER COLUMN counts SET STATISTICS 0,
    ALTER COLUMN firsts SET STATISTICS 0,
    ALTER COLUMN lasts SET STATISTICS 0;
ALTER TABLE tidemark.profile_trail
    ALTER COLUMN ids SET STATISTICS 0;
ALTER TABLE tidemark.profile_trail_wide
    ALTER COLUMN ids SET STATISTICS 0;
ALTER TABLE tidemark.profile_trail_chunks
    ALTER COLUMN ids SET STATISTICS 0,
    ALTER COLUMN off SET STATISTICS 0,
    ALTER COLUMN type SET STATISTICS 0,
    ALTER COLUMN txid SET STATISTICS 0;
ALTER TABLE tidemark.profile_trail_packed
    ALTER COLUMN off SET STATISTICS 0,
    ALTER COLUMN type SET STATISTICS 0,
    ALTER COLUMN txid SET STATISTICS 0;

-- Analyzed after a fifth of the rows changed rather than the embedded
-- cluster's 2% (set for the churning shard buffers): under ingest that was
-- every autovacuum round. Profiles and identifiers are updated in place and
-- keyed uniquely, the merge log, marks and trails only inserted, so their
-- statistics keep their shape; partitions made later get the same
-- (`PARTITION_OPTIONS` in the profiles crate).
ALTER TABLE tidemark.profiles SET (autovacuum_analyze_scale_factor = 0.2);
ALTER TABLE tidemark.profile_ids SET (autovacuum_analyze_scale_factor = 0.2);
ALTER TABLE tidemark.profile_merges SET (autovacuum_analyze_scale_factor = 0.2);
DO $$
DECLARE
    p regclass;
BEGIN
    FOR p IN SELECT i.inhrelid::regclass FROM pg_inherits i
             WHERE i.inhparent IN ('tidemark.profile_seen'::regclass,
                                   'tidemark.profile_trail'::regclass,
                                   'tidemark.profile_trail_chunks'::regclass,
                                   'tidemark.profile_trail_packed'::regclass) LOOP
        EXECUTE format('ALTER TABLE %s SET (autovacuum_analyze_scale_factor = 0.2)', p);
    END LOOP;
END $$;
