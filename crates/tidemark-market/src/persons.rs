//! Who a linked market's transactions are about (SPEC 11), and how
//! well a profile database's bridged persons match the truth.
//!
//! Person `k` uses one to three devices (`user` `p<k>`, `p<k>.1`, `p<k>.2`);
//! every other person has a member account and now and then logs in, which
//! puts `"ids": {"member": "m<k>"}` on the transaction. A few transactions
//! carry identifiers no single person owns: a carrier's NAT address
//! (`ip:carrier<c>`) and the QA team's test device (`user:qa-device`),
//! logged into many members' accounts. Those glue unrelated persons together
//! until `max_ids` stops them, which is what purity measures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use rand::rngs::SmallRng;
use rand::RngExt;

/// Share of a member's transactions during which they are logged in.
const LOGIN_RATE: f64 = 0.15;
/// Share of transactions seen through a carrier's NAT address (one of three).
const CARRIER_RATE: f64 = 0.003;
/// Share of transactions made on the QA team's test device.
const TEST_DEVICE_RATE: f64 = 0.0005;
/// The test device's `user`.
pub const TEST_DEVICE: &str = "qa-device";

/// How many devices person `k` uses: one, two or three (persons 0, 3, 6, …
/// have a second; 0, 7, 14, … a third).
pub fn devices(k: u32) -> u32 {
    1 + u32::from(k.is_multiple_of(3)) + u32::from(k.is_multiple_of(7))
}

/// Whether person `k` has a member account (every other person).
pub fn is_member(k: u32) -> bool {
    k.is_multiple_of(2)
}

/// How one transaction shows its person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    /// Which of the person's devices (0 is `p<k>`).
    pub device: u8,
    /// Logged in: the member id rides along.
    pub login: bool,
    /// Seen through carrier `c`'s NAT address (1-based; 0 = not).
    pub carrier: u8,
    /// Made on the QA test device, logged into the person's account.
    pub test_device: bool,
}

impl Seen {
    /// Draws how person `k`'s next transaction shows itself.
    pub fn draw(rng: &mut SmallRng, k: u32) -> Seen {
        let device = rng.random_range(0..devices(k)) as u8;
        let login = is_member(k) && rng.random_bool(LOGIN_RATE);
        let carrier = if rng.random_bool(CARRIER_RATE) {
            rng.random_range(1..=3u8)
        } else {
            0
        };
        let test_device = rng.random_bool(TEST_DEVICE_RATE);
        Seen {
            device,
            login,
            carrier,
            test_device,
        }
    }

    /// Writes the `user` value of person `k`'s event into `out`.
    pub fn write_user(&self, k: u32, out: &mut String) {
        if self.test_device {
            out.push_str(TEST_DEVICE);
        } else if self.device == 0 {
            let _ = write!(out, "p{k}");
        } else {
            let _ = write!(out, "p{k}.{}", self.device);
        }
    }

    /// Writes `"ids":{…}` (with a leading comma) if the event carries any.
    pub fn write_ids(&self, k: u32, out: &mut String) {
        let member = self.login || self.test_device;
        if !member && self.carrier == 0 {
            return;
        }
        out.push_str(r#","ids":{"#);
        if self.carrier > 0 {
            let _ = write!(out, r#""ip":"carrier{}""#, self.carrier);
        }
        if member {
            let sep = if self.carrier > 0 { "," } else { "" };
            let _ = write!(out, r#"{sep}"member":"m{k}""#);
        }
        out.push('}');
    }
}

/// The true person behind an identifier (`kind:value`) of a linked market:
/// `None` for the shared ones (carrier addresses, the test device) and for
/// identifiers the market never makes.
pub fn true_person(id: &str) -> Option<u32> {
    if let Some(v) = id.strip_prefix("user:p") {
        let k = v.split_once('.').map_or(v, |(k, _)| k);
        return k.parse().ok();
    }
    id.strip_prefix("member:m")?.parse().ok()
}

/// How bridged persons (a profile database's identifier → person rows)
/// match the market's true persons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quality {
    /// Identifiers held.
    pub identifiers: usize,
    /// Persons holding two identifiers or more.
    pub bridged: usize,
    /// Bridged persons whose identifiers belong to two true persons or more
    /// (shared identifiers count for no one).
    pub mixed: usize,
    /// True persons seen under two identifiers or more.
    pub multi: usize,
    /// Of those, the ones whose identifiers all sit in one person.
    pub whole: usize,
}

impl Quality {
    /// Scores `(identifier, person)` rows.
    pub fn measure<'a>(rows: impl IntoIterator<Item = (&'a str, i64)>) -> Quality {
        let mut persons: BTreeMap<i64, (usize, BTreeSet<u32>)> = BTreeMap::new();
        let mut truth: BTreeMap<u32, (usize, BTreeSet<i64>)> = BTreeMap::new();
        let mut identifiers = 0;
        for (id, person) in rows {
            identifiers += 1;
            let p = persons.entry(person).or_default();
            p.0 += 1;
            if let Some(k) = true_person(id) {
                p.1.insert(k);
                let t = truth.entry(k).or_default();
                t.0 += 1;
                t.1.insert(person);
            }
        }
        let bridged = persons.values().filter(|p| p.0 >= 2);
        let multi = truth.values().filter(|t| t.0 >= 2);
        Quality {
            identifiers,
            bridged: bridged.clone().count(),
            mixed: bridged.filter(|p| p.1.len() >= 2).count(),
            multi: multi.clone().count(),
            whole: multi.filter(|t| t.1.len() == 1).count(),
        }
    }

    /// Share of bridged persons that hold one true person only.
    pub fn purity(&self) -> f64 {
        share(self.bridged - self.mixed, self.bridged)
    }

    /// Share of true persons with several identifiers held whole.
    pub fn completeness(&self) -> f64 {
        share(self.whole, self.multi)
    }
}

fn share(n: usize, of: usize) -> f64 {
    if of == 0 {
        1.0
    } else {
        n as f64 / of as f64
    }
}

impl fmt::Display for Quality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "purity {:.4} ({} of {} bridged persons mix true persons), completeness {:.4} \
             ({} of {} true persons with several identifiers held whole), {} identifiers",
            self.purity(),
            self.mixed,
            self.bridged,
            self.completeness(),
            self.whole,
            self.multi,
            self.identifiers
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn identifiers_name_their_true_person() {
        assert_eq!(true_person("user:p12"), Some(12));
        assert_eq!(true_person("user:p12.2"), Some(12));
        assert_eq!(true_person("member:m12"), Some(12));
        assert_eq!(true_person("user:qa-device"), None);
        assert_eq!(true_person("ip:carrier1"), None);
        assert_eq!(true_person("user:px"), None);
    }

    #[test]
    fn events_say_what_the_person_showed() {
        let mut out = String::new();
        let s = Seen {
            device: 2,
            login: true,
            carrier: 3,
            test_device: false,
        };
        s.write_user(7, &mut out);
        s.write_ids(7, &mut out);
        assert_eq!(out, r#"p7.2,"ids":{"ip":"carrier3","member":"m7"}"#);
        out.clear();
        Seen::default().write_ids(7, &mut out);
        assert_eq!(out, "");
        // Drawn devices stay within the person's.
        let mut rng = SmallRng::seed_from_u64(1);
        for k in 0..50 {
            let seen = Seen::draw(&mut rng, k);
            assert!(u32::from(seen.device) < devices(k));
            assert!(!seen.login || is_member(k));
        }
    }

    #[test]
    fn quality_counts_mixed_and_whole_persons() {
        let rows = [
            ("user:p1", 10),
            ("user:p1.1", 10),
            ("member:m1", 10), // person 1 whole, person 10 pure
            ("user:p2", 20),
            ("ip:carrier1", 20),
            ("user:p3", 20), // person 20 mixes 2 and 3
            ("user:p3.1", 30),
            ("user:p4", 40), // alone: not bridged
        ];
        let q = Quality::measure(rows);
        assert_eq!(
            q,
            Quality {
                identifiers: 8,
                bridged: 2,
                mixed: 1,
                multi: 2,
                whole: 1,
            }
        );
        assert_eq!(q.purity(), 0.5);
        assert_eq!(q.completeness(), 0.5);
    }
}
