//! Transaction ids (SPEC 1): 20 random hex digits then the creation time in
//! milliseconds as 12 hex digits, all lowercase.

use std::fmt;

/// Number of hex digits in a txid.
pub const TXID_LEN: usize = 32;
/// Number of leading random hex digits; sampling prefixes apply to these.
pub const RANDOM_DIGITS: usize = 20;
/// Largest creation time a txid can carry (12 hex digits).
pub const MAX_CREATED_MS: u64 = (1 << 48) - 1;

/// A validated transaction id, kept as its 32 ASCII digits so it can be used
/// as a string (topics, SQL) without formatting.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Txid([u8; TXID_LEN]);

impl Txid {
    /// Parses a txid; `None` unless it is exactly 32 lowercase hex digits.
    pub fn parse(s: &str) -> Option<Txid> {
        let bytes: [u8; TXID_LEN] = s.as_bytes().try_into().ok()?;
        bytes
            .iter()
            .all(|&b| is_lower_hex(b))
            .then_some(Txid(bytes))
    }

    /// Builds a txid from the low 80 bits of `random` and a creation time.
    /// Panics if `created_ms` does not fit in 12 hex digits (year 10889).
    pub fn new(random: u128, created_ms: u64) -> Txid {
        assert!(created_ms <= MAX_CREATED_MS, "creation time out of range");
        let mut out = [0u8; TXID_LEN];
        let random = random & ((1u128 << 80) - 1);
        for (i, slot) in out[..RANDOM_DIGITS].iter_mut().enumerate() {
            *slot = HEX[((random >> (4 * (RANDOM_DIGITS - 1 - i))) & 0xf) as usize];
        }
        for (i, slot) in out[RANDOM_DIGITS..].iter_mut().enumerate() {
            *slot = HEX[((created_ms >> (4 * (TXID_LEN - RANDOM_DIGITS - 1 - i))) & 0xf) as usize];
        }
        Txid(out)
    }

    /// The transaction's creation time, milliseconds since the Unix epoch.
    pub fn created_ms(&self) -> u64 {
        self.0[RANDOM_DIGITS..]
            .iter()
            .fold(0u64, |acc, &b| (acc << 4) | u64::from(hex_value(b)))
    }

    /// The 32 hex digits.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).expect("txid is ASCII")
    }

    /// The first hex digit, as used in a tick's `sent` keys.
    pub fn first_digit(&self) -> char {
        self.0[0] as char
    }
}

impl fmt::Display for Txid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Txid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Txid({})", self.as_str())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        _ => b - b'a' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn python_example_round_trips() {
        // secrets.token_hex(10) + format(1700000000123, "012x")
        let t = Txid::parse("3fa9c0ffee00112233440000018bcfe5687b").is_none();
        assert!(t, "36 digits is too long");
        let t = Txid::parse("3fa9c0ffee0011223344018bcfe5687b").unwrap();
        assert_eq!(t.created_ms(), 1_700_000_000_123);
        assert_eq!(t.first_digit(), '3');
    }

    #[test]
    fn rejects_uppercase_and_non_hex() {
        assert!(Txid::parse("3FA9c0ffee0011223344018bcfe5687b").is_none());
        assert!(Txid::parse("3ga9c0ffee0011223344018bcfe5687b").is_none());
        assert!(Txid::parse("").is_none());
        assert!(Txid::parse("3fa9c0ffee0011223344018bcfe5687").is_none());
    }

    proptest! {
        #[test]
        fn new_then_parse_round_trips(random in any::<u128>(), created in 0..=MAX_CREATED_MS) {
            let t = Txid::new(random, created);
            let back = Txid::parse(t.as_str()).unwrap();
            prop_assert_eq!(back, t);
            prop_assert_eq!(back.created_ms(), created);
            let expected = format!("{:020x}{:012x}", random & ((1u128 << 80) - 1), created);
            prop_assert_eq!(t.as_str(), expected.as_str());
        }
    }
}
