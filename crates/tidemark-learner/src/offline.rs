//! `tidemark learn --input FILE...`: one progressive pass over TSV files
//! (plain or gzip, read in order). Each line is a label (0 or 1), then one
//! categorical feature per column; an empty column is a missing feature.
//! Column `j` (1 for the first feature) is named by the header with
//! `header`, else by its number, and hashed as the string value `v` under
//! that name: `murmur3(v, murmur3(name, seed)) & mask` (see `tidemark-features`).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tidemark_features::Hashing;
use tidemark_ftrl::{auc, Ftrl, Metrics, Params};

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
    /// Hash into 2^bits weights.
    pub bits: u8,
    /// The hash seed.
    pub seed: u32,
    /// Learning settings.
    pub params: Params,
    /// The first line of each file names the columns.
    pub header: bool,
    /// Column-name pairs crossed into one more feature each.
    pub crosses: Vec<(String, String)>,
    /// Where to write each row's progressive prediction, one per line.
    pub predictions: Option<PathBuf>,
}

/// What an offline pass measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Rows learned.
    pub rows: u64,
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
}

impl Report {
    /// Throughput.
    pub fn rows_per_second(&self) -> f64 {
        self.rows as f64 / self.seconds.max(1e-9)
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

/// Runs the progressive pass and returns what it measured.
pub fn run(files: &[PathBuf], opts: &Options) -> Result<Report, OfflineError> {
    if files.is_empty() {
        return Err(OfflineError::NoInput);
    }
    crate::config::check_bits(opts.bits).map_err(|e| OfflineError::Settings(e.to_string()))?;
    opts.params.validate().map_err(OfflineError::Settings)?;
    let hashing = Hashing::new(opts.bits, opts.seed, opts.crosses.clone());
    let bias = hashing.bias_index();
    let mut model = Ftrl::new(opts.params, hashing.slots());
    let mut metrics = Metrics::new(100_000);
    let mut pairs: Vec<(f32, bool)> = Vec::new();
    let mut out = match &opts.predictions {
        Some(p) => Some(BufWriter::with_capacity(
            1 << 20,
            File::create(p).map_err(io(p))?,
        )),
        None => None,
    };
    let mut names: Vec<String> = Vec::new();
    let mut seeds: Vec<u32> = Vec::new();
    // Crosses as column positions, resolved once the names are known.
    let mut cross_cols: Vec<(usize, usize, u32)> = Vec::new();
    let mut x: Vec<(u32, f32)> = Vec::with_capacity(64);
    let mut line = Vec::with_capacity(4096);
    let mut fields: Vec<(usize, usize)> = Vec::with_capacity(64);
    let started = Instant::now();
    for (file_no, path) in files.iter().enumerate() {
        let mut r = open(path)?;
        let mut line_no = 0u64;
        loop {
            line.clear();
            let n = r.read_until(b'\n', &mut line).map_err(io(path))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            if line_no == 1 && opts.header {
                if file_no == 0 {
                    names = line
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
            fields.clear();
            let mut start = 0;
            for (i, &b) in line.iter().enumerate() {
                if b == b'\t' {
                    fields.push((start, i));
                    start = i + 1;
                }
            }
            fields.push((start, line.len()));
            let y = match &line[fields[0].0..fields[0].1] {
                b"1" => true,
                b"0" => false,
                other => {
                    return Err(OfflineError::Label {
                        path: path.clone(),
                        line: line_no,
                        got: String::from_utf8_lossy(other).into_owned(),
                    })
                }
            };
            let cols = fields.len() - 1;
            if seeds.len() < cols {
                // Name new columns: by header, else by number (1-based).
                for j in seeds.len()..cols {
                    let name = names.get(j).cloned().unwrap_or_else(|| (j + 1).to_string());
                    seeds.push(hashing.name_seed(&name));
                    names.resize(names.len().max(j + 1), String::new());
                    if names[j].is_empty() {
                        names[j] = name;
                    }
                }
                cross_cols = resolve_crosses(&hashing, &names)?;
            }
            x.clear();
            for (j, &(a, b)) in fields[1..].iter().enumerate() {
                if a < b {
                    x.push((hashing.categorical(seeds[j], &line[a..b]), 1.0));
                }
            }
            for &(ca, cb, seed) in &cross_cols {
                let (Some(&(a0, a1)), Some(&(b0, b1))) = (fields.get(ca + 1), fields.get(cb + 1))
                else {
                    continue;
                };
                if a0 < a1 && b0 < b1 {
                    x.push((hashing.cross(seed, &line[a0..a1], &line[b0..b1]), 1.0));
                }
            }
            x.push((bias, 1.0));
            let p = model.learn(&x, y);
            metrics.total.add(p, y);
            pairs.push((p as f32, y));
            if let Some(o) = out.as_mut() {
                writeln!(o, "{}", p as f32)
                    .map_err(io(opts.predictions.as_deref().expect("open")))?;
            }
        }
    }
    if let Some(mut o) = out {
        o.flush()
            .map_err(io(opts.predictions.as_deref().expect("open")))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let t = metrics.total;
    Ok(Report {
        rows: t.rows,
        positives: t.positives,
        seconds,
        logloss: t.logloss(),
        auc: auc(&mut pairs),
        calibration: t.calibration(),
    })
}

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
