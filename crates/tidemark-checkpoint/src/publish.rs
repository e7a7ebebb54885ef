//! Publishing checkpoints atomically in a directory, with a stable name.
//!
//! `checkpoint-<n>.tdm` files are written to a temporary name, fsynced and
//! renamed, so no reader ever sees one half-written; then the symlink
//! `latest.tdm` is replaced atomically by another rename. The newest `keep`
//! files are kept, so a bidder can roll back.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::Checkpoint;

/// The name that always points at the newest checkpoint in a directory.
pub const LATEST: &str = "latest.tdm";

/// Writes `checkpoint` as the next file in `dir`, points `latest.tdm` at it
/// and removes all but the newest `keep` files. Returns the new file's path.
pub fn publish(dir: &Path, checkpoint: &Checkpoint, keep: usize) -> std::io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let mut numbered = numbered(dir)?;
    let next = numbered.last().map_or(1, |(n, _)| n + 1);
    let name = format!("checkpoint-{next:08}.tdm");
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&checkpoint.to_bytes())?;
        f.sync_all()?;
    }
    let path = dir.join(&name);
    fs::rename(&tmp, &path)?;
    let link_tmp = dir.join(".latest.tmp");
    let _ = fs::remove_file(&link_tmp);
    std::os::unix::fs::symlink(&name, &link_tmp)?;
    fs::rename(&link_tmp, dir.join(LATEST))?;
    fs::File::open(dir)?.sync_all()?;
    numbered.push((next, path.clone()));
    let excess = numbered.len().saturating_sub(keep.max(1));
    for (_, old) in numbered.drain(..excess) {
        let _ = fs::remove_file(old);
    }
    Ok(path)
}

/// Removes the temporary files a writer killed mid-write left in `dir`
/// (`.checkpoint-<n>.tdm.tmp`, `.latest.tmp`): call at start, when no
/// writer of this directory runs. Returns how many it removed.
pub fn remove_stale_temporaries(dir: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let temporary = name == ".latest.tmp"
            || (name.starts_with(".checkpoint-") && name.ends_with(".tdm.tmp"));
        if temporary && fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The checkpoint `latest.tdm` points to, if any.
pub fn latest(dir: &Path) -> Option<PathBuf> {
    let p = dir.join(LATEST);
    fs::canonicalize(&p).ok()
}

/// `checkpoint-<n>.tdm` files, oldest first.
fn numbered(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out: Vec<(u64, PathBuf)> = fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name
                .strip_prefix("checkpoint-")?
                .strip_suffix(".tdm")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Writes `checkpoint` to `path` atomically (a temporary name beside it,
/// fsynced, renamed): `tidemark learn --input --save FILE`.
pub fn write(path: &Path, checkpoint: &Checkpoint) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&checkpoint.to_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temporaries_go_and_checkpoints_stay() {
        let dir = std::env::temp_dir().join(format!("tidemark-tmps-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for name in [
            ".checkpoint-00000003.tdm.tmp",
            ".latest.tmp",
            "checkpoint-00000002.tdm",
            "notes.tmp",
        ] {
            fs::write(dir.join(name), b"x").unwrap();
        }
        assert_eq!(remove_stale_temporaries(&dir).unwrap(), 2);
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["checkpoint-00000002.tdm", "notes.tmp"]);
        assert_eq!(remove_stale_temporaries(&dir.join("absent")).unwrap(), 0);
        let _ = fs::remove_dir_all(&dir);
    }
}
