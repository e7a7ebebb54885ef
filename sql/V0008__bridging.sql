-- Bridging (SPEC 11, issue 11): identifiers of one person linked into one
-- profile, with caps against super-nodes.

-- Refusals charged to an identifier (a link that would have made a person
-- hold more than max_ids), and when it was blocklisted (it links nothing
-- more; it stays readable).
ALTER TABLE tidemark.profile_ids
    ADD COLUMN refusals       integer     NOT NULL DEFAULT 0,
    ADD COLUMN blocklisted_at timestamptz;

CREATE VIEW tidemark.profile_blocklist AS
SELECT id AS identifier, blocklisted_at, refusals
FROM tidemark.profile_ids
WHERE blocklisted_at IS NOT NULL;

-- Every merge, appended: wall time, the event that caused it, and the
-- surviving and absorbed masters as they stood.
CREATE TABLE tidemark.profile_merges (
    merged_at timestamptz NOT NULL DEFAULT now(),
    ts        bigint      NOT NULL,
    txid      text        NOT NULL,
    master    text        NOT NULL,
    absorbed  text        NOT NULL
);

-- How big persons are: a growing tail is where super-nodes hide.
CREATE VIEW tidemark.profile_sizes AS
SELECT size, count(*) AS persons
FROM tidemark.profiles
GROUP BY size
ORDER BY size;
