//! `tidemark export --target T`: a target's observations as the TSV that
//! `tidemark learn --input --header` reads: a header line, then the label,
//! a `:target` column when several targets are exported (`--target a,b`,
//! their rows interleaved as a learner reads them), and one column per
//! feature name (strings as they are, bools as true/false,
//! numbers as written), empty where a bid lacked the feature. A feature
//! whose every value is a number is headed `name:num`, so the offline pass
//! hashes it as a number, as online learning does. Matured observations
//! only (`kind <> 'provisional'`, SPEC 5) unless `--kinds all`: an early
//! target's provisional zeros are for a learner that weighs them (with each
//! row's txid, by which its tuning pairs a member's rows).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use tidemark_learner::offline;

#[derive(clap::Args)]
pub struct Args {
    /// The targets whose observations to export (ctr, cvr_short, ...;
    /// several, comma-separated, add a `:target` column)
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    target: Vec<String>,
    /// Only this shard's observations
    #[arg(long)]
    shard: Option<String>,
    /// Database (default: the embedded one; right after `tidemark demo`, the demo's)
    #[arg(long, env = "TIDEMARK_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Output file (default: stdout)
    #[arg(long)]
    output: Option<PathBuf>,
    /// Which observations: `matured` (late and final: the labels as they
    /// ended) or `all` (provisional rows too, with a `:kind` column after the
    /// label and a `:txid` column after it, which `learn --input --header`
    /// weighs and tunes on as the online learner does)
    #[arg(long, value_enum, default_value_t = Kinds::Matured)]
    kinds: Kinds,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Kinds {
    Matured,
    All,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut args = args;
    let mut seen = std::collections::BTreeSet::new();
    args.target.retain(|t| seen.insert(t.clone()));
    let url = crate::db::resolve_observations(args.database_url.as_deref(), &args.target[0])?;
    let several = args.target.len() > 1;
    let sink: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("{}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let rows = crate::runtime()?.block_on(async {
        let c = tidemark_store::connect(&url).await?;
        let shard = args.shard.as_deref();
        let names = tidemark_store::observations::feature_names(&c, &args.target, shard).await?;
        let all = args.kinds == Kinds::All;
        write!(out, "label")?;
        if several {
            write!(out, "\t{}", offline::TARGET_COLUMN)?;
        }
        if all {
            write!(out, "\t{}\t{}", offline::KIND_COLUMN, offline::TXID_COLUMN)?;
        }
        for (n, numeric) in &names {
            let mark = if *numeric { offline::NUMERIC } else { "" };
            write!(out, "\t{}{mark}", clean(n))?;
        }
        writeln!(out)?;
        let mut cursor = (String::new(), 0i64);
        let mut rows = 0u64;
        loop {
            let page = tidemark_store::observations::page(
                &c,
                &args.target,
                shard,
                (&cursor.0, cursor.1),
                50_000,
                all,
            )
            .await?;
            let Some(last) = page.last() else { break };
            cursor = (last.shard.clone(), last.seq);
            for row in &page {
                let f: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&row.features)?;
                write!(out, "{}", u8::from(row.label))?;
                if several {
                    write!(out, "\t{}", clean(&row.target))?;
                }
                if all {
                    write!(out, "\t{}\t{}", row.kind, clean(&row.txid))?;
                }
                for (n, _) in &names {
                    out.write_all(b"\t")?;
                    match f.get(n) {
                        Some(serde_json::Value::String(s)) => write!(out, "{}", clean(s))?,
                        Some(serde_json::Value::Bool(b)) => write!(out, "{b}")?,
                        Some(serde_json::Value::Number(x)) => write!(out, "{x}")?,
                        _ => {}
                    }
                }
                writeln!(out)?;
                rows += 1;
            }
        }
        out.flush()?;
        anyhow::Ok(rows)
    })?;
    eprintln!(
        "tidemark export: {rows} observations of {}",
        args.target.join(", ")
    );
    Ok(())
}

/// Tabs and line breaks would break the TSV: they become spaces.
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\t', '\n', '\r']) {
        s.replace(['\t', '\n', '\r'], " ").into()
    } else {
        s.into()
    }
}
