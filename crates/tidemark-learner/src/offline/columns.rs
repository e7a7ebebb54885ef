//! The columns of an offline pass's files: their names and kinds, how a
//! cell becomes a value, how crosses find their columns, and the hashing the
//! command line asks for.

use std::path::Path;

use tidemark_features::{Hashing, Transform, Val};

use super::OfflineError;

/// Cell `field` of `line` as the value column `col` holds: `None` when
/// empty, bytes when categorical, a finite number when numeric (or an error
/// naming the file, line and column).
pub(super) fn cell_value<'l>(
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

/// Hashing into `2^bits` slots with crosses, `NAME=T` transforms and
/// `TARGET=NAME` omissions, as the command line gives them.
pub fn hashing(
    bits: u8,
    seed: u32,
    crosses: Vec<(String, String)>,
    transforms: &[String],
    omit: &[String],
) -> Result<Hashing, OfflineError> {
    crate::config::check_bits(bits).map_err(|e| OfflineError::Settings(e.to_string()))?;
    let pairs = transforms
        .iter()
        .map(|t| t.split_once('=').unwrap_or((t.as_str(), "")));
    let transforms = crate::config::parse_transforms(pairs)
        .map_err(|e| OfflineError::Settings(format!("--transform {e}")))?;
    let mut pairs: Vec<(&str, Vec<String>)> = Vec::new();
    for o in omit {
        match o.split_once('=') {
            Some((t, n)) => pairs.push((t, vec![n.to_owned()])),
            None => {
                return Err(OfflineError::Settings(format!(
                    "--omit {o}: expected TARGET=NAME"
                )))
            }
        }
    }
    let omit = crate::config::parse_omit(pairs.iter().map(|(t, n)| (*t, &n[..])))
        .map_err(|e| OfflineError::Settings(format!("--omit {e}")))?;
    Ok(Hashing::new(bits, seed, crosses)
        .with_transforms(transforms)
        .with_omit(omit))
}

/// A column: its name, seed and kind.
pub(super) struct Column {
    pub(super) name: String,
    /// Hashed into the row: every column but those whose header starts
    /// with `:` (`:kind`, `:target`, `:txid`, and any other such name).
    pub(super) feature: bool,
    pub(super) seed: u32,
    pub(super) numeric: bool,
    pub(super) transform: Option<Transform>,
}

impl Column {
    /// From a header cell: `name`, or `name:num` for a numeric column.
    pub(super) fn new(h: &Hashing, cell: &str) -> Column {
        let (name, numeric) = match cell.strip_suffix(NUMERIC) {
            Some(n) => (n, true),
            None => (cell, false),
        };
        Column {
            name: name.to_owned(),
            feature: !cell.starts_with(':'),
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

/// The header cell of the column holding each row's txid (as `tidemark
/// export --kinds all` writes it): an early target's tuning pairs a
/// member's provisional and matured rows by it, as online.
pub const TXID_COLUMN: &str = ":txid";

/// The header cell of the column naming each row's target (as `tidemark
/// export` writes it for several targets).
pub const TARGET_COLUMN: &str = ":target";

pub(super) fn resolve_crosses(
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
