//! The keys every subscribing process reads the same way (SPEC 6, 7, 11):
//! where to connect, which prefixes, which clock and its bounds. Each
//! process parses its own file and hands these keys over as written, so a
//! key means one thing, with one default, in every configuration.

use std::time::Duration;

use tidemark_wire::parse_duration;

/// Which clock a process follows (SPEC 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// Wall time (production).
    Wall,
    /// Event time from publishers' ticks (replays, authenticated publishers).
    Event,
}

/// The validated subscription of one process.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// ZeroMQ endpoints both sockets connect to.
    pub endpoints: Vec<String>,
    /// Txid prefixes read; empty means every transaction.
    pub prefixes: Vec<String>,
    /// The clock the process follows.
    pub clock: ClockKind,
    /// How far behind the oldest publisher's tick the event clock stays.
    pub lateness: Duration,
    /// A publisher silent this long stops holding the event clock back.
    pub publisher_timeout: Duration,
    /// How far ahead of the reference an event or tick may be (SPEC 1).
    pub max_future: Duration,
    /// ZeroMQ receive high-water mark of each socket, in messages.
    pub rcvhwm: i32,
    /// Publisher names whose ticks count at once (SPEC 6).
    pub max_publishers: usize,
    /// Who may publish (`[curve]`, SPEC 2 and 7); `None`: plain sockets.
    pub curve: Option<crate::curve::Curve>,
}

/// `[curve]` as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCurve {
    /// The fleet's secret key file.
    pub secret_key_file: String,
    /// `[[curve.publishers]]`.
    #[serde(default)]
    pub publishers: Vec<RawListed>,
}

/// One `[[curve.publishers]]` entry as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListed {
    /// `name`.
    pub name: String,
    /// `public_key`, Z85.
    #[serde(default)]
    pub public_key: Option<String>,
    /// `public_key_file`: a file holding it (a `tidemark keys new` FILE.pub).
    #[serde(default)]
    pub public_key_file: Option<String>,
    /// `forwarder`.
    #[serde(default)]
    pub forwarder: bool,
}

/// The subscription keys as written in a file (absent: `None`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Keys<'a> {
    /// `endpoints`.
    pub endpoints: &'a [String],
    /// `prefixes`.
    pub prefixes: Option<&'a [String]>,
    /// `clock`.
    pub clock: Option<&'a str>,
    /// `lateness`.
    pub lateness: Option<&'a str>,
    /// `publisher_timeout`.
    pub publisher_timeout: Option<&'a str>,
    /// `max_future`.
    pub max_future: Option<&'a str>,
    /// `rcvhwm`.
    pub rcvhwm: Option<i64>,
    /// `max_publishers`.
    pub max_publishers: Option<i64>,
    /// `[curve]`.
    pub curve: Option<&'a RawCurve>,
}

/// Declares a process's configuration as written in its file (a struct
/// the process derives `Deserialize` for), with the subscription keys
/// added, and `keys()` to hand them to [`Subscription::from_keys`]. A macro
/// rather than a nested struct: serde's `flatten` cannot be combined with
/// `deny_unknown_fields`, which is what names a misspelt key, and it would
/// lose the spans that name a mistyped one.
///
/// ```ignore
/// tidemark_intake::raw_config! {
///     #[derive(serde::Deserialize)]
///     #[serde(deny_unknown_fields)]
///     struct Raw { name: String, period: Option<String> }
/// }
/// ```
#[macro_export]
macro_rules! raw_config {
    ($(#[$meta:meta])* struct $raw:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        struct $raw {
            #[serde(default)]
            endpoints: Vec<String>,
            prefixes: Option<Vec<String>>,
            clock: Option<String>,
            lateness: Option<String>,
            publisher_timeout: Option<String>,
            max_future: Option<String>,
            rcvhwm: Option<i64>,
            max_publishers: Option<i64>,
            curve: Option<$crate::config::RawCurve>,
            $($(#[$fmeta])* $field: $ty),*
        }

        impl $raw {
            /// The subscription keys as written.
            fn keys(&self) -> $crate::Keys<'_> {
                $crate::Keys {
                    endpoints: &self.endpoints,
                    prefixes: self.prefixes.as_deref(),
                    clock: self.clock.as_deref(),
                    lateness: self.lateness.as_deref(),
                    publisher_timeout: self.publisher_timeout.as_deref(),
                    max_future: self.max_future.as_deref(),
                    rcvhwm: self.rcvhwm,
                    max_publishers: self.max_publishers,
                    curve: self.curve.as_ref(),
                }
            }
        }
    };
}

/// A configuration that cannot be used, naming the key at fault (every
/// process's configuration reports its errors this way).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// The key, as written in the file.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error of `key`.
    pub fn new(key: impl Into<String>, message: impl ToString) -> ConfigError {
        ConfigError {
            key: key.into(),
            message: message.to_string(),
        }
    }
}

fn err(key: &str, message: impl ToString) -> ConfigError {
    ConfigError::new(key, message)
}

/// Reads a configuration file's text into `T` (a [`raw_config!`] struct),
/// naming the key at fault, its line and the nearest known key
/// (`tidemark_wire::parse_toml`).
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    tidemark_wire::parse_toml(text).map_err(|(key, message)| err(&key, message))
}

/// [`parse_toml`] with the process's environment overrides: every key
/// settable as `<prefix><KEY>` (`TIDEMARK_SHARD_BATCH_EVENTS=50000`,
/// `TIDEMARK_SHARD_WINDOWS__CLICK=2h`; `tidemark_wire::parse_toml_env`).
pub fn parse_toml_env<T: serde::de::DeserializeOwned>(
    text: &str,
    prefix: &str,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<T, ConfigError> {
    tidemark_wire::parse_toml_env(text, prefix, vars).map_err(|(key, message)| err(&key, message))
}

/// Names of processes (shards name their tables with them) and counters:
/// `[a-z][a-z0-9_]{0,31}`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?} must match [a-z][a-z0-9_]{{0,31}}"))
    }
}

/// Validates `[curve]`: the fleet's key file read, each listed publisher
/// named once with a key.
fn curve(raw: &RawCurve) -> Result<crate::curve::Curve, ConfigError> {
    let secret = crate::curve::read_secret_key_file(std::path::Path::new(&raw.secret_key_file))
        .map_err(|m| err("curve.secret_key_file", m))?;
    let publishers = listed(&raw.publishers, "curve.publishers")?;
    Ok(crate::curve::Curve { secret, publishers })
}

/// Validates a list of publishers (`key` names it in messages): at least
/// one, each key listed once, given inline or by file. A name may be
/// listed with several keys (a key being rotated), all alike as to
/// `forwarder`.
fn listed(raw: &[RawListed], key: &str) -> Result<Vec<crate::curve::Listed>, ConfigError> {
    use crate::curve::{parse_key, read_key_file, Listed};
    if raw.is_empty() {
        return Err(err(
            key,
            "list at least one publisher (name and public_key): with none, nobody gets in",
        ));
    }
    let mut publishers: Vec<Listed> = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let key = |k: &str| format!("{key}[{i}].{k}");
        if p.name.is_empty() {
            return Err(err(&key("name"), "a publisher needs a name"));
        }
        if publishers
            .iter()
            .any(|q| q.name == p.name && q.forwarder != p.forwarder)
        {
            return Err(err(
                &key("forwarder"),
                format!("{:?} is listed before with another `forwarder`", p.name),
            ));
        }
        let public = match (&p.public_key, &p.public_key_file) {
            (Some(k), None) => parse_key(k).map_err(|m| err(&key("public_key"), m))?,
            (None, Some(f)) => read_key_file(std::path::Path::new(f))
                .map_err(|m| err(&key("public_key_file"), m))?,
            _ => {
                return Err(err(
                    &key("public_key"),
                    "give exactly one of public_key and public_key_file",
                ))
            }
        };
        if let Some(q) = publishers.iter().find(|q| q.public == public) {
            return Err(err(
                &key("public_key"),
                format!("this key is listed before, as {:?}", q.name),
            ));
        }
        publishers.push(Listed {
            name: p.name.clone(),
            public,
            forwarder: p.forwarder,
        });
    }
    Ok(publishers)
}

/// Reads a file of `[[publishers]]` entries (`name`, `public_key`,
/// `forwarder`), as `tidemark proxy --curve-publishers` takes.
pub fn read_publishers(path: &std::path::Path) -> Result<Vec<crate::curve::Listed>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        publishers: Vec<RawListed>,
    }
    let at = |m: &dyn std::fmt::Display| format!("{}: {m}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| at(&e))?;
    let file: File = parse_toml(&text).map_err(|e| at(&e))?;
    listed(&file.publishers, "publishers").map_err(|e| at(&e))
}

impl Subscription {
    /// Validates the keys; `rcvhwm_default` is the owner's (a process that
    /// batches more holds more).
    pub fn from_keys(k: Keys<'_>, rcvhwm_default: i32) -> Result<Subscription, ConfigError> {
        if k.endpoints.is_empty() {
            return Err(err("endpoints", "at least one endpoint is required"));
        }
        for e in k.endpoints {
            if !(e.starts_with("tcp://") || e.starts_with("ipc://") || e.starts_with("inproc://")) {
                return Err(err(
                    "endpoints",
                    format!("{e:?} is not a ZeroMQ endpoint like tcp://host:port"),
                ));
            }
        }
        if k.prefixes.is_some_and(<[String]>::is_empty) {
            return Err(err(
                "prefixes",
                "is empty: omit the key to read every transaction",
            ));
        }
        let prefixes = k.prefixes.unwrap_or_default().to_vec();
        tidemark_plan::validate_set(&prefixes).map_err(|e| err("prefixes", e.to_string()))?;
        let clock = match k.clock {
            None | Some("wall") => ClockKind::Wall,
            Some("event") => ClockKind::Event,
            Some(other) => {
                return Err(err(
                    "clock",
                    format!("{other:?} is neither \"wall\" nor \"event\""),
                ))
            }
        };
        let dur = |key: &str, v: Option<&str>, default: Duration| {
            v.map_or(Ok(default), |s| parse_duration(s).map_err(|m| err(key, m)))
        };
        let rcvhwm = match k.rcvhwm {
            None => rcvhwm_default,
            Some(n) if (1..=i64::from(i32::MAX)).contains(&n) => n as i32,
            Some(n) => {
                return Err(err(
                    "rcvhwm",
                    format!("must be a message count from 1 to {}, got {n}", i32::MAX),
                ))
            }
        };
        let max_publishers = match k.max_publishers {
            None => 64,
            Some(n) if (1..=65_536).contains(&n) => n as usize,
            Some(n) => {
                return Err(err(
                    "max_publishers",
                    format!("must be from 1 to 65536, got {n}"),
                ))
            }
        };
        let curve = k.curve.map(curve).transpose()?;
        Ok(Subscription {
            endpoints: k.endpoints.to_vec(),
            prefixes,
            clock,
            lateness: dur("lateness", k.lateness, Duration::from_secs(5))?,
            publisher_timeout: dur(
                "publisher_timeout",
                k.publisher_timeout,
                Duration::from_secs(30),
            )?,
            max_future: dur("max_future", k.max_future, Duration::from_secs(600))?,
            rcvhwm,
            max_publishers,
            curve,
        })
    }

    /// The share of all transactions read (SPEC 4).
    pub fn rate(&self) -> f64 {
        if self.prefixes.is_empty() {
            1.0
        } else {
            tidemark_plan::share(&self.prefixes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::raw_config! {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            name: String,
            #[serde(default)]
            batch_events: i64,
        }
    }

    #[test]
    fn a_raw_config_reads_the_subscription_keys_and_names_the_key_at_fault() {
        let ok =
            "name = \"a\"\nendpoints = [\"tcp://127.0.0.1:1\"]\nclock = \"event\"\nrcvhwm = 5\n";
        let raw: Raw = parse_toml(ok).unwrap();
        let s = Subscription::from_keys(raw.keys(), 7).unwrap();
        assert_eq!((raw.name.as_str(), raw.batch_events), ("a", 0));
        assert_eq!((s.clock, s.rcvhwm), (ClockKind::Event, 5));
        let key = |text: &str| parse_toml::<Raw>(text).unwrap_err().key;
        // A wrong type names the key, not the value.
        assert_eq!(
            key("name = \"a\"\nbatch_events = \"50000\""),
            "batch_events"
        );
        assert_eq!(key("name = \"a\"\nrcvhwm = \"x\""), "rcvhwm");
        // An unknown key names itself.
        assert_eq!(key("name = \"a\"\nbatch_event = 5"), "batch_event");
        assert_eq!(key("name = 5"), "name");
    }

    fn keys(endpoints: &[String]) -> Keys<'_> {
        Keys {
            endpoints,
            ..Keys::default()
        }
    }

    #[test]
    fn defaults_follow_the_spec() {
        let ep = vec!["tcp://127.0.0.1:1".to_owned()];
        let s = Subscription::from_keys(keys(&ep), 7).unwrap();
        assert_eq!(s.clock, ClockKind::Wall);
        assert_eq!(s.lateness, Duration::from_secs(5));
        assert_eq!(s.publisher_timeout, Duration::from_secs(30));
        assert_eq!(s.max_future, Duration::from_secs(600));
        assert_eq!(s.rcvhwm, 7);
        assert_eq!(s.rate(), 1.0);
    }

    #[test]
    fn a_publisher_list_takes_keys_inline_or_by_file_and_a_name_may_rotate_keys() {
        let z85 = |b: u8| zmq::z85_encode(&[b; 32]).unwrap();
        let file = std::env::temp_dir().join(format!("listed-{}.pub", std::process::id()));
        std::fs::write(&file, format!("{}\n", z85(2))).unwrap();
        let entry =
            |name: &str, key: Option<String>, file: Option<&std::path::Path>, fw: bool| RawListed {
                name: name.to_owned(),
                public_key: key,
                public_key_file: file.map(|f| f.display().to_string()),
                forwarder: fw,
            };
        let ok = listed(
            &[
                entry("a", Some(z85(1)), None, false),
                entry("a", None, Some(&file), false),
                entry("p", Some(z85(3)), None, true),
            ],
            "publishers",
        )
        .unwrap();
        assert_eq!(ok[1].public, [2; 32]);
        assert!(ok[2].forwarder && ok.iter().filter(|p| p.name == "a").count() == 2);
        let refused = |list: &[RawListed]| listed(list, "publishers").unwrap_err().key;
        assert_eq!(refused(&[]), "publishers");
        assert_eq!(
            refused(&[entry("", Some(z85(1)), None, false)]),
            "publishers[0].name"
        );
        assert_eq!(
            refused(&[entry("a", None, None, false)]),
            "publishers[0].public_key"
        );
        let both = entry("a", Some(z85(1)), Some(&file), false);
        assert_eq!(refused(&[both]), "publishers[0].public_key");
        let twice = [
            entry("a", Some(z85(2)), None, false),
            entry("b", None, Some(&file), false),
        ];
        assert_eq!(refused(&twice), "publishers[1].public_key");
        let unlike = [
            entry("a", Some(z85(1)), None, false),
            entry("a", Some(z85(3)), None, true),
        ];
        assert_eq!(refused(&unlike), "publishers[1].forwarder");
        let missing = std::path::Path::new("/nonexistent/k.pub");
        assert_eq!(
            refused(&[entry("a", None, Some(missing), false)]),
            "publishers[0].public_key_file"
        );
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn names_are_plain_identifiers() {
        assert!(validate_name("s0_eu").is_ok());
        for bad in ["", "0s", "S0", "a-b", &"a".repeat(33)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let ep = vec!["tcp://127.0.0.1:1".to_owned()];
        let bad_ep = vec!["localhost:1".to_owned()];
        let empty: Vec<String> = Vec::new();
        let overlapping = vec!["0".to_owned(), "01".to_owned()];
        let cases: [(Keys<'_>, &str); 8] = [
            (keys(&empty), "endpoints"),
            (keys(&bad_ep), "endpoints"),
            (
                Keys {
                    prefixes: Some(&empty),
                    ..keys(&ep)
                },
                "prefixes",
            ),
            (
                Keys {
                    prefixes: Some(&overlapping),
                    ..keys(&ep)
                },
                "prefixes",
            ),
            (
                Keys {
                    clock: Some("lunar"),
                    ..keys(&ep)
                },
                "clock",
            ),
            (
                Keys {
                    lateness: Some("soon"),
                    ..keys(&ep)
                },
                "lateness",
            ),
            (
                Keys {
                    rcvhwm: Some(0),
                    ..keys(&ep)
                },
                "rcvhwm",
            ),
            (
                Keys {
                    max_publishers: Some(0),
                    ..keys(&ep)
                },
                "max_publishers",
            ),
        ];
        for (k, key) in cases {
            assert_eq!(Subscription::from_keys(k, 1).unwrap_err().key, key);
        }
    }
}
