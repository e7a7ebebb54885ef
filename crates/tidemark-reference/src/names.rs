//! The patterns the contract writes more than once: names,
//! `[a-z][a-z0-9_]{0,31}` (custom event types, SPEC 2; identifier kinds,
//! SPEC 11), and lowercase hex digits (txids, SPEC 1; prefixes, SPEC 4).

/// Whether `c` is a lowercase hex digit, `[0-9a-f]`.
pub(crate) fn is_lower_hex(c: char) -> bool {
    c.is_ascii_digit() || ('a'..='f').contains(&c)
}

/// Whether `name` matches `[a-z][a-z0-9_]{0,31}`: one lowercase ASCII
/// letter, then at most 31 more of lowercase letters, digits and `_`.
pub(crate) fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    first.is_ascii_lowercase()
        && name.len() <= 32
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

#[cfg(test)]
mod tests {
    use super::is_name;

    #[test]
    fn the_pattern_and_nothing_else() {
        for good in ["a", "click", "sign_up2", "a_", &"z".repeat(32)] {
            assert!(is_name(good), "{good:?}");
        }
        let too_long = "z".repeat(33);
        for bad in ["", "1a", "_a", "Open", "a-b", "a b", "é", "aé", &too_long] {
            assert!(!is_name(bad), "{bad:?}");
        }
    }
}
