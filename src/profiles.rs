//! `tidemark profiles` and `tidemark profile get` (SPEC 11).

use std::path::PathBuf;

use anyhow::Context;
use tidemark_profiles::Config;

use crate::reads::{identifier, instant};

#[derive(clap::Args)]
pub struct ProcessArgs {
    /// The profile process's TOML configuration (SPEC 11)
    #[arg(long)]
    config: PathBuf,
    /// The profile database, instead of the configuration's `database_url`
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

#[derive(clap::Subcommand)]
pub enum ProfileAction {
    /// Print the profiles of identifiers (`kind:value`)
    Get {
        /// Identifiers, `kind:value` (split at the first `:`)
        #[arg(required = true)]
        ids: Vec<String>,
        /// Counters at this time: ms since the epoch or RFC 3339; default the
        /// profile process's clock as saved, else now
        #[arg(long)]
        at: Option<String>,
        /// One JSON object per identifier per line
        #[arg(long)]
        json: bool,
        /// The profile database; default the embedded one
        #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
        database_url: Option<String>,
        #[command(flatten)]
        replicas: crate::reads::Replicas,
    },
}

pub fn run_process(args: ProcessArgs) -> anyhow::Result<()> {
    let config = Config::from_file(&args.config)
        .map_err(|e| crate::Misconfigured(format!("{}: {e}", args.config.display())))?;
    let url = crate::db::resolve(args.database_url.or(config.database_url.clone()).as_deref())?;
    crate::runtime()?.block_on(async {
        let summary = tidemark_profiles::run(config, &url, crate::shutdown_signal())
            .await
            .context("profiles")?;
        let applied = summary.counts.get("applied").copied().unwrap_or(0);
        tracing::info!(applied, "profile process stopped");
        Ok(())
    })
}

pub fn run_profile(action: ProfileAction) -> anyhow::Result<()> {
    let ProfileAction::Get {
        ids,
        at,
        json,
        database_url,
        replicas,
    } = action;
    let ids: Vec<String> = ids
        .iter()
        .map(|s| identifier(s))
        .collect::<Result<_, _>>()?;
    let at = at.map(|a| instant(&a, "at")).transpose()?;
    let url = crate::db::resolve(database_url.as_deref())?;
    crate::runtime()?.block_on(async {
        let reader = replicas.reader(&url)?;
        let at = match at {
            Some(a) => a,
            None => reader
                .clock()
                .await?
                .unwrap_or_else(tidemark_market::now_ms),
        };
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        for p in reader.get(&refs, at).await? {
            if json {
                println!("{}", p.to_json());
                continue;
            }
            println!(
                "{}  master {}  size {}{}  at {}",
                p.id,
                p.master,
                p.size,
                if p.blocklisted { "  BLOCKLISTED" } else { "" },
                p.at
            );
            for (name, v) in &p.counters {
                println!("  {name:<24} {v:.6}");
            }
            for t in &p.types {
                println!(
                    "  {:<24} {} events, first {}, last {}",
                    t.type_name, t.count, t.first, t.last
                );
            }
        }
        replicas.report(&reader);
        Ok(())
    })
}
