//! A shard's configuration (SPEC 7): the parts that decide its
//! observations, read from its TOML file with SPEC 7's defaults, and the
//! durations it is written in.

use crate::names::is_lower_hex;
use crate::names::is_name;

/// Event types every shard knows (SPEC 2), which no custom type may take.
/// `tick` is handled apart.
const BUILT_IN_TYPES: [&str; 5] = ["auction", "bid", "impression", "click", "install"];

/// Names of the targets every shard emits (SPEC 5).
const BUILT_IN_TARGETS: [&str; 3] = ["ctr", "cvr_short", "cvr_long"];

/// The population a configured target labels (SPEC 7, `given`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// The `ctr` population.
    Impression,
    /// The `ctr` population with `ctr` label 1 (as `cvr_*`).
    Click,
}

/// One `[[targets]]` entry (SPEC 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The target's name (the observations' `target`).
    pub name: String,
    /// Its population: impressed or clicked transactions.
    pub given: Given,
    /// The event type whose arrival makes the label 1.
    pub event: String,
    /// Label 1 only for an event strictly later than this after creation (0: from creation).
    pub after_ms: i64,
    /// Label 1 for an event at most this long after creation.
    pub until_ms: i64,
    /// Added to `until_ms` before the target is emitted.
    pub grace_ms: i64,
    /// `feedback = "early"` (SPEC 5, 7 v1.3): provisional and late observations.
    pub early: bool,
}

/// Four durations in milliseconds, one per built-in window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// The impression window.
    pub impression: i64,
    /// The click window.
    pub click: i64,
    /// The short install window.
    pub install_short: i64,
    /// The long install window.
    pub install_long: i64,
}

/// The parts of a shard's configuration that decide its observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How far ahead of the reference an event or tick may be (SPEC 1).
    pub max_future_ms: i64,
    /// Empty means every transaction.
    pub prefixes: Vec<String>,
    /// Custom event type names.
    pub custom_types: Vec<String>,
    /// The windows (SPEC 5).
    pub windows_ms: Windows,
    /// The grace added to each window.
    pub grace_ms: Windows,
    /// Only the configured extra targets, not `ctr` and `cvr_*`.
    pub targets: Vec<Target>,
    /// `[feedback] cvr_long = "early"` (SPEC 7 v1.3).
    pub cvr_long_early: bool,
}

pub(super) const SECOND: i64 = 1_000;
pub(super) const MINUTE: i64 = 60 * SECOND;
pub(super) const HOUR: i64 = 60 * MINUTE;
pub(super) const DAY: i64 = 24 * HOUR;

impl Default for Config {
    /// The defaults SPEC 7 shows.
    fn default() -> Config {
        Config {
            prefixes: Vec::new(),
            custom_types: Vec::new(),
            windows_ms: Windows {
                impression: 2 * MINUTE,
                click: HOUR,
                install_short: 24 * HOUR,
                install_long: 7 * DAY,
            },
            grace_ms: Windows {
                impression: 30 * SECOND,
                click: 5 * MINUTE,
                install_short: 6 * HOUR,
                install_long: 6 * HOUR,
            },
            targets: Vec::new(),
            cvr_long_early: false,
            max_future_ms: 10 * MINUTE,
        }
    }
}

impl Config {
    /// Parses a shard's TOML config (SPEC 7): only prefixes, custom_types,
    /// max_future, `[windows]`, `[grace]`, `[[targets]]` matter; every other key is
    /// ignored; defaults as SPEC 7 shows. Durations like "500ms", "5s", "2m",
    /// "1h", "7d" (a whole number followed by one of those suffixes).
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("config: {e}"))?;
        let mut config = Config::default();

        if let Some(value) = table.get("prefixes") {
            config.prefixes = string_list("prefixes", value)?;
            check_prefixes(&config.prefixes)?;
        }
        if let Some(value) = table.get("custom_types") {
            config.custom_types = string_list("custom_types", value)?;
            for name in &config.custom_types {
                check_custom_type(name)?;
            }
        }
        if let Some(value) = table.get("max_future") {
            config.max_future_ms = duration("max_future", value)?;
        }
        if let Some(value) = table.get("windows") {
            read_windows("windows", value, &mut config.windows_ms)?;
        }
        if let Some(value) = table.get("grace") {
            read_windows("grace", value, &mut config.grace_ms)?;
        }
        let w = config.windows_ms;
        if w.impression > w.click || w.click > w.install_short || w.install_short > w.install_long {
            return Err(
                "windows: must grow from impression to click to install_short to install_long"
                    .to_string(),
            );
        }
        if let Some(value) = table.get("targets") {
            let Some(entries) = value.as_array() else {
                return Err("targets: must be an array of tables ([[targets]])".to_string());
            };
            for entry in entries {
                let target = read_target(entry)?;
                let taken = BUILT_IN_TARGETS.contains(&target.name.as_str())
                    || config.targets.iter().any(|t| t.name == target.name);
                if taken {
                    return Err(format!("targets.name: {:?} is used twice", target.name));
                }
                config.targets.push(target);
            }
        }
        if let Some(value) = table.get("feedback") {
            let Some(entries) = value.as_table() else {
                return Err("feedback: must be a table".to_string());
            };
            for (name, value) in entries {
                let early = feedback(&format!("feedback.{name}"), value)?;
                match name.as_str() {
                    "cvr_long" => config.cvr_long_early = early,
                    "ctr" | "cvr_short" if early => {
                        return Err(format!("feedback.{name}: its window starts at creation"))
                    }
                    "ctr" | "cvr_short" => {}
                    _ => return Err(format!("feedback.{name}: not a built-in target")),
                }
            }
        }
        Ok(config)
    }
}

/// Parses a duration such as `500ms`, `5s`, `2m`, `1h` or `7d` into milliseconds.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!("{text:?} does not start with a whole number"));
    }
    let factor = match unit {
        "ms" => 1,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        _ => return Err(format!("{text:?} needs a unit: ms, s, m, h or d")),
    };
    let number: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn duration(key: &str, value: &toml::Value) -> Result<i64, String> {
    match value.as_str() {
        Some(text) => parse_duration(text).map_err(|e| format!("{key}: {e}")),
        None => Err(format!("{key}: must be a duration string like \"5s\"")),
    }
}

fn string_list(key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    let Some(items) = value.as_array() else {
        return Err(format!("{key}: must be an array of strings"));
    };
    let mut out = Vec::new();
    for item in items {
        match item.as_str() {
            Some(s) => out.push(s.to_string()),
            None => return Err(format!("{key}: must be an array of strings")),
        }
    }
    Ok(out)
}

fn check_prefixes(prefixes: &[String]) -> Result<(), String> {
    for p in prefixes {
        if p.is_empty() || !p.chars().all(is_lower_hex) {
            return Err(format!("prefixes: {p:?} is not lowercase hex"));
        }
    }
    for (i, a) in prefixes.iter().enumerate() {
        for b in &prefixes[i + 1..] {
            if a.starts_with(b.as_str()) || b.starts_with(a.as_str()) {
                return Err(format!("prefixes: {a:?} and {b:?} overlap"));
            }
        }
    }
    Ok(())
}

fn check_custom_type(name: &str) -> Result<(), String> {
    if !is_name(name) || BUILT_IN_TYPES.contains(&name) || name.starts_with("tick") {
        return Err(format!("custom_types: {name:?} is not a valid custom type"));
    }
    Ok(())
}

fn read_windows(key: &str, value: &toml::Value, into: &mut Windows) -> Result<(), String> {
    let Some(table) = value.as_table() else {
        return Err(format!("{key}: must be a table"));
    };
    if let Some(v) = table.get("impression") {
        into.impression = duration(&format!("{key}.impression"), v)?;
    }
    if let Some(v) = table.get("click") {
        into.click = duration(&format!("{key}.click"), v)?;
    }
    if let Some(v) = table.get("install_short") {
        into.install_short = duration(&format!("{key}.install_short"), v)?;
    }
    if let Some(v) = table.get("install_long") {
        into.install_long = duration(&format!("{key}.install_long"), v)?;
    }
    Ok(())
}

/// One `[[targets]]` table. `name`, `given`, `event` and `until` are required;
/// `after` and `grace` default to zero.
fn read_target(value: &toml::Value) -> Result<Target, String> {
    let Some(table) = value.as_table() else {
        return Err("targets: each entry must be a table".to_string());
    };
    let text = |key: &str| -> Result<String, String> {
        match table.get(key).and_then(|v| v.as_str()) {
            Some(s) => Ok(s.to_string()),
            None => Err(format!("targets.{key}: required string")),
        }
    };
    let name = text("name")?;
    let given = match text("given")?.as_str() {
        "impression" => Given::Impression,
        "click" => Given::Click,
        other => {
            return Err(format!(
                "targets.given: {other:?} is neither \"impression\" nor \"click\""
            ))
        }
    };
    let event = text("event")?;
    let until_ms = match table.get("until") {
        Some(v) => duration("targets.until", v)?,
        None => return Err("targets.until: required duration".to_string()),
    };
    let after_ms = match table.get("after") {
        Some(v) => duration("targets.after", v)?,
        None => 0,
    };
    let grace_ms = match table.get("grace") {
        Some(v) => duration("targets.grace", v)?,
        None => 0,
    };
    let early = match table.get("feedback") {
        Some(v) => feedback("targets.feedback", v)?,
        None => false,
    };
    if early && after_ms == 0 {
        return Err("targets.feedback: \"early\" needs `after` above 0".to_string());
    }
    Ok(Target {
        name,
        given,
        event,
        after_ms,
        until_ms,
        grace_ms,
        early,
    })
}

/// `"early"` is true, `"final"` false (SPEC 7 v1.3).
fn feedback(key: &str, value: &toml::Value) -> Result<bool, String> {
    match value.as_str() {
        Some("early") => Ok(true),
        Some("final") => Ok(false),
        _ => Err(format!("{key}: must be \"early\" or \"final\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_toml_defaults() {
        let c = Config::from_toml("name = \"s0\"\nclock = \"event\"\nlateness = \"5s\"\n").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.windows_ms.impression, 120_000);
        assert_eq!(c.windows_ms.click, 3_600_000);
        assert_eq!(c.windows_ms.install_short, 86_400_000);
        assert_eq!(c.windows_ms.install_long, 604_800_000);
        assert_eq!(c.grace_ms.impression, 30_000);
        assert_eq!(c.grace_ms.click, 300_000);
        assert_eq!(c.grace_ms.install_short, 21_600_000);
        assert_eq!(c.grace_ms.install_long, 21_600_000);
        assert_eq!(c.max_future_ms, 600_000);
        assert!(c.prefixes.is_empty() && c.custom_types.is_empty() && c.targets.is_empty());
    }

    #[test]
    fn from_toml_overrides() {
        let text = r#"
            name = "s1"
            endpoints = ["tcp://127.0.0.1:5556"]
            prefixes = ["0", "1f"]
            database_url = "postgres://x"
            period = "1s"
            max_future = "1h"
            custom_types = ["open", "sign_up2"]
            unknown_key = { a = 1 }

            [windows]
            impression = "500ms"
            click = "2m"

            [grace]
            install_long = "1d"

            [[targets]]
            name = "open_24h"
            given = "click"
            event = "open"
            after = "1h"
            until = "24h"
            grace = "1h"

            [[targets]]
            name = "sign"
            given = "impression"
            event = "sign_up2"
            until = "2h"
        "#;
        let c = Config::from_toml(text).unwrap();
        assert_eq!(c.prefixes, ["0", "1f"]);
        assert_eq!(c.custom_types, ["open", "sign_up2"]);
        assert_eq!(c.max_future_ms, HOUR);
        assert_eq!(c.windows_ms.impression, 500);
        assert_eq!(c.windows_ms.click, 2 * MINUTE);
        assert_eq!(c.windows_ms.install_short, DAY);
        assert_eq!(c.grace_ms.install_long, DAY);
        assert_eq!(c.grace_ms.click, 5 * MINUTE);
        let open = Target {
            name: "open_24h".into(),
            given: Given::Click,
            event: "open".into(),
            after_ms: HOUR,
            until_ms: DAY,
            grace_ms: HOUR,
            early: false,
        };
        let sign = Target {
            name: "sign".into(),
            given: Given::Impression,
            event: "sign_up2".into(),
            after_ms: 0,
            until_ms: 2 * HOUR,
            grace_ms: 0,
            early: false,
        };
        assert_eq!(c.targets, [open, sign]);
    }

    #[test]
    fn from_toml_refusals_name_the_key() {
        let cases = [
            ("prefixes = [\"0\", \"01\"]", "prefixes"),
            ("prefixes = [\"A\"]", "prefixes"),
            ("prefixes = \"0\"", "prefixes"),
            ("custom_types = [\"click\"]", "custom_types"),
            ("custom_types = [\"ticker\"]", "custom_types"),
            ("custom_types = [\"Open\"]", "custom_types"),
            ("max_future = \"10\"", "max_future"),
            ("max_future = 10", "max_future"),
            ("[windows]\nclick = \"1x\"", "windows.click"),
            ("[windows]\nclick = \"1m\"", "windows"),
            ("[grace]\nimpression = \"1.5s\"", "grace.impression"),
            (
                "[[targets]]\nname = \"t\"\ngiven = \"install\"\nevent = \"open\"\nuntil = \"1h\"",
                "targets.given",
            ),
            (
                "[[targets]]\nname = \"t\"\ngiven = \"click\"\nevent = \"open\"",
                "targets.until",
            ),
            (
                "[[targets]]\nname = \"ctr\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"1h\"",
                "targets.name",
            ),
            ("this is not toml", "config"),
        ];
        for (text, key) in cases {
            let err = Config::from_toml(text).unwrap_err();
            assert!(err.starts_with(key), "{text:?} gave {err:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("5s"), Ok(5_000));
        assert_eq!(parse_duration("2m"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("7d"), Ok(604_800_000));
        assert_eq!(parse_duration("0s"), Ok(0));
        for bad in [
            "",
            "5",
            "s",
            "1.5h",
            "-1s",
            "5 s",
            "5sec",
            "1w",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
