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

use tidemark_features::{murmur3_32, Hashing};

use crate::{auc, Ftrl, Metrics, Params};

pub struct Options {
    pub bits: u8,
    pub seed: u32,
    pub params: Params,
    pub header: bool,
    /// Column-name pairs crossed into one more feature each.
    pub crosses: Vec<(String, String)>,
    /// Where to write each row's progressive prediction, one per line.
    pub predictions: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub rows: u64,
    pub positives: u64,
    pub seconds: f64,
    pub logloss: f64,
    pub auc: f64,
    /// Mean prediction over label rate.
    pub calibration: f64,
}

impl Report {
    pub fn rows_per_second(&self) -> f64 {
        self.rows as f64 / self.seconds.max(1e-9)
    }
}

fn open(path: &Path) -> Result<Box<dyn BufRead>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let raw: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    Ok(Box::new(BufReader::with_capacity(1 << 20, raw)))
}

/// Runs the progressive pass and returns what it measured.
pub fn run(files: &[PathBuf], opts: &Options) -> Result<Report, String> {
    if files.is_empty() {
        return Err("no input files".into());
    }
    let hashing = Hashing::new(opts.bits, opts.seed, opts.crosses.clone());
    let mask = hashing.mask();
    let bias = hashing.bias_index();
    let mut model = Ftrl::new(opts.params, hashing.slots());
    let mut metrics = Metrics::new(100_000);
    let mut pairs: Vec<(f32, bool)> = Vec::new();
    let mut out = match &opts.predictions {
        Some(p) => Some(BufWriter::with_capacity(
            1 << 20,
            File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
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
            let n = r
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("{}: {e}", path.display()))?;
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
                    return Err(format!(
                        "{}:{line_no}: label must be 0 or 1, got {:?}",
                        path.display(),
                        String::from_utf8_lossy(other)
                    ))
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
                    x.push((murmur3_32(&line[a..b], seeds[j]) & mask, 1.0));
                }
            }
            for &(ca, cb, seed) in &cross_cols {
                let (Some(&(a0, a1)), Some(&(b0, b1))) = (fields.get(ca + 1), fields.get(cb + 1))
                else {
                    continue;
                };
                if a0 < a1 && b0 < b1 {
                    x.push((
                        murmur3_32(&line[b0..b1], murmur3_32(&line[a0..a1], seed)) & mask,
                        1.0,
                    ));
                }
            }
            x.push((bias, 1.0));
            let p = model.learn(&x, y);
            metrics.total.add(p, y);
            pairs.push((p as f32, y));
            if let Some(o) = out.as_mut() {
                writeln!(o, "{}", p as f32).map_err(|e| format!("predictions: {e}"))?;
            }
        }
    }
    if let Some(mut o) = out {
        o.flush().map_err(|e| format!("predictions: {e}"))?;
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

fn resolve_crosses(h: &Hashing, names: &[String]) -> Result<Vec<(usize, usize, u32)>, String> {
    h.crosses
        .iter()
        .map(|(a, b)| {
            let find = |n: &str| {
                names
                    .iter()
                    .position(|c| c == n)
                    .ok_or_else(|| format!("--cross {a},{b}: no column named {n:?}"))
            };
            Ok((find(a)?, find(b)?, h.cross_seed(a, b)))
        })
        .collect()
}
