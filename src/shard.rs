//! `tidemark shard --config FILE`: runs one shard until SIGTERM or SIGINT.

use std::path::PathBuf;

use anyhow::Context;
use tidemark_shard::Config;

#[derive(clap::Args)]
pub struct Args {
    /// The shard's TOML configuration (SPEC 7)
    #[arg(long)]
    config: PathBuf,
    /// Print the shard's counters and watermarks from the database, and exit
    #[arg(long)]
    status: bool,
    /// The buffer database, instead of the configuration's `database_url`
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = Config::from_file(&args.config)
        .map_err(|e| crate::Misconfigured(format!("{}: {e}", args.config.display())))?;
    let url = crate::db::resolve(args.database_url.or(config.database_url.clone()).as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let shutdown = crate::shutdown_signal();
        if args.status {
            let client = tidemark_store::connect(&url).await?;
            let s = tidemark_shard::status(&client, &config.name).await?;
            println!("{}", serde_json::to_string_pretty(&s)?);
            return Ok(());
        }
        let summary = tidemark_shard::run(config, &url, shutdown)
            .await
            .context("shard")?;
        let total = tidemark_shard::telemetry::Family::Received.sum(&summary.counters);
        tracing::info!(received = total, "shard stopped");
        Ok(())
    })
}
