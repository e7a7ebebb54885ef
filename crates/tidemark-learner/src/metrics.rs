//! The learner's metrics (`tidemark_learner_*`), each defined once.

use tidemark_metrics::Metric;

/// Per target: observations learned since the model began.
pub const ROWS: Metric = Metric::counter("rows", "observations learned (since the model began)");
/// Per target: progressive logloss over every row learned.
pub const LOGLOSS: Metric = Metric::gauge("logloss", "progressive logloss over every row learned");
/// Per target: progressive logloss over the last `window` rows.
pub const RECENT_LOGLOSS: Metric = Metric::gauge(
    "recent_logloss",
    "progressive logloss over the last `window` rows",
);
/// Per target: times the setting it predicts with changed.
pub const TUNING_SWITCHES: Metric = Metric::counter(
    "tuning_switches",
    "times the setting a target predicts with changed",
);
/// Per setting of a target's grid: its decayed progressive logloss.
pub const TUNING_RECENT_LOGLOSS: Metric = Metric::gauge(
    "tuning_recent_logloss",
    "per setting of a target's grid, its progressive logloss decayed by half every half_life rows",
);
/// Per setting of a target's grid: 1 for the one it predicts with.
pub const TUNING_CHOSEN: Metric = Metric::gauge(
    "tuning_chosen",
    "1 for the setting a target predicts with (the checkpoint's), 0 for the others",
);
/// Per target and feature: values left out of a row as out of range (SPEC 10).
pub const NUMERIC_OUT_OF_RANGE: Metric = Metric::counter(
    "numeric_out_of_range",
    "numeric values (after their transform) or crosses' products left out of a row: not finite, or over 1e15 in magnitude",
);
/// Per target: checkpoints not written because a number was not finite.
pub const CHECKPOINT_REFUSED: Metric = Metric::counter(
    "checkpoint_refused",
    "times a target (or a pool, counted as target=\"pool:NAME\") held a number that is not finite when a checkpoint was due: not written, it resumed from its last good checkpoint",
);
/// Per stream: 1 while its saved position is ahead of its last seq.
pub const POSITION_AHEAD: Metric = Metric::gauge(
    "position_ahead",
    "1 while a stream's saved position is ahead of its last seq (a failover or crash lost observations already read)",
);
/// Per stream: the last seq read.
pub const POSITION: Metric =
    Metric::gauge("position", "the last seq read, per <source>/<shard> stream");
/// Seconds since the last checkpoint.
pub const CHECKPOINT_AGE: Metric = Metric::gauge(
    "checkpoint_age_seconds",
    "seconds since the last checkpoint was written (or the learner started)",
);

/// Every metric of the learner.
pub const ALL: [Metric; 11] = [
    ROWS,
    LOGLOSS,
    RECENT_LOGLOSS,
    TUNING_SWITCHES,
    TUNING_RECENT_LOGLOSS,
    TUNING_CHOSEN,
    NUMERIC_OUT_OF_RANGE,
    CHECKPOINT_REFUSED,
    POSITION_AHEAD,
    POSITION,
    CHECKPOINT_AGE,
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_metric_is_documented_for_operators() {
        let doc = include_str!("../../../docs/operations.md");
        for m in super::ALL {
            let name = m.exposed("learner");
            assert!(doc.contains(&name), "{name} is not in docs/operations.md");
        }
    }
}
