//! One event as the profile process reads it: what every decision of the
//! core takes, made by the intake (`crate::intake`) from the wire.

use tidemark_person::Identities;
use tidemark_wire::Txid;

/// One event as the profile process reads it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Index of its type in the configuration's `types`.
    pub type_index: usize,
    /// Its transaction.
    pub txid: Txid,
    /// The txid's creation time, ms.
    pub created: i64,
    /// Its own time, ms.
    pub ts: i64,
    /// Its identifiers.
    pub ids: Identities,
    /// The payload as received (kept for the quarantine).
    pub raw: Box<str>,
    /// Its place in arrival order, set as it joins the process's queue: a
    /// batch taken apart is put back together in that order.
    pub seq: u64,
    /// The process clock when intake accepted it (`None` before the clock
    /// has a value): it is judged stale or not against this, once, however
    /// long the database then keeps it waiting (SPEC 11, v1.3).
    pub accepted: Option<i64>,
}

impl Event {
    /// Memory it holds, near enough: its payload, its identifiers, and a
    /// fixed part.
    pub fn bytes(&self) -> usize {
        let ids: usize = self.ids.ids.iter().map(|i| i.as_str().len() + 32).sum();
        self.raw.len() + ids + 128
    }
}
