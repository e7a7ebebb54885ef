//! What a profile process knows, as plain data: the (type, txid) taken,
//! counts by reason, persons and their identifiers, first ts, refusals and
//! the blocklist, every event counted and every merge. Receiving writes it
//! (`receive`, `links`); reading answers from it (`read`).

use std::collections::{BTreeMap, BTreeSet};

use super::setup::Setup;

/// Every reason [`Profiles::counts`] always reports, even at zero.
const REASONS: [&str; 8] = [
    "applied",
    "duplicate",
    "stale",
    "bad_identifier",
    "no_identifier",
    "links_refused",
    "rejected",
    "future",
];

/// One event counted for a person.
#[derive(Debug, Clone)]
pub(super) struct Counted {
    pub(super) kind: String,
    pub(super) txid: String,
    pub(super) ts: i64,
    /// The good identifiers it carried, sorted bytewise.
    pub(super) ids: Vec<String>,
    /// The identifier whose person it counts for (that person only grows).
    pub(super) counted_for: String,
}

/// What a profile process must know after receiving some messages.
#[derive(Debug, Clone)]
pub struct Profiles {
    pub(super) setup: Setup,
    /// Every (type, txid) taken by a first copy.
    pub(super) taken: BTreeSet<(String, String)>,
    pub(super) counts: BTreeMap<String, u64>,
    /// Identifier -> index into `persons`.
    pub(super) person_of: BTreeMap<String, usize>,
    /// Persons by index; an absorbed person is left empty, its index unused.
    pub(super) persons: Vec<BTreeSet<String>>,
    /// Identifier -> smallest `ts` of an accepted event carrying it.
    pub(super) first_ts: BTreeMap<String, i64>,
    /// Identifier -> refusals charged so far.
    pub(super) refusals: BTreeMap<String, u64>,
    pub(super) blocklisted: BTreeSet<String>,
    /// Every counted event, in receive order.
    pub(super) events: Vec<Counted>,
    /// Every merge: `(ts, txid, master, absorbed)`.
    pub(super) merges: Vec<(i64, String, String, String)>,
}

impl Profiles {
    /// A profile process that has received nothing yet.
    pub fn new(setup: Setup) -> Profiles {
        let counts = REASONS.iter().map(|r| (r.to_string(), 0)).collect();
        Profiles {
            setup,
            taken: BTreeSet::new(),
            counts,
            person_of: BTreeMap::new(),
            persons: Vec::new(),
            first_ts: BTreeMap::new(),
            refusals: BTreeMap::new(),
            blocklisted: BTreeSet::new(),
            events: Vec::new(),
            merges: Vec::new(),
        }
    }

    /// Counts one more message for `reason`.
    pub(super) fn count(&mut self, reason: &str) {
        *self.counts.entry(reason.to_string()).or_insert(0) += 1;
    }
}
