//! End-to-end tests: the built `tidemark` binary, a real PostgreSQL cluster
//! and real ZeroMQ sockets. One test binary, so one cluster serves them all.
//! Helpers come only from `tidemark-testkit`; the guardrails that need no
//! database are the `tidy` test target.

// `tidemark plan` and argument handling.
mod cli;
// The embedded cluster (SPEC 9) and the per-test database harness.
mod db;
// `tidemark demo`, small: its report, export, a signal stopping it.
mod demo;
// The systemd units and the shipped layout, alerts and dashboards.
mod deploy;
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
// An oversized event costs only itself (SPEC 2).
mod oversize;
// Profiles (SPEC 11) end to end against the reference: links, marks,
// restarts, staleness, statistics and trails in its folder.
mod profiles;
// A stalled replica receiver reads as lag.
mod replicas;
// The embedded cluster's password and files against a local attacker.
mod secrets;
// Shards end to end (SPEC 5), their faults, and `exact`: row by row
// against the reference under faults and load.
mod shard;
// Processes started before their database, or cut while starting.
mod starting;
// `tidemark status` and `tidemark validate` over a deployment.
mod status;
// TLS to PostgreSQL as libpq's sslmode asks.
mod tls;
