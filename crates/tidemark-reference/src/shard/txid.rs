//! Transaction ids and prefixes (SPEC 1, 4): a txid is 32 lowercase hex
//! digits whose last 12 spell its creation time; a shard's prefixes say
//! which share of all txids it sees.

use crate::names::is_lower_hex;

/// The creation time of a well-formed txid (SPEC 1), else `None`.
pub fn txid_created_ms(txid: &str) -> Option<i64> {
    if txid.len() != 32 || !txid.chars().all(is_lower_hex) {
        return None;
    }
    i64::from_str_radix(&txid[20..], 16).ok()
}

/// The share of transactions a shard with these prefixes sees (SPEC 4): the
/// sum of `16^-len(p)`; no prefixes means every transaction.
pub fn shares(prefixes: &[String]) -> f64 {
    if prefixes.is_empty() {
        return 1.0;
    }
    prefixes.iter().map(|p| 16f64.powi(-(p.len() as i32))).sum()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{txid, T0};
    use super::*;

    #[test]
    fn shares_sum_prefix_sizes() {
        assert_eq!(shares(&[]), 1.0);
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shares(&p(&["0", "1", "2", "3"])), 0.25);
        assert_eq!(shares(&p(&["a", "0f"])), 1.0 / 16.0 + 1.0 / 256.0);
    }

    #[test]
    fn txid_parsing() {
        assert_eq!(txid_created_ms(&txid("ab", T0)), Some(T0));
        assert_eq!(txid_created_ms(&txid("ab", 0)), Some(0));
        assert_eq!(txid_created_ms(&"f".repeat(32)), Some(0xffff_ffff_ffff));
        assert_eq!(txid_created_ms(&"F".repeat(32)), None);
        assert_eq!(txid_created_ms(&"g".repeat(32)), None);
        assert_eq!(txid_created_ms(&"0".repeat(31)), None);
        assert_eq!(txid_created_ms(&"0".repeat(33)), None);
    }
}
