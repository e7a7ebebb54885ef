//! `tidemark learn --input FILE...`: the offline pass's flags, saving and
//! loading models (VW's `-f`, `-i`, `-t`), and its report.

use std::path::PathBuf;

use anyhow::bail;
use tidemark_ftrl::{Grid, Params};
use tidemark_learner::offline;

#[derive(clap::Args)]
pub struct Offline {
    /// TSV files (plain or .gz), read in order, for one progressive pass
    #[arg(long, num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// The first line of each file names the columns (`name:num` marks a numeric column, as `export` writes them)
    #[arg(long)]
    header: bool,
    /// Hash into 2^bits weights [default: 22]
    #[arg(long)]
    bits: Option<u8>,
    /// FTRL-Proximal learning rate: a weight's step is alpha / (beta + sqrt(sum of its squared gradients)) [default: 0.1]
    #[arg(long)]
    alpha: Option<f64>,
    /// FTRL-Proximal smoothing of the per-weight learning rate (see --alpha) [default: 1]
    #[arg(long)]
    beta: Option<f64>,
    /// L1 regularisation: weights whose accumulated evidence stays under it are exactly 0 (sparse models) [default: 1]
    #[arg(long)]
    l1: Option<f64>,
    /// L2 regularisation: shrinks every weight towards 0 [default: 1]
    #[arg(long)]
    l2: Option<f64>,
    /// Factors over alpha the pass tunes over, side by side (`1` alone, with --tune-l2 1: no tuning) [default: 0.0625,0.125,0.25,0.5,1,2,4]
    #[arg(long, value_delimiter = ',', value_name = "F,F,...")]
    tune_alpha: Option<Vec<f64>>,
    /// Factors over l2 the pass tunes over (see --tune-alpha) [default: 1]
    #[arg(long, value_delimiter = ',', value_name = "F,F,...")]
    tune_l2: Option<Vec<f64>>,
    /// Leave the label rate alone out of the tuning (it predicts first otherwise)
    #[arg(long)]
    no_tune_rate: bool,
    /// Hash seed [default: 0]
    #[arg(long)]
    seed: Option<u32>,
    /// Cross two columns into one more feature: `--cross a,b` (repeatable)
    #[arg(long)]
    cross: Vec<String>,
    /// A numeric column's transform, as the online learner's `[transforms]`:
    /// `--transform clk_1h=log1p`, `price=clip(0, 10)`, `n=buckets(1, 2, 5)` (repeatable)
    #[arg(long, value_name = "NAME=T")]
    transform: Vec<String>,
    /// Leave a feature out of one target's rows (`[omit]` online): `--omit cvr_long=hour` (repeatable)
    #[arg(long, value_name = "TARGET=NAME")]
    omit: Vec<String>,
    /// Start from this checkpoint's models, every target and pool (its hashing,
    /// its settings and grids; --alpha/--beta/--l1/--l2 replace a grid by one
    /// setting) instead of empty ones
    #[arg(long, value_name = "FILE", conflicts_with_all = ["bits", "seed", "cross", "transform", "omit", "tune_alpha", "tune_l2"])]
    model: Option<PathBuf>,
    /// The target of rows without a `:target` column: one of --model's
    /// (default: its only one), or the name --save gives the new model
    /// (default: "model")
    #[arg(long)]
    target: Option<String>,
    /// Targets that share weights (rows with a `:target` column, as `export
    /// --target a,b` writes them): `--pool install=cvr_short,cvr_long`, as
    /// the online learner's `[pools.install]` (repeatable)
    #[arg(long, value_name = "NAME=T1,T2")]
    pool: Vec<String>,
    /// The targets whose rows teach a pool, as `[pools.NAME] teachers`
    /// (default: its targets): `--pool install=cvr_long --teachers
    /// install=cvr_short,cvr_long` (repeatable; a checkpoint does not hold them)
    #[arg(long, value_name = "NAME=T1,T2")]
    teachers: Vec<String>,
    /// Only predict (progressive figures of a fixed model, e.g. a held-out file)
    #[arg(long, requires = "model")]
    test_only: bool,
    /// Write the models after the pass as a checkpoint (bidders and `score` load it)
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Write each row's progressive prediction (made before learning it), one per line
    #[arg(long)]
    predictions: Option<PathBuf>,
    /// Write the weight each row was learned with, one per line (rows of a `:kind` column are weighed: docs/learner.md)
    #[arg(long, value_name = "FILE")]
    weights: Option<PathBuf>,
    /// Print the figures as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(args: Offline) -> anyhow::Result<()> {
    let (hashing, mut start) = match &args.model {
        Some(path) => {
            let c = offline::load(path, args.target.as_deref())?;
            (c.hashing.clone(), Some(c))
        }
        None => {
            let (bits, seed) = (args.bits.unwrap_or(22), args.seed.unwrap_or(0));
            let crosses = parse_crosses(&args.cross)?;
            let h = offline::hashing(bits, seed, crosses, &args.transform, &args.omit)?;
            (h, None)
        }
    };
    let over = |base: Params| Params {
        alpha: args.alpha.unwrap_or(base.alpha),
        beta: args.beta.unwrap_or(base.beta),
        l1: args.l1.unwrap_or(base.l1),
        l2: args.l2.unwrap_or(base.l2),
    };
    // The settings given replace those of --target's model, else of every one.
    let named = |t: &tidemark_checkpoint::Target| args.target.as_ref().is_none_or(|n| *n == t.name);
    for t in start
        .iter_mut()
        .flat_map(|c| &mut c.targets)
        .filter(|t| named(t))
    {
        if args.alpha.or(args.beta).or(args.l1).or(args.l2).is_some() {
            t.tuning = None;
        }
        let p = over(Params::from(&*t));
        (t.alpha, t.beta, t.l1, t.l2) = (p.alpha, p.beta, p.l1, p.l2);
    }
    let opts = offline::Options {
        hashing,
        params: over(Params::default()),
        grid: Grid {
            alpha: args.tune_alpha.unwrap_or_else(|| Grid::default().alpha),
            l2: args.tune_l2.unwrap_or_else(|| Grid::default().l2),
            rate: !args.no_tune_rate,
            ..Grid::default()
        },
        header: args.header,
        pools: offline::pools(&args.pool, &args.teachers, start.as_ref())?,
        target: args.target,
        predictions: args.predictions,
        weights: args.weights,
        start,
        learn: !args.test_only,
    };
    let (r, models) = offline::run(&args.input, &opts)?;
    if let Some(path) = &args.save {
        offline::save(path, &models, opts.start.as_ref(), &r)?;
    }
    match args.json {
        true => println!("{}", r.to_json()),
        false => println!("{r}"),
    }
    Ok(())
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
