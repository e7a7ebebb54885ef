//! `tidemark plan`: prefix sets for a sampling rate and a number of shards.

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Share of all transactions to sample, in (0, 1]
    #[arg(long)]
    rate: f64,
    /// Number of disjoint shards to split the sample into
    #[arg(long)]
    shards: u64,
    /// Print {"rate", "shards": [{"name", "prefixes", "rate"}]}
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let plan = tidemark_plan::plan(args.rate, args.shards)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&plan).context("encoding the plan")?
        );
        return Ok(());
    }
    println!(
        "# sampling rate {} over {} shards",
        plan.rate,
        plan.shards.len()
    );
    for s in &plan.shards {
        let quoted: Vec<String> = s.prefixes.iter().map(|p| format!("{p:?}")).collect();
        println!(
            "{}: rate = {:.9}  prefixes = [{}]",
            s.name,
            s.rate,
            quoted.join(", ")
        );
    }
    Ok(())
}
