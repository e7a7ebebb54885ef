//! `tidemark plan`: prefix sets for a sampling rate and a number of shards.

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Share of all transactions to sample, in (0, 1]
    #[arg(long, required_unless_present = "check")]
    rate: Option<f64>,
    /// Number of disjoint shards to split the sample into
    #[arg(long, required_unless_present = "check")]
    shards: Option<u64>,
    /// Instead of planning, check shard configuration files together: overlaps
    /// (an error) and the share of transactions no shard samples
    #[arg(long, num_args = 1.., conflicts_with_all = ["rate", "shards"])]
    check: Vec<std::path::PathBuf>,
    /// Print {"rate", "shards": [{"name", "prefixes", "rate"}]}
    #[arg(long)]
    json: bool,
    /// Also write each shard's configuration, DIR/shard-NAME.toml (never over an existing file)
    #[arg(long, value_name = "DIR", conflicts_with = "check")]
    write_configs: Option<std::path::PathBuf>,
    /// The endpoints written configurations subscribe to (a proxy's backend)
    #[arg(long, default_value = "tcp://127.0.0.1:5556")]
    endpoint: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.check.is_empty() {
        return check(&args.check, args.json);
    }
    let (Some(rate), Some(shards)) = (args.rate, args.shards) else {
        anyhow::bail!("--rate and --shards are required");
    };
    let plan = tidemark_plan::plan(rate, shards)?;
    if let Some(dir) = &args.write_configs {
        write_configs(&plan, dir, &args.endpoint)?;
    }
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

/// One configuration per shard (SPEC 7); `database_url` is left to
/// `TIDEMARK_DATABASE_URL` so secrets stay out of the files.
fn write_configs(
    plan: &tidemark_plan::Plan,
    dir: &std::path::Path,
    endpoints: &[String],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let q = |v: &[String]| {
        v.iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, s) in plan.shards.iter().enumerate() {
        let path = dir.join(format!("shard-{}.toml", s.name));
        let text = format!(
            "# Written by `tidemark plan --rate {} --shards {}`: shard {} samples {:.9} of transactions.\n\
             # database_url: TIDEMARK_DATABASE_URL (docs/operations.md), or set it here.\n\
             name = {:?}\nendpoints = [{}]\nprefixes = [{}]\nmetrics_addr = \"127.0.0.1:{}\"\n",
            plan.rate,
            plan.shards.len(),
            s.name,
            s.rate,
            s.name,
            q(endpoints),
            q(&s.prefixes),
            9400 + i,
        );
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("{} (not overwritten)", path.display()))?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Checks deployed shard configurations against each other.
fn check(files: &[std::path::PathBuf], json: bool) -> anyhow::Result<()> {
    let mut sets = Vec::new();
    for f in files {
        let c = tidemark_shard::Config::from_file(f)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        let prefixes = if c.subscription.prefixes.is_empty() {
            (0..16).map(|d| format!("{d:x}")).collect()
        } else {
            c.subscription.prefixes.clone()
        };
        sets.push((c.name, prefixes));
    }
    let mut names: Vec<&String> = sets.iter().map(|(n, _)| n).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        anyhow::bail!("two configurations name the same shard {:?}", w[0]);
    }
    let c = tidemark_plan::coverage(&sets);
    if json {
        println!("{}", serde_json::to_string(&c)?);
    } else {
        println!(
            "shards {}, sampled share {:.9}, share no shard samples {:.9}",
            sets.len(),
            c.rate,
            c.uncovered
        );
        for o in &c.overlaps {
            println!(
                "overlap: {} {:?} and {} {:?}",
                o.shards[0], o.prefixes[0], o.shards[1], o.prefixes[1]
            );
        }
    }
    if !c.overlaps.is_empty() {
        anyhow::bail!(
            "{} overlapping prefix pairs: a transaction would be sampled by two shards",
            c.overlaps.len()
        );
    }
    Ok(())
}
