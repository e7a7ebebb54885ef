//! `tidemark demo`: the whole pipeline on the embedded default.
//!
//! What exists so far: the embedded cluster, the schema and the sampling
//! planner. The synthetic market, shards and learner join as they land.

use std::time::Instant;

use tidemark_store::Cluster;

#[derive(clap::Args)]
pub struct Args {
    /// Sampling rate for the demo's plan
    #[arg(long, default_value_t = 0.25)]
    rate: f64,
    /// Number of shards for the demo's plan
    #[arg(long, default_value_t = 2)]
    shards: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let cluster = Cluster::new(&Cluster::default_home())?;
    eprintln!(
        "[1/3] starting the embedded PostgreSQL under {} …",
        cluster.home().display()
    );
    let applied = crate::db::up(&cluster, None)?;
    eprintln!(
        "      up at {} (server binaries: {}), migrations applied now: {applied:?}",
        cluster.url(),
        cluster.bindir().display()
    );
    eprintln!(
        "[2/3] planning {} shards sampling {} of transactions …",
        args.shards, args.rate
    );
    let plan = tidemark_plan::plan(args.rate, args.shards)?;
    for s in &plan.shards {
        eprintln!("      {}: {:?} (share {:.6})", s.name, s.prefixes, s.rate);
    }
    eprintln!("[3/3] checking the observation table …");
    let rows: i64 = crate::runtime()?.block_on(async {
        let client = tidemark_store::connect(&cluster.url()).await?;
        let row = client
            .query_one("SELECT count(*) FROM tidemark.observations", &[])
            .await?;
        anyhow::Ok(row.get(0))
    })?;
    println!("report");
    println!("  database      {}", cluster.url());
    println!(
        "  plan rate     {} over {} shards",
        plan.rate,
        plan.shards.len()
    );
    println!("  observations  {rows}");
    println!("  elapsed       {:.1}s", started.elapsed().as_secs_f64());
    println!(
        "  not yet built: the synthetic market, shard intake, phases and the learner (issues 3-5)"
    );
    Ok(())
}
