//! The learner's mathematics: FTRL-Proximal logistic regression with
//! per-coordinate learning rates and elastic net (McMahan et al., KDD 2013,
//! Algorithm 1), progressive validation metrics, and the offline TSV mode of
//! `tidemark learn --input`.
//!
//! Owns: model state (z, n), prediction and update, metrics, conversion to and
//! from checkpoint targets. Knows nothing of PostgreSQL, sockets or runtimes:
//! the online loop that feeds it lives in the binary.

mod ftrl;
mod metrics;
pub mod offline;

pub use ftrl::{Ftrl, Params};
pub use metrics::{auc, Metrics, Window};
