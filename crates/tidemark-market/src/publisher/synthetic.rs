//! The synthetic source: the market generates events up to the event time
//! the wall clock has reached (`speed` event milliseconds per wall
//! millisecond, or as fast as it goes at speed 0), in batches, and each
//! batch goes out in event-time order between the ticks that cover it.
//! With `--profiles` a batch's bids first get their persons' counters
//! (`profiles`); with `--truth` the market's truth goes to its file (`truth`).

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tidemark_wire::event_payload;

use super::profiles::ProfileReads;
use super::truth::TruthFile;
use super::wire::Wire;
use super::{done, PublishError, PublishOptions};
use crate::market::{Market, MarketConfig, Out};

/// Events generated, and their persons read, before any of them is sent.
const BATCH: usize = 4096;

/// Publishes the market's events until its span ends or the publisher is
/// done; returns the event time everything before which was sent.
pub(super) fn synthetic(
    opts: &PublishOptions,
    cfg: MarketConfig,
    wire: &mut Wire,
    stop: &AtomicBool,
    started: Instant,
) -> Result<i64, PublishError> {
    if opts.speed <= 0.0 && opts.span_ms.is_none() {
        return Err(PublishError::NeedsSpan);
    }
    let end = opts.span_ms.map(|s| opts.start_ms + s);
    let mut market = Market::new(cfg, opts.start_ms);
    let mut truth = opts.truth.as_deref().map(TruthFile::create).transpose()?;
    if truth.is_some() {
        market.truths = Some(Vec::new());
    }
    let mut profiles = opts
        .profiles
        .as_deref()
        .map(|url| ProfileReads::open(opts, url))
        .transpose()?;
    wire.lookups = profiles.as_ref().map(|p| p.reader.clone());
    let mut batch: Vec<Out> = Vec::new();
    let mut payload = String::new();
    let mut through = opts.start_ms;
    wire.tick(through)?;
    while !done(opts, stop, started) {
        let mut now_ms = if opts.speed > 0.0 {
            opts.start_ms + (started.elapsed().as_secs_f64() * 1000.0 * opts.speed) as i64
        } else {
            i64::MAX
        };
        if let Some(end) = end {
            if through >= end {
                break;
            }
            now_ms = now_ms.min(end);
        }
        let mut caught_up = true;
        // With --profiles a batch's bids' persons are read in one round trip
        // before any of it goes out.
        let n = next_batch(&mut market, &mut batch, now_ms);
        if let (Some(p), Some(last)) = (profiles.as_mut(), batch[..n].last()) {
            let at = last.ts;
            p.enrich(&mut batch[..n], at)?;
        }
        if let (Some(f), Some(t)) = (truth.as_mut(), market.truths.as_mut()) {
            f.write(t)?;
        }
        for out in &batch[..n] {
            // Everything that goes out before `send_at` has been sent.
            through = through.max(out.send_at - 1);
            wire.ticks_to(through)?;
            event_payload(&mut payload, &out.type_name, &out.txid, out.ts, &out.extra);
            wire.event(&out.type_name, &out.txid, payload.as_bytes())?;
            caught_up = false;
        }
        if caught_up {
            through = through.max(now_ms);
        }
        wire.ticks_to(through)?;
        if caught_up && opts.speed > 0.0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if let Some(f) = truth {
        f.finish(market.truths.as_mut().expect("recording"))?;
    }
    if let Some(p) = profiles {
        p.log_summary();
    }
    Ok(through)
}

/// Fills the head of `batch` (grown as needed, its entries reused) with the
/// market's next events, in time order, up to `BATCH` of them and none
/// after `now_ms`; returns how many.
fn next_batch(market: &mut Market, batch: &mut Vec<Out>, now_ms: i64) -> usize {
    let mut n = 0;
    while n < BATCH {
        if batch.len() <= n {
            batch.push(Out::default());
        }
        if !market.next_until(now_ms, &mut batch[n]) {
            break;
        }
        n += 1;
    }
    n
}
