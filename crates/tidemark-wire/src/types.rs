//! Event types (SPEC 2): the built-in ones and the configured custom ones.

use std::fmt;

/// The type of an event. Custom types are indices into a [`Types`] registry,
/// so the type is `Copy` and comparing it costs nothing on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// `auction`: what the exchange offered (not subscribed by shards).
    Auction,
    /// `bid`: carries the features.
    Bid,
    /// `impression`: the bid won.
    Impression,
    /// `click`.
    Click,
    /// `install`.
    Install,
    /// A configured custom type, by its index.
    Custom(u8),
}

impl EventType {
    /// The built-in types, in slot order.
    pub const BUILTIN: [EventType; 5] = [
        EventType::Auction,
        EventType::Bid,
        EventType::Impression,
        EventType::Click,
        EventType::Install,
    ];

    /// High-frequency types are read from their own socket (SPEC 4).
    pub fn is_high_frequency(self) -> bool {
        matches!(
            self,
            EventType::Auction | EventType::Bid | EventType::Impression
        )
    }

    fn builtin_name(self) -> Option<&'static str> {
        Some(match self {
            EventType::Auction => "auction",
            EventType::Bid => "bid",
            EventType::Impression => "impression",
            EventType::Click => "click",
            EventType::Install => "install",
            EventType::Custom(_) => return None,
        })
    }
}

/// Why a custom type name is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTypeName(pub String);

impl fmt::Display for BadTypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadTypeName {}

/// The event types a process understands: the built-ins plus configured custom ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Types {
    custom: Vec<String>,
}

impl Types {
    /// Validates custom names: `[a-z][a-z0-9_]{0,31}`, not built-in, not `tick*`, unique.
    pub fn new<S: AsRef<str>>(custom: &[S]) -> Result<Types, BadTypeName> {
        let mut names: Vec<String> = Vec::with_capacity(custom.len());
        if custom.len() > usize::from(u8::MAX) {
            return Err(BadTypeName(format!("at most {} custom types", u8::MAX)));
        }
        for name in custom {
            let name = name.as_ref();
            validate_custom_name(name)?;
            if names.iter().any(|n| n == name) {
                return Err(BadTypeName(format!("custom type {name:?} is listed twice")));
            }
            names.push(name.to_owned());
        }
        Ok(Types { custom: names })
    }

    /// The type of a name, if known.
    pub fn lookup(&self, name: &str) -> Option<EventType> {
        Some(match name {
            "auction" => EventType::Auction,
            "bid" => EventType::Bid,
            "impression" => EventType::Impression,
            "click" => EventType::Click,
            "install" => EventType::Install,
            _ => {
                let i = self.custom.iter().position(|c| c == name)?;
                EventType::Custom(i as u8)
            }
        })
    }

    /// The wire name of a type. Panics on a custom index this registry does not hold.
    pub fn name(&self, t: EventType) -> &str {
        match t {
            EventType::Custom(i) => &self.custom[usize::from(i)],
            builtin => builtin.builtin_name().expect("built-in"),
        }
    }

    /// The custom types and their names, in order.
    pub fn custom(&self) -> impl Iterator<Item = (EventType, &str)> {
        self.custom
            .iter()
            .enumerate()
            .map(|(i, n)| (EventType::Custom(i as u8), n.as_str()))
    }
}

fn validate_custom_name(name: &str) -> Result<(), BadTypeName> {
    let b = name.as_bytes();
    let shape_ok = !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    if !shape_ok {
        return Err(BadTypeName(format!(
            "custom type {name:?} must match [a-z][a-z0-9_]{{0,31}}"
        )));
    }
    if name.starts_with("tick") {
        return Err(BadTypeName(format!(
            "custom type {name:?} must not start with \"tick\""
        )));
    }
    if EventType::BUILTIN
        .iter()
        .any(|t| t.builtin_name() == Some(name))
    {
        return Err(BadTypeName(format!(
            "custom type {name:?} is a built-in type"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_names_are_validated() {
        assert!(Types::new(&["open", "add_to_cart", "x9"]).is_ok());
        for bad in [
            "",
            "Open",
            "9x",
            "ticket",
            "tick",
            "bid",
            "a-b",
            &"a".repeat(33),
        ] {
            assert!(Types::new(&[bad]).is_err(), "{bad:?} accepted");
        }
        assert!(Types::new(&["open", "open"]).is_err());
    }

    #[test]
    fn lookup_and_name_agree() {
        let t = Types::new(&["open"]).unwrap();
        for name in ["auction", "bid", "impression", "click", "install", "open"] {
            assert_eq!(t.name(t.lookup(name).unwrap()), name);
        }
        assert_eq!(t.lookup("tick"), None);
        assert_eq!(t.lookup("close"), None);
    }
}
