//! `tidemark status FILE...`: a deployment at a glance, from its
//! configuration files: is each shard running and sweeping, each profile
//! process running and keeping up, each learner reading what the shards
//! emit, each database reachable. Exits 1 when anything is unhealthy.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use tidemark_wire::parse_duration;

use crate::deployment::{load, Part};
use crate::health::{check, http_get, Check};

#[derive(clap::Args)]
pub struct Args {
    /// Configuration files of the deployment: shards, profile processes, learners
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// One JSON object: `healthy`, and per part its facts and problems
    #[arg(long)]
    json: bool,
    /// Unhealthy past this: a wall clock trailing wall time, a checkpoint this old with observations unread
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    stale: Duration,
    /// The database of configurations that name none (default: the embedded one, never started by this)
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let parts: Vec<(PathBuf, Part)> = args
        .files
        .iter()
        .map(|f| load(f).map(|p| (f.clone(), p)))
        .collect::<Result<_, String>>()
        .map_err(crate::Misconfigured)?;
    let default = match &args.database_url {
        Some(u) => u.clone(),
        None => tidemark_store::Cluster::new(&tidemark_store::Cluster::default_home())?.url(),
    };
    let stale_ms = args.stale.as_millis() as i64;
    let reports: Vec<Value> = crate::runtime()?.block_on(async {
        let mut out = Vec::new();
        for (file, part) in &parts {
            let mut r = Check::default();
            check(part, &default, stale_ms, &mut r).await;
            if let Some(addr) = part.metrics_addr() {
                if http_get(addr, "/healthz").is_none() {
                    r.problem(format!("its endpoint http://{addr}/healthz does not answer"));
                }
            }
            out.push(json!({"kind": part.kind(), "name": part.name(), "config": file.display().to_string(),
                "healthy": r.problems.is_empty(), "problems": r.problems, "facts": r.facts}));
        }
        out
    });
    let healthy = reports.iter().all(|r| r["healthy"] == true);
    if args.json {
        println!("{}", json!({"healthy": healthy, "parts": reports}));
    } else {
        for r in &reports {
            let mark = if r["healthy"] == true { "ok  " } else { "FAIL" };
            println!(
                "{mark} {:<8} {:<16} {}",
                r["kind"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or(""),
                r["facts"]
            );
            for p in r["problems"].as_array().into_iter().flatten() {
                println!("       {}", p.as_str().unwrap_or(""));
            }
        }
    }
    if healthy {
        Ok(())
    } else {
        Err(crate::signals::Answer(1).into())
    }
}
