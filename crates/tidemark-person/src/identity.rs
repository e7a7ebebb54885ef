//! An event's identifiers (SPEC 3 `user` and `ids`, judged by SPEC 11): each
//! bad one is dropped and counted, the rest kept in link order.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::Identifier;

/// The good identifiers of one event and how many bad ones it carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identities {
    /// Link order: its `user` first, then `ids` sorted by kind.
    pub ids: Vec<Identifier>,
    /// Whether `ids[0]` is the event's `user`.
    pub has_user: bool,
    /// Identifiers dropped (`bad_identifier`).
    pub bad: u32,
}

impl Identities {
    /// Reads `user` and `ids` as sent (JSON text; absent or `null` is `None`).
    /// A `user` that is not a string, an `ids` that is not an object (counted
    /// once), an entry that is not a string and a kind or value SPEC 11
    /// refuses are each one bad identifier.
    pub fn read(user: Option<&RawValue>, ids: Option<&RawValue>) -> Identities {
        Identities::read_at_most(user, ids, usize::MAX).expect("no limit")
    }

    /// [`Identities::read`], or `None` when the event carries more than
    /// `max` identifiers as sent (SPEC 11 `max_ids_per_event`: its `user`,
    /// and each key of `ids`, or `ids` itself when it is not an object,
    /// counted before any is judged bad). Work and memory are linear in the
    /// identifiers sent (the payload bounds them), and none is judged when
    /// they are too many.
    pub fn read_at_most(
        user: Option<&RawValue>,
        ids: Option<&RawValue>,
        max: usize,
    ) -> Option<Identities> {
        let map = ids
            .map(|raw| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(raw.get()).ok());
        let sent = usize::from(user.is_some())
            + match &map {
                None => 0,
                Some(None) => 1,
                Some(Some(m)) => m.len(),
            };
        if sent > max {
            return None;
        }
        let mut out = Identities::default();
        if let Some(u) = user {
            match serde_json::from_str::<&str>(u.get())
                .map(std::borrow::Cow::Borrowed)
                .or_else(|_| serde_json::from_str::<String>(u.get()).map(Into::into))
            {
                Ok(v) => match Identifier::user(&v) {
                    Ok(id) => {
                        out.ids.push(id);
                        out.has_user = true;
                    }
                    Err(_) => out.bad += 1,
                },
                Err(_) => out.bad += 1,
            }
        }
        match map {
            None => {}
            // A BTreeMap sorts by kind, bytewise: the link order. Its kinds
            // are distinct and `user` is refused as a kind, so no identifier
            // can repeat: nothing to look up.
            Some(Some(map)) => {
                for (kind, value) in map {
                    match value
                        .as_str()
                        .ok_or(())
                        .and_then(|v| Identifier::from_ids(&kind, v).map_err(|_| ()))
                    {
                        Ok(id) => out.ids.push(id),
                        Err(()) => out.bad += 1,
                    }
                }
            }
            Some(None) => out.bad += 1,
        }
        Some(out)
    }

    /// The identifier whose person the event counts for: its `user`, else its
    /// bytewise-smallest identifier (SPEC 11); `None` when none is left.
    pub fn primary(&self) -> Option<&Identifier> {
        if self.has_user {
            self.ids.first()
        } else {
            self.ids.iter().min()
        }
    }

    /// The identifiers sorted bytewise (as a trail lists them).
    pub fn sorted(&self) -> Vec<&Identifier> {
        let mut v: Vec<&Identifier> = self.ids.iter().collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(user: Option<&str>, ids: Option<&str>) -> Identities {
        let raw = |s: &str| serde_json::from_str::<Box<RawValue>>(s).unwrap();
        let (u, i) = (user.map(raw), ids.map(raw));
        Identities::read(u.as_deref(), i.as_deref())
    }

    #[test]
    fn more_identifiers_than_allowed_refuse_the_event_bad_ones_included() {
        let raw = |s: &str| serde_json::from_str::<Box<RawValue>>(s).unwrap();
        let (u, ids) = (raw(r#""u""#), raw(r#"{"a": "1", "b": 2, "user": "x"}"#));
        let at_most = |max| Identities::read_at_most(Some(&u), Some(&ids), max);
        assert_eq!(at_most(3), None, "user and three keys, two of them bad");
        let four = at_most(4).unwrap();
        assert_eq!((four.ids.len(), four.bad), (2, 2));
        let not_an_object = raw("[1, 2, 3]");
        assert!(Identities::read_at_most(None, Some(&not_an_object), 1).is_some());
        // Thousands of identifiers cost one parse, and nothing more.
        let many: String = (0..5_000).map(|i| format!(r#""k{i}":"v","#)).collect();
        let many = raw(&format!("{{{}\"z\":\"v\"}}", many));
        assert_eq!(Identities::read_at_most(None, Some(&many), 16), None);
        assert_eq!(Identities::read(None, Some(&many)).ids.len(), 5_001);
    }

    #[test]
    fn user_first_then_ids_by_kind() {
        let x = read(
            Some(r#""u1""#),
            Some(r#"{"member": "m", "idfa": "a\u00e9"}"#),
        );
        let names: Vec<&str> = x.ids.iter().map(|i| i.as_str()).collect();
        assert_eq!(names, ["user:u1", "idfa:aé", "member:m"]);
        assert_eq!(x.primary().unwrap().as_str(), "user:u1");
        assert_eq!(x.bad, 0);
        let y = read(None, Some(r#"{"member": "m", "idfa": "a"}"#));
        assert_eq!(y.primary().unwrap().as_str(), "idfa:a");
    }

    #[test]
    fn each_bad_identifier_drops_only_itself() {
        let long = "x".repeat(257);
        let x = read(
            Some("7"),
            Some(&format!(
                r#"{{"user": "u", "Bad": "v", "ok": "v", "e": "", "n": "a\u0000", "l": "{long}", "num": 3}}"#
            )),
        );
        assert_eq!(x.bad, 7);
        assert_eq!(x.ids.len(), 1);
        assert_eq!(x.primary().unwrap().as_str(), "ok:v");
        assert_eq!(read(None, Some("[1]")).bad, 1);
        assert_eq!(read(Some(r#""a\u0000""#), None).primary(), None);
    }
}
