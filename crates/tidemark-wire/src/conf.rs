//! Reading configuration files: TOML errors that name the key at fault, its
//! line and column, and the known key nearest to a misspelt one.

/// The environment variables a configuration may name (`${NAME}`): those
/// whose name and value are UTF-8. Others are skipped, not fatal: one odd
/// variable in a unit's environment must not crash a process at every
/// start (`std::env::vars` panics on it).
pub fn env_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// A configuration file's text read into `T`; on failure, the key at fault
/// (`config` when toml points nowhere) and a message with its line and
/// column.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, (String, String)> {
    toml::from_str(text).map_err(|e| {
        let span = e.span();
        let key = span
            .as_ref()
            .and_then(|s| key_at(text, s.start, s.end))
            .unwrap_or_else(|| "config".into());
        let mut message = suggest(e.message());
        if let Some(s) = span {
            let (line, column) = line_column(text, s.start);
            message = format!("{message} (line {line}, column {column})");
        }
        (key, message)
    })
}

/// `T` from a configuration file's text with environment overrides: each
/// variable `<prefix><KEY>` (upper case; `__` between a table and its key,
/// as in `TIDEMARK_SHARD_WINDOWS__CLICK`) sets that key, its value read as a
/// TOML value (`50000`, `true`, `["a", "b"]`) or else as a string (`1h`).
/// Without such variables this is [`parse_toml`].
pub fn parse_toml_env<T: serde::de::DeserializeOwned>(
    text: &str,
    prefix: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<T, (String, String)> {
    let overrides: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| k.len() > prefix.len() && k.starts_with(prefix))
        .collect();
    if overrides.is_empty() {
        return parse_toml(text);
    }
    let mut table: toml::Table = parse_toml(text)?;
    let mut names = Vec::new();
    for (var, raw) in &overrides {
        let path: Vec<String> = var[prefix.len()..]
            .to_lowercase()
            .split("__")
            .map(str::to_owned)
            .collect();
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.clone()));
        let (last, tables) = path.split_last().expect("a key after the prefix");
        let mut at = &mut table;
        for t in tables {
            let next = at
                .entry(t.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(inner) = next.as_table_mut() else {
                return Err((path.join("."), format!("{var}: {t} is not a table")));
            };
            at = inner;
        }
        at.insert(last.clone(), value);
        names.push(var.as_str());
    }
    T::deserialize(toml::Value::Table(table)).map_err(|e| {
        let message = suggest(&e.to_string());
        let key = message
            .strip_prefix("unknown key `")
            .and_then(|r| r.split('`').next())
            .unwrap_or("config")
            .to_owned();
        (
            key,
            format!(
                "{message} (with environment overrides {})",
                names.join(", ")
            ),
        )
    })
}

/// The key a span of `text` belongs to: an unknown key's span is the key; a
/// wrong value's span is the value, whose key is left of its `=`.
fn key_at(text: &str, start: usize, end: usize) -> Option<String> {
    let line_start = text.get(..start)?.rfind('\n').map_or(0, |i| i + 1);
    let before = text.get(line_start..start)?;
    let key = match before.find('=') {
        Some(eq) => &before[..eq],
        None => text.get(start..end)?,
    };
    let key = key.trim().trim_matches('"');
    (!key.is_empty()).then(|| key.to_owned())
}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// serde's "unknown field `x`, expected one of `a`, `b`" made shorter and
/// more useful: the nearest known key, or the list when none is near.
fn suggest(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((field, known)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let names: Vec<&str> = known.split('`').skip(1).step_by(2).collect();
    let nearest = names
        .iter()
        .map(|n| (distance(field, n), *n))
        .min()
        .filter(|(d, _)| *d <= (field.chars().count() / 3).max(2));
    match nearest {
        Some((_, n)) => format!("unknown key `{field}`: did you mean `{n}`?"),
        None => format!("unknown key `{field}`; known keys: {}", names.join(", ")),
    }
}

/// Levenshtein distance in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != *cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Raw {
        name: String,
        batch_events: Option<usize>,
        retention: Option<String>,
    }

    #[test]
    fn errors_name_the_key_its_line_and_the_nearest_key() {
        let e = parse_toml::<Raw>("name = \"s0\"\nbatch_event = 5\n").unwrap_err();
        assert_eq!(e.0, "batch_event");
        assert_eq!(
            e.1,
            "unknown key `batch_event`: did you mean `batch_events`? (line 2, column 1)"
        );
        let e = parse_toml::<Raw>("name = \"s0\"\nbatch_events = \"50000\"\n").unwrap_err();
        assert_eq!(e.0, "batch_events");
        assert!(e.1.contains("line 2, column 16"), "{}", e.1);
        let e = parse_toml::<Raw>("name = \"s0\"\nzzz = 1\n").unwrap_err();
        assert!(
            e.1.contains("known keys: name, batch_events, retention"),
            "{}",
            e.1
        );
        let e = parse_toml::<Raw>("name = \"s0\"\nbroken").unwrap_err();
        assert!(e.1.contains("line 2"), "{e:?}");
    }

    #[test]
    fn the_environment_overrides_keys_and_table_keys() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct WithTable {
            name: String,
            n: Option<i64>,
            list: Option<Vec<String>>,
            windows: Option<std::collections::BTreeMap<String, String>>,
        }
        let env = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let text = "name = \"a\"\nn = 1\n[windows]\nclick = \"1h\"\n";
        let r: WithTable = parse_toml_env(
            text,
            "T_",
            env(&[
                ("T_N", "50000"),
                ("T_WINDOWS__CLICK", "2h"),
                ("T_LIST", "[\"x\", \"y\"]"),
                ("OTHER", "1"),
            ]),
        )
        .unwrap();
        assert_eq!((r.name.as_str(), r.n), ("a", Some(50000)));
        assert_eq!(r.list.unwrap(), ["x", "y"]);
        assert_eq!(r.windows.unwrap()["click"], "2h");
        let e = parse_toml_env::<WithTable>(text, "T_", env(&[("T_NN", "5")])).unwrap_err();
        assert_eq!(e.0, "nn");
        assert!(
            e.1.contains("did you mean `n`?") && e.1.contains("T_NN"),
            "{}",
            e.1
        );
        let e = parse_toml_env::<WithTable>(text, "T_", env(&[("T_N", "many")])).unwrap_err();
        assert!(e.1.contains("T_N"), "{}", e.1);
        // Nothing under the prefix: the file alone, its errors with lines.
        let e = parse_toml_env::<WithTable>("name = 1", "T_", env(&[])).unwrap_err();
        assert!(e.1.contains("line 1"), "{}", e.1);
    }

    #[test]
    fn distances() {
        assert_eq!(distance("rate", "rtae"), 2);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("trail", "trial"), 2);
        assert_eq!(distance("same", "same"), 0);
    }
}
