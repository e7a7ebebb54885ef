//! `tidemark trail` (SPEC 11).

use crate::reads::{identifier, instant, Replicas};

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
