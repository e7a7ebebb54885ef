//! The names of a shard's counters, defined once. The writer counts with
//! them, `tidemark.shard_counters` stores them, the views in `sql/` split
//! them into family and subject, and every reader (status log, `shard
//! --status`, the demo, benches) sums families through [`Family::sum`]. A
//! test checks the views classify every name as defined here.

/// A counter with one name (no per-type or per-reason subject).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Counter {
    /// Events dropped because the writer held `max_pending`.
    DroppedOverflow,
    /// Bid feature values of unsupported kinds dropped from `features`.
    DroppedFeatures,
    /// Batches committed to the buffer.
    Batches,
    /// Fresh event rows copied into the buffer.
    RowsWritten,
    /// Late-arriving events merged into consolidated rows.
    Merged,
    /// Sweep transactions committed.
    Sweeps,
    /// Transactions consolidated by the impression phase.
    TransactionsSwept,
    /// Transactions kept after the impression phase (they had an impression).
    KeptImpressed,
    /// Transactions with events but no bid.
    Orphans,
    /// Transactions with a bid but no impression (dropped by subsetting).
    Unimpressed,
    /// Duplicate events (same type, same txid) folded away.
    Duplicates,
    /// Transactions kept after the last click-phase target (they had a click).
    KeptClicked,
    /// Transactions let go after the last phase.
    Forgotten,
    /// Creation-time ranges recorded in `tidemark.gaps` (buffer lost).
    Gaps,
    /// Observations deleted by retention.
    Pruned,
    /// Messages estimated lost on the wire, from ticks' `sent` counts.
    LostEstimate,
    /// Ticks refused for being more than `max_future` ahead (SPEC 3).
    FutureTick,
    /// Events the database refused, set aside in `tidemark.quarantine`.
    Quarantined,
    /// Refused events not kept because the quarantine was full.
    QuarantineDropped,
    /// Observations the database refused, recorded in `tidemark.emission_gaps`.
    EmissionGaps,
    /// Database errors of the transient class (connection, restart, conflict).
    DbErrorsTransient,
    /// Database errors of the resource class (53xxx).
    DbErrorsResource,
    /// Database errors of the data class (22xxx, 23xxx, 54xxx).
    DbErrorsData,
    /// Database errors of no known class.
    DbErrorsUnknown,
    /// Times the liveness gate held the sweep (the low socket fell silent while bids flowed).
    LivenessHolds,
    /// Times the liveness gate gave up holding after `liveness_max_hold`.
    LivenessGaveUp,
    /// Connections libzmq dropped for good (a frame over the maximum
    /// message size) and intake connected again (SPEC 2).
    ConnectionsRestored,
    /// Ticks under a new publisher name refused while `max_publishers`
    /// names counted (SPEC 6).
    TooManyPublishers,
    /// Ticks under a name other than the one listed with the CURVE key
    /// that sent them (SPEC 2).
    ForeignTick,
}

impl Counter {
    /// Every counter, in declaration order (`ALL[c as usize] == c`).
    pub const ALL: [Counter; 29] = [
        Counter::DroppedOverflow,
        Counter::DroppedFeatures,
        Counter::Batches,
        Counter::RowsWritten,
        Counter::Merged,
        Counter::Sweeps,
        Counter::TransactionsSwept,
        Counter::KeptImpressed,
        Counter::Orphans,
        Counter::Unimpressed,
        Counter::Duplicates,
        Counter::KeptClicked,
        Counter::Forgotten,
        Counter::Gaps,
        Counter::Pruned,
        Counter::LostEstimate,
        Counter::FutureTick,
        Counter::Quarantined,
        Counter::QuarantineDropped,
        Counter::EmissionGaps,
        Counter::DbErrorsTransient,
        Counter::DbErrorsResource,
        Counter::DbErrorsData,
        Counter::DbErrorsUnknown,
        Counter::LivenessHolds,
        Counter::LivenessGaveUp,
        Counter::ConnectionsRestored,
        Counter::TooManyPublishers,
        Counter::ForeignTick,
    ];

    /// Its name in `tidemark.shard_counters`.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::DroppedOverflow => "dropped_overflow",
            Counter::DroppedFeatures => "dropped_features",
            Counter::Batches => "batches",
            Counter::RowsWritten => "rows_written",
            Counter::Merged => "merged",
            Counter::Sweeps => "sweeps",
            Counter::TransactionsSwept => "transactions_swept",
            Counter::KeptImpressed => "kept_impressed",
            Counter::Orphans => "orphans",
            Counter::Unimpressed => "unimpressed",
            Counter::Duplicates => "duplicates",
            Counter::KeptClicked => "kept_clicked",
            Counter::Forgotten => "forgotten",
            Counter::Gaps => "gaps",
            Counter::Pruned => "pruned",
            Counter::LostEstimate => "lost_estimate",
            Counter::FutureTick => "future_tick",
            Counter::Quarantined => "quarantined",
            Counter::QuarantineDropped => "quarantine_dropped",
            Counter::EmissionGaps => "emission_gaps",
            Counter::DbErrorsTransient => "db_errors_transient",
            Counter::DbErrorsResource => "db_errors_resource",
            Counter::DbErrorsData => "db_errors_data",
            Counter::DbErrorsUnknown => "db_errors_unknown",
            Counter::LivenessHolds => "liveness_holds",
            Counter::LivenessGaveUp => "liveness_gave_up",
            Counter::ConnectionsRestored => "connections_restored",
            Counter::TooManyPublishers => "too_many_publishers",
            Counter::ForeignTick => "foreign_tick",
        }
    }

    /// The counter of database errors of a class.
    pub const fn db_errors(class: tidemark_store::ErrorClass) -> Counter {
        match class {
            tidemark_store::ErrorClass::Transient => Counter::DbErrorsTransient,
            tidemark_store::ErrorClass::Resource => Counter::DbErrorsResource,
            tidemark_store::ErrorClass::Data => Counter::DbErrorsData,
            tidemark_store::ErrorClass::Unknown => Counter::DbErrorsUnknown,
        }
    }

    /// The value of this counter in `(name, value)` pairs (0 if absent).
    pub fn get<N: AsRef<str>>(self, counters: &[(N, i64)]) -> i64 {
        counters
            .iter()
            .filter(|(n, _)| n.as_ref() == self.name())
            .map(|(_, v)| v)
            .sum()
    }
}

/// A family of counters named `<prefix>_<subject>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Events accepted, per event type.
    Received,
    /// Events after their window, per event type.
    Late,
    /// Events of a type no target's window reads, per event type.
    OutsideWindows,
    /// Late events whose transaction no population holds, per event type.
    Unmatched,
    /// Events more than `max_future` ahead, per event type.
    Future,
    /// Messages refused by the decoder, per reason (SPEC 3).
    Rejected,
    /// Observations emitted, per target.
    Observations,
    /// Observations labelled 1, per target.
    Positives,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 8] = [
        Family::Received,
        Family::Late,
        Family::OutsideWindows,
        Family::Unmatched,
        Family::Future,
        Family::Rejected,
        Family::Observations,
        Family::Positives,
    ];

    /// The families whose subject is an event type.
    pub const PER_TYPE: [Family; 5] = [
        Family::Received,
        Family::Late,
        Family::OutsideWindows,
        Family::Unmatched,
        Family::Future,
    ];

    /// The prefix of its names, without the `_`.
    pub const fn prefix(self) -> &'static str {
        match self {
            Family::Received => "received",
            Family::Late => "late",
            Family::OutsideWindows => "outside_windows",
            Family::Unmatched => "unmatched",
            Family::Future => "future",
            Family::Rejected => "rejected",
            Family::Observations => "observations",
            Family::Positives => "positives",
        }
    }

    /// The counter of `subject` in this family.
    pub fn name(self, subject: &str) -> String {
        format!("{}_{subject}", self.prefix())
    }

    /// The subject of `name` if it belongs to this family (never a [`Counter`]).
    pub fn subject(self, name: &str) -> Option<&str> {
        if Counter::ALL.iter().any(|c| c.name() == name) {
            return None;
        }
        name.strip_prefix(self.prefix())?.strip_prefix('_')
    }

    /// The sum of this family over `(name, value)` pairs.
    pub fn sum<N: AsRef<str>>(self, counters: &[(N, i64)]) -> i64 {
        counters
            .iter()
            .filter(|(n, _)| self.subject(n.as_ref()).is_some())
            .map(|(_, v)| v)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_declaration_order_and_names_are_unique() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        let mut names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Counter::ALL.len());
    }

    #[test]
    fn a_single_counter_is_in_no_family() {
        // `future_tick` starts like the `future_<type>` family.
        assert_eq!(Family::Future.subject("future_tick"), None);
        assert_eq!(Family::Future.subject("future_bid"), Some("bid"));
        assert_eq!(Family::Late.subject("lateness"), None);
        let c = [
            ("future_tick", 2i64),
            ("future_click", 3),
            ("received_bid", 5),
        ];
        assert_eq!(Family::Future.sum(&c), 3);
        assert_eq!(Counter::FutureTick.get(&c), 2);
    }
}
