//! Instants as people write them: on the command line (SPEC 11 `--at`,
//! `--from`, `--to`), milliseconds since the epoch or RFC 3339; printed, RFC
//! 3339 in UTC. Owns the calendar arithmetic (proleptic Gregorian, UTC)
//! that turns one into the other, so no other crate keeps its own copy.

/// Parses `1700000000000` or `2026-11-22T10:00:00Z` (fraction and offset
/// optional: `2026-11-22T10:00:00.250+01:00`; a space may stand for `T`)
/// into milliseconds since the epoch.
pub fn parse_instant(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map_err(|_| format!("{s:?}: out of range"));
    }
    let bad = || {
        format!("{s:?}: expected milliseconds since the epoch or RFC 3339 (2026-11-22T10:00:00Z)")
    };
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = &s[r];
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    let mut rest = &s[19..];
    let mut ms = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let f = &frac[..digits];
        ms = format!("{:0<3}", &f[..f.len().min(3)])
            .parse::<i64>()
            .map_err(|_| bad())?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let oh: i64 = o[1..3].parse().map_err(|_| bad())?;
            let om: i64 = o[4..6].parse().map_err(|_| bad())?;
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (oh * 60 + om)
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(y, mo, d);
    Ok(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + ms)
}

/// `ms` milliseconds since the epoch in RFC 3339, UTC, to the millisecond:
/// `2023-11-14T22:13:20.123Z`. [`parse_instant`] reads it back.
pub fn format_instant(ms: i64) -> String {
    let c = Civil::of(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second, c.milli
    )
}

/// The UTC calendar fields of an instant (proleptic Gregorian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year, e.g. 2023.
    pub year: i64,
    /// The month, 1 to 12.
    pub month: u32,
    /// The day of the month, from 1.
    pub day: u32,
    /// The hour, 0 to 23.
    pub hour: u32,
    /// The minute, 0 to 59.
    pub minute: u32,
    /// The second, 0 to 59.
    pub second: u32,
    /// The millisecond, 0 to 999.
    pub milli: u32,
}

impl Civil {
    /// The fields of `ms` milliseconds since the epoch (Howard Hinnant's
    /// algorithm, the inverse of the one [`parse_instant`] uses).
    pub fn of(ms: i64) -> Civil {
        let secs = ms.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Civil {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            milli: ms.rem_euclid(1000) as u32,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms() {
        assert_eq!(parse_instant("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_instant("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_instant("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_instant("2023-11-14T23:13:20.5+01:00"),
            Ok(1_700_000_000_500)
        );
        assert_eq!(
            parse_instant("2000-02-29 12:00:00.123Z"),
            Ok(951_825_600_123)
        );
        for bad in [
            "",
            "yesterday",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20.Z",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn printed_in_utc_and_read_back() {
        assert_eq!(format_instant(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_instant(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(format_instant(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(format_instant(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            Civil::of(951_782_400_000),
            Civil {
                year: 2000,
                month: 2,
                day: 29,
                hour: 0,
                minute: 0,
                second: 0,
                milli: 0
            }
        );
        for ms in [0, -1, 1_700_000_000_123, 951_825_600_123, 4_102_444_800_000] {
            assert_eq!(parse_instant(&format_instant(ms)), Ok(ms), "{ms}");
        }
    }
}
