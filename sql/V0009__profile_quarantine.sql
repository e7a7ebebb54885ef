-- Issue 23 (SPEC 11 v1.2 "Poison"): nothing PostgreSQL refuses for one event
-- can stop a profile process. Its batches are split until the refused events
-- are found; each is kept here with its raw message, why, and when, while the
-- rest of its batch is applied. One profile process owns a database, so no
-- process column. Bounded (`quarantine_max`); what the bound turns away is
-- counted as `quarantine_dropped` in tidemark.profile_counts.
CREATE TABLE tidemark.profile_quarantine (
    id       bigserial   PRIMARY KEY,
    topic    text        NOT NULL,
    payload  bytea       NOT NULL,
    reason   text        NOT NULL,
    sqlstate text,
    at       timestamptz NOT NULL DEFAULT now()
);
