//! Durations as configuration files write them (SPEC 7): `500ms`, `5s`, `2m`, `1h`, `7d`.

use std::fmt;
use std::time::Duration;

/// Parses `<integer><unit>` with unit one of `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let bad = || format!("{s:?} is not a duration like 500ms, 5s, 2m, 1h or 7d");
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let ms_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(ms_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// Formats a duration in the largest unit that divides it exactly.
pub struct HumanDuration(pub Duration);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, per) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms >= per && ms.is_multiple_of(per) {
                return write!(f, "{}{unit}", ms / per);
            }
        }
        write!(f, "{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "",
            "5",
            "s",
            "5 s",
            "-5s",
            "1.5h",
            "5w",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats_back() {
        for s in ["500ms", "5s", "2m", "1h", "7d", "90s"] {
            assert_eq!(HumanDuration(parse_duration(s).unwrap()).to_string(), s);
        }
    }
}
