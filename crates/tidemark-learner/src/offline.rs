//! `tidemark learn --input FILE...`: one progressive pass over TSV files
//! (plain or gzip, read in order). Each line is a label (0 or 1), then one
//! feature per column; an empty column is a missing feature. Column `j` (1
//! for the first feature) is named by the header with `header`, else by its
//! number, and hashed as the string value `v` under that name:
//! `murmur3(v, murmur3(name, seed)) & mask` (see `tidemark-features`). A
//! header cell `name:num` (as `tidemark export` writes the features that are
//! numbers) makes the column numeric: hashed as the number it holds, through
//! its transform if one is configured, exactly as online learning hashes it.
//! A header cell `:kind` (as `tidemark export --kinds all` writes it) holds
//! each row's observation kind (SPEC 5, v1.3): rows are then weighed as the
//! online learner weighs them (`tidemark_ftrl::Kind::weight`), and measured
//! on matured rows only.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tidemark_checkpoint::{Checkpoint, Target};
use tidemark_features::{Hashing, Transform, Val};
use tidemark_ftrl::{auc, Choice, Ftrl, Grid, Kind, Metrics, Params, Row};

/// Why an offline pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// No input files were given.
    #[error("no input files")]
    NoInput,
    /// The settings are unusable.
    #[error("{0}")]
    Settings(String),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        error: std::io::Error,
    },
    /// A line's `:kind` cell is not an observation kind.
    #[error("{path}:{line}: kind must be provisional, late or final, got {got:?}")]
    Kind {
        /// The file.
        path: PathBuf,
        /// Its line number (1-based).
        line: u64,
        /// What the cell held.
        got: String,
    },
    /// A line's label is not 0 or 1.
    #[error("{path}:{line}: label must be 0 or 1, got {got:?}")]
    Label {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: u64,
        /// What the label column held.
        got: String,
    },
    /// A numeric column holds something else.
    #[error("{path}:{line}: column {column:?} is numeric (`:num`), got {got:?}")]
    Number {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: u64,
        /// The column's name.
        column: String,
        /// What it held.
        got: String,
    },
    /// A cross names a column the header lacks.
    #[error("--cross {a},{b}: no column named {missing:?}")]
    Cross {
        /// The cross's first column.
        a: String,
        /// The cross's second column.
        b: String,
        /// The one not found.
        missing: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OfflineError + '_ {
    move |error| OfflineError::Io {
        path: path.to_owned(),
        error,
    }
}

/// How to run an offline pass.
pub struct Options {
    /// Feature hashing: crosses by column name, numeric columns' transforms.
    pub hashing: Hashing,
    /// Learning settings (of an empty model; `start` has its own).
    pub params: Params,
    /// The settings an empty model tunes over around `params`.
    pub grid: Grid,
    /// The first line of each file names the columns.
    pub header: bool,
    /// Where to write each row's progressive prediction, one per line.
    pub predictions: Option<PathBuf>,
    /// Where to write the weight each row was learned with (the setting
    /// predicting's), one per line: what another learner needs to learn
    /// the same rows the same way.
    pub weights: Option<PathBuf>,
    /// Start from this model (a checkpoint's target, trained with the same
    /// hashing) instead of an empty one.
    pub start: Option<Target>,
    /// Learn from each row after predicting it; `false` only predicts.
    pub learn: bool,
}

/// What an offline pass measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Rows with a matured label (`late` or `final`, or every row without
    /// a `:kind` column): what the figures below are measured on.
    pub rows: u64,
    /// Provisional rows learned besides (weighted, never measured).
    pub provisional: u64,
    /// Rows labelled 1.
    pub positives: u64,
    /// Time taken.
    pub seconds: f64,
    /// Progressive logloss.
    pub logloss: f64,
    /// Progressive AUC.
    pub auc: f64,
    /// Mean prediction over label rate.
    pub calibration: f64,
    /// The setting predicting at the end, and the grid's recent losses.
    pub choice: Choice,
    /// Values (after their transform) and crosses' products left out of
    /// their rows: over 1e15 in magnitude (SPEC 10, v1.3).
    pub out_of_range: u64,
}

impl Report {
    /// Throughput: every row learned, provisional ones included.
    pub fn rows_per_second(&self) -> f64 {
        (self.rows + self.provisional) as f64 / self.seconds.max(1e-9)
    }

    /// The figures as `learn --json` prints them.
    pub fn to_json(&self) -> serde_json::Value {
        let finite = |x: f64| x.is_finite().then_some(x);
        let c = &self.choice;
        let p = c.settings[c.chosen];
        serde_json::json!({
            "rows": self.rows, "provisional": self.provisional,
            "positives": self.positives, "seconds": self.seconds,
            "rows_per_second": self.rows_per_second(), "logloss": self.logloss,
            "numeric_out_of_range": self.out_of_range,
            "auc": finite(self.auc), "calibration": finite(self.calibration),
            "chosen": {"alpha": p.alpha, "beta": p.beta, "l1": p.l1, "l2": p.l2},
            "switches": c.switches, "last_switch": c.last_switch,
            "grid": c.settings.iter().zip(&c.recent_loss).map(|(p, l)| serde_json::json!({
                "alpha": p.alpha, "l2": p.l2, "recent_logloss": finite(*l),
            })).collect::<Vec<_>>(),
        })
    }
}

impl std::fmt::Display for Report {
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
        writeln!(f, "rows/s      {:.0}", self.rows_per_second())?;
        writeln!(f, "logloss     {:.6}", self.logloss)?;
        writeln!(f, "auc         {:.6}", self.auc)?;
        writeln!(
            f,
            "calibration {:.4} (mean prediction / label rate)",
            self.calibration
        )?;
        if self.out_of_range > 0 {
            writeln!(
                f,
                "left out    {} numeric values over 1e15 in magnitude (numeric_out_of_range)",
                self.out_of_range
            )?;
        }
        write!(f, "setting     alpha {} l2 {}", p.alpha, p.l2)?;
        if c.settings.len() > 1 {
            write!(
                f,
                " (best of {} lately; {} switches)",
                c.settings.len(),
                c.switches
            )?;
        }
        Ok(())
    }
}

fn open(path: &Path) -> Result<Box<dyn BufRead>, OfflineError> {
    let f = File::open(path).map_err(io(path))?;
    let raw: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    Ok(Box::new(BufReader::with_capacity(1 << 20, raw)))
}

/// Runs the progressive pass and returns what it measured, and the model.
pub fn run(files: &[PathBuf], opts: &Options) -> Result<(Report, Ftrl), OfflineError> {
    if files.is_empty() {
        return Err(OfflineError::NoInput);
    }
    let mut pass = Pass::new(opts)?;
    let started = Instant::now();
    let mut line = Vec::with_capacity(4096);
    for (file_no, path) in files.iter().enumerate() {
        pass.file(path, file_no == 0, &mut line)?;
    }
    pass.finish(started)
}

/// One pass under way: the model, what it has measured, the columns named
/// so far, and the buffers each row reuses.
struct Pass<'a> {
    opts: &'a Options,
    model: Ftrl,
    /// The bias feature's index, in every row.
    bias: u32,
    metrics: Metrics,
    /// Every row's (prediction, label), for the AUC.
    pairs: Vec<(f32, bool)>,
    /// Where predictions go (`Options::predictions`).
    out: Option<BufWriter<File>>,
    /// Where weights go (`Options::weights`).
    weights_out: Option<BufWriter<File>>,
    /// The column holding each row's kind (`:kind`), if any.
    kind_col: Option<usize>,
    provisional: u64,
    /// Column names, from the first file's header or the columns' numbers.
    names: Vec<String>,
    cols: Vec<Column>,
    /// Crosses as column positions, resolved once the names are known.
    cross_cols: Vec<(usize, usize, u32)>,
    /// The row's hashed features.
    x: Vec<(u32, f32)>,
    /// The row's cells, as `(start, end)` in its line; the label first.
    fields: Vec<(usize, usize)>,
    out_of_range: u64,
}

impl<'a> Pass<'a> {
    /// Checks the settings, makes the model (empty, or `opts.start`) and
    /// opens the predictions' file.
    fn new(opts: &'a Options) -> Result<Pass<'a>, OfflineError> {
        let params = opts.start.as_ref().map_or(opts.params, Params::from);
        params.validate().map_err(OfflineError::Settings)?;
        let hashing = &opts.hashing;
        let bias = hashing.bias_index();
        opts.grid.validate().map_err(OfflineError::Settings)?;
        let model = match &opts.start {
            Some(t) => Ftrl::from_target(t, hashing.slots()),
            None => opts.grid.model(params, hashing.slots()),
        };
        let create = |path: &Option<PathBuf>| -> Result<_, OfflineError> {
            Ok(match path {
                Some(p) => Some(BufWriter::with_capacity(
                    1 << 20,
                    File::create(p).map_err(io(p))?,
                )),
                None => None,
            })
        };
        let (out, weights_out) = (create(&opts.predictions)?, create(&opts.weights)?);
        Ok(Pass {
            opts,
            model,
            bias,
            metrics: Metrics::new(100_000),
            pairs: Vec::new(),
            out,
            weights_out,
            kind_col: None,
            provisional: 0,
            names: Vec::new(),
            cols: Vec::new(),
            cross_cols: Vec::new(),
            x: Vec::with_capacity(64),
            fields: Vec::with_capacity(64),
            out_of_range: 0,
        })
    }

    /// Every row of one file, read into `line` (the caller's, reused); the
    /// header, with `Options::header`, names the columns if the file is the
    /// `first`.
    fn file(&mut self, path: &Path, first: bool, line: &mut Vec<u8>) -> Result<(), OfflineError> {
        let mut r = open(path)?;
        let mut line_no = 0u64;
        loop {
            line.clear();
            let n = r.read_until(b'\n', line).map_err(io(path))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if line_no == 1 && self.opts.header {
                if first {
                    self.names = line
                        .split(|&b| b == b'\t')
                        .skip(1)
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect();
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            self.row(line, path, line_no)?;
        }
        Ok(())
    }

    /// One row: predicted, then learned from (with `Options::learn`), and
    /// measured.
    fn row(&mut self, line: &[u8], path: &Path, line_no: u64) -> Result<(), OfflineError> {
        self.fields.clear();
        let mut start = 0;
        for (i, &b) in line.iter().enumerate() {
            if b == b'\t' {
                self.fields.push((start, i));
                start = i + 1;
            }
        }
        self.fields.push((start, line.len()));
        let y = match &line[self.fields[0].0..self.fields[0].1] {
            b"1" => true,
            b"0" => false,
            other => {
                return Err(OfflineError::Label {
                    path: path.to_owned(),
                    line: line_no,
                    got: String::from_utf8_lossy(other).into_owned(),
                })
            }
        };
        let n_cols = self.fields.len() - 1;
        if self.cols.len() < n_cols {
            self.name_columns(n_cols)?;
        }
        self.features(line, n_cols, path, line_no)?;
        let kind = match self.kind_col {
            None => Kind::Final,
            Some(j) => {
                let (a, b) = self.fields[j + 1];
                let cell = String::from_utf8_lossy(&line[a..b]);
                Kind::parse(&cell).ok_or_else(|| OfflineError::Kind {
                    path: path.to_owned(),
                    line: line_no,
                    got: cell.into_owned(),
                })?
            }
        };
        let row = Row::of(y, kind);
        // The weight the row is learned with depends on whether the target
        // is learned early, as it stands before the row.
        let early = self.model.is_early() && !(kind == Kind::Final && y);
        let p = if self.opts.learn {
            self.model.learn_row(&self.x, row)
        } else {
            self.model.score(&self.x)
        };
        if kind.matured() {
            self.metrics.total.add(p, y);
            self.pairs.push((p as f32, y));
        } else {
            self.provisional += 1;
        }
        if let Some(o) = self.out.as_mut() {
            writeln!(o, "{}", p as f32).map_err(io(self
                .opts
                .predictions
                .as_deref()
                .expect("open")))?;
        }
        if let Some(o) = self.weights_out.as_mut() {
            let w = if self.opts.learn {
                kind.weight(p, early)
            } else {
                0.0
            };
            writeln!(o, "{}", w as f32).map_err(io(self.opts.weights.as_deref().expect("open")))?;
        }
        Ok(())
    }

    /// Names the columns first seen in a row of `n_cols`: by header, else
    /// by number (1-based); resolves the crosses again.
    fn name_columns(&mut self, n_cols: usize) -> Result<(), OfflineError> {
        let hashing = &self.opts.hashing;
        for j in self.cols.len()..n_cols {
            let cell = self
                .names
                .get(j)
                .cloned()
                .unwrap_or_else(|| (j + 1).to_string());
            if cell == KIND_COLUMN {
                self.kind_col = Some(j);
            }
            let col = Column::new(hashing, &cell);
            self.names
                .resize(self.names.len().max(j + 1), String::new());
            self.names[j] = col.name.clone();
            self.cols.push(col);
        }
        self.cross_cols = resolve_crosses(hashing, &self.names)?;
        Ok(())
    }

    /// Hashes the row's cells, crosses and bias into `x`.
    fn features(
        &mut self,
        line: &[u8],
        n_cols: usize,
        path: &Path,
        line_no: u64,
    ) -> Result<(), OfflineError> {
        let hashing = &self.opts.hashing;
        let x = &mut self.x;
        x.clear();
        let value = |j: usize| cell_value(line, self.fields[j + 1], &self.cols[j], path, line_no);
        for (j, col) in self.cols.iter().enumerate().take(n_cols) {
            let (a, b) = self.fields[j + 1];
            if a == b || Some(j) == self.kind_col {
                continue;
            }
            if !col.numeric {
                // The hot path: a categorical cell, hashed in place.
                x.push((hashing.categorical(col.seed, &line[a..b]), 1.0));
            } else if let Some(v) = value(j)? {
                if !hashing.push(col.seed, col.transform.as_ref(), v, x) {
                    self.out_of_range += 1;
                }
            }
        }
        for &(ca, cb, seed) in &self.cross_cols {
            if ca >= n_cols || cb >= n_cols {
                continue;
            }
            if let (Some(va), Some(vb)) = (value(ca)?, value(cb)?) {
                let (ta, tb) = (
                    self.cols[ca].transform.as_ref(),
                    self.cols[cb].transform.as_ref(),
                );
                if !hashing.push_cross(seed, (ta, va), (tb, vb), x) {
                    self.out_of_range += 1;
                }
            }
        }
        x.push((self.bias, 1.0));
        Ok(())
    }

    /// Flushes the predictions and reports, `started` being when the
    /// first row was read.
    fn finish(mut self, started: Instant) -> Result<(Report, Ftrl), OfflineError> {
        if let Some(mut o) = self.out.take() {
            o.flush()
                .map_err(io(self.opts.predictions.as_deref().expect("open")))?;
        }
        if let Some(mut o) = self.weights_out.take() {
            o.flush()
                .map_err(io(self.opts.weights.as_deref().expect("open")))?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let t = self.metrics.total;
        let report = Report {
            rows: t.rows,
            provisional: self.provisional,
            positives: t.positives,
            seconds,
            logloss: t.logloss(),
            auc: auc(&mut self.pairs),
            calibration: t.calibration(),
            choice: self.model.choice(),
            out_of_range: self.out_of_range,
        };
        Ok((report, self.model))
    }
}

/// Cell `field` of `line` as the value column `col` holds: `None` when
/// empty, bytes when categorical, a finite number when numeric (or an error
/// naming the file, line and column).
fn cell_value<'l>(
    line: &'l [u8],
    (a, b): (usize, usize),
    col: &Column,
    path: &Path,
    line_no: u64,
) -> Result<Option<Val<'l>>, OfflineError> {
    let cell = &line[a..b];
    if cell.is_empty() {
        return Ok(None);
    }
    if !col.numeric {
        return Ok(Some(Val::Bytes(cell)));
    }
    match std::str::from_utf8(cell)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
    {
        Some(v) if v.is_finite() => Ok(Some(Val::Number(v))),
        _ => Err(OfflineError::Number {
            path: path.to_owned(),
            line: line_no,
            column: col.name.clone(),
            got: String::from_utf8_lossy(cell).into_owned(),
        }),
    }
}

/// Hashing into `2^bits` slots with crosses and `NAME=T` transforms, as
/// the command line gives them.
pub fn hashing(
    bits: u8,
    seed: u32,
    crosses: Vec<(String, String)>,
    transforms: &[String],
) -> Result<Hashing, OfflineError> {
    crate::config::check_bits(bits).map_err(|e| OfflineError::Settings(e.to_string()))?;
    let pairs = transforms
        .iter()
        .map(|t| t.split_once('=').unwrap_or((t.as_str(), "")));
    let transforms = crate::config::parse_transforms(pairs)
        .map_err(|e| OfflineError::Settings(format!("--transform {e}")))?;
    Ok(Hashing::new(bits, seed, crosses).with_transforms(transforms))
}

/// The model `--model FILE` starts from: the checkpoint's hashing and its
/// target `target` (or its only one).
pub fn load(path: &Path, target: Option<&str>) -> Result<(Hashing, Target), OfflineError> {
    let c = Checkpoint::read(path, true)
        .map_err(|e| OfflineError::Settings(format!("--model {}: {e}", path.display())))?;
    let pick = match (target, &c.targets[..]) {
        (Some(n), _) => c.targets.iter().find(|t| t.name == n),
        (None, [only]) => Some(only),
        (None, _) => None,
    };
    match pick {
        Some(t) => Ok((c.hashing.clone(), t.clone())),
        None => {
            let names: Vec<&str> = c.targets.iter().map(|t| t.name.as_str()).collect();
            Err(OfflineError::Settings(format!(
                "--model {}: name one of its targets {names:?} with --target",
                path.display()
            )))
        }
    }
}

/// Writes `model` as a one-target checkpoint named `name` (`--save`),
/// atomically, with the pass's figures.
pub fn save(
    path: &Path,
    hashing: &Hashing,
    model: &Ftrl,
    name: &str,
    r: &Report,
) -> Result<(), OfflineError> {
    let auc = if r.auc.is_finite() {
        serde_json::json!(r.auc)
    } else {
        serde_json::Value::Null
    };
    let figures = serde_json::json!({"rows": r.rows, "logloss": r.logloss, "auc": auc});
    let c = Checkpoint {
        hashing: hashing.clone(),
        targets: vec![model.to_target(name, figures)],
        pools: Vec::new(),
        positions: BTreeMap::new(),
        created_at_ms: tidemark_metrics::wall_ms(),
    };
    tidemark_checkpoint::write(path, &c).map_err(io(path))
}

/// A feature column: its name, seed and kind.
struct Column {
    name: String,
    seed: u32,
    numeric: bool,
    transform: Option<Transform>,
}

impl Column {
    /// From a header cell: `name`, or `name:num` for a numeric column.
    fn new(h: &Hashing, cell: &str) -> Column {
        let (name, numeric) = match cell.strip_suffix(NUMERIC) {
            Some(n) => (n, true),
            None => (cell, false),
        };
        Column {
            name: name.to_owned(),
            seed: h.name_seed(name),
            numeric,
            transform: h.transform(name).cloned(),
        }
    }
}

/// The header suffix that marks a numeric column.
pub const NUMERIC: &str = ":num";

/// The header cell of the column holding each row's observation kind.
pub const KIND_COLUMN: &str = ":kind";

fn resolve_crosses(
    h: &Hashing,
    names: &[String],
) -> Result<Vec<(usize, usize, u32)>, OfflineError> {
    h.crosses
        .iter()
        .map(|(a, b)| {
            let find = |n: &str| {
                names
                    .iter()
                    .position(|c| c == n)
                    .ok_or_else(|| OfflineError::Cross {
                        a: a.clone(),
                        b: b.clone(),
                        missing: n.to_owned(),
                    })
            };
            Ok((find(a)?, find(b)?, h.cross_seed(a, b)))
        })
        .collect()
}
