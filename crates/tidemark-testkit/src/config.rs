//! Configuration files for tests, built key by key: each fixture is
//! defined once (here or beside the tests that share it), and a test
//! changes a key by name rather than editing a copy of the text.

use std::fmt;
use std::path::{Path, PathBuf};

/// A value as TOML writes it.
pub trait ToToml {
    /// Its TOML text.
    fn to_toml(&self) -> String;
}

impl ToToml for &str {
    fn to_toml(&self) -> String {
        // JSON's string escapes are TOML's basic string's.
        serde_json::to_string(self).expect("a string")
    }
}

impl ToToml for String {
    fn to_toml(&self) -> String {
        self.as_str().to_toml()
    }
}

impl ToToml for &Path {
    fn to_toml(&self) -> String {
        self.display().to_string().to_toml()
    }
}

impl ToToml for PathBuf {
    fn to_toml(&self) -> String {
        self.as_path().to_toml()
    }
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl ToToml for $t {
            fn to_toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
plain!(i64, u64, usize, bool, f64);

impl<T: ToToml> ToToml for &[T] {
    fn to_toml(&self) -> String {
        let items: Vec<String> = self.iter().map(ToToml::to_toml).collect();
        format!("[{}]", items.join(", "))
    }
}

impl<T: ToToml, const N: usize> ToToml for [T; N] {
    fn to_toml(&self) -> String {
        self.as_slice().to_toml()
    }
}

/// A configuration file: top-level keys, then tables (`[name]`) and
/// arrays of tables (`[[name]]`), in the order first set.
#[derive(Debug, Clone, Default)]
pub struct Config {
    top: Vec<(String, String)>,
    tables: Vec<Table>,
}

#[derive(Debug, Clone)]
struct Table {
    name: String,
    array: bool,
    keys: Vec<(String, String)>,
}

fn put(keys: &mut Vec<(String, String)>, key: &str, value: String) {
    match keys.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => keys.push((key.to_owned(), value)),
    }
}

impl Config {
    /// An empty file.
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets `key` (replacing it if set); `table.key` sets a key of `[table]`.
    pub fn set(mut self, key: &str, value: impl ToToml) -> Config {
        let value = value.to_toml();
        let Some((table, key)) = key.split_once('.') else {
            put(&mut self.top, key, value);
            return self;
        };
        match self.tables.iter_mut().find(|t| !t.array && t.name == table) {
            Some(t) => put(&mut t.keys, key, value),
            None => self.tables.push(Table {
                name: table.to_owned(),
                array: false,
                keys: vec![(key.to_owned(), value)],
            }),
        }
        self
    }

    /// Appends one `[[name]]` table of `keys`.
    pub fn push(mut self, name: &str, keys: &[(&str, &dyn ToToml)]) -> Config {
        let keys = keys.iter().map(|(k, v)| ((*k).to_owned(), v.to_toml()));
        self.tables.push(Table {
            name: name.to_owned(),
            array: true,
            keys: keys.collect(),
        });
        self
    }

    /// Appends a profile counter (`[[counters]]`, SPEC 11).
    pub fn counter(self, name: &str, event: &str, half_life: &str) -> Config {
        self.push(
            "counters",
            &[
                ("name", &name),
                ("event", &event),
                ("half_life", &half_life),
            ],
        )
    }

    /// Writes it to `path`; returns `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.to_string()).expect("write the configuration");
        path.to_owned()
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.top {
            writeln!(f, "{k} = {v}")?;
        }
        for t in &self.tables {
            let (open, close) = if t.array { ("[[", "]]") } else { ("[", "]") };
            writeln!(f, "\n{open}{}{close}", t.name)?;
            for (k, v) in &t.keys {
                writeln!(f, "{k} = {v}")?;
            }
        }
        Ok(())
    }
}

/// A learner reading the database at `url` as source `local`, its
/// checkpoints under `dir/ckpt`; small models, short polls.
pub fn learner(dir: &Path, url: &str) -> Config {
    Config::new()
        .set("checkpoint_dir", dir.join("ckpt"))
        .set("bits", 16i64)
        .set("batch", 500i64)
        .set("poll", "50ms")
        .push("sources", &[("name", &"local"), ("database_url", &url)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_set_by_name_and_tables_follow_in_order() {
        let c = Config::new()
            .set("clock", "wall")
            .set("dedup.click", "5h")
            .counter("clk", "click", "1h")
            .set("batch_events", 700usize)
            .set("clock", "event")
            .set("prefixes", ["0", "a\"b"]);
        assert_eq!(
            c.to_string(),
            "clock = \"event\"\nbatch_events = 700\nprefixes = [\"0\", \"a\\\"b\"]\n\n\
             [dedup]\nclick = \"5h\"\n\n[[counters]]\nname = \"clk\"\nevent = \"click\"\nhalf_life = \"1h\"\n"
        );
    }
}
