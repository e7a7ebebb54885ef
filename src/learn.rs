//! `tidemark learn`: the online learner over shard databases (`--config`),
//! or an offline pass over TSV files (`--input`, in `offline.rs`).
//! Arguments only: the service is `tidemark_learner`.

use std::path::PathBuf;

use anyhow::bail;
use tidemark_learner::Config;

#[derive(clap::Args)]
pub struct Args {
    /// The learner's TOML configuration (online mode; see docs/learner.md)
    #[arg(long, conflicts_with = "input")]
    config: Option<PathBuf>,
    #[command(flatten)]
    offline: crate::offline::Offline,
    /// Online: the database of sources that name none (default: the embedded one)
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match (&args.config, args.offline.input.is_empty()) {
        (Some(path), _) => online(path, args.database_url.as_deref()),
        (None, false) => crate::offline::run(args.offline),
        (None, true) => bail!("give --input FILE... (offline) or --config FILE (online)"),
    }
}

fn online(path: &std::path::Path, database_url: Option<&str>) -> anyhow::Result<()> {
    let mut config = Config::from_file(path).map_err(|e| crate::Misconfigured(format!("{e}")))?;
    if config.needs_default_database() {
        config.default_database(&crate::db::resolve(database_url)?);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let summary = tidemark_learner::run(config, crate::shutdown_signal()).await?;
        tracing::info!(
            learned = summary.learned,
            checkpoints = summary.checkpoints,
            "learner stopped"
        );
        anyhow::Ok(())
    })
}
