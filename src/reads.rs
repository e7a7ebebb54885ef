//! What the profile readers (`profile get`, `trail`) and the market's
//! bidder (`publish --profiles`) share on the command line: identifiers and
//! instants as typed, and reading from hot standbys (`--replica`,
//! `--max-lag`; docs/operations.md).

use tidemark_person::Identifier;
use tidemark_reader::{split_hosts, Reader, Served};
use tidemark_wire::parse_instant;

/// An identifier as typed, `kind:value`, in its stored form.
pub(crate) fn identifier(s: &str) -> anyhow::Result<String> {
    Identifier::parse(s)
        .map(|i| i.as_str().to_owned())
        .map_err(|e| anyhow::anyhow!("{s:?} is not an identifier (kind:value): {e}"))
}

/// A time as typed for `--{what}`: ms since the epoch or RFC 3339.
pub(crate) fn instant(s: &str, what: &str) -> anyhow::Result<i64> {
    parse_instant(s).map_err(|e| anyhow::anyhow!("--{what}: {e}"))
}

/// Where reads go besides the profile database itself.
#[derive(clap::Args)]
pub struct Replicas {
    /// A hot standby of the profile database to read from (repeatable; a URL with a host list, postgresql://a,b:5433/db, names one per host): replicas
    /// serve reads in turn while within --max-lag, else the primary does
    #[arg(long = "replica", value_name = "URL")]
    pub urls: Vec<String>,
    /// The most a replica may lag its primary and still serve a read
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    max_lag: String,
}

impl Replicas {
    /// `--max-lag`.
    pub fn max_lag(&self) -> anyhow::Result<std::time::Duration> {
        Ok(tidemark_wire::parse_duration(&self.max_lag)
            .map_err(|e| crate::Misconfigured(format!("--max-lag: {e}")))?)
    }

    /// A reader of `url` (the primary) and these replicas.
    pub fn reader(&self, url: &str) -> anyhow::Result<Reader> {
        let urls: Vec<&str> = self.urls.iter().map(String::as_str).collect();
        Ok(Reader::new(url, 1)?.with_replicas(&urls, self.max_lag()?)?)
    }

    /// Says on stderr where the read was served, when replicas were given.
    pub fn report(&self, reader: &Reader) {
        match (self.urls.is_empty(), reader.last_served()) {
            (false, Some(Served::Replica { index, lag_ms })) => {
                // Indexes count a host list's hosts one by one.
                let all = self.urls.iter().flat_map(|u| split_hosts(u));
                let url = all.clone().nth(index).unwrap_or_default();
                eprintln!("served by replica {url} ({lag_ms} ms behind)");
            }
            (false, _) => eprintln!("served by the primary (no replica within --max-lag)"),
            (true, _) => {}
        }
    }
}
