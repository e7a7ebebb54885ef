//! Durations as configuration files write them (SPEC 7): `500ms`, `5s`, `2m`, `1h`, `7d`.

use std::fmt;
use std::time::Duration;

/// Parses `<integer><unit>` with unit one of `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a duration like 500ms, 5s, 2m, 1h, 7d or 1h30m");
    let long = || format!("{s:?} is too long");
    let (mut rest, mut total) = (s, 0u64);
    if rest.is_empty() {
        return Err(bad());
    }
    // Terms like `1h30m`: each a number and a unit.
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(split);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
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
        let term = n.checked_mul(ms_per).ok_or_else(long)?;
        total = total.checked_add(term).ok_or_else(long)?;
        rest = next;
    }
    Ok(Duration::from_millis(total))
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
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2d12h"), Ok(Duration::from_secs(60 * 3600)));
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
            "1h30",
            "h30m",
            "1h 30m",
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
