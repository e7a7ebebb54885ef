//! Shard configuration (SPEC 7): one TOML file, validated at start with
//! messages that name the offending key.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tidemark_intake::Subscription;

pub use tidemark_intake::{validate_name, ConfigError};
use tidemark_wire::{parse_duration, Types};

pub use tidemark_intake::ClockKind;

/// A validated shard configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The shard's name: its schema is `shard_<name>`.
    pub name: String,
    /// Endpoints, prefixes, clock and door bounds (shared with every
    /// subscribing process).
    pub subscription: Subscription,
    /// `None`: the embedded default (SPEC 9).
    pub database_url: Option<String>,
    /// How often watermarks advance.
    pub period: Duration,
    /// Built-in and custom event types.
    pub types: Types,
    /// The attribution windows.
    pub windows: Windows,
    /// The grace added to each window before its phase is swept.
    pub grace: Windows,
    /// Extra targets beyond `ctr`, `cvr_short`, `cvr_long`.
    pub targets: Vec<Target>,
    /// `[feedback] cvr_long = "early"` (SPEC 5, 7 v1.3): provisional and
    /// late observations for the built-in long install target.
    pub cvr_long_early: bool,
    /// Events per batch written to PostgreSQL.
    pub batch_events: usize,
    /// Longest an event waits in memory before its batch is written.
    pub batch_delay: Duration,
    /// Most events held in memory (received, not yet written); beyond it new
    /// events wait in ZeroMQ's queues, then are dropped there.
    pub max_pending: usize,
    /// Most bytes those events may take (payloads and rebuilt parts): with
    /// events of the largest size, this binds before `max_pending`.
    pub max_pending_bytes: usize,
    /// Creation-time span of one buffer partition.
    pub partition: Duration,
    /// Observations older than this (by emission) are deleted once every
    /// registered consumer has read them; `None` keeps them forever.
    pub retention: Option<Duration>,
    /// How often retention runs.
    pub retention_check: Duration,
    /// Most rows a shard keeps in `tidemark.quarantine`.
    pub quarantine_max: i64,
    /// How long a stopping shard tries to write what it holds (SPEC 7).
    pub shutdown_timeout: Duration,
    /// How long a starting shard waits for the session its predecessor
    /// left behind to let go of the shard's lock (SPEC 7, 12).
    pub lock_grace: Duration,
    /// Buffered rows one sweep transaction aims at (sweeps are sized by rows,
    /// not by creation time: a sparse day is one, a dense minute several).
    pub sweep_rows: u64,
    /// Rows a buffer partition aims at: sparse stretches get wider partitions.
    pub partition_rows: u64,
    /// Where to serve Prometheus metrics (`host:port`), if anywhere.
    pub metrics_addr: Option<String>,
    /// The liveness gate (`crate::liveness`): the low socket's silence that
    /// closes it, and the longest it holds. Off when `None`.
    pub liveness: Option<(Duration, Duration)>,
}

/// The four default windows, measured from the transaction's creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Impression after bid.
    pub impression: Duration,
    /// Click after creation.
    pub click: Duration,
    /// Short install window.
    pub install_short: Duration,
    /// Long install window.
    pub install_long: Duration,
}

/// A configured target beyond `ctr`, `cvr_short`, `cvr_long`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The target's name.
    pub name: String,
    /// Its population: impressed or clicked transactions.
    pub given: Given,
    /// Event type name whose arrival labels 1.
    pub event: String,
    /// Label 1 only for an event strictly later than this after creation.
    pub after: Duration,
    /// Label 1 for an event at most this long after creation.
    pub until: Duration,
    /// Added to `until` before the target is emitted.
    pub grace: Duration,
    /// `feedback = "early"`: provisional and late observations (SPEC 5).
    pub early: bool,
}

/// The population a target is learned over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// Transactions with a bid and an impression in time (as `ctr`).
    Impression,
    /// Those that also got a click in time (as `cvr_*`).
    Click,
}

fn err(key: impl Into<String>, message: impl ToString) -> ConfigError {
    ConfigError::new(key, message)
}

tidemark_intake::raw_config! {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Raw {
        name: Option<String>,
        database_url: Option<String>,
        period: Option<String>,
        #[serde(default)]
        custom_types: Vec<String>,
        #[serde(default)]
        windows: BTreeMap<String, String>,
        #[serde(default)]
        grace: BTreeMap<String, String>,
        #[serde(default)]
        targets: Vec<RawTarget>,
        #[serde(default)]
        feedback: BTreeMap<String, String>,
        batch_events: Option<usize>,
        batch_delay: Option<String>,
        max_pending: Option<usize>,
        max_pending_bytes: Option<usize>,
        partition: Option<String>,
        retention: Option<String>,
        retention_check: Option<String>,
        quarantine_max: Option<i64>,
        shutdown_timeout: Option<String>,
        lock_grace: Option<String>,
        sweep_rows: Option<u64>,
        partition_rows: Option<u64>,
        metrics_addr: Option<String>,
        liveness_silence: Option<String>,
        liveness_max_hold: Option<String>,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: Option<String>,
    given: Option<String>,
    event: Option<String>,
    after: Option<String>,
    until: Option<String>,
    grace: Option<String>,
    feedback: Option<String>,
}

/// SPEC 5's windows.
pub const DEFAULT_WINDOWS: Windows = Windows {
    impression: Duration::from_secs(120),
    click: Duration::from_secs(3600),
    install_short: Duration::from_secs(24 * 3600),
    install_long: Duration::from_secs(7 * 24 * 3600),
};

/// SPEC 7's grace.
pub const DEFAULT_GRACE: Windows = Windows {
    impression: Duration::from_secs(30),
    click: Duration::from_secs(300),
    install_short: Duration::from_secs(6 * 3600),
    install_long: Duration::from_secs(6 * 3600),
};

const BUILTIN_TARGETS: [&str; 3] = ["ctr", "cvr_short", "cvr_long"];

impl Config {
    /// Reads and validates a configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("--config", format!("{}: {e}", path.display())))?;
        Config::parse_with(&text, tidemark_wire::env_vars())
    }

    /// Parses and validates a configuration.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, [])
    }

    /// Parses and validates a configuration with environment overrides:
    /// `TIDEMARK_SHARD_<KEY>` variables among `vars` (docs/operations.md).
    pub fn parse_with(
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let raw: Raw = tidemark_intake::config::parse_toml_env(text, "TIDEMARK_SHARD_", vars)?;
        let name = raw.name.clone().ok_or_else(|| err("name", "is required"))?;
        validate_name(&name).map_err(|m| err("name", m))?;
        let subscription = Subscription::from_keys(raw.keys(), 50_000)?;
        let dur =
            |key: &str, v: &Option<String>, default: Duration| -> Result<Duration, ConfigError> {
                v.as_deref()
                    .map_or(Ok(default), |s| parse_duration(s).map_err(|m| err(key, m)))
            };
        let period = dur("period", &raw.period, Duration::from_secs(1))?;
        if period.is_zero() {
            return Err(err("period", "must be greater than 0"));
        }
        let types =
            Types::new(&raw.custom_types).map_err(|e| err("custom_types", e.to_string()))?;
        let windows = parse_windows("windows", &raw.windows, DEFAULT_WINDOWS)?;
        let grace = parse_windows("grace", &raw.grace, DEFAULT_GRACE)?;
        if !(windows.impression <= windows.click
            && windows.click <= windows.install_short
            && windows.install_short < windows.install_long)
        {
            return Err(err(
                "windows",
                "must grow: impression <= click <= install_short < install_long",
            ));
        }
        if windows.impression.is_zero() {
            return Err(err("windows.impression", "must be greater than 0"));
        }
        let mut targets = Vec::new();
        for (i, t) in raw.targets.iter().enumerate() {
            targets.push(target(i, t, &types, &targets, windows)?);
        }
        let cvr_long_early = builtin_feedback(&raw.feedback)?;
        if cvr_long_early
            && windows.install_short + grace.install_short
                > windows.install_long + grace.install_long
        {
            // Its provisional rows would come after its final ones.
            return Err(err(
                "feedback.cvr_long",
                "cannot be \"early\" when install_short and its grace end after install_long and its grace",
            ));
        }
        let partition = dur("partition", &raw.partition, Duration::from_secs(60))?;
        if partition < Duration::from_secs(1) || partition.as_millis() % 1000 != 0 {
            return Err(err(
                "partition",
                "must be a whole number of seconds, at least 1s",
            ));
        }
        Ok(Config {
            name,
            subscription,
            database_url: raw.database_url,
            period,
            types,
            windows,
            grace,
            targets,
            cvr_long_early,
            batch_events: positive("batch_events", raw.batch_events, 20_000)?,
            batch_delay: dur("batch_delay", &raw.batch_delay, Duration::from_millis(200))?,
            max_pending: positive("max_pending", raw.max_pending, 100_000)?,
            max_pending_bytes: positive("max_pending_bytes", raw.max_pending_bytes, 256 << 20)?,
            partition,
            retention: raw
                .retention
                .as_deref()
                .map(|s| parse_duration(s).map_err(|m| err("retention", m)))
                .transpose()?,
            retention_check: dur(
                "retention_check",
                &raw.retention_check,
                Duration::from_secs(60),
            )?,
            quarantine_max: positive("quarantine_max", raw.quarantine_max, 10_000)?,
            shutdown_timeout: dur(
                "shutdown_timeout",
                &raw.shutdown_timeout,
                Duration::from_secs(30),
            )?,
            lock_grace: dur("lock_grace", &raw.lock_grace, Duration::from_secs(60))?,
            sweep_rows: positive("sweep_rows", raw.sweep_rows, 250_000)?,
            partition_rows: positive("partition_rows", raw.partition_rows, 1_000_000)?,
            metrics_addr: raw.metrics_addr,
            liveness: match (&raw.liveness_silence, &raw.liveness_max_hold) {
                (None, None) => None,
                (None, Some(_)) => return Err(err("liveness_max_hold", "needs liveness_silence")),
                (Some(_), _) => {
                    let silence = dur("liveness_silence", &raw.liveness_silence, Duration::ZERO)?;
                    if silence.is_zero() {
                        return Err(err("liveness_silence", "must be greater than 0"));
                    }
                    let hold = Duration::from_secs(1800);
                    Some((
                        silence,
                        dur("liveness_max_hold", &raw.liveness_max_hold, hold)?,
                    ))
                }
            },
        })
    }

    /// The share of all transactions this shard samples.
    pub fn rate(&self) -> f64 {
        self.subscription.rate()
    }
}

fn positive<T: PartialOrd + Default + Copy + std::fmt::Display>(
    key: &str,
    v: Option<T>,
    default: T,
) -> Result<T, ConfigError> {
    match v {
        None => Ok(default),
        Some(x) if x > T::default() => Ok(x),
        Some(x) => Err(err(key, format!("must be greater than 0, got {x}"))),
    }
}

/// `"early"` or `"final"` (the default), else an error naming `key`.
fn feedback(key: &str, v: Option<&str>) -> Result<bool, ConfigError> {
    match v {
        None | Some("final") => Ok(false),
        Some("early") => Ok(true),
        Some(other) => Err(err(
            key,
            format!("{other:?} is neither \"early\" nor \"final\""),
        )),
    }
}

/// `[feedback]`: only a built-in target whose window starts after creation
/// (`cvr_long`) can be learned early; `ctr` and `cvr_short` start at 0.
fn builtin_feedback(raw: &BTreeMap<String, String>) -> Result<bool, ConfigError> {
    let mut cvr_long = false;
    for (k, v) in raw {
        let key = format!("feedback.{k}");
        let early = feedback(&key, Some(v))?;
        match k.as_str() {
            "cvr_long" => cvr_long = early,
            "ctr" | "cvr_short" if early => {
                return Err(err(
                    key,
                    "cannot be \"early\": its window starts at creation (`after` is 0), so there is no later label to learn early",
                ))
            }
            "ctr" | "cvr_short" => {}
            _ => {
                return Err(err(
                    key,
                    "unknown built-in target; configured targets take `feedback` in their [[targets]] entry",
                ))
            }
        }
    }
    Ok(cvr_long)
}

fn parse_windows(
    section: &str,
    raw: &BTreeMap<String, String>,
    default: Windows,
) -> Result<Windows, ConfigError> {
    let mut w = default;
    for (k, v) in raw {
        let key = format!("{section}.{k}");
        let d = parse_duration(v).map_err(|m| err(&key, m))?;
        match k.as_str() {
            "impression" => w.impression = d,
            "click" => w.click = d,
            "install_short" => w.install_short = d,
            "install_long" => w.install_long = d,
            _ => {
                return Err(err(
                    key,
                    "unknown window; expected impression, click, install_short or install_long",
                ))
            }
        }
    }
    Ok(w)
}

fn target(
    i: usize,
    t: &RawTarget,
    types: &Types,
    earlier: &[Target],
    windows: Windows,
) -> Result<Target, ConfigError> {
    let key = |k: &str| format!("targets[{i}].{k}");
    let name = t
        .name
        .clone()
        .ok_or_else(|| err(key("name"), "is required"))?;
    validate_name(&name).map_err(|m| err(key("name"), m))?;
    if BUILTIN_TARGETS.contains(&name.as_str()) || earlier.iter().any(|e| e.name == name) {
        return Err(err(key("name"), format!("{name:?} is already a target")));
    }
    let given = match t.given.as_deref() {
        Some("impression") => Given::Impression,
        Some("click") => Given::Click,
        Some(other) => {
            return Err(err(
                key("given"),
                format!("{other:?} is neither \"impression\" nor \"click\""),
            ))
        }
        None => {
            return Err(err(
                key("given"),
                "is required: \"impression\" or \"click\"",
            ))
        }
    };
    let event = t
        .event
        .clone()
        .ok_or_else(|| err(key("event"), "is required"))?;
    match types.lookup(&event) {
        Some(
            tidemark_wire::EventType::Click
            | tidemark_wire::EventType::Install
            | tidemark_wire::EventType::Custom(_),
        ) => {}
        _ => {
            return Err(err(
                key("event"),
                format!("{event:?} is not click, install or one of custom_types"),
            ))
        }
    }
    let d = |k: &str, v: &Option<String>| -> Result<Option<Duration>, ConfigError> {
        v.as_deref()
            .map(|s| parse_duration(s).map_err(|m| err(key(k), m)))
            .transpose()
    };
    let after = d("after", &t.after)?.unwrap_or(Duration::ZERO);
    let until = d("until", &t.until)?.ok_or_else(|| err(key("until"), "is required"))?;
    let grace = d("grace", &t.grace)?.unwrap_or(Duration::ZERO);
    if until <= after {
        return Err(err(key("until"), "must be later than `after`"));
    }
    let early = feedback(&key("feedback"), t.feedback.as_deref())?;
    if early && after.is_zero() {
        return Err(err(
            key("feedback"),
            "cannot be \"early\" when `after` is 0: provisional rows are emitted at the window's start",
        ));
    }
    let population_ready = match given {
        Given::Impression => windows.impression,
        Given::Click => windows.click,
    };
    if until < population_ready {
        return Err(err(
            key("until"),
            format!("must not end before the {given:?} window that defines its population"),
        ));
    }
    Ok(Target {
        name,
        given,
        event,
        after,
        until,
        grace,
        early,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
name = "s0"
endpoints = ["tcp://127.0.0.1:5556"]
prefixes = ["0", "1", "2", "3"]
clock = "event"
lateness = "5s"
publisher_timeout = "30s"
period = "1s"
max_future = "10m"
custom_types = ["open"]

[windows]
impression = "2m"
click = "1h"
install_short = "24h"
install_long = "7d"

[grace]
impression = "30s"
click = "5m"
install_short = "6h"
install_long = "6h"

[[targets]]
name = "open_24h"
given = "click"
event = "open"
after = "0s"
until = "24h"
grace = "1h"
"#;

    #[test]
    fn the_spec_example_parses() {
        let c = Config::parse(FULL).unwrap();
        assert_eq!(c.name, "s0");
        assert_eq!(c.subscription.clock, ClockKind::Event);
        assert_eq!(c.rate(), 0.25);
        assert_eq!(c.windows, DEFAULT_WINDOWS);
        assert_eq!(c.grace, DEFAULT_GRACE);
        assert_eq!(c.targets.len(), 1);
        assert_eq!(c.targets[0].given, Given::Click);
    }

    #[test]
    fn minimal_config_takes_defaults() {
        let c = Config::parse("name = \"a\"\nendpoints = [\"tcp://127.0.0.1:1\"]").unwrap();
        assert_eq!(c.subscription.clock, ClockKind::Wall);
        assert!(c.subscription.prefixes.is_empty());
        assert_eq!(c.rate(), 1.0);
        assert_eq!(c.subscription.max_future, Duration::from_secs(600));
    }

    fn key_of(text: &str) -> String {
        Config::parse(text).expect_err("should be refused").key
    }

    #[test]
    fn errors_name_the_key() {
        let base = "endpoints = [\"tcp://127.0.0.1:1\"]\n";
        assert_eq!(key_of(base), "name");
        assert_eq!(key_of(&format!("name = \"S-0\"\n{base}")), "name");
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}prefixes = [\"1\", \"1a\"]")),
            "prefixes"
        );
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}prefixes = [\"G\"]")),
            "prefixes"
        );
        assert_eq!(key_of("name = \"a\""), "endpoints");
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}clock = \"sun\"")),
            "clock"
        );
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}period = \"soon\"")),
            "period"
        );
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}custom_types = [\"bid\"]")),
            "custom_types"
        );
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}[windows]\nclick = \"1m\"")),
            "windows"
        );
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}[windows]\nclik = \"1m\"")),
            "windows.clik"
        );
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}[grace]\nclick = \"x\"")),
            "grace.click"
        );
        let t = |body: &str| {
            format!("name = \"a\"\n{base}custom_types = [\"open\"]\n[[targets]]\n{body}")
        };
        assert_eq!(
            key_of(&t(
                "name = \"x\"\ngiven = \"bid\"\nevent = \"open\"\nuntil = \"1d\""
            )),
            "targets[0].given"
        );
        assert_eq!(
            key_of(&t(
                "name = \"x\"\ngiven = \"click\"\nevent = \"nope\"\nuntil = \"1d\""
            )),
            "targets[0].event"
        );
        assert_eq!(
            key_of(&t(
                "name = \"ctr\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"1d\""
            )),
            "targets[0].name"
        );
        assert_eq!(
            key_of(&t("name = \"x\"\ngiven = \"click\"\nevent = \"open\"")),
            "targets[0].until"
        );
        assert!(key_of(&format!("name = \"a\"\n{base}bogus = 1")).contains("bogus"));
        assert_eq!(
            key_of(&format!("name = \"a\"\n{base}batch_events = \"50000\"")),
            "batch_events"
        );
    }

    #[test]
    fn early_feedback_is_for_windows_that_start_late() {
        let base = "name = \"a\"\nendpoints = [\"tcp://127.0.0.1:1\"]\ncustom_types = [\"open\"]\n";
        let c = Config::parse(&format!("{base}[feedback]\ncvr_long = \"early\"")).unwrap();
        assert!(c.cvr_long_early);
        assert!(!Config::parse(base).unwrap().cvr_long_early);
        for (body, key) in [
            ("[feedback]\nctr = \"early\"", "feedback.ctr"),
            ("[feedback]\ncvr_short = \"early\"", "feedback.cvr_short"),
            ("[feedback]\ncvr_long = \"soon\"", "feedback.cvr_long"),
            ("[feedback]\nopen_24h = \"early\"", "feedback.open_24h"),
            (
                "[[targets]]\nname = \"o\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"1d\"\nfeedback = \"early\"",
                "targets[0].feedback",
            ),
            (
                "[[targets]]\nname = \"o\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"1d\"\nfeedback = \"now\"",
                "targets[0].feedback",
            ),
        ] {
            assert_eq!(key_of(&format!("{base}{body}")), key, "{body}");
        }
        // Its start's sweep must not come after its end's.
        assert_eq!(
            key_of(&format!(
                "{base}[windows]\ninstall_short = \"24h\"\ninstall_long = \"26h\"\n[grace]\ninstall_short = \"6h\"\ninstall_long = \"1h\"\n[feedback]\ncvr_long = \"early\""
            )),
            "feedback.cvr_long"
        );
        let c = Config::parse(&format!(
            "{base}[[targets]]\nname = \"o\"\ngiven = \"click\"\nevent = \"open\"\nafter = \"1h\"\nuntil = \"1d\"\nfeedback = \"early\""
        ))
        .unwrap();
        assert!(c.targets[0].early);
    }
}
