-- A replica's lag counts the silence of its receiver too (issue 46). Caught
-- up and streaming used to read 0 even when the receiver had stalled (a
-- stopped walreceiver still says `streaming`, and has replayed all it
-- received). A receiver that hears nothing for half of `wal_receiver_timeout`
-- asks its primary for a reply, so silence up to that is normal; beyond it
-- counts as lag. Otherwise, as before: the age of the last transaction
-- replayed here; NULL on a primary (a promoted replica reads NULL, and
-- readers skip it). Roles that may not read `pg_stat_wal_receiver`'s
-- details (not superuser, not pg_read_all_stats) get the replay age.
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
            ELSE coalesce(
                (SELECT greatest(0,
                            (extract(epoch FROM clock_timestamp() - r.last_msg_receipt_time) * 1000)::bigint
                            - (SELECT setting::bigint / 2 FROM pg_settings
                               WHERE name = 'wal_receiver_timeout'))
                 FROM pg_stat_wal_receiver r
                 WHERE r.status = 'streaming' AND r.last_msg_receipt_time IS NOT NULL
                   AND pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()),
                (extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()) * 1000)::bigint)
       END AS replica_lag_ms
FROM tidemark.profile_process p;
