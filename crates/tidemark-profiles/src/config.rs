//! The profile process's configuration (SPEC 11): one TOML file, validated
//! at start with messages that name the key at fault.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tidemark_intake::{validate_name, Subscription};
use tidemark_wire::{parse_duration, Types};

pub use tidemark_intake::ConfigError;

fn err(key: impl Into<String>, message: impl ToString) -> ConfigError {
    ConfigError::new(key, message)
}

/// One `[[counters]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterDef {
    /// Its name: the feature name bidders copy its value under.
    pub name: String,
    /// The event type it counts.
    pub event: String,
    /// Its half-life, ms (> 0).
    pub half_life_ms: i64,
}

/// A validated profile-process configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The process's name (its lock and status row).
    pub name: String,
    /// Endpoints, prefixes, clock and door bounds (as every subscribing
    /// process reads them).
    pub subscription: Subscription,
    /// `None`: the embedded default (SPEC 9).
    pub database_url: Option<String>,
    /// Built-in and custom event types known.
    pub known: Types,
    /// The event types read, by name.
    pub types: Vec<String>,
    /// How long (of txid creation time) duplicates are recognised, by type
    /// (as `types`; SPEC 11 v1.2): older copies are stale.
    pub dedup: Vec<Duration>,
    /// Most identifiers one person may hold.
    pub max_ids: usize,
    /// Most identifiers one event may carry as sent (`too_many_ids` beyond).
    pub max_ids_per_event: usize,
    /// Refusals after which an identifier is blocklisted.
    pub blocklist_after: u64,
    /// How long events are kept for trails; `None`: no trails.
    pub trail: Option<Duration>,
    /// The counters, in file order.
    pub counters: Vec<CounterDef>,
    /// Workers, each owning the persons that hash to it (its own connection).
    pub workers: usize,
    /// Events per batch at most.
    pub batch_events: usize,
    /// Events (or link-stage entries) one transaction takes at most; below
    /// that, transactions are paced to their duration (`core::Pace`).
    pub transaction_events: usize,
    /// Stored persons each worker keeps in memory between transactions
    /// (`core::Known`); 0 keeps none.
    pub worker_cache: usize,
    /// Bytes of events held in memory at most (a batch takes at most half):
    /// with events of the largest size this binds before `batch_events`.
    pub max_pending_bytes: usize,
    /// Longest an accepted event waits before its batch is applied.
    pub batch_delay: Duration,
    /// How long a stop waits for the database to take what is held.
    pub shutdown_timeout: Duration,
    /// How long a starting process waits for the session its predecessor
    /// left behind to let go of the profile lock (SPEC 7, 12).
    pub lock_grace: Duration,
    /// Rows `tidemark.profile_quarantine` may hold.
    pub quarantine_max: i64,
    /// Where to serve Prometheus metrics (`host:port`), if anywhere.
    pub metrics_addr: Option<String>,
}

tidemark_intake::raw_config! {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Raw {
        name: String,
        database_url: Option<String>,
        types: Option<Vec<String>>,
        #[serde(default)]
        custom_types: Vec<String>,
        dedup: Option<RawDedup>,
        #[serde(default = "default_max_ids")]
        max_ids: i64,
        #[serde(default = "default_max_ids_per_event")]
        max_ids_per_event: i64,
        #[serde(default = "default_blocklist_after")]
        blocklist_after: i64,
        trail: Option<String>,
        #[serde(default)]
        counters: Vec<RawCounter>,
        #[serde(default = "default_workers")]
        workers: i64,
        #[serde(default = "default_batch_events")]
        batch_events: i64,
        #[serde(default = "default_batch_events")]
        transaction_events: i64,
        #[serde(default = "default_worker_cache")]
        worker_cache: i64,
        #[serde(default = "default_max_pending_bytes")]
        max_pending_bytes: i64,
        #[serde(default = "default_batch_delay")]
        batch_delay: String,
        #[serde(default = "default_shutdown_timeout")]
        shutdown_timeout: String,
        #[serde(default = "default_lock_grace")]
        lock_grace: String,
        #[serde(default = "default_quarantine_max")]
        quarantine_max: i64,
        metrics_addr: Option<String>,
    }
}

fn default_workers() -> i64 {
    2
}
fn default_batch_events() -> i64 {
    50_000
}
fn default_worker_cache() -> i64 {
    100_000
}
fn default_max_pending_bytes() -> i64 {
    256 << 20
}
fn default_batch_delay() -> String {
    "200ms".into()
}
fn default_shutdown_timeout() -> String {
    "30s".into()
}
fn default_lock_grace() -> String {
    "60s".into()
}
fn default_quarantine_max() -> i64 {
    10_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCounter {
    name: String,
    event: String,
    half_life: String,
}

/// `dedup` as written: one duration for every type, or a table by type.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum RawDedup {
    All(String),
    ByType(std::collections::BTreeMap<String, String>),
}

/// SPEC 11 v1.2's default `dedup` of a type: clicks and impressions come
/// within minutes of creation, installs and other types within days.
fn default_dedup(type_name: &str) -> &'static str {
    match type_name {
        "impression" => "1h",
        "click" => "3h",
        _ => "8d",
    }
}

/// The `dedup` horizon of each type read, in `types` order.
fn dedup_by_type(raw: Option<&RawDedup>, types: &[String]) -> Result<Vec<Duration>, ConfigError> {
    let parse = |key: String, v: &str| parse_duration(v).map_err(|e| err(&key, e));
    match raw {
        None => types
            .iter()
            .map(|t| parse(format!("dedup.{t}"), default_dedup(t)))
            .collect(),
        Some(RawDedup::All(v)) => Ok(vec![parse("dedup".into(), v)?; types.len()]),
        Some(RawDedup::ByType(by_type)) => {
            if let Some(k) = by_type.keys().find(|k| !types.contains(k)) {
                return Err(err(format!("dedup.{k}"), "not a type this process reads"));
            }
            types
                .iter()
                .map(|t| {
                    let v = by_type.get(t).map_or(default_dedup(t), String::as_str);
                    parse(format!("dedup.{t}"), v)
                })
                .collect()
        }
    }
}
fn default_max_ids() -> i64 {
    50
}
fn default_max_ids_per_event() -> i64 {
    16
}
fn default_blocklist_after() -> i64 {
    100
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| err(path.display().to_string(), e))?;
        Config::parse_with(&text, tidemark_wire::env_vars())
    }

    /// Parses and validates a configuration.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, [])
    }

    /// Parses and validates a configuration with environment overrides:
    /// `TIDEMARK_PROFILES_<KEY>` variables among `vars` (docs/operations.md).
    pub fn parse_with(
        text: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let raw: Raw = tidemark_intake::config::parse_toml_env(text, "TIDEMARK_PROFILES_", vars)?;
        validate_name(&raw.name).map_err(|m| err("name", m))?;
        let subscription = Subscription::from_keys(raw.keys(), 1_000_000)?;
        let duration = |key: &str, v: &str| parse_duration(v).map_err(|e| err(key, e));
        let known = Types::new(&raw.custom_types).map_err(|e| err("custom_types", e))?;
        let types = match raw.types {
            Some(t) => t,
            None => ["impression", "click", "install"]
                .iter()
                .map(|s| s.to_string())
                .chain(raw.custom_types.iter().cloned())
                .collect(),
        };
        if types.is_empty() {
            return Err(err("types", "at least one type is read"));
        }
        for t in &types {
            if known.lookup(t).is_none() {
                return Err(err(
                    "types",
                    format!("{t:?} is neither built in nor in custom_types"),
                ));
            }
        }
        if raw.max_ids < 2 {
            return Err(err("max_ids", "must be at least 2"));
        }
        if !(1..=1024).contains(&raw.max_ids_per_event) {
            return Err(err("max_ids_per_event", "must be 1 to 1024"));
        }
        if raw.quarantine_max < 0 {
            return Err(err("quarantine_max", "must be 0 or more"));
        }
        if raw.blocklist_after < 1 {
            return Err(err("blocklist_after", "must be at least 1"));
        }
        if !(1..=64).contains(&raw.workers) {
            return Err(err("workers", "must be 1 to 64"));
        }
        if !(1..=1_000_000).contains(&raw.batch_events) {
            return Err(err("batch_events", "must be 1 to 1000000"));
        }
        if !(1..=1_000_000).contains(&raw.transaction_events) {
            return Err(err("transaction_events", "must be 1 to 1000000"));
        }
        if !(0..=10_000_000).contains(&raw.worker_cache) {
            return Err(err("worker_cache", "must be 0 to 10000000"));
        }
        if !((1 << 20)..=(1 << 40)).contains(&raw.max_pending_bytes) {
            return Err(err("max_pending_bytes", "must be 1 MiB to 1 TiB"));
        }
        let mut names = BTreeSet::new();
        let mut counters = Vec::with_capacity(raw.counters.len());
        for (i, c) in raw.counters.into_iter().enumerate() {
            let key = |k: &str| format!("counters[{i}].{k}");
            validate_name(&c.name).map_err(|m| err(key("name"), m))?;
            if !names.insert(c.name.clone()) {
                return Err(err(key("name"), format!("{:?} is defined twice", c.name)));
            }
            if !types.contains(&c.event) {
                return Err(err(
                    key("event"),
                    format!("{:?} is not one of the types read", c.event),
                ));
            }
            let h = duration(&key("half_life"), &c.half_life)?;
            if h.is_zero() {
                return Err(err(key("half_life"), "must be greater than 0"));
            }
            counters.push(CounterDef {
                name: c.name,
                event: c.event,
                half_life_ms: h.as_millis() as i64,
            });
        }
        let dedup = dedup_by_type(raw.dedup.as_ref(), &types)?;
        Ok(Config {
            name: raw.name,
            subscription,
            database_url: raw.database_url,
            known,
            types,
            dedup,
            max_ids: raw.max_ids as usize,
            max_ids_per_event: raw.max_ids_per_event as usize,
            blocklist_after: raw.blocklist_after as u64,
            trail: raw.trail.map(|t| duration("trail", &t)).transpose()?,
            counters,
            workers: raw.workers as usize,
            batch_events: raw.batch_events as usize,
            transaction_events: raw.transaction_events as usize,
            worker_cache: raw.worker_cache as usize,
            max_pending_bytes: raw.max_pending_bytes as usize,
            batch_delay: duration("batch_delay", &raw.batch_delay)?,
            shutdown_timeout: duration("shutdown_timeout", &raw.shutdown_timeout)?,
            lock_grace: duration("lock_grace", &raw.lock_grace)?,
            quarantine_max: raw.quarantine_max,
            metrics_addr: raw.metrics_addr,
        })
    }

    /// The share of transactions read (SPEC 4).
    pub fn rate(&self) -> f64 {
        self.subscription.rate()
    }

    /// The weight of one event in a counter: `1/rate` when sampling, else 1.
    pub fn weight(&self) -> f64 {
        1.0 / self.rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "name = \"p\"\nendpoints = [\"tcp://127.0.0.1:1\"]\n";

    #[test]
    fn defaults_follow_spec_11() {
        let c = Config::parse(&format!(
            "{BASE}custom_types = [\"open\"]\n[[counters]]\nname = \"clk_7d\"\nevent = \"click\"\nhalf_life = \"7d\"\n"
        ))
        .unwrap();
        assert_eq!(c.types, ["impression", "click", "install", "open"]);
        let (hour, day) = (Duration::from_secs(3600), Duration::from_secs(86_400));
        assert_eq!(c.dedup, [hour, 3 * hour, 8 * day, 8 * day]);
        let one = Config::parse(&format!("{BASE}dedup = \"2d\"\n")).unwrap();
        assert_eq!(one.dedup, [2 * day; 3], "one duration sets every type");
        let by_type = Config::parse(&format!("{BASE}[dedup]\nclick = \"5h\"\n")).unwrap();
        assert_eq!(by_type.dedup, [hour, 5 * hour, 8 * day]);
        let bad = Config::parse(&format!("{BASE}[dedup]\nopen = \"5h\"\n")).unwrap_err();
        assert_eq!(bad.key, "dedup.open");
        let bad = Config::parse(&format!("{BASE}[dedup]\nclick = \"soon\"\n")).unwrap_err();
        assert_eq!(bad.key, "dedup.click");
        assert_eq!((c.max_ids, c.blocklist_after, c.trail), (50, 100, None));
        assert_eq!(c.counters[0].half_life_ms, 7 * 86_400_000);
        assert_eq!(c.subscription.clock, tidemark_intake::ClockKind::Wall);
        assert_eq!(c.weight(), 1.0);
        let c = Config::parse(&format!("{BASE}prefixes = [\"0\", \"1\"]\n")).unwrap();
        assert_eq!(c.weight(), 8.0);
    }

    #[test]
    fn errors_name_the_key() {
        for (extra, key) in [
            ("clock = \"lunar\"\n", "clock"),
            ("prefixes = [\"0\", \"01\"]\n", "prefixes"),
            ("types = [\"open\"]\n", "types"),
            ("max_ids = 1\n", "max_ids"),
            ("max_ids_per_event = 0\n", "max_ids_per_event"),
            ("trail = \"soon\"\n", "trail"),
            ("[[counters]]\nname = \"c\"\nevent = \"bid\"\nhalf_life = \"1d\"\n", "counters[0].event"),
            ("[[counters]]\nname = \"c\"\nevent = \"click\"\nhalf_life = \"0s\"\n", "counters[0].half_life"),
            (
                "[[counters]]\nname = \"c\"\nevent = \"click\"\nhalf_life = \"1d\"\n[[counters]]\nname = \"c\"\nevent = \"install\"\nhalf_life = \"1d\"\n",
                "counters[1].name",
            ),
        ] {
            let e = Config::parse(&format!("{BASE}{extra}")).unwrap_err();
            assert_eq!(e.key, key, "{extra:?}: {e}");
        }
    }
}
