//! The learning service: the online learner that follows shards'
//! observation streams and writes checkpoints (`tidemark learn --config`),
//! and the offline progressive pass over TSV files (`tidemark learn --input`).
//!
//! Owns: the learner's configuration (validated once, durations parsed),
//! the loop (read a batch per stream, learn, checkpoint, register positions),
//! resuming from the latest checkpoint, retrying sources that are away, and
//! file and gzip IO of the offline mode. The maths is `tidemark-ftrl`'s;
//! every SQL statement is `tidemark-store`'s.

#![warn(missing_docs)]

mod config;
pub mod metrics;
pub mod offline;
mod online;
mod sources;

pub use config::{check_bits, parse_transforms, Config, ConfigError, Source};
pub use online::{run, Summary, TrainError};
