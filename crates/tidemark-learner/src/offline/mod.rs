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
//! on matured rows only; a `:txid` cell pairs a member's rows in the tuning,
//! as online. A header cell `:target` (as `tidemark export`
//! writes it for several targets) names each row's target: each learns its
//! own model, and targets in a pool (`Options::pools`) share its weights as
//! the online learner's do, so a pass over an export of the rows in the
//! order the learner read them learns what it learned.
//!
//! By concern: `columns` (naming, parsing and hashing cells), `models`
//! (`--model`, `--save`, `--pool`), `report` (the figures).

mod columns;
mod models;
mod report;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tidemark_checkpoint::Checkpoint;
use tidemark_features::Hashing;
use tidemark_ftrl::{auc, Grid, Kind, Metrics, Models, Params, Row};

use columns::{cell_value, resolve_crosses, Column};
pub use columns::{hashing, KIND_COLUMN, NUMERIC, TARGET_COLUMN, TXID_COLUMN};
pub use models::{load, pools, save, Pools};
pub use report::{Figures, Report};

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
    /// A line's `:target` cell is empty or not UTF-8.
    #[error("{path}:{line}: the :target column must name a target, got {got:?}")]
    Target {
        /// The file.
        path: PathBuf,
        /// Its line number (1-based).
        line: u64,
        /// What the cell held.
        got: String,
    },
    /// Rows without a `:target` column, and no target to give them.
    #[error("{0}")]
    NoTarget(String),
    /// `--test-only` over rows of a target the model lacks.
    #[error("{path}:{line}: target {target:?} is not in the model (--test-only learns none)")]
    UnknownTarget {
        /// The file.
        path: PathBuf,
        /// Its line number (1-based).
        line: u64,
        /// The target.
        target: String,
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
    /// Learning settings (of a new target or pool; `start`'s have their own).
    pub params: Params,
    /// The settings a new target tunes over around `params`.
    pub grid: Grid,
    /// The pools targets new to the pass share weights in (learning with
    /// `params`), and their teachers (for a pool `start` holds too).
    pub pools: Pools,
    /// The target of rows without a `:target` column (default: `start`'s
    /// only target, else `model`).
    pub target: Option<String>,
    /// The first line of each file names the columns.
    pub header: bool,
    /// Where to write each row's progressive prediction, one per line.
    pub predictions: Option<PathBuf>,
    /// Where to write the weight each row was learned with (the setting
    /// predicting's), one per line: what another learner needs to learn
    /// the same rows the same way.
    pub weights: Option<PathBuf>,
    /// Start from this checkpoint's targets and pools (trained with the same
    /// hashing) instead of none.
    pub start: Option<Checkpoint>,
    /// Learn from each row after predicting it; `false` only predicts.
    pub learn: bool,
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

/// Runs the progressive pass and returns what it measured, and the models.
pub fn run(files: &[PathBuf], opts: &Options) -> Result<(Report, Models), OfflineError> {
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
    models: Models,
    /// The target of rows without a `:target` column, or why there is none.
    target: Result<String, String>,
    /// The bias feature's index, in every row.
    bias: u32,
    /// Per target, what the pass measured of it (a few targets: a list).
    measured: Vec<(String, Measured)>,
    /// The entry of `measured` the last row went to.
    last_measured: usize,
    /// Where predictions go (`Options::predictions`).
    out: Option<BufWriter<File>>,
    /// Where weights go (`Options::weights`).
    weights_out: Option<BufWriter<File>>,
    /// The column holding each row's kind (`:kind`), if any.
    kind_col: Option<usize>,
    /// The column naming each row's target (`:target`), if any.
    target_col: Option<usize>,
    /// The current row's target (a buffer kept between rows).
    row_target: String,
    /// The column holding each row's txid (`:txid`), if any.
    txid_col: Option<usize>,
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
    /// Checks the settings, makes the models (none, or `opts.start`'s) and
    /// opens the predictions' file.
    fn new(opts: &'a Options) -> Result<Pass<'a>, OfflineError> {
        let started = opts.start.iter().flat_map(|c| &c.targets);
        for params in std::iter::once(opts.params).chain(started.map(Params::from)) {
            params.validate().map_err(OfflineError::Settings)?;
        }
        let hashing = &opts.hashing;
        let bias = hashing.bias_index();
        opts.grid.validate().map_err(OfflineError::Settings)?;
        let models = match &opts.start {
            Some(c) => Models::from_checkpoint(c, WINDOW),
            None => Models::new(hashing.clone(), WINDOW),
        };
        let models = (models.with_grid(opts.grid.clone()))
            .with_pools(&opts.pools.of, |_| opts.params)
            .with_teachers(&opts.pools.teaches);
        let target = match (&opts.target, &opts.start) {
            (Some(t), _) => Ok(t.clone()),
            (None, None) => Ok("model".to_owned()),
            (None, Some(c)) => match &c.targets[..] {
                [only] => Ok(only.name.clone()),
                _ => Err(format!(
                    "rows without a {TARGET_COLUMN} column: {}",
                    models::name_one_of(c)
                )),
            },
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
            models,
            target,
            bias,
            measured: Vec::new(),
            last_measured: 0,
            out,
            weights_out,
            kind_col: None,
            target_col: None,
            row_target: String::new(),
            txid_col: None,
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
        // Owned for the row (its buffer reused): hashing reads which
        // features the target omits while it fills `x`.
        let mut target = std::mem::take(&mut self.row_target);
        target.clear();
        match self.target_col {
            Some(j) => {
                let (a, b) = self.fields[j + 1];
                match std::str::from_utf8(&line[a..b]) {
                    Ok(t) if !t.is_empty() => target.push_str(t),
                    _ => {
                        return Err(OfflineError::Target {
                            path: path.to_owned(),
                            line: line_no,
                            got: String::from_utf8_lossy(&line[a..b]).into_owned(),
                        })
                    }
                }
            }
            None => target.push_str(
                self.target
                    .as_deref()
                    .map_err(|e| OfflineError::NoTarget(e.clone()))?,
            ),
        };
        self.features(line, n_cols, &target, path, line_no)?;
        let result = self.learn_row(line, y, kind, &target, path, line_no);
        self.row_target = target;
        result
    }

    /// Learns (or scores) the row hashed into `x` as `target`'s, and
    /// writes its prediction and weight.
    fn learn_row(
        &mut self,
        line: &[u8],
        y: bool,
        kind: Kind,
        target: &str,
        path: &Path,
        line_no: u64,
    ) -> Result<(), OfflineError> {
        let mut row = Row::of(y, kind);
        if let Some(j) = self.txid_col {
            let (a, b) = self.fields[j + 1];
            row = row.member(&String::from_utf8_lossy(&line[a..b]));
        }
        // The weight the row is learned with depends on whether the target
        // is learned early, as it stands before the row.
        let early = self.weights_out.is_some()
            && !(kind == Kind::Final && y)
            && (self.models.targets.get(target)).is_some_and(|(m, _)| m.is_early());
        let p = if self.opts.learn {
            self.models
                .learn_hashed(target, || self.opts.params, &self.x, row)
        } else {
            self.models.score_hashed(target, &self.x).ok_or_else(|| {
                OfflineError::UnknownTarget {
                    path: path.to_owned(),
                    line: line_no,
                    target: target.to_owned(),
                }
            })?
        };
        // Rows of one target run in long stretches: the last one's first.
        let last = self.last_measured;
        let at = match self.measured.get(last) {
            Some((name, _)) if name == target => last,
            _ => match self.measured.iter().position(|(n, _)| n == target) {
                Some(i) => i,
                None => {
                    self.measured.push((target.to_owned(), Measured::default()));
                    self.measured.len() - 1
                }
            },
        };
        self.last_measured = at;
        let m = &mut self.measured[at].1;
        if kind.matured() {
            m.metrics.total.add(p, y);
            m.pairs.push((p as f32, y));
        } else {
            m.provisional += 1;
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
            if cell == TARGET_COLUMN {
                self.target_col = Some(j);
            }
            if cell == TXID_COLUMN {
                self.txid_col = Some(j);
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

    /// Hashes the row's cells, crosses and bias into `x`, without the
    /// columns `target` omits.
    fn features(
        &mut self,
        line: &[u8],
        n_cols: usize,
        target: &str,
        path: &Path,
        line_no: u64,
    ) -> Result<(), OfflineError> {
        let hashing = &self.opts.hashing;
        let skip = hashing.omitted(target);
        let kept = |col: &Column| skip.is_none_or(|s| !s.contains(&col.name));
        let x = &mut self.x;
        x.clear();
        let value = |j: usize| cell_value(line, self.fields[j + 1], &self.cols[j], path, line_no);
        for (j, col) in self.cols.iter().enumerate().take(n_cols) {
            let (a, b) = self.fields[j + 1];
            if a == b || !col.feature || !kept(col) {
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
            if ca >= n_cols || cb >= n_cols || !kept(&self.cols[ca]) || !kept(&self.cols[cb]) {
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
    fn finish(mut self, started: Instant) -> Result<(Report, Models), OfflineError> {
        if let Some(mut o) = self.out.take() {
            o.flush()
                .map_err(io(self.opts.predictions.as_deref().expect("open")))?;
        }
        if let Some(mut o) = self.weights_out.take() {
            o.flush()
                .map_err(io(self.opts.weights.as_deref().expect("open")))?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let mut targets = BTreeMap::new();
        for (name, mut m) in std::mem::take(&mut self.measured) {
            let Some((model, _)) = self.models.targets.get(&name) else {
                continue;
            };
            let t = m.metrics.total;
            let figures = Figures {
                rows: t.rows,
                provisional: m.provisional,
                positives: t.positives,
                logloss: t.logloss(),
                auc: auc(&mut m.pairs),
                calibration: t.calibration(),
                choice: model.choice(),
            };
            targets.insert(name, figures);
        }
        let report = Report {
            seconds,
            out_of_range: self.out_of_range,
            targets,
            pools: (self.models.pools.iter())
                .map(|(n, p)| (n.clone(), p.trained))
                .collect(),
        };
        Ok((report, self.models))
    }
}

/// What a pass measured of one target.
struct Measured {
    metrics: Metrics,
    /// Every matured row's (prediction, label), for the AUC.
    pairs: Vec<(f32, bool)>,
    provisional: u64,
}

impl Default for Measured {
    fn default() -> Measured {
        Measured {
            metrics: Metrics::new(WINDOW),
            pairs: Vec::new(),
            provisional: 0,
        }
    }
}

/// Rows the recent figures slide over.
const WINDOW: u64 = 100_000;
