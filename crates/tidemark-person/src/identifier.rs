//! Identifiers (SPEC 11): `kind:value`, kind `[a-z][a-z0-9_]{0,31}`, value
//! 1–256 bytes of UTF-8 without U+0000; compared bytewise.

use std::fmt;

/// A valid identifier. Orders bytewise, as SPEC 11 compares them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identifier(String);

/// Why a string is not an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadIdentifier {
    /// No `:` separates kind and value.
    #[error("no ':' between kind and value")]
    NoColon,
    /// The kind is not `[a-z][a-z0-9_]{0,31}`.
    #[error("kind {0:?} is not [a-z][a-z0-9_]{{0,31}}")]
    Kind(String),
    /// The value is empty or longer than 256 bytes.
    #[error("value of {0} bytes (1 to 256)")]
    Length(usize),
    /// The value holds U+0000.
    #[error("value holds U+0000")]
    Nul,
    /// `ids` may not carry the `user` kind: `user` is the event's own field.
    #[error("kind \"user\" inside ids")]
    UserInIds,
}

fn valid_kind(kind: &str) -> bool {
    let b = kind.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

impl Identifier {
    /// The identifier of `kind` and `value`.
    pub fn new(kind: &str, value: &str) -> Result<Identifier, BadIdentifier> {
        if !valid_kind(kind) {
            return Err(BadIdentifier::Kind(kind.to_owned()));
        }
        if value.is_empty() || value.len() > 256 {
            return Err(BadIdentifier::Length(value.len()));
        }
        if value.contains('\0') {
            return Err(BadIdentifier::Nul);
        }
        Ok(Identifier(format!("{kind}:{value}")))
    }

    /// An event's `user`: the identifier `user:<value>`.
    pub fn user(value: &str) -> Result<Identifier, BadIdentifier> {
        Identifier::new("user", value)
    }

    /// One entry of an event's `ids` (kind → value); `user` is refused there.
    pub fn from_ids(kind: &str, value: &str) -> Result<Identifier, BadIdentifier> {
        if kind == "user" {
            return Err(BadIdentifier::UserInIds);
        }
        Identifier::new(kind, value)
    }

    /// Parses `kind:value`, split at the first `:` (as the command line does).
    pub fn parse(s: &str) -> Result<Identifier, BadIdentifier> {
        let (kind, value) = s.split_once(':').ok_or(BadIdentifier::NoColon)?;
        Identifier::new(kind, value)
    }

    /// `kind:value`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The kind.
    pub fn kind(&self) -> &str {
        self.0.split_once(':').expect("validated").0
    }
}

impl fmt::Display for Identifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_values_and_order() {
        assert_eq!(
            Identifier::parse("device:a:b").unwrap().as_str(),
            "device:a:b"
        );
        assert_eq!(Identifier::parse("device:a:b").unwrap().kind(), "device");
        assert_eq!(Identifier::parse("nocolon"), Err(BadIdentifier::NoColon));
        assert!(matches!(
            Identifier::parse("Dev:x"),
            Err(BadIdentifier::Kind(_))
        ));
        assert!(matches!(
            Identifier::parse("1d:x"),
            Err(BadIdentifier::Kind(_))
        ));
        assert!(Identifier::parse(&format!("{}:x", "a".repeat(32))).is_ok());
        assert!(Identifier::parse(&format!("{}:x", "a".repeat(33))).is_err());
        assert_eq!(Identifier::parse("d:"), Err(BadIdentifier::Length(0)));
        assert!(Identifier::new("d", &"é".repeat(128)).is_ok(), "256 bytes");
        assert_eq!(
            Identifier::new("d", &"é".repeat(129)),
            Err(BadIdentifier::Length(258))
        );
        assert_eq!(Identifier::new("d", "a\0"), Err(BadIdentifier::Nul));
        assert_eq!(
            Identifier::from_ids("user", "x"),
            Err(BadIdentifier::UserInIds)
        );
        assert_eq!(Identifier::user("x").unwrap().as_str(), "user:x");
        // Bytewise: '_' (0x5f) sorts before 'a', 'Z' before 'a', multi-byte last.
        let mut v: Vec<Identifier> = ["a:é", "a:a", "a:Z", "a_b:x", "a:_"]
            .iter()
            .map(|s| Identifier::parse(s).unwrap())
            .collect();
        v.sort();
        let s: Vec<&str> = v.iter().map(|i| i.as_str()).collect();
        assert_eq!(s, ["a:Z", "a:_", "a:a", "a:é", "a_b:x"]);
    }
}
