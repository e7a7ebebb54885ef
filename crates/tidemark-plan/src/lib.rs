//! Txid prefix algebra (SPEC 4): which share of transactions a set of prefixes
//! samples, whether shards overlap, and sampling plans for `tidemark plan`.
//!
//! Owns: prefix validation, disjointness and coverage checks, and the planner.
//! Pure: no IO, no sockets, no database. A prefix is a string of lowercase hex
//! digits matched against the random leading digits of a txid.

#![warn(missing_docs)]

use std::fmt;

use serde::Serialize;

/// Planning works in units of 16^-6 of all transactions: the tolerance SPEC 4 allows.
pub const PLAN_DIGITS: u32 = 6;
const UNITS: u64 = 1 << (4 * PLAN_DIGITS);
/// Longest prefix accepted: the random digits of a txid.
pub const MAX_PREFIX_LEN: usize = 20;

/// Why a prefix or a prefix set is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixError {
    /// A character that is not a lowercase hex digit.
    NotHex(String),
    /// An empty prefix.
    Empty,
    /// Longer than `MAX_PREFIX_LEN`.
    TooLong(String),
    /// One prefix extends another.
    Overlap(String, String),
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixError::NotHex(p) => write!(f, "prefix {p:?} is not lowercase hex"),
            PrefixError::Empty => f.write_str("a prefix must have at least one digit"),
            PrefixError::TooLong(p) => {
                write!(
                    f,
                    "prefix {p:?} is longer than the {MAX_PREFIX_LEN} random txid digits"
                )
            }
            PrefixError::Overlap(a, b) => write!(f, "prefixes {a:?} and {b:?} overlap"),
        }
    }
}

impl std::error::Error for PrefixError {}

/// Checks one prefix: 1 to 20 lowercase hex digits.
pub fn validate_prefix(p: &str) -> Result<(), PrefixError> {
    if p.is_empty() {
        return Err(PrefixError::Empty);
    }
    if !p
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(PrefixError::NotHex(p.to_owned()));
    }
    if p.len() > MAX_PREFIX_LEN {
        return Err(PrefixError::TooLong(p.to_owned()));
    }
    Ok(())
}

/// Checks a shard's prefix set: each valid, none a prefix of another.
pub fn validate_set<S: AsRef<str>>(prefixes: &[S]) -> Result<(), PrefixError> {
    for p in prefixes {
        validate_prefix(p.as_ref())?;
    }
    first_overlap(prefixes.iter().map(AsRef::as_ref)).map_or(Ok(()), |(a, b)| {
        Err(PrefixError::Overlap(a.to_owned(), b.to_owned()))
    })
}

/// The share of all transactions a set of disjoint prefixes samples: Σ 16^-len.
pub fn share<S: AsRef<str>>(prefixes: &[S]) -> f64 {
    prefixes
        .iter()
        .map(|p| 16f64.powi(-(p.as_ref().len() as i32)))
        .sum()
}

/// Whether a txid (or any hex string) falls under one of the prefixes.
pub fn matches<S: AsRef<str>>(prefixes: &[S], txid: &str) -> bool {
    prefixes.iter().any(|p| txid.starts_with(p.as_ref()))
}

/// The first pair of overlapping prefixes (equal, or one starting the other).
fn first_overlap<'a>(prefixes: impl Iterator<Item = &'a str>) -> Option<(&'a str, &'a str)> {
    let mut sorted: Vec<&str> = prefixes.collect();
    sorted.sort_unstable();
    // In sorted order, a prefix is immediately followed by the strings it starts,
    // so checking neighbours finds every overlap.
    sorted
        .windows(2)
        .find(|w| w[1].starts_with(w[0]))
        .map(|w| (w[0], w[1]))
}

/// One shard of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardPlan {
    /// The shard's name.
    pub name: String,
    /// Its prefixes.
    pub prefixes: Vec<String>,
    /// The share of transactions they sample.
    pub rate: f64,
}

/// N disjoint prefix sets whose union samples (about) a rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The rate the union achieves.
    pub rate: f64,
    /// The shards, disjoint.
    pub shards: Vec<ShardPlan>,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanError {
    /// Not in `(0, 1]`.
    Rate(f64),
    /// Zero shards, or more than the rate can be split into.
    Shards(u64),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Rate(r) => write!(f, "--rate must be in (0, 1], got {r}"),
            PlanError::Shards(n) => write!(
                f,
                "--shards must be between 1 and the number of {}-digit prefixes the rate covers, got {n}",
                PLAN_DIGITS
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// Plans `shards` disjoint prefix sets sampling `rate` of all transactions.
///
/// Each shard's share, in units of 16^-6, is written in base 16: digit `d_k`
/// means `d_k` prefixes of length `6 - k`. Handing out blocks largest first,
/// from one cursor, keeps every block aligned, so each shard gets the fewest
/// prefixes its share allows and is within 16^-6 of `rate / shards`.
pub fn plan(rate: f64, shards: u64) -> Result<Plan, PlanError> {
    if !(rate > 0.0 && rate <= 1.0) {
        return Err(PlanError::Rate(rate));
    }
    let ideal = rate / shards as f64 * UNITS as f64;
    let mut per_shard = ideal.round() as u64;
    if per_shard.saturating_mul(shards) > UNITS {
        per_shard = ideal.floor() as u64;
    }
    if shards == 0 || per_shard == 0 {
        return Err(PlanError::Shards(shards));
    }
    let mut sets = vec![Vec::new(); shards as usize];
    let mut cursor = 0u64;
    // k = 6 would be the empty prefix; a whole-space shard gets 16 one-digit prefixes.
    for k in (0..PLAN_DIGITS).rev() {
        let size = 1u64 << (4 * k);
        let count = if k == PLAN_DIGITS - 1 {
            per_shard >> (4 * k)
        } else {
            (per_shard >> (4 * k)) & 0xf
        };
        for set in sets.iter_mut() {
            for _ in 0..count {
                let digits = (PLAN_DIGITS - k) as usize;
                set.push(format!("{:0digits$x}", cursor >> (4 * k)));
                cursor += size;
            }
        }
    }
    let shards: Vec<ShardPlan> = sets
        .into_iter()
        .enumerate()
        .map(|(i, prefixes)| ShardPlan {
            name: format!("s{i}"),
            rate: share(&prefixes),
            prefixes,
        })
        .collect();
    Ok(Plan {
        rate: (per_shard * shards.len() as u64) as f64 / UNITS as f64,
        shards,
    })
}

/// What a set of shard prefix sets covers, for checking deployed configurations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coverage {
    /// Sum of the shares of all shards' prefixes.
    pub rate: f64,
    /// Pairs of shards sharing transactions, with the overlapping prefixes.
    pub overlaps: Vec<Overlap>,
    /// The share of transactions no shard samples.
    pub uncovered: f64,
}

/// Two shards whose prefix sets overlap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overlap {
    /// The two shards.
    pub shards: [String; 2],
    /// A prefix of each that overlaps the other.
    pub prefixes: [String; 2],
}

/// Checks named prefix sets together: every overlap between shards, and what is left out.
pub fn coverage(sets: &[(String, Vec<String>)]) -> Coverage {
    let mut all: Vec<(&str, &str)> = sets
        .iter()
        .flat_map(|(name, ps)| ps.iter().map(move |p| (p.as_str(), name.as_str())))
        .collect();
    all.sort_unstable();
    let mut overlaps = Vec::new();
    // Any prefix that starts later ones in sorted order overlaps each of them.
    for (i, (p, shard)) in all.iter().enumerate() {
        for (q, other) in all[i + 1..].iter().take_while(|(q, _)| q.starts_with(p)) {
            if shard != other {
                overlaps.push(Overlap {
                    shards: [shard.to_string(), other.to_string()],
                    prefixes: [p.to_string(), q.to_string()],
                });
            }
        }
    }
    // Share of the union: count only prefixes not inside an earlier one.
    let mut union: Vec<&str> = Vec::new();
    for (p, _) in &all {
        if union.last().is_none_or(|last| !p.starts_with(last)) {
            union.push(p);
        }
    }
    let covered = share(&union);
    Coverage {
        rate: sets.iter().map(|(_, ps)| share(ps)).sum(),
        overlaps,
        uncovered: (1.0 - covered).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_papers_examples() {
        assert_eq!(share(&["a"]), 1.0 / 16.0);
        assert_eq!(share(&["a", "01"]), 1.0 / 16.0 + 1.0 / 256.0);
        let p = plan(1.0, 4).unwrap();
        let sets: Vec<_> = p.shards.iter().map(|s| s.prefixes.join(",")).collect();
        assert_eq!(sets, ["0,1,2,3", "4,5,6,7", "8,9,a,b", "c,d,e,f"]);
        assert_eq!(p.rate, 1.0);
    }

    #[test]
    fn rejects_bad_arguments() {
        for r in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(matches!(plan(r, 2), Err(PlanError::Rate(_))), "{r}");
        }
        assert!(matches!(plan(0.5, 0), Err(PlanError::Shards(0))));
        assert!(matches!(plan(1e-9, 1), Err(PlanError::Shards(1))));
    }

    #[test]
    fn validates_prefixes() {
        assert!(validate_set(&["0", "1f", "2"]).is_ok());
        assert_eq!(
            validate_set(&["1", "1f"]),
            Err(PrefixError::Overlap("1".into(), "1f".into()))
        );
        assert_eq!(
            validate_set(&["a", "a"]),
            Err(PrefixError::Overlap("a".into(), "a".into()))
        );
        assert_eq!(validate_set(&["A"]), Err(PrefixError::NotHex("A".into())));
        assert_eq!(validate_set(&[""]), Err(PrefixError::Empty));
        assert!(matches!(
            validate_set(&["0".repeat(21)]),
            Err(PrefixError::TooLong(_))
        ));
    }

    #[test]
    fn coverage_finds_overlaps_and_gaps() {
        let sets = vec![
            ("s0".to_owned(), vec!["0".to_owned(), "1".to_owned()]),
            ("s1".to_owned(), vec!["1a".to_owned(), "2".to_owned()]),
        ];
        let c = coverage(&sets);
        assert_eq!(c.overlaps.len(), 1);
        assert_eq!(c.overlaps[0].prefixes, ["1".to_owned(), "1a".to_owned()]);
        assert!((c.uncovered - 13.0 / 16.0).abs() < 1e-12);
    }

    proptest! {
        #[test]
        fn plans_are_disjoint_balanced_and_hit_the_rate(rate in 1e-4f64..=1.0, shards in 1u64..64) {
            let Ok(p) = plan(rate, shards) else { return Ok(()) };
            prop_assert_eq!(p.shards.len() as u64, shards);
            let tol = 16f64.powi(-6);
            let sets: Vec<(String, Vec<String>)> =
                p.shards.iter().map(|s| (s.name.clone(), s.prefixes.clone())).collect();
            let c = coverage(&sets);
            prop_assert!(c.overlaps.is_empty());
            for s in &p.shards {
                prop_assert!(validate_set(&s.prefixes).is_ok());
                prop_assert!((s.rate - rate / shards as f64).abs() <= tol, "{} vs {}", s.rate, rate / shards as f64);
                prop_assert!((share(&s.prefixes) - s.rate).abs() < 1e-15);
            }
            prop_assert!((c.rate - p.rate).abs() < 1e-12);
            prop_assert!((p.rate - rate).abs() <= tol * shards as f64);
            prop_assert!(p.rate <= 1.0);
        }

        #[test]
        fn matches_agrees_with_share(prefixes in proptest::collection::vec("[0-9a-f]{1,3}", 1..6)) {
            // Counting all 3-digit strings matched equals share × 4096 for disjoint sets.
            if validate_set(&prefixes).is_err() { return Ok(()) }
            let hits = (0..4096u32).filter(|i| matches(&prefixes, &format!("{i:03x}"))).count();
            prop_assert_eq!(hits as f64, share(&prefixes) * 4096.0);
        }
    }
}
