-- What a reader on a hot standby (`tidemark db up --standby`, or any
-- streaming replica) needs to know: whether it is one, and how far behind
-- the primary it is. `replica_lag_ms` is 0 while the standby streams and
-- has replayed everything it received, else the time since the last
-- transaction replayed here committed on the primary (a standby cut off
-- from its primary sees it grow); NULL on a primary.
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
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
                 AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::bigint
       END AS replica_lag_ms
FROM tidemark.profile_process p;
