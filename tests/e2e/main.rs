//! End-to-end tests: the built `tidemark` binary, a real PostgreSQL cluster
//! and real ZeroMQ sockets. One test binary, so one cluster serves them all.

#[path = "../support/mod.rs"]
mod support;

mod bridging;
mod cli;
mod db;
mod demo;
mod deploy;
mod exact;
mod hosts;
mod learn;
mod profiles;
mod shard;
mod tidy;
mod tls;
