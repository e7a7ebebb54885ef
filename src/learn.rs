//! `tidemark learn`: offline progressive validation over TSV files
//! (`--input`), or the online learner over shard databases (`--config`).
//! Arguments only: the service is `tidemark_learner`.

use std::path::PathBuf;

use anyhow::bail;
use tidemark_ftrl::Params;
use tidemark_learner::{offline, Config};

#[derive(clap::Args)]
pub struct Args {
    /// The learner's TOML configuration (online mode; see docs/learner.md)
    #[arg(long, conflicts_with = "input")]
    config: Option<PathBuf>,
    /// TSV files (plain or .gz), read in order, for one progressive pass
    #[arg(long, num_args = 1..)]
    input: Vec<PathBuf>,
    /// The first line of each file names the columns
    #[arg(long)]
    header: bool,
    /// Hash into 2^bits weights
    #[arg(long, default_value_t = 22)]
    bits: u8,
    /// FTRL-Proximal learning rate: a weight's step is alpha / (beta + sqrt(sum of its squared gradients))
    #[arg(long, default_value_t = 0.1)]
    alpha: f64,
    /// FTRL-Proximal smoothing of the per-weight learning rate (see --alpha)
    #[arg(long, default_value_t = 1.0)]
    beta: f64,
    /// L1 regularisation: weights whose accumulated evidence stays under it are exactly 0 (sparse models)
    #[arg(long, default_value_t = 1.0)]
    l1: f64,
    /// L2 regularisation: shrinks every weight towards 0
    #[arg(long, default_value_t = 1.0)]
    l2: f64,
    /// Hash seed
    #[arg(long, default_value_t = 0)]
    seed: u32,
    /// Cross two columns into one more feature: `--cross a,b` (repeatable)
    #[arg(long)]
    cross: Vec<String>,
    /// Write each row's progressive prediction (made before learning it), one per line
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Print the figures as JSON
    #[arg(long)]
    json: bool,
    /// Online: the database of sources that name none (default: the embedded one)
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match (&args.config, args.input.is_empty()) {
        (Some(path), _) => online(path, args.database_url.as_deref()),
        (None, false) => offline(args),
        (None, true) => bail!("give --input FILE... (offline) or --config FILE (online)"),
    }
}

fn parse_crosses(cross: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    cross
        .iter()
        .map(|c| match c.split_once(',') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
            _ => bail!("--cross {c:?}: expected two column names, like a,b"),
        })
        .collect()
}

fn offline(args: Args) -> anyhow::Result<()> {
    let params = Params {
        alpha: args.alpha,
        beta: args.beta,
        l1: args.l1,
        l2: args.l2,
    };
    let opts = offline::Options {
        bits: args.bits,
        seed: args.seed,
        params,
        header: args.header,
        crosses: parse_crosses(&args.cross)?,
        predictions: args.predictions,
    };
    let r = offline::run(&args.input, &opts)?;
    let nan_null = |x: f64| {
        if x.is_finite() {
            serde_json::json!(x)
        } else {
            serde_json::Value::Null
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "rows": r.rows, "positives": r.positives, "seconds": r.seconds,
                "rows_per_second": r.rows_per_second(), "logloss": r.logloss,
                "auc": nan_null(r.auc), "calibration": nan_null(r.calibration),
            })
        );
    } else {
        println!("rows        {}", r.rows);
        println!("rows/s      {:.0}", r.rows_per_second());
        println!("logloss     {:.6}", r.logloss);
        println!("auc         {:.6}", r.auc);
        println!(
            "calibration {:.4} (mean prediction / label rate)",
            r.calibration
        );
    }
    Ok(())
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
