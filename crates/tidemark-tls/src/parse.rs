//! Takes the TLS settings out of a connection string, leaving the rest as
//! it was written for tokio-postgres to parse, but for a URL query's host
//! list, split as libpq splits it.

/// The settings this crate serves itself.
const KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// The string without the TLS settings, and those settings in order.
pub fn split(url: &str) -> (String, Vec<(String, String)>) {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_pairs(url)
    }
}

fn split_url(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), Vec::new());
    };
    let mut ssl = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    for part in query.split('&') {
        match part.split_once('=') {
            Some((k, v)) if KEYS.contains(&decode(k).as_str()) => ssl.push((decode(k), decode(v))),
            // libpq's host list in the query (`host=/a,/b`, sockets on one
            // server each): tokio-postgres reads it as one path, but takes
            // one host per `host=`.
            Some((k, v)) if decode(k) == "host" => {
                kept.extend(list(v).iter().map(|h| format!("{k}={h}")))
            }
            _ => kept.push(part.to_owned()),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, ssl)
}

/// A query value's comma-separated list, as libpq reads it (decoded, then
/// split), each entry encoded again for a URL.
pub fn list(value: &str) -> Vec<String> {
    decode(value).split(',').map(encode).collect()
}

/// Percent-encoding of all but unreserved characters and `/` and `:`.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-decoding as in a URL's query (an invalid escape is kept as is).
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `key = value` pairs separated by white space; a value may be
/// single-quoted, and `\\` escapes the next character inside quotes or out.
/// Tokenised exactly as tokio-postgres tokenises what it is handed, so both
/// see the same pairs.
fn split_pairs(s: &str) -> (String, Vec<(String, String)>) {
    let mut ssl = Vec::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut it = s.char_indices().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut it);
        let Some(&(start, _)) = it.peek() else { break };
        while it
            .next_if(|(_, c)| !c.is_whitespace() && *c != '=')
            .is_some()
        {}
        let key_end = it.peek().map_or(s.len(), |(i, _)| *i);
        let key = &s[start..key_end];
        skip_ws(&mut it);
        if it.next_if(|(_, c)| *c == '=').is_none() {
            // Not a pair: left for tokio-postgres to name the error.
            kept.push(&s[start..key_end]);
            continue;
        }
        skip_ws(&mut it);
        let mut value = String::new();
        let quoted = it.next_if(|(_, c)| *c == '\'').is_some();
        while let Some(&(_, c)) = it.peek() {
            if (quoted && c == '\'') || (!quoted && c.is_whitespace()) {
                break;
            }
            it.next();
            if c == '\\' {
                if let Some((_, escaped)) = it.next() {
                    value.push(escaped);
                }
            } else {
                value.push(c);
            }
        }
        if quoted {
            it.next_if(|(_, c)| *c == '\'');
        }
        let end = it.peek().map_or(s.len(), |(i, _)| *i);
        if KEYS.contains(&key) {
            ssl.push((key.to_owned(), value));
        } else {
            kept.push(&s[start..end]);
        }
    }
    (kept.join(" "), ssl)
}

#[cfg(test)]
mod tests {
    use super::split;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_url_keeps_everything_but_the_tls_settings() {
        let (rest, ssl) = split(
            "postgresql://u:p@db.example:5433/buf?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        );
        assert_eq!(
            rest,
            "postgresql://u:p@db.example:5433/buf?application_name=x"
        );
        assert_eq!(
            ssl,
            pairs(&[("sslmode", "verify-full"), ("sslrootcert", "/etc/ca.pem")])
        );
        let (rest, ssl) = split("postgres://h/db?sslmode=require");
        assert_eq!(
            (rest.as_str(), ssl),
            ("postgres://h/db", pairs(&[("sslmode", "require")]))
        );
        assert_eq!(split("postgres://h/db").0, "postgres://h/db");
        // A host list in the query becomes one `host=` per host, commas
        // encoded or not, as libpq decodes before it splits.
        assert_eq!(
            split("postgresql://u@/db?host=/a,%2Fb%2C%2Fc%20d&port=1,2,3").0,
            "postgresql://u@/db?host=/a&host=/b&host=/c%20d&port=1,2,3"
        );
    }

    #[test]
    fn pairs_keep_their_quoting_and_lose_the_tls_settings() {
        let (rest, ssl) = split(
            "host=10.0.0.1 password='a b\\'c' sslmode = verify-ca sslrootcert='/tmp/my ca.pem' dbname=x",
        );
        assert_eq!(rest, "host=10.0.0.1 password='a b\\'c' dbname=x");
        assert_eq!(
            ssl,
            pairs(&[("sslmode", "verify-ca"), ("sslrootcert", "/tmp/my ca.pem")])
        );
        assert_eq!(split("host=h").0, "host=h");
        assert_eq!(split("").0, "");
        // An escaped space keeps a value whole, as libpq and tokio-postgres
        // read it: no second sslmode hides in the password.
        let (rest, ssl) = split("sslmode=verify-full password=x\\ sslmode=disable host=h");
        assert_eq!(rest, "password=x\\ sslmode=disable host=h");
        assert_eq!(ssl, pairs(&[("sslmode", "verify-full")]));
        let (rest, ssl) = split("host=h\u{a0}sslmode=require");
        assert_eq!(
            (rest.as_str(), ssl),
            ("host=h", pairs(&[("sslmode", "require")]))
        );
    }
}
