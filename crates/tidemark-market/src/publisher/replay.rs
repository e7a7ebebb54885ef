//! The replay source (`--replay FILE`): JSON lines, one event payload
//! each, sent as they are, paced by their `ts` (or as fast as they go at
//! speed 0), with ticks before each event and while the file is idle. A
//! line that is not an event is skipped with a warning (the first ten
//! named). With `--follow` it goes on reading past the end of the file.

use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tidemark_wire::Txid;

use super::error::file_error;
use super::wire::{Wire, TICK_EVERY};
use super::{done, PublishError, PublishOptions};

/// The fields a replay needs from each line; the line itself is sent as is.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    ty: &'a str,
    #[serde(borrow)]
    txid: &'a str,
    ts: i64,
}

/// The head of a line written as `{"type":"…","txid":"…","ts":N,…`, as
/// `--write` and most producers write it, without a JSON parse: the replay
/// shares its two cores with the shard. Anything else goes to serde.
fn quick_head(line: &str) -> Option<Head<'_>> {
    let rest = line.strip_prefix(r#"{"type":""#)?;
    let (ty, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(r#","txid":""#)?;
    let (txid, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(r#","ts":"#)?;
    let end = rest.find([',', '}'])?;
    let ts = rest[..end].parse().ok()?;
    let plain = |s: &str| s.bytes().all(|b| b != b'\\' && b >= 0x20);
    (plain(ty) && plain(txid)).then_some(Head { ty, txid, ts })
}

/// Reads a replay file's lines on a thread of its own, in batches; with
/// `follow`, goes on reading past its end (a growing file, or a pipe such
/// as `kcat … | tidemark publish --replay /dev/stdin --follow`), one line
/// at a time so none waits for a batch to fill.
fn read_lines(
    path: &Path,
    follow: bool,
) -> Result<std::sync::mpsc::Receiver<std::io::Result<Vec<String>>>, PublishError> {
    let file = std::fs::File::open(path).map_err(file_error(path))?;
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    let batch = if follow { 1 } else { 1024 };
    std::thread::Builder::new()
        .name("replay-reader".into())
        .spawn(move || {
            let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
            loop {
                let mut lines = Vec::with_capacity(batch);
                while lines.len() < batch {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) if follow => std::thread::sleep(Duration::from_millis(50)),
                        Ok(0) => break,
                        Ok(_) => lines.push(line),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                let end = lines.len() < batch;
                if (!lines.is_empty() && tx.send(Ok(lines)).is_err()) || end {
                    return;
                }
            }
        })
        .map_err(file_error(path))?;
    Ok(rx)
}

/// Publishes the file's events until it ends (or, following it, until the
/// publisher is done); returns the event time everything before which was sent.
pub(super) fn replay(
    opts: &PublishOptions,
    path: &Path,
    wire: &mut Wire,
    stop: &AtomicBool,
    started: Instant,
) -> Result<i64, PublishError> {
    let lines = read_lines(path, opts.follow)?;
    let mut first_ts: Option<i64> = None;
    let mut through = i64::MIN;
    let mut n = 0u64;
    let mut skipped = 0u64;
    while !done(opts, stop, started) {
        let batch = match lines.recv_timeout(TICK_EVERY) {
            Ok(batch) => batch.map_err(file_error(path))?,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // Idle (following a quiet pipe): tell shards the publisher
                // is alive, with its `sent` counts.
                if through > i64::MIN {
                    wire.ticks_to(through)?;
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        for line in batch {
            n += 1;
            if done(opts, stop, started) {
                break;
            }
            let text = line.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            let Some((head, txid)) = parse(text, path, n, &mut skipped) else {
                continue;
            };
            let ts = head.ts;
            let first = *first_ts.get_or_insert(ts);
            if opts.speed > 0.0 {
                wait_for(ts, first, through, opts, wire, stop, started)?;
            }
            // Everything before this event's time has been sent (up to the file's disorder).
            through = through.max(ts - 1);
            wire.ticks_to(through)?;
            wire.event(head.ty, &txid, text.as_bytes())?;
        }
    }
    if skipped > 10 {
        tracing::warn!("{}: {skipped} lines skipped in all", path.display());
    }
    Ok(through.max(first_ts.unwrap_or(0)) + 1)
}

/// A line's head and txid; `None` for a line that is no event, counted in
/// `skipped` (and the first ten named in a warning). `n` is its number.
fn parse<'a>(text: &'a str, path: &Path, n: u64, skipped: &mut u64) -> Option<(Head<'a>, Txid)> {
    let head = match quick_head(text).map_or_else(|| serde_json::from_str::<Head<'_>>(text), Ok) {
        Ok(h) => h,
        Err(e) => {
            *skipped += 1;
            if *skipped <= 10 {
                tracing::warn!(
                    "{}:{n}: skipped, needs string type and txid and integer ts: {e}",
                    path.display()
                );
            }
            return None;
        }
    };
    let Some(txid) = Txid::parse(head.txid) else {
        *skipped += 1;
        if *skipped <= 10 {
            tracing::warn!("{}:{n}: skipped, bad txid {:?}", path.display(), head.txid);
        }
        return None;
    };
    Some((head, txid))
}

/// Waits until the event time `ts` comes round (`first` is the file's first
/// event's, sent at the start), ticking meanwhile past `through`.
fn wait_for(
    ts: i64,
    first: i64,
    through: i64,
    opts: &PublishOptions,
    wire: &mut Wire,
    stop: &AtomicBool,
    started: Instant,
) -> Result<(), PublishError> {
    let due = Duration::from_secs_f64(((ts - first).max(0) as f64 / opts.speed) / 1000.0);
    while started.elapsed() < due && !done(opts, stop, started) {
        if through > i64::MIN {
            let now = first + (started.elapsed().as_secs_f64() * 1000.0 * opts.speed) as i64;
            wire.ticks_to(now.min(ts - 1).max(through))?;
        }
        std::thread::sleep(Duration::from_millis(1).min(due - started.elapsed().min(due)));
    }
    Ok(())
}
