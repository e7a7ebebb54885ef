//! Checkpoints (SPEC 10): one file holding, for every target, the non-zero
//! weights bidders score with and the learner's resume state, the hashing
//! settings, and the position reached in each shard's observation stream.
//! `docs/checkpoint-format.md` specifies the bytes.
//!
//! Owns: the format (write, read, verify), atomic publication with a stable
//! `latest` name, and `Scorer`, which bidders link to score bids and reload
//! newer checkpoints while scoring goes on. Depends only on the feature
//! hashing crate and serde_json: no runtime, no database, no sockets.

#![warn(missing_docs)]

mod format;
mod publish;
mod scorer;
mod sections;

pub use format::{
    Candidate, Checkpoint, FormatError, Target, Tuning, FORMAT_VERSION, MAGIC, MAX_CANDIDATES,
};
pub use publish::{latest, publish, remove_stale_temporaries, write, LATEST};
pub use scorer::{Model, Scorer, Scores};
