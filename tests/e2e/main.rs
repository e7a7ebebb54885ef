//! End-to-end tests: the built `tidemark` binary, a real PostgreSQL cluster
//! and real ZeroMQ sockets. One test binary, so one cluster serves them all.
//! Helpers come only from `tidemark-testkit`; the guardrails that need no
//! database are the `tidy` test target.

mod bridging;
mod cli;
mod db;
mod demo;
mod deploy;
mod exact;
mod examples;
mod failover;
mod finite;
mod floods;
mod guide;
mod hostile;
mod hosts;
mod keys;
mod learn;
mod marks;
mod oversize;
mod profiles;
mod replicas;
mod restarts;
mod secrets;
mod shard;
mod staleness;
mod starting;
mod statistics;
mod status;
mod tls;
mod trails;
