-- What a reader on a hot standby (`tidemark db up --standby`, or any
-- streaming replica) needs to know: whether it is one, and how far behind
-- the primary it is. `replica_lag_ms` is the time since the last
-- transaction replayed here committed on the primary, so it also grows while
-- the primary writes nothing; NULL on a primary.
CREATE OR REPLACE VIEW tidemark.profile_status AS
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
       p.updated_at,
       pg_is_in_recovery() AS on_replica,
       CASE WHEN pg_is_in_recovery()
            THEN (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::bigint
       END AS replica_lag_ms
FROM tidemark.profile_process p;
