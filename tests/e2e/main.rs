//! End-to-end tests: the built `tidemark` binary, a real PostgreSQL cluster
//! and real ZeroMQ sockets. One test binary, so one cluster serves them all.
//! Helpers come only from `tidemark-testkit`; the guardrails that need no
//! database are the `tidy` test target.

// Several publishers linking the same persons at once (SPEC 11).
mod bridging;
// `tidemark plan` and argument handling.
mod cli;
// The embedded cluster (SPEC 9) and the per-test database harness.
mod db;
// `tidemark demo`, small: its report, export, a signal stopping it.
mod demo;
// The systemd units and the shipped layout, alerts and dashboards.
mod deploy;
// Shards against the reference row by row, under faults and load.
mod exact;
// The programs under `examples/`, against real processes.
mod examples;
// Promoted standbys that missed commits: profiles, shard, reader.
mod failover;
// Numbers out of range never reach a model (SPEC 10).
mod finite;
// Floods of the largest messages: memory within its bound.
mod floods;
// docs/first-pipeline.md, run as a newcomer runs it.
mod guide;
// Hostile and broken peers: refused, counted, honest traffic kept.
mod hostile;
// Several hosts in network namespaces.
mod hosts;
// CURVE keys (SPEC 2, 7) on real processes and sockets.
mod keys;
// The learner end to end, killed at random, checkpoints scored.
mod learn;
// First-copy marks (SPEC 11) taken plainly, and copies.
mod marks;
// An oversized event costs only itself (SPEC 2).
mod oversize;
// Profiles (SPEC 11) end to end against the reference.
mod profiles;
// A stalled replica receiver reads as lag.
mod replicas;
// Restarts never stall (SPEC 12): kill -9 twenty times, an operator's lock.
mod restarts;
// The embedded cluster's password and files against a local attacker.
mod secrets;
// Shards end to end (SPEC 5), and their faults.
mod shard;
// Staleness fixed at acceptance (SPEC 11): held databases.
mod staleness;
// Processes started before their database, or cut while starting.
mod starting;
// What ANALYZE does to the profile tables.
mod statistics;
// `tidemark status` and `tidemark validate` over a deployment.
mod status;
// TLS to PostgreSQL as libpq's sslmode asks.
mod tls;
// Trails packed by day, read back against the reference.
mod trails;
