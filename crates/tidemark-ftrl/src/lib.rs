//! The learner's mathematics: FTRL-Proximal logistic regression with
//! per-coordinate learning rates and elastic net (McMahan et al., KDD 2013,
//! Algorithm 1), several settings of it learning side by side so each target
//! predicts with the one doing best lately (a grid), progressive validation
//! metrics, and a set of models per target fed JSON feature objects; rows of
//! targets learned early (SPEC 5, v1.3) weighed so the models stay unbiased
//! for the final label (`early`), and targets pooled so a thin one borrows
//! a frequent one's evidence (`models`).
//!
//! Owns: model state (z, n), prediction and update, metrics, conversion to and
//! from checkpoint targets. Does no IO: no files, no database, no runtime.
//! Features are hashed only through `tidemark-features`, as bidders score
//! them. The services that feed it (online over shard databases, offline over
//! TSV files) live in `tidemark-learner`.

#![warn(missing_docs)]

mod early;
mod ftrl;
mod grid;
mod metrics;
mod models;
mod tuner;

pub use early::{member, Kind, Row};
pub use ftrl::{Choice, Ftrl, Params, ALPHA_MIN, DEN_MIN, N_MAX, PARAM_MAX, RATE_ONLY_L1, Z_MAX};
pub use grid::Grid;
pub use metrics::{auc, Metrics, Window};
pub use models::{Models, OTHER_FEATURES, OUT_OF_RANGE_NAMES};
pub use tuner::{MAX_SETTINGS, PENDING_MAX};
