//! A profile process's configuration (SPEC 11): the parts that decide what
//! it knows, read from its TOML file with SPEC 11's defaults.

use std::collections::BTreeMap;

pub(super) const MINUTE_MS: i64 = 60_000;
pub(super) const HOUR_MS: i64 = 60 * MINUTE_MS;
pub(super) const DAY_MS: i64 = 24 * HOUR_MS;

/// One counter definition: `[[counters]] name, event, half_life`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// The counter's name (the key in `counters` and in bid features).
    pub name: String,
    /// The event type it counts.
    pub event: String,
    /// Its half-life in milliseconds.
    pub half_life_ms: i64,
}

/// The parts of a profile process's configuration that decide what it knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The event types the process reads (SPEC 11 `types`; built-ins and custom names).
    pub types: Vec<String>,
    /// Configured custom types (SPEC 2 rules), so their topics decode.
    pub custom_types: Vec<String>,
    /// The counters, in configuration order.
    pub counters: Vec<CounterSpec>,
    /// The process's txid prefixes (SPEC 4); empty = all. Weight w = 1/rate, rate = sum of 16^-len(p) (1 when empty).
    pub prefixes: Vec<String>,
    /// How long (of txid creation time) a (type, txid) is remembered, by
    /// type (SPEC 11 v1.2); a type not here takes its default
    /// ([`Setup::dedup_of`]: impression 1 h, click 3 h, any other 8 days).
    pub dedup_ms: BTreeMap<String, i64>,
    /// How far ahead of the reference a txid or `ts` may be; default 10 minutes.
    pub max_future_ms: i64,
    /// The most identifiers a person may hold; default 50.
    pub max_ids: usize,
    /// Refusals an identifier may be charged before it is blocklisted; default 100.
    pub blocklist_after: u64,
    /// The most identifiers an event may carry as sent (`user` and each key
    /// of `ids`), default 16; beyond it the event is refused whole
    /// (`too_many_ids`, SPEC 11 v1.2).
    pub max_ids_per_event: usize,
}

impl Default for Setup {
    /// The defaults SPEC 11 gives: types impression, click, install; no custom
    /// types, counters or prefixes.
    fn default() -> Setup {
        Setup {
            types: vec![
                "impression".to_string(),
                "click".to_string(),
                "install".to_string(),
            ],
            custom_types: Vec::new(),
            counters: Vec::new(),
            prefixes: Vec::new(),
            dedup_ms: BTreeMap::new(),
            max_future_ms: 10 * MINUTE_MS,
            max_ids: 50,
            blocklist_after: 100,
            max_ids_per_event: 16,
        }
    }
}

impl Setup {
    /// The `dedup` horizon of a type: as configured, else SPEC 11's
    /// default (impression 1 h, click 3 h, install and any other 8 days).
    pub fn dedup_of(&self, type_name: &str) -> i64 {
        self.dedup_ms
            .get(type_name)
            .copied()
            .unwrap_or(match type_name {
                "impression" => HOUR_MS,
                "click" => 3 * HOUR_MS,
                _ => 8 * DAY_MS,
            })
    }

    /// Reads a profile process's TOML configuration (SPEC 11). Only `types`,
    /// `custom_types`, `prefixes`, `dedup`, `max_future`, `max_ids`,
    /// `blocklist_after` and `[[counters]]` matter; other keys are ignored.
    /// `types` defaults to impression, click, install and the custom types.
    pub fn from_toml(text: &str) -> Result<Setup, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("config: {e}"))?;
        let mut setup = Setup::default();
        if let Some(value) = table.get("custom_types") {
            setup.custom_types = strings("custom_types", value)?;
        }
        match table.get("types") {
            Some(value) => setup.types = strings("types", value)?,
            None => setup.types.extend(setup.custom_types.iter().cloned()),
        }
        if let Some(value) = table.get("prefixes") {
            setup.prefixes = strings("prefixes", value)?;
        }
        match table.get("dedup") {
            None => {}
            // A single duration sets every type.
            Some(value @ toml::Value::String(_)) => {
                let d = duration("dedup", value)?;
                setup.dedup_ms = setup.types.iter().map(|t| (t.clone(), d)).collect();
            }
            Some(toml::Value::Table(by_type)) => {
                for (t, value) in by_type {
                    setup
                        .dedup_ms
                        .insert(t.clone(), duration(&format!("dedup.{t}"), value)?);
                }
            }
            Some(_) => return Err("dedup: a duration or a table of durations by type".into()),
        }
        if let Some(value) = table.get("max_future") {
            setup.max_future_ms = duration("max_future", value)?;
        }
        if let Some(value) = table.get("max_ids") {
            let n = value.as_integer().filter(|n| *n >= 1);
            let n = n.ok_or("max_ids: must be a positive integer")?;
            setup.max_ids = n as usize;
        }
        if let Some(value) = table.get("max_ids_per_event") {
            let n = value.as_integer().filter(|n| *n >= 1);
            let n = n.ok_or("max_ids_per_event: must be a positive integer")?;
            setup.max_ids_per_event = n as usize;
        }
        if let Some(value) = table.get("blocklist_after") {
            let n = value.as_integer().filter(|n| *n >= 0);
            let n = n.ok_or("blocklist_after: must be a non-negative integer")?;
            setup.blocklist_after = n as u64;
        }
        if let Some(value) = table.get("counters") {
            let entries = value
                .as_array()
                .ok_or("counters: must be an array of tables ([[counters]])")?;
            for entry in entries {
                let text = |key: &str| -> Result<String, String> {
                    match entry.get(key).and_then(|v| v.as_str()) {
                        Some(s) => Ok(s.to_string()),
                        None => Err(format!("counters.{key}: required string")),
                    }
                };
                let half_life_ms = crate::parse_duration(&text("half_life")?)
                    .map_err(|e| format!("counters.half_life: {e}"))?;
                setup.counters.push(CounterSpec {
                    name: text("name")?,
                    event: text("event")?,
                    half_life_ms,
                });
            }
        }
        Ok(setup)
    }

    /// The weight of one counted event: `1/rate` (SPEC 4, 11), 1 without prefixes.
    pub fn weight(&self) -> f64 {
        if self.prefixes.is_empty() {
            return 1.0;
        }
        let rate: f64 = self
            .prefixes
            .iter()
            .map(|p| 16f64.powi(-(p.len() as i32)))
            .sum();
        1.0 / rate
    }
}

fn strings(key: &str, value: &toml::Value) -> Result<Vec<String>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("{key}: must be an array of strings"))?;
    items
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{key}: must be an array of strings"))
        })
        .collect()
}

fn duration(key: &str, value: &toml::Value) -> Result<i64, String> {
    let text = value
        .as_str()
        .ok_or_else(|| format!("{key}: must be a duration string like \"5s\""))?;
    crate::parse_duration(text).map_err(|e| format!("{key}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::close;
    use super::*;

    #[test]
    fn setup_reads_the_toml_configuration() {
        let s = Setup::from_toml(
            r#"
            name = "p"
            custom_types = ["signup"]
            prefixes = ["a"]
            dedup = "2d"
            max_ids = 7
            [[counters]]
            name = "clk_7d"
            event = "click"
            half_life = "7d"
            "#,
        )
        .unwrap();
        assert_eq!(s.types, vec!["impression", "click", "install", "signup"]);
        assert_eq!(
            s.dedup_of("click"),
            2 * DAY_MS,
            "one duration sets every type"
        );
        let by_type = Setup::from_toml("[dedup]\nclick = \"5h\"\n").unwrap();
        assert_eq!(by_type.dedup_of("click"), 5 * HOUR_MS);
        assert_eq!(
            by_type.dedup_of("impression"),
            HOUR_MS,
            "SPEC 11 v1.2 defaults"
        );
        assert_eq!(by_type.dedup_of("install"), 8 * DAY_MS);
        assert_eq!(by_type.dedup_of("open"), 8 * DAY_MS);
        assert_eq!(s.max_future_ms, 10 * MINUTE_MS);
        assert_eq!((s.max_ids, s.blocklist_after), (7, 100));
        assert_eq!(s.counters[0].half_life_ms, 7 * DAY_MS);
        assert!(close(s.weight(), 16.0));
    }
}
