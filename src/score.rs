//! `tidemark score --checkpoint FILE`: one JSON object of bid features per
//! stdin line in, one JSON line of predictions out (one key per target, plus
//! `p_install`). A malformed line gets `{"error": ...}` and scoring goes on.

use std::io::{BufRead, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use tidemark_checkpoint::Scorer;

#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint file, or a checkpoint directory (its latest.tdm)
    #[arg(long)]
    checkpoint: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let scorer =
        Scorer::open(&args.checkpoint).with_context(|| format!("{}", args.checkpoint.display()))?;
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in stdin.lines() {
        let line = line.context("reading stdin")?;
        let reply = match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(serde_json::Value::Object(features)) => scorer.score(&features).to_json(),
            Ok(_) => serde_json::json!({"error": "expected a JSON object of features"}),
            Err(e) => serde_json::json!({"error": format!("not JSON: {e}")}),
        };
        writeln!(out, "{reply}")?;
        // Interactive callers see each answer at once.
        out.flush()?;
    }
    Ok(())
}
