//! What an offline pass measured: per target, its progressive figures; per
//! pool, the rows it learned; as `learn` prints them and `--json` writes them.

use std::collections::BTreeMap;

use tidemark_ftrl::Choice;

/// What an offline pass measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Time taken.
    pub seconds: f64,
    /// Values (after their transform) and crosses' products left out of
    /// their rows: over 1e15 in magnitude (SPEC 10, v1.3).
    pub out_of_range: u64,
    /// Per target the pass learned or scored (rows without a `:target`
    /// column are the one target the pass was given).
    pub targets: BTreeMap<String, Figures>,
    /// Per pool, the rows it has learned from in all (its trained count:
    /// a `--model` checkpoint's rows included).
    pub pools: BTreeMap<String, u64>,
}

/// One target's progressive figures.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Rows with a matured label (`late` or `final`, or every row without
    /// a `:kind` column): what the figures below are measured on.
    pub rows: u64,
    /// Provisional rows learned besides (weighted, never measured).
    pub provisional: u64,
    /// Rows labelled 1.
    pub positives: u64,
    /// Progressive logloss.
    pub logloss: f64,
    /// Progressive AUC.
    pub auc: f64,
    /// Mean prediction over label rate.
    pub calibration: f64,
    /// The setting predicting at the end, and the grid's recent losses.
    pub choice: Choice,
}

impl Report {
    /// Throughput: every row learned, provisional ones included.
    pub fn rows_per_second(&self) -> f64 {
        let rows: u64 = self.targets.values().map(|f| f.rows + f.provisional).sum();
        rows as f64 / self.seconds.max(1e-9)
    }

    /// The figures as `learn --json` prints them: per target under
    /// `targets`, and, when there is one target, its figures at the top as
    /// well (as before targets could be several).
    pub fn to_json(&self) -> serde_json::Value {
        let mut top = serde_json::json!({
            "seconds": self.seconds,
            "rows_per_second": self.rows_per_second(),
            "numeric_out_of_range": self.out_of_range,
            "targets": self.targets.iter()
                .map(|(n, f)| (n.clone(), f.to_json()))
                .collect::<serde_json::Map<_, _>>(),
            "pools": self.pools.iter()
                .map(|(n, t)| (n.clone(), serde_json::json!({"trained": t})))
                .collect::<serde_json::Map<_, _>>(),
        });
        // The one target's figures at the top too; no rows, zeros there.
        let flat = match self.targets.len() {
            0 => serde_json::json!({"rows": 0, "provisional": 0, "positives": 0,
                "logloss": 0.0, "auc": null, "calibration": null}),
            1 => self
                .targets
                .values()
                .map(Figures::to_json)
                .next()
                .unwrap_or_default(),
            _ => serde_json::Value::Null,
        };
        if let (serde_json::Value::Object(f), Some(o)) = (flat, top.as_object_mut()) {
            o.extend(f);
        }
        top
    }
}

impl Figures {
    /// One target's figures as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let finite = |x: f64| x.is_finite().then_some(x);
        let c = &self.choice;
        let p = c.settings[c.chosen];
        serde_json::json!({
            "rows": self.rows, "provisional": self.provisional,
            "positives": self.positives, "logloss": self.logloss,
            "auc": finite(self.auc), "calibration": finite(self.calibration),
            "chosen": {"alpha": p.alpha, "beta": p.beta, "l1": p.l1, "l2": p.l2},
            "switches": c.switches, "last_switch": c.last_switch,
            "grid": c.settings.iter().zip(&c.recent_loss).map(|(p, l)| serde_json::json!({
                "alpha": p.alpha, "l2": p.l2, "recent_logloss": finite(*l),
            })).collect::<Vec<_>>(),
        })
    }

    /// What a checkpoint records of the pass (`--save`).
    pub fn to_checkpoint_json(&self) -> serde_json::Value {
        let auc = self.auc.is_finite().then_some(self.auc);
        serde_json::json!({"rows": self.rows, "logloss": self.logloss, "auc": auc})
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let several = self.targets.len() > 1 || !self.pools.is_empty();
        for (name, t) in &self.targets {
            if several {
                writeln!(f, "target      {name}")?;
            }
            write!(f, "{t}")?;
        }
        for (name, trained) in &self.pools {
            writeln!(f, "pool        {name}: learned from {trained} rows")?;
        }
        if self.targets.is_empty() {
            writeln!(f, "rows        0")?;
        }
        write!(f, "rows/s      {:.0}", self.rows_per_second())?;
        if self.out_of_range > 0 {
            write!(
                f,
                "\nleft out    {} numeric values over 1e15 in magnitude (numeric_out_of_range)",
                self.out_of_range
            )?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.choice;
        let p = c.settings[c.chosen];
        writeln!(f, "rows        {}", self.rows)?;
        if self.provisional > 0 {
            writeln!(
                f,
                "provisional {} (learned weighted, not measured)",
                self.provisional
            )?;
        }
        writeln!(f, "logloss     {:.6}", self.logloss)?;
        writeln!(f, "auc         {:.6}", self.auc)?;
        writeln!(
            f,
            "calibration {:.4} (mean prediction / label rate)",
            self.calibration
        )?;
        write!(f, "setting     alpha {} l2 {}", p.alpha, p.l2)?;
        if c.settings.len() > 1 {
            write!(
                f,
                " (best of {} lately; {} switches)",
                c.settings.len(),
                c.switches
            )?;
        }
        writeln!(f)
    }
}
