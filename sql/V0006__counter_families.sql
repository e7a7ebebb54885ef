-- `tidemark.counters` split names by prefix only, so the single counter
-- `future_tick` showed as family `future`, subject `tick`. Names are defined
-- once in `tidemark_store::telemetry`; a test checks this view against them.
CREATE OR REPLACE VIEW tidemark.counters AS
SELECT shard,
       CASE
           WHEN name = 'future_tick' THEN 'shard'
           WHEN name ~ '^(received|late|unmatched|future|rejected)_' THEN split_part(name, '_', 1)
           WHEN name LIKE 'outside_windows_%' THEN 'outside_windows'
           WHEN name ~ '^(observations|positives)_' THEN split_part(name, '_', 1)
           ELSE 'shard'
       END AS family,
       CASE
           WHEN name = 'future_tick' THEN name
           WHEN name ~ '^(received|late|unmatched|future|rejected)_' THEN substr(name, strpos(name, '_') + 1)
           WHEN name LIKE 'outside_windows_%' THEN substr(name, 17)
           WHEN name ~ '^(observations|positives)_' THEN substr(name, strpos(name, '_') + 1)
           ELSE name
       END AS subject,
       value,
       updated_at
FROM tidemark.shard_counters
ORDER BY shard, family, subject;
