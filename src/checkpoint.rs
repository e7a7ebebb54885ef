//! `tidemark checkpoint show|verify FILE|DIR [--json]`: what a checkpoint
//! holds, and whether a bidder can load it, before it is shipped to bidder
//! hosts (docs/operations.md, "Shipping checkpoints").

use std::path::{Path, PathBuf};

use anyhow::Context;
use tidemark_checkpoint::{Checkpoint, Scorer};

#[derive(clap::Subcommand)]
pub enum Action {
    /// Print a checkpoint's hashing settings, targets with their figures, and stream positions
    Show {
        /// A checkpoint file, or a checkpoint directory (its latest.tdm)
        path: PathBuf,
        /// The header as JSON, with the file's version and size
        #[arg(long)]
        json: bool,
    },
    /// Check magic, version, checksum and structure, and load it as a bidder
    /// does: exit 0 when it can be shipped, 1 (with the reason) when not
    Verify {
        /// A checkpoint file, or a checkpoint directory (its latest.tdm)
        path: PathBuf,
        /// One JSON object: `{"ok": true, ...}` or `{"ok": false, "error": ...}`
        #[arg(long)]
        json: bool,
    },
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Show { path, json } => show(&resolve(&path), json),
        Action::Verify { path, json } => verify(&resolve(&path), json),
    }
}

fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(tidemark_checkpoint::LATEST)
    } else {
        path.to_owned()
    }
}

/// The file's version and size beside its header.
fn facts(path: &Path) -> anyhow::Result<(Checkpoint, u32, u64)> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    let c = Checkpoint::from_bytes(&bytes, true).with_context(|| path.display().to_string())?;
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("checked by the reader"));
    Ok((c, version, bytes.len() as u64))
}

fn show(path: &Path, json: bool) -> anyhow::Result<()> {
    let (c, version, bytes) = facts(path)?;
    if json {
        let mut h = c.header();
        h["path"] = path.display().to_string().into();
        h["version"] = version.into();
        h["bytes"] = bytes.into();
        println!("{h}");
        return Ok(());
    }
    let h = &c.hashing;
    println!(
        "{} (format version {version}, {bytes} bytes)",
        path.display()
    );
    let now = tidemark_metrics::wall_ms();
    println!(
        "created     {} ms since the epoch, {:.0} s ago",
        c.created_at_ms,
        (now - c.created_at_ms) as f64 / 1000.0
    );
    println!(
        "hashing     murmur3_x86_32, bits {}, seed {}",
        h.bits, h.seed
    );
    for (a, b) in &h.crosses {
        println!("cross       {a} × {b}");
    }
    for (name, t) in &h.transforms {
        println!("transform   {name} = {t}");
    }
    for (target, names) in &h.omit {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        println!("omit        {target}: {}", names.join(", "));
    }
    // A pool's weights are added to those of each target naming it.
    let pools = c.pools.iter().map(|p| ("pool", p));
    for (kind, t) in c.targets.iter().map(|t| ("target", t)).chain(pools) {
        let m = &t.metrics;
        println!(
            "{kind:<11} {:<12} trained {:>10}  weights {:>9}  logloss {}  auc {}  (alpha {}, beta {}, l1 {}, l2 {}){}",
            t.name,
            t.trained,
            t.weights.len(),
            m["logloss"].as_f64().map_or("-".into(), |x| format!("{x:.5}")),
            m["auc"].as_f64().map_or("-".into(), |x| format!("{x:.4}")),
            t.alpha,
            t.beta,
            t.l1,
            t.l2,
            t.pool.as_ref().map_or(String::new(), |p| format!(" pool {p}"))
        );
        if let Some(u) = &t.tuning {
            let rows = u.decayed_rows.max(1e-12);
            let grid: Vec<String> = (u.candidates.iter())
                .map(|k| match tidemark_ftrl::Params::from(k).is_rate_only() {
                    true => format!("rate: {:.5}", k.loss / rows),
                    false => format!("{}/{}: {:.5}", k.alpha, k.l2, k.loss / rows),
                })
                .collect();
            let last = u
                .last_switch
                .map_or("never".into(), |r| format!("last at row {r}"));
            println!("  tuning    alpha/l2: recent logloss  {}", grid.join("  "));
            println!("  switches  {} ({last})", u.switches);
        }
    }
    for (stream, seq) in &c.positions {
        println!("position    {stream} at seq {seq}");
    }
    Ok(())
}

fn verify(path: &Path, json: bool) -> anyhow::Result<()> {
    let checked = facts(path).and_then(|(c, version, bytes)| {
        // What a bidder does: the same load `score` and the Scorer make.
        Scorer::open(path).with_context(|| path.display().to_string())?;
        Ok((c, version, bytes))
    });
    match (checked, json) {
        (Ok((c, version, bytes)), true) => {
            let targets: Vec<&str> = c.targets.iter().map(|t| t.name.as_str()).collect();
            println!(
                "{}",
                serde_json::json!({"ok": true, "path": path.display().to_string(),
                    "version": version, "bytes": bytes, "targets": targets})
            );
            Ok(())
        }
        (Ok((c, version, bytes)), false) => {
            println!(
                "ok: {} (format version {version}, {bytes} bytes, {} targets, checksum verified)",
                path.display(),
                c.targets.len()
            );
            Ok(())
        }
        (Err(e), true) => {
            println!(
                "{}",
                serde_json::json!({"ok": false, "path": path.display().to_string(), "error": format!("{e:#}")})
            );
            std::process::exit(1)
        }
        (Err(e), false) => Err(e),
    }
}
