-- Views for operators (`docs/sql-inspection.md` shows each in use).

-- Each shard: its clock, whether a process holds it, how far the clock is
-- behind wall time (for an event clock, how far the replay is behind now).
CREATE VIEW tidemark.shard_status AS
SELECT s.name AS shard,
       s.prefixes,
       s.rate,
       s.clock_kind,
       to_timestamp(s.clock_ms / 1000.0) AS clock,
       now() - to_timestamp(s.clock_ms / 1000.0) AS clock_behind_wall,
       s.next_seq - 1 AS observations,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted
                 AND l.classid = 1952738667::oid   -- "tdmk", the shard lock class
                 AND l.objid = hashtext(s.name)::oid) AS running,
       s.started_at,
       s.updated_at
FROM tidemark.shards s;

-- Every phase watermark: transactions created at or before `swept_through`
-- are done with that phase. `lag` is how far it trails the shard's clock
-- beyond its configured window + grace (normally under one period).
CREATE VIEW tidemark.watermark_lag AS
SELECT w.shard,
       w.phase,
       make_interval(secs => w.offset_ms / 1000.0) AS window_plus_grace,
       to_timestamp(w.wm_ms / 1000.0) AS swept_through,
       make_interval(secs => (s.clock_ms - w.offset_ms - w.wm_ms) / 1000.0) AS lag,
       w.updated_at
FROM tidemark.watermarks w
JOIN tidemark.shards s ON s.name = w.shard
ORDER BY w.shard, w.offset_ms;

-- Observations per shard and target: all time, and emitted in the last hour.
CREATE VIEW tidemark.observation_rates AS
SELECT shard,
       target,
       count(*) AS total,
       avg(label)::numeric(8, 5) AS label_rate,
       count(*) FILTER (WHERE emitted_at > now() - interval '1 hour') AS last_hour,
       (avg(label) FILTER (WHERE emitted_at > now() - interval '1 hour'))::numeric(8, 5) AS label_rate_last_hour,
       max(emitted_at) AS last_emitted
FROM tidemark.observations
GROUP BY shard, target
ORDER BY shard, target;

-- Counters split into family and subject: received / late / outside_windows /
-- unmatched / future per event type, rejected per reason, and the rest.
CREATE VIEW tidemark.counters AS
SELECT shard,
       CASE
           WHEN name ~ '^(received|late|unmatched|future|rejected)_' THEN split_part(name, '_', 1)
           WHEN name LIKE 'outside_windows_%' THEN 'outside_windows'
           WHEN name ~ '^(observations|positives)_' THEN split_part(name, '_', 1)
           ELSE 'shard'
       END AS family,
       CASE
           WHEN name ~ '^(received|late|unmatched|future|rejected)_' THEN substr(name, strpos(name, '_') + 1)
           WHEN name LIKE 'outside_windows_%' THEN substr(name, 17)
           WHEN name ~ '^(observations|positives)_' THEN substr(name, strpos(name, '_') + 1)
           ELSE name
       END AS subject,
       value,
       updated_at
FROM tidemark.shard_counters
ORDER BY shard, family, subject;

-- What each shard's buffer holds, by tier: `events` (waiting for the
-- impression sweep), `txns` (impressed, waiting for clicks), `long` (clicked,
-- waiting for installs). Row counts are the statistics collector's.
CREATE VIEW tidemark.buffer_rows AS
SELECT substr(t.schemaname, 7) AS shard,
       CASE WHEN t.relname LIKE 'events%' THEN 'events (until impression sweep)'
            WHEN t.relname LIKE 'txns%' THEN 'txns (impressed, until click sweep)'
            ELSE 'long (clicked, until last sweep)' END AS tier,
       count(*) AS tables,
       sum(t.n_live_tup) AS rows,
       pg_size_pretty(sum(pg_total_relation_size(t.relid))) AS size
FROM pg_stat_user_tables t
WHERE t.schemaname LIKE 'shard\_%' AND t.relname <> 'sentinel'
GROUP BY 1, 2
ORDER BY 1, 2;

-- How long after creation each event type arrived, over the transactions a
-- shard holds now (fresh events, and the earliest click and install of
-- consolidated ones), against the window + grace of the phase that reads it:
-- do the windows fit the traffic?
CREATE FUNCTION tidemark.event_delays(shard_name text)
RETURNS TABLE (type text, events bigint, p50 interval, p90 interval, p99 interval, max interval, "window" interval)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    wm_impression timestamptz;
    wm_unclicked timestamptz;
BEGIN
    SELECT to_timestamp(w.wm_ms / 1000.0) INTO wm_impression
    FROM tidemark.watermarks w WHERE w.shard = shard_name AND w.phase = 'impression';
    SELECT to_timestamp(w.wm_ms / 1000.0) INTO wm_unclicked
    FROM tidemark.watermarks w WHERE w.shard = shard_name AND w.phase = 'unclicked';
    RETURN QUERY EXECUTE format(
        'WITH d AS (
             SELECT e.type, e.ts - e.created_at AS delay FROM %1$I.events e
             WHERE e.created_at > coalesce($1, ''-infinity'')
             UNION ALL
             SELECT x.type, x.delay FROM %1$I.txns t,
                 LATERAL (VALUES (''click'', t.click_ts - t.created_at), (''install'', t.install_ts - t.created_at)) x(type, delay)
             WHERE x.delay IS NOT NULL AND t.created_at > coalesce($2, ''-infinity'')
             UNION ALL
             SELECT x.type, x.delay FROM %1$I.long l,
                 LATERAL (VALUES (''click'', l.click_ts - l.created_at), (''install'', l.install_ts - l.created_at)) x(type, delay)
             WHERE x.delay IS NOT NULL
         )
         SELECT d.type, count(*),
                percentile_cont(0.5) WITHIN GROUP (ORDER BY d.delay),
                percentile_cont(0.9) WITHIN GROUP (ORDER BY d.delay),
                percentile_cont(0.99) WITHIN GROUP (ORDER BY d.delay),
                max(d.delay),
                make_interval(secs => (SELECT w.offset_ms / 1000.0 FROM tidemark.watermarks w
                                       WHERE w.shard = %2$L AND w.phase = CASE d.type
                                           WHEN ''bid'' THEN ''impression'' WHEN ''impression'' THEN ''impression''
                                           WHEN ''click'' THEN ''ctr'' WHEN ''install'' THEN ''cvr_long'' ELSE d.type END))
         FROM d GROUP BY d.type ORDER BY 2 DESC',
        'shard_' || shard_name, shard_name)
    USING wm_impression, wm_unclicked;
END $$;

COMMENT ON FUNCTION tidemark.event_delays(text) IS
    'Delay after creation per event type over the transactions a shard holds, with the window + grace of the phase that reads it';
