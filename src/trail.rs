//! `tidemark trail` (SPEC 11), and reading from hot standbys (`--replica`,
//! `--max-lag`; docs/operations.md) for it and `profile get`.

use tidemark_reader::{split_hosts, Reader, Served};

use crate::profiles::{identifier, instant};

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

#[derive(clap::Args)]
pub struct TrailArgs {
    /// Any identifier of the person, `kind:value`
    id: String,
    /// From this time (inclusive): ms since the epoch or RFC 3339
    #[arg(long)]
    from: String,
    /// To this time (exclusive)
    #[arg(long)]
    to: String,
    /// Only these types, comma-separated
    #[arg(long, value_delimiter = ',')]
    types: Option<Vec<String>>,
    /// One JSON object per event per line
    #[arg(long)]
    json: bool,
    /// The profile database; default the embedded one
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    #[command(flatten)]
    replicas: Replicas,
}

pub fn run_trail(args: TrailArgs) -> anyhow::Result<()> {
    let id = identifier(&args.id)?;
    let from = instant(&args.from, "from")?;
    let to = instant(&args.to, "to")?;
    let url = crate::db::resolve(args.database_url.as_deref())?;
    crate::runtime()?.block_on(async {
        let reader = args.replicas.reader(&url)?;
        for e in reader.trail(&id, from, to, args.types.as_deref()).await? {
            if args.json {
                println!("{}", e.to_json());
            } else {
                println!(
                    "{}  {:<12} {}  {}",
                    e.ts,
                    e.type_name,
                    e.txid,
                    e.ids.join(" ")
                );
            }
        }
        args.replicas.report(&reader);
        Ok(())
    })
}
