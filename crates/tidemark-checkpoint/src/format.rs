//! The bytes of a checkpoint (version 6 when a target omits features, else
//! 5 with pools, else 4), little-endian:
//!
//! ```text
//! magic        8 bytes   "TDMKCKPT"
//! version      u32       6, 5 or 4 (versions 1 to 3 are still read)
//! header_len   u32
//! header       JSON, header_len bytes (hashing, targets and pools with their counts, positions, metrics)
//! weights      per target, then per pool, in header order: count × (u32 index, f32 weight), non-zero only
//! state        per target, then per pool, in header order: count × (u32 index, f32 z, f32 n), touched coordinates
//! tuning       per target with `tuning`, per candidate but the chosen one, in header order:
//!              count × (u32 index, f32 z, f32 n)
//! crc32        u32       CRC-32 (zlib's) of every byte before it
//! ```
//!
//! Version 3 adds only resume state: a bidder's reader ignores `tuning` and
//! scores with the target's weights, as in version 2. Version 4 records
//! `hashing.max_abs`, the bound past which a value is left out of a row
//! (SPEC 10, v1.3). Version 5 adds pools, weights that several targets
//! share (SPEC 10, v1.3): a pooled target scores its own weights plus its
//! pool's. Version 6 adds `hashing.omit`, the features a target's rows
//! leave out (target → names). Every number in a file is finite: a reader refuses one that is
//! not, whatever its checksum says.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{json, Value};

use crate::sections::Sections;
use tidemark_features::{Hashing, Transform};

/// The first bytes of every checkpoint file.
pub const MAGIC: &[u8; 8] = b"TDMKCKPT";
/// The newest format version this crate writes. Version 2 added
/// `hashing.transforms`; a reader that ignored them would score differently,
/// so older readers must refuse it. Version 3 added per-target `tuning`
/// (until version 4, a file without it was written as version 2).
/// Version 4 added `hashing.max_abs`: a reader that did not leave values
/// past it out of a row would score differently. Versions 1 to 3 are still
/// read (with the bound of this build, [`tidemark_features::MAX_ABS`]).
/// Version 5 added `pools`; a file without one is still written as version
/// 4, so a bidder's older reader keeps reading every unpooled model.
/// Version 6 added `hashing.omit`: a reader that hashed an omitted feature
/// into its target's row would score differently. A file whose targets
/// omit nothing is written as version 5 or 4.
pub const FORMAT_VERSION: u32 = 6;

/// How a self-tuning target chose its weights: the settings that learn side
/// by side over the same rows, and which one the target's own weights,
/// settings and state are.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuning {
    /// Rows after which a row's loss counts half as much in `loss`.
    pub half_life: f64,
    /// The decayed count of rows the losses are summed over.
    pub decayed_rows: f64,
    /// Index in `candidates` of the setting predicting now.
    pub chosen: usize,
    /// Times the chosen setting changed.
    pub switches: u64,
    /// `trained` when it last changed (`None`: never).
    pub last_switch: Option<u64>,
    /// Every setting, the chosen one included.
    pub candidates: Vec<Candidate>,
}

/// One setting of a self-tuning target.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// FTRL alpha.
    pub alpha: f64,
    /// FTRL beta.
    pub beta: f64,
    /// L1.
    pub l1: f64,
    /// L2.
    pub l2: f64,
    /// Its decayed sum of progressive logloss (divide by `decayed_rows`).
    pub loss: f64,
    /// Its resume state `(index, z, n)`; empty for the chosen candidate,
    /// whose state is the target's.
    pub state: Vec<(u32, f32, f32)>,
}

/// One target's model.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The target's name.
    pub name: String,
    /// FTRL alpha it was trained with.
    pub alpha: f64,
    /// FTRL beta.
    pub beta: f64,
    /// L1.
    pub l1: f64,
    /// L2.
    pub l2: f64,
    /// Observations learned since the model began.
    pub trained: u64,
    /// The base margin every score starts from: the log-odds of the label
    /// rate learned so far (`ln((ones + ½) / (zeros + ½))` over `labels`);
    /// 0 in version-1 files.
    pub margin: f64,
    /// `(rows, ones)` the margin is counted over; `None` for a model trained
    /// without a margin (version 1), which keeps 0.
    pub labels: Option<(u64, u64)>,
    /// A target learned early (SPEC 5, v1.3): `(provisional, late)` rows
    /// learned; `labels` then counts only the `final` rows weighed 1 (none
    /// while the target stays early), and the margin is the weighted rate of
    /// docs/learner.md. `None` otherwise.
    pub early_labels: Option<(u64, u64)>,
    /// Non-zero weights, by index.
    pub weights: Vec<(u32, f32)>,
    /// The learner's resume state: `(index, z, n)` for every coordinate seen.
    pub state: Vec<(u32, f32, f32)>,
    /// Progressive-validation metrics, free-form.
    pub metrics: Value,
    /// The settings it tunes over (version 3), if it tunes itself.
    pub tuning: Option<Tuning>,
    /// The pool whose weights it adds to its own (version 5), if any.
    pub pool: Option<String>,
}

impl Target {
    /// The first number of this target that is not finite, or a setting no
    /// learner can use, named (`None`: all is well).
    pub fn non_finite(&self) -> Option<String> {
        if !usable(self.alpha, self.beta, self.l1, self.l2) {
            return Some("alpha, beta, l1 or l2 unusable".into());
        }
        if !self.margin.is_finite() {
            return Some("margin".into());
        }
        if let Some((i, _)) = self.weights.iter().find(|(_, w)| !w.is_finite()) {
            return Some(format!("weight at index {i}"));
        }
        let bad_state = |s: &[(u32, f32, f32)]| {
            (s.iter())
                .find(|(_, z, n)| !(z.is_finite() && n.is_finite() && *n >= 0.0))
                .map(|(i, _, _)| *i)
        };
        if let Some(i) = bad_state(&self.state) {
            return Some(format!("state (z, n) at index {i}"));
        }
        let u = self.tuning.as_ref()?;
        if !(u.half_life.is_finite() && u.half_life >= 1.0 && u.decayed_rows.is_finite()) {
            return Some("tuning.half_life or tuning.decayed_rows".into());
        }
        u.candidates.iter().enumerate().find_map(|(k, c)| {
            if !(usable(c.alpha, c.beta, c.l1, c.l2) && c.loss.is_finite()) {
                return Some(format!("tuning candidate {k}: settings or loss"));
            }
            bad_state(&c.state).map(|i| format!("tuning candidate {k}: state at index {i}"))
        })
    }
}

/// A whole checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// How features were hashed.
    pub hashing: Hashing,
    /// One model per target.
    pub targets: Vec<Target>,
    /// Weights shared by the targets that name them (version 5): each a
    /// model without margin, labels, tuning or pool of its own.
    pub pools: Vec<Target>,
    /// `<source>/<shard>` → the last observation `seq` learned.
    pub positions: BTreeMap<String, i64>,
    /// When it was written, ms since the epoch.
    pub created_at_ms: i64,
}

/// Why a checkpoint cannot be read.
#[derive(Debug)]
pub enum FormatError {
    /// The file could not be read or written.
    Io(std::io::Error),
    /// Not a checkpoint file (wrong magic).
    NotACheckpoint,
    /// A format version this build does not know.
    UnsupportedVersion(u32),
    /// The checksum or structure is wrong.
    Corrupt(String),
    /// A number that is not finite (or a setting no learner can use):
    /// what the file's writer should never have written.
    NonFinite(String),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Io(e) => write!(f, "{e}"),
            FormatError::NotACheckpoint => f.write_str("not a Tidemark checkpoint (bad magic bytes)"),
            FormatError::UnsupportedVersion(v) => write!(
                f,
                "checkpoint format version {v} is not supported (this build reads versions 1 to {FORMAT_VERSION})"
            ),
            FormatError::Corrupt(why) => write!(f, "corrupt checkpoint: {why}"),
            FormatError::NonFinite(what) => write!(
                f,
                "checkpoint holds a number that is not finite ({what}): refused, as no model may score with it"
            ),
        }
    }
}

impl std::error::Error for FormatError {}

impl From<std::io::Error> for FormatError {
    fn from(e: std::io::Error) -> Self {
        FormatError::Io(e)
    }
}

impl Checkpoint {
    /// The header as written in the file (`tidemark checkpoint show --json`).
    pub fn header(&self) -> Value {
        let mut h = json!({
            "hashing": {
                "function": "murmur3_x86_32",
                "seed": self.hashing.seed,
                "bits": self.hashing.bits,
                "crosses": self.hashing.crosses.iter().map(|(a, b)| [a, b]).collect::<Vec<_>>(),
                "bias_index": self.hashing.bias_index(),
                "max_abs": self.hashing.max_abs,
                "transforms": self.hashing.transforms.iter()
                    .map(|(n, t)| (n.clone(), t.to_json()))
                    .collect::<serde_json::Map<_, _>>(),
            },
            "targets": self.targets.iter().map(target_header).collect::<Vec<_>>(),
            "positions": self.positions,
            "created_at_ms": self.created_at_ms,
        });
        if !self.hashing.omit.is_empty() {
            h["hashing"]["omit"] = json!(self.hashing.omit);
        }
        if !self.pools.is_empty() {
            h["pools"] = self.pools.iter().map(target_header).collect();
        }
        h
    }

    /// The version [`Checkpoint::to_bytes`] writes: 6 when a target omits
    /// features, else 5 with pools, else 4 (the file is then what a writer
    /// of that version wrote, byte for byte).
    pub fn version(&self) -> u32 {
        if !self.hashing.omit.is_empty() {
            FORMAT_VERSION
        } else if !self.pools.is_empty() {
            5
        } else {
            4
        }
    }

    /// The models in the order of the binary sections: targets, then pools.
    fn models(&self) -> impl Iterator<Item = &Target> {
        self.targets.iter().chain(&self.pools)
    }

    /// The first number in the checkpoint that is not finite (or not a
    /// usable setting), named: what no checkpoint may hold (SPEC 10, v1.3).
    pub fn non_finite(&self) -> Option<String> {
        if !(self.hashing.max_abs.is_finite() && self.hashing.max_abs > 0.0) {
            return Some("hashing.max_abs".into());
        }
        named_non_finite(&self.targets, &self.pools)
    }

    /// The checkpoint as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = self.header().to_string();
        let tuned = |t: &Target| -> usize {
            t.tuning
                .as_ref()
                .map_or(0, |u| u.candidates.iter().map(|c| c.state.len()).sum())
        };
        let body: usize = self
            .models()
            .map(|t| t.weights.len() * 8 + (t.state.len() + tuned(t)) * 12)
            .sum();
        let mut out = Vec::with_capacity(20 + header.len() + body);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.version().to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        for t in self.models() {
            for (i, w) in &t.weights {
                out.extend_from_slice(&i.to_le_bytes());
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        let states = self.models().map(|t| &t.state).chain(
            self.targets
                .iter()
                .filter_map(|t| t.tuning.as_ref())
                .flat_map(|u| u.candidates.iter().map(|c| &c.state)),
        );
        for state in states {
            for (i, z, n) in state {
                out.extend_from_slice(&i.to_le_bytes());
                out.extend_from_slice(&z.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads and verifies a checkpoint. With `with_state = false` the resume
    /// state is skipped (what a bidder needs).
    pub fn from_bytes(bytes: &[u8], with_state: bool) -> Result<Checkpoint, FormatError> {
        let (version, header, mut sections) = frame(bytes)?;
        let hashing = read_hashing(&header["hashing"], version)?;
        let slots = hashing.slots() as u32;
        let metas = header["targets"]
            .as_array()
            .ok_or_else(|| corrupt("targets"))?;
        let pool_metas = match (version, &header["pools"]) {
            (5.., Value::Array(p)) => p.as_slice(),
            (5.., Value::Null) => &[],
            (5.., _) => return Err(corrupt("pools")),
            _ => &[],
        };
        let mut models = Vec::with_capacity(metas.len() + pool_metas.len());
        for m in metas.iter().chain(pool_metas) {
            let count = m["weights"]
                .as_u64()
                .ok_or_else(|| corrupt("targets.weights"))? as usize;
            let weights = sections.weights(count, slots)?;
            models.push(read_target(m, version, weights)?);
        }
        let all: Vec<Value> = metas.iter().chain(pool_metas).cloned().collect();
        read_states(&mut models, &all, version, &mut sections, with_state, slots)?;
        sections.finish()?;
        let pools = models.split_off(metas.len());
        let targets = models;
        check_pools(&targets, &pools)?;
        // A checksum proves the bytes are the ones written, not that the
        // writer was sound: no reader scores with a non-finite number.
        if let Some(why) = named_non_finite(&targets, &pools) {
            return Err(FormatError::NonFinite(why));
        }
        let positions = header["positions"]
            .as_object()
            .ok_or_else(|| corrupt("positions"))?
            .iter()
            .map(|(k, v)| {
                v.as_i64()
                    .map(|s| (k.clone(), s))
                    .ok_or_else(|| corrupt("positions"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Checkpoint {
            hashing,
            targets,
            pools,
            positions,
            created_at_ms: header["created_at_ms"].as_i64().unwrap_or(0),
        })
    }

    /// Reads and verifies a checkpoint; `with_state` also loads the resume state (z, n).
    pub fn read(path: &std::path::Path, with_state: bool) -> Result<Checkpoint, FormatError> {
        let bytes = std::fs::read(path)?;
        Checkpoint::from_bytes(&bytes, with_state)
    }
}

fn corrupt(why: &str) -> FormatError {
    FormatError::Corrupt(why.to_owned())
}

/// The first non-finite number among targets and pools, named.
fn named_non_finite(targets: &[Target], pools: &[Target]) -> Option<String> {
    let named = |kind: &'static str| {
        move |t: &Target| {
            t.non_finite()
                .map(|why| format!("{kind} {}: {why}", t.name))
        }
    };
    (targets.iter().find_map(named("target"))).or_else(|| pools.iter().find_map(named("pool")))
}

/// Pools are plain weights, named once each, and every pool a target names
/// is in the file: a reader that scored such a target without its pool
/// would score something else than what was trained.
fn check_pools(targets: &[Target], pools: &[Target]) -> Result<(), FormatError> {
    for (k, p) in pools.iter().enumerate() {
        if p.tuning.is_some() || p.pool.is_some() || p.labels.is_some() || p.margin != 0.0 {
            return Err(corrupt(&format!(
                "pool {}: a pool has weights only",
                p.name
            )));
        }
        if pools[..k].iter().any(|q| q.name == p.name) {
            return Err(corrupt(&format!("pool {} named twice", p.name)));
        }
    }
    for t in targets {
        if let Some(name) = &t.pool {
            if !pools.iter().any(|p| &p.name == name) {
                return Err(corrupt(&format!("target {}: no pool {name}", t.name)));
            }
        }
    }
    Ok(())
}

/// The frame around everything: magic, a version this build reads, the
/// checksum, the header's length and its JSON. Returns the version, the
/// header, and the binary sections after it (the checksum cut off).
fn frame(bytes: &[u8]) -> Result<(u32, Value, Sections<'_>), FormatError> {
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(FormatError::NotACheckpoint);
    }
    if bytes.len() < 20 {
        return Err(corrupt("truncated header"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(FormatError::UnsupportedVersion(version));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes(tail.try_into().expect("4 bytes")) {
        return Err(corrupt("checksum mismatch (truncated or damaged file)"));
    }
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    let header_end = 16usize
        .checked_add(hlen)
        .filter(|e| *e <= body.len())
        .ok_or_else(|| corrupt("header length"))?;
    let header: Value = serde_json::from_slice(&body[16..header_end])
        .map_err(|e| corrupt(&format!("header: {e}")))?;
    let sections = Sections::new(body, header_end);
    Ok((version, header, sections))
}

/// The header's `hashing` as a file of `version` holds it (no transforms
/// before version 2, no `max_abs` before version 4: this build's bound).
fn read_hashing(h: &Value, version: u32) -> Result<Hashing, FormatError> {
    if h["function"] != "murmur3_x86_32" {
        return Err(corrupt("unknown hash function"));
    }
    let bits = h["bits"]
        .as_u64()
        .filter(|b| (1..=30).contains(b))
        .ok_or_else(|| corrupt("hashing.bits"))? as u8;
    let seed = h["seed"]
        .as_u64()
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| corrupt("hashing.seed"))?;
    let crosses = h["crosses"]
        .as_array()
        .ok_or_else(|| corrupt("hashing.crosses"))?
        .iter()
        .map(|c| match (c[0].as_str(), c[1].as_str()) {
            (Some(a), Some(b)) => Ok((a.to_owned(), b.to_owned())),
            _ => Err(corrupt("hashing.crosses")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let transforms = match (version, &h["transforms"]) {
        (1, _) => BTreeMap::new(),
        (_, Value::Object(m)) => m
            .iter()
            .map(|(n, t)| {
                Transform::from_json(t)
                    .map(|t| (n.clone(), t))
                    .ok_or_else(|| corrupt(&format!("hashing.transforms.{n}")))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(corrupt("hashing.transforms")),
    };
    let omit = match (version, &h["omit"]) {
        (6.., Value::Object(m)) => m
            .iter()
            .map(|(t, names)| {
                let names = (names.as_array().into_iter().flatten())
                    .map(|n| n.as_str().map(str::to_owned))
                    .collect::<Option<BTreeSet<String>>>()
                    .filter(|n| !n.is_empty());
                names
                    .map(|n| (t.clone(), n))
                    .ok_or_else(|| corrupt(&format!("hashing.omit.{t}")))
            })
            .collect::<Result<_, _>>()?,
        (6.., Value::Null) | (..6, _) => BTreeMap::new(),
        _ => return Err(corrupt("hashing.omit")),
    };
    let mut hashing = Hashing::new(bits, seed, crosses)
        .with_transforms(transforms)
        .with_omit(omit);
    if version >= 4 {
        hashing.max_abs = h["max_abs"]
            .as_f64()
            .filter(|m| m.is_finite() && *m > 0.0)
            .ok_or_else(|| corrupt("hashing.max_abs"))?;
    }
    Ok(hashing)
}

/// A target from its header entry `m` and its weights, without its resume
/// state and tuning (read after every target's weights).
fn read_target(m: &Value, version: u32, weights: Vec<(u32, f32)>) -> Result<Target, FormatError> {
    let f = |k: &str| {
        m[k].as_f64()
            .ok_or_else(|| corrupt(&format!("targets.{k}")))
    };
    let t = Target {
        name: m["name"]
            .as_str()
            .ok_or_else(|| corrupt("targets.name"))?
            .to_owned(),
        alpha: f("alpha")?,
        beta: f("beta")?,
        l1: f("l1")?,
        l2: f("l2")?,
        trained: m["trained"]
            .as_u64()
            .ok_or_else(|| corrupt("targets.trained"))?,
        margin: match version {
            1 => 0.0,
            _ => f("margin")?,
        },
        labels: match (version, &m["labels"]) {
            (1, _) | (_, Value::Null) => None,
            (_, l) => match (l[0].as_u64(), l[1].as_u64()) {
                (Some(rows), Some(ones)) if ones <= rows => Some((rows, ones)),
                _ => return Err(corrupt("targets.labels")),
            },
        },
        early_labels: match &m["early_labels"] {
            Value::Null => None,
            l => match (l[0].as_u64(), l[1].as_u64()) {
                (Some(p), Some(late)) => Some((p, late)),
                _ => return Err(corrupt("targets.early_labels")),
            },
        },
        weights,
        state: Vec::new(),
        metrics: m["metrics"].clone(),
        tuning: None,
        pool: match (version, &m["pool"]) {
            (_, Value::Null) | (..=4, _) => None,
            (_, Value::String(p)) => Some(p.clone()),
            _ => return Err(corrupt("targets.pool")),
        },
    };
    if !usable(t.alpha, t.beta, t.l1, t.l2) {
        return Err(corrupt("targets: unusable alpha, beta, l1 or l2"));
    }
    Ok(t)
}

/// The resume state of every target, in header order, then the tuning of
/// those that have it (version 3 on), each candidate's state after it.
/// States are kept, and their indices checked, only `with_state`; their
/// lengths are checked either way.
fn read_states(
    targets: &mut [Target],
    metas: &[Value],
    version: u32,
    sections: &mut Sections<'_>,
    with_state: bool,
    slots: u32,
) -> Result<(), FormatError> {
    for (t, m) in targets.iter_mut().zip(metas) {
        t.state = sections.state(m["state"].as_u64(), slots, with_state)?;
    }
    for (t, m) in targets.iter_mut().zip(metas) {
        if version < 3 || m["tuning"].is_null() {
            continue;
        }
        let mut u = tuning(&m["tuning"]).ok_or_else(|| corrupt("targets.tuning"))?;
        for (k, c) in u.candidates.iter_mut().enumerate() {
            let count = m["tuning"]["candidates"][k]["state"].as_u64();
            c.state = sections.state(count, slots, with_state)?;
        }
        t.tuning = Some(u);
    }
    Ok(())
}

/// A target's entry in the header; `tuning` only when it has one, so a file
/// without tuning is a version-2 file byte for byte.
fn target_header(t: &Target) -> Value {
    let mut h = json!({
        "name": t.name, "alpha": t.alpha, "beta": t.beta, "l1": t.l1, "l2": t.l2,
        "trained": t.trained, "margin": t.margin, "labels": t.labels.map(|(r, o)| [r, o]),
        "weights": t.weights.len(), "state": t.state.len(),
        "metrics": t.metrics,
    });
    if let Some((p, late)) = t.early_labels {
        h["early_labels"] = json!([p, late]);
    }
    if let Some(pool) = &t.pool {
        h["pool"] = json!(pool);
    }
    if let Some(u) = &t.tuning {
        h["tuning"] = json!({
            "half_life": u.half_life, "decayed_rows": u.decayed_rows,
            "chosen": u.chosen, "switches": u.switches, "last_switch": u.last_switch,
            "candidates": u.candidates.iter().map(|c| json!({
                "alpha": c.alpha, "beta": c.beta, "l1": c.l1, "l2": c.l2,
                "loss": c.loss, "state": c.state.len(),
            })).collect::<Vec<_>>(),
        });
    }
    h
}

/// Settings a learner can resume with: `alpha` within [1e-4, 1e4], the
/// others within [0, 1e30], `beta / alpha + l2` at least 1e-3
/// (`tidemark-ftrl`'s `Params::validate`, the bounds that keep its state
/// finite). A damaged but checksum-valid file is refused here rather than
/// learned from.
fn usable(alpha: f64, beta: f64, l1: f64, l2: f64) -> bool {
    (1e-4..=1e4).contains(&alpha)
        && [beta, l1, l2].iter().all(|v| (0.0..=1e30).contains(v))
        && beta / alpha + l2 >= 1e-3
}

/// The most settings a learner runs side by side (`tidemark-ftrl`'s
/// `MAX_SETTINGS`, one cache line of 8 lanes; it asserts they agree).
pub const MAX_CANDIDATES: usize = 8;

/// A header's `tuning` object, candidates without their state.
fn tuning(u: &Value) -> Option<Tuning> {
    let f = |v: &Value, k: &str| v[k].as_f64();
    let candidates = u["candidates"]
        .as_array()?
        .iter()
        .map(|c| {
            Some(Candidate {
                alpha: f(c, "alpha")?,
                beta: f(c, "beta")?,
                l1: f(c, "l1")?,
                l2: f(c, "l2")?,
                loss: f(c, "loss")?,
                state: Vec::new(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let chosen = usize::try_from(u["chosen"].as_u64()?).ok()?;
    (chosen < candidates.len() && candidates.len() <= MAX_CANDIDATES).then_some(())?;
    (candidates.iter())
        .all(|c| usable(c.alpha, c.beta, c.l1, c.l2) && c.loss.is_finite())
        .then_some(())?;
    let half_life = f(u, "half_life")?;
    (half_life.is_finite() && half_life >= 1.0).then_some(())?;
    Some(Tuning {
        half_life,
        decayed_rows: f(u, "decayed_rows")?,
        chosen,
        switches: u["switches"].as_u64()?,
        last_switch: match &u["last_switch"] {
            Value::Null => None,
            v => Some(v.as_u64()?),
        },
        candidates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            hashing: Hashing::new(4, 7, vec![("a".into(), "b".into())]).with_transforms(
                BTreeMap::from([
                    ("n".to_owned(), Transform::Log1p),
                    ("k".to_owned(), Transform::Buckets(vec![0.5, 2.0])),
                ]),
            ),
            targets: vec![Target {
                name: "ctr".into(),
                alpha: 0.1,
                beta: 1.0,
                l1: 1.0,
                l2: 1.0,
                trained: 3,
                margin: -0.5,
                labels: Some((3, 1)),
                early_labels: None,
                weights: vec![(1, 0.5), (16, -2.0)],
                state: vec![(1, -1.5, 2.0), (3, 0.5, 1.0), (16, 3.0, 4.0)],
                metrics: json!({"logloss": 0.1}),
                tuning: None,
                pool: None,
            }],
            pools: Vec::new(),
            positions: BTreeMap::from([("local/s0".to_owned(), 42)]),
            created_at_ms: 1,
        }
    }

    #[test]
    fn round_trips() {
        let c = sample();
        assert_eq!(Checkpoint::from_bytes(&c.to_bytes(), true).unwrap(), c);
        let lean = Checkpoint::from_bytes(&c.to_bytes(), false).unwrap();
        assert!(lean.targets[0].state.is_empty());
        assert_eq!(lean.targets[0].weights, c.targets[0].weights);
        // A target learned early keeps its provisional and late counts; a
        // file without any is byte for byte what it was.
        let plain = c.to_bytes();
        assert!(!String::from_utf8_lossy(&plain).contains("early_labels"));
        let mut e = c.clone();
        e.targets[0].early_labels = Some((40, 3));
        assert_eq!(Checkpoint::from_bytes(&e.to_bytes(), true).unwrap(), e);
    }

    /// `sample()` with a second target and a pool both targets share.
    pub(crate) fn pooled() -> Checkpoint {
        let mut c = sample();
        let mut long = c.targets[0].clone();
        long.name = "cvr_long".into();
        long.weights = vec![(2, 0.25)];
        c.targets.push(long);
        for t in &mut c.targets {
            t.pool = Some("install".into());
        }
        c.pools.push(Target {
            name: "install".into(),
            margin: 0.0,
            labels: None,
            metrics: Value::Null,
            weights: vec![(1, -0.75), (5, 1.5)],
            state: vec![(1, 2.0, 3.0), (5, -4.0, 5.0)],
            ..c.targets[0].clone()
        });
        c.pools[0].pool = None;
        c
    }

    #[test]
    fn omitted_features_round_trip_and_only_they_make_a_version_6_file() {
        let mut c = pooled();
        let omit = BTreeMap::from([("cvr_long".to_owned(), BTreeSet::from(["hour".to_owned()]))]);
        c.hashing = c.hashing.clone().with_omit(omit);
        let bytes = c.to_bytes();
        assert_eq!(bytes[8], 6);
        assert_eq!(Checkpoint::from_bytes(&bytes, true).unwrap(), c);
        assert_eq!(c.header()["hashing"]["omit"], json!({"cvr_long": ["hour"]}));
        // A list that is not of names, or is empty, is refused.
        for bad in [
            json!({"cvr_long": [1]}),
            json!({"cvr_long": []}),
            json!(["hour"]),
        ] {
            let mut h = c.header();
            h["hashing"]["omit"] = bad.clone();
            let e = read_hashing(&h["hashing"], 6).unwrap_err().to_string();
            assert!(e.contains("hashing.omit"), "{bad}: {e}");
        }
    }

    #[test]
    fn pools_round_trip_and_only_they_make_a_version_5_file() {
        let plain = sample().to_bytes();
        assert_eq!(plain[8], 4, "no pool: a version-4 file");
        assert!(!String::from_utf8_lossy(&plain).contains("pool"));
        let c = pooled();
        let bytes = c.to_bytes();
        assert_eq!(bytes[8], 5);
        assert_eq!(Checkpoint::from_bytes(&bytes, true).unwrap(), c);
        let lean = Checkpoint::from_bytes(&bytes, false).unwrap();
        assert_eq!(lean.pools[0].weights, c.pools[0].weights);
        assert!(lean.pools[0].state.is_empty());
        // What no writer may write: a target naming a pool not in the file,
        // a pool with a margin or tuning, a pool twice, a non-finite pool.
        let refused = |c: Checkpoint| Checkpoint::from_bytes(&c.to_bytes(), true).unwrap_err();
        let mut missing = pooled();
        missing.targets[1].pool = Some("other".into());
        assert!(refused(missing).to_string().contains("no pool other"));
        let mut margin = pooled();
        margin.pools[0].margin = 0.5;
        assert!(refused(margin).to_string().contains("weights only"));
        let mut twice = pooled();
        twice.pools.push(twice.pools[0].clone());
        assert!(refused(twice).to_string().contains("named twice"));
        let mut nan = pooled();
        nan.pools[0].weights[0].1 = f32::NAN;
        assert!(
            matches!(refused(nan.clone()), FormatError::NonFinite(w) if w.starts_with("pool install"))
        );
        assert!(nan.non_finite().unwrap().starts_with("pool install"));
    }

    #[test]
    fn refuses_foreign_damaged_and_future_files() {
        let bytes = sample().to_bytes();
        assert!(matches!(
            Checkpoint::from_bytes(b"hello world, not a checkpoint", true),
            Err(FormatError::NotACheckpoint)
        ));
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(matches!(
            Checkpoint::from_bytes(&flipped, true),
            Err(FormatError::Corrupt(_))
        ));
        assert!(matches!(
            Checkpoint::from_bytes(&bytes[..bytes.len() - 9], true),
            Err(FormatError::Corrupt(_))
        ));
        let mut future = bytes.clone();
        future[8] = FORMAT_VERSION as u8 + 1;
        assert!(matches!(
            Checkpoint::from_bytes(&future, true),
            Err(FormatError::UnsupportedVersion(v)) if v == FORMAT_VERSION + 1
        ));
        for cut in 0..bytes.len() {
            assert!(Checkpoint::from_bytes(&bytes[..cut], true).is_err());
        }
    }

    #[test]
    fn tuning_round_trips_and_a_bidder_skips_it() {
        let mut c = sample();
        let candidate = |alpha: f64, loss: f64, state: Vec<(u32, f32, f32)>| Candidate {
            alpha,
            beta: 1.0,
            l1: 1.0,
            l2: 1.0,
            loss,
            state,
        };
        c.targets[0].tuning = Some(Tuning {
            half_life: 1e4,
            decayed_rows: 2.5,
            chosen: 1,
            switches: 1,
            last_switch: Some(2),
            candidates: vec![
                candidate(0.025, 1.5, vec![(2, 0.25, 1.0)]),
                candidate(0.1, 1.25, vec![]),
                candidate(0.4, 1.75, vec![(0, 1.0, 2.0), (15, -1.0, 0.5)]),
            ],
        });
        let bytes = c.to_bytes();
        assert_eq!(bytes[8], 4);
        assert_eq!(Checkpoint::from_bytes(&bytes, true).unwrap(), c);
        let lean = Checkpoint::from_bytes(&bytes, false).unwrap();
        assert_eq!(lean.targets[0].weights, c.targets[0].weights);
        let u = lean.targets[0].tuning.as_ref().unwrap();
        assert!(u.candidates.iter().all(|c| c.state.is_empty()));
        for cut in 0..bytes.len() {
            assert!(Checkpoint::from_bytes(&bytes[..cut], true).is_err());
        }
        // Settings no learner could resume with, written with a valid
        // checksum, are refused: an alpha of 0 (infinite steps), a negative
        // L2, a half-life under one row.
        let damaged = |f: &dyn Fn(&mut Checkpoint)| {
            let mut d = c.clone();
            f(&mut d);
            Checkpoint::from_bytes(&d.to_bytes(), true).unwrap_err()
        };
        let tuning = |d: &mut Checkpoint| d.targets[0].tuning.as_mut().unwrap().clone();
        damaged(&|d| {
            let mut u = tuning(d);
            u.candidates[2].alpha = 0.0;
            d.targets[0].tuning = Some(u);
        });
        damaged(&|d| {
            let mut u = tuning(d);
            u.candidates[0].l2 = -1.0;
            d.targets[0].tuning = Some(u);
        });
        damaged(&|d| {
            let mut u = tuning(d);
            u.half_life = 0.5;
            d.targets[0].tuning = Some(u);
        });
        damaged(&|d| d.targets[0].alpha = f64::NAN);
    }

    #[test]
    fn every_reader_refuses_a_number_that_is_not_finite() {
        // Written with a valid checksum, as a learner without the guard did:
        // each is refused, and says what it found.
        type Damage<'a> = &'a dyn Fn(&mut Checkpoint);
        let cases: [(&str, Damage); 6] = [
            ("weight", &|c| c.targets[0].weights[1].1 = f32::NAN),
            ("weight", &|c| c.targets[0].weights[0].1 = f32::INFINITY),
            ("state", &|c| c.targets[0].state[2].2 = f32::INFINITY),
            ("state", &|c| c.targets[0].state[0].1 = f32::NEG_INFINITY),
            ("state", &|c| c.targets[0].state[1].2 = -1.0),
            ("alpha", &|c| c.targets[0].alpha = 1e-30),
        ];
        for (what, damage) in cases {
            let mut c = sample();
            damage(&mut c);
            assert!(
                c.non_finite().unwrap().contains(what),
                "{:?}",
                c.non_finite()
            );
            let bytes = c.to_bytes();
            let lean = Checkpoint::from_bytes(&bytes, false);
            let full = Checkpoint::from_bytes(&bytes, true);
            assert!(full.is_err(), "{what}: {full:?}");
            if what == "weight" {
                // A bidder's reader, which skips the state, refuses it too.
                assert!(matches!(lean, Err(FormatError::NonFinite(_))), "{lean:?}");
            }
        }
        // A non-finite margin or loss cannot even be written as JSON (null):
        // still refused, as corrupt.
        let mut c = sample();
        c.targets[0].margin = f64::NAN;
        assert!(c.non_finite().is_some());
        assert!(Checkpoint::from_bytes(&c.to_bytes(), false).is_err());
        assert_eq!(sample().non_finite(), None);
    }

    #[test]
    fn records_the_bound_on_values() {
        let mut c = sample();
        c.hashing.max_abs = 1e6;
        let back = Checkpoint::from_bytes(&c.to_bytes(), false).unwrap();
        assert_eq!(back.hashing.max_abs, 1e6);
        assert_eq!(back.header()["hashing"]["max_abs"], 1e6);
    }

    #[test]
    fn reads_version_1_without_transforms() {
        let mut c = sample();
        c.hashing.transforms.clear();
        c.targets[0].margin = 0.0;
        c.targets[0].labels = None;
        let mut bytes = c.to_bytes();
        bytes[8] = 1;
        let n = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Checkpoint::from_bytes(&bytes, true).unwrap(), c);
    }
}
