//! What the demo watches while it runs: a sample of every stage each second
//! (kept for the report's plots over time) and the live display of it, one
//! line per stage on a terminal, plain lines every few seconds otherwise.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tidemark_shard::telemetry::Family;
use tokio_postgres::Client;

/// The state of every stage at one moment.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the demo started.
    pub t: f64,
    /// Events the shards received, over all shards.
    pub received: i64,
    /// Buffer rows per tier (phase), over all shards.
    pub tiers: Vec<(String, i64)>,
    /// Observations per target so far.
    pub observations: BTreeMap<String, i64>,
    /// The online learner's progressive logloss per target, from its latest checkpoint.
    pub logloss: BTreeMap<String, f64>,
    /// Rows the learner has trained on.
    pub learned: u64,
    /// Events the profile process has applied.
    pub profile_events: i64,
}

/// Reads one sample.
pub async fn sample(
    c: &Client,
    t: f64,
    shards: &[String],
    checkpoints: &Path,
) -> anyhow::Result<Sample> {
    let mut received = 0;
    for s in shards {
        received += Family::Received.sum(&tidemark_shard::store::state::counters(c, s).await?);
    }
    let mut s = Sample {
        t,
        received,
        tiers: crate::store::buffer_rows(c).await?,
        observations: crate::store::observations_by_target(c)
            .await?
            .into_iter()
            .collect(),
        profile_events: tidemark_profiles::store::counts(c)
            .await?
            .iter()
            .filter(|(r, _)| r == "applied")
            .map(|(_, n)| n)
            .sum(),
        ..Sample::default()
    };
    let ckpt = tidemark_checkpoint::latest(checkpoints)
        .and_then(|p| tidemark_checkpoint::Checkpoint::read(&p, false).ok());
    if let Some(c) = ckpt {
        for t in &c.targets {
            s.learned += t.trained;
            if let Some(x) = t.metrics["logloss"].as_f64() {
                s.logloss.insert(t.name.clone(), x);
            }
        }
    }
    Ok(s)
}

/// The live display.
pub struct Display {
    bars: Option<(MultiProgress, Vec<ProgressBar>)>,
    last_plain: Instant,
}

const STAGES: [&str; 4] = ["market", "shards", "profiles", "learner"];

impl Display {
    /// Bars when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Display {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let style =
                ProgressStyle::with_template("  {spinner} {prefix:<9} {msg}").expect("template");
            let bars = STAGES
                .iter()
                .map(|name| {
                    let b = multi.add(ProgressBar::new_spinner());
                    b.set_style(style.clone());
                    b.set_prefix(*name);
                    b.enable_steady_tick(Duration::from_millis(200));
                    b
                })
                .collect();
            (multi, bars)
        });
        Display {
            bars,
            last_plain: Instant::now(),
        }
    }

    /// Shows the latest sample; `rate` is events/s through the shards since
    /// the previous one, `market` the publisher's line.
    pub fn show(&mut self, s: &Sample, rate: f64, market: &str) {
        let obs: Vec<String> = s
            .observations
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let loss: Vec<String> = s
            .logloss
            .iter()
            .map(|(t, x)| format!("{t} {x:.4}"))
            .collect();
        let buffered: i64 = s.tiers.iter().map(|(_, n)| n).sum();
        let lines = [
            market.to_owned(),
            format!(
                "{} received, {rate:.0}/s, {buffered} buffered, observations: {}",
                s.received,
                obs.join(", ")
            ),
            format!("{} events applied", s.profile_events),
            format!("{} rows learned, logloss: {}", s.learned, loss.join(", ")),
        ];
        match &self.bars {
            Some((_, bars)) => {
                for (b, l) in bars.iter().zip(lines) {
                    b.set_message(l);
                }
            }
            None if self.last_plain.elapsed() >= Duration::from_secs(5) => {
                self.last_plain = Instant::now();
                eprintln!("      {:>4.0}s {}", s.t, lines.join(" | "));
            }
            None => {}
        }
    }

    /// Prints a line above the bars (or plainly).
    pub fn println(&self, line: &str) {
        match &self.bars {
            Some((multi, _)) => {
                let _ = multi.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    /// Leaves the bars' last state on the screen.
    pub fn finish(&mut self) {
        if let Some((_, bars)) = self.bars.take() {
            for b in bars {
                b.finish();
            }
        }
    }
}
