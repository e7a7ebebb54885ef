//! What a shard keeps of the messages sent to it (SPEC 1, 3): the
//! `max_future` door, moved by ticks, and every accepted copy of every
//! transaction, each with what the test observed of the shard's clock
//! before it was sent, so that the sweep can tell which copies were in time.

use std::collections::{BTreeMap, HashMap};

use super::config::Config;
use super::message::{read_message, Feature, Message, Sent};

/// One accepted copy of a non-bid event.
#[derive(Debug, Clone)]
struct Arrival<'a> {
    kind: &'a str,
    /// `max(ts, created)`.
    ts_eff: i64,
    clock_at_least: Option<i64>,
}

/// Everything accepted for one transaction.
#[derive(Debug, Default)]
pub(super) struct Transaction<'a> {
    pub(super) created: i64,
    /// The bid copy in time for the impression sweep with the earliest
    /// `ts_eff` (the first sent on a tie), and its features.
    pub(super) bid: Option<(i64, BTreeMap<String, Feature>)>,
    /// Non-bid copies, in the order sent.
    arrivals: Vec<Arrival<'a>>,
}

/// `created + a + b`, without overflow.
pub(super) fn after(created: i64, a: i64, b: i64) -> i64 {
    created.saturating_add(a).saturating_add(b)
}

/// A copy is in time for a sweep at `sweep_at` unless the shard's clock was
/// known to be at or past that point before the copy was sent.
fn in_time(clock_at_least: Option<i64>, sweep_at: i64) -> bool {
    match clock_at_least {
        None => true,
        Some(k) => k < sweep_at,
    }
}

impl Transaction<'_> {
    /// The winning copy's `ts_eff` of type `kind` for a window swept at
    /// `sweep_at`: the earliest among the copies in time for it (SPEC 3).
    pub(super) fn earliest(&self, kind: &str, sweep_at: i64) -> Option<i64> {
        self.arrivals
            .iter()
            .filter(|a| a.kind == kind && in_time(a.clock_at_least, sweep_at))
            .map(|a| a.ts_eff)
            .min()
    }

    /// Every copy of type `kind`, in the order sent: `(ts_eff, what the
    /// test saw of the shard's clock before sending it)`.
    pub(super) fn copies<'s>(
        &'s self,
        kind: &'s str,
    ) -> impl Iterator<Item = (i64, Option<i64>)> + 's {
        self.arrivals
            .iter()
            .filter(move |a| a.kind == kind)
            .map(|a| (a.ts_eff, a.clock_at_least))
    }
}

/// Whether a copy the test saw the clock at `clock_at_least` before sending
/// reached the shard before a sweep at `sweep_at` (unknown: it did).
pub(super) fn before(clock_at_least: Option<i64>, sweep_at: i64) -> bool {
    in_time(clock_at_least, sweep_at)
}

/// Every transaction with an accepted copy, in txid order, from the
/// messages sent to one shard with `config` in this order (a single
/// publisher). `reference_start_ms` is the max_future reference before the
/// first tick (SPEC 1).
pub(super) fn intake<'a>(
    config: &Config,
    sent: &'a [Sent],
    reference_start_ms: i64,
) -> Vec<(u128, Transaction<'a>)> {
    let windows = config.windows_ms;
    let grace = config.grace_ms;

    // A txid is 32 hex digits, so it is kept as the number it spells: same
    // order, cheaper to hash and sort.
    let mut newest_tick: Option<i64> = None;
    let mut transactions: HashMap<u128, Transaction> = HashMap::new();
    for message in sent {
        let Some(read) = read_message(config, &message.frames) else {
            continue;
        };
        let reference = newest_tick.unwrap_or(reference_start_ms);
        let horizon = reference.saturating_add(config.max_future_ms);
        match read {
            Message::Tick { ts } => {
                if ts > horizon {
                    continue; // future_tick: refused
                }
                newest_tick = Some(newest_tick.map_or(ts, |t| t.max(ts)));
            }
            Message::Event {
                kind,
                txid,
                created,
                ts,
                features,
            } => {
                if created > horizon {
                    continue; // a future txid
                }
                let ts_eff = ts.max(created);
                let key = u128::from_str_radix(txid, 16).expect("a checked txid");
                let tx = transactions.entry(key).or_insert_with(|| Transaction {
                    created,
                    ..Transaction::default()
                });
                match features {
                    Some(features) => {
                        let sweep = after(created, windows.impression, grace.impression);
                        let earlier = match &tx.bid {
                            None => true,
                            Some((best, _)) => ts_eff < *best,
                        };
                        if in_time(message.clock_at_least, sweep) && earlier {
                            tx.bid = Some((ts_eff, features));
                        }
                    }
                    None => tx.arrivals.push(Arrival {
                        kind,
                        ts_eff,
                        clock_at_least: message.clock_at_least,
                    }),
                }
            }
        }
    }

    let mut transactions: Vec<(u128, Transaction)> = transactions.into_iter().collect();
    transactions.sort_unstable_by_key(|(key, _)| *key);
    transactions
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{
        app, bid, event, label, late, raw, run, shown, tick, txid, HOUR, T0,
    };
    use super::super::Sent;
    use super::*;

    #[test]
    fn duplicate_bids_earliest_wins_first_sent_on_tie() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let sent = vec![
            bid(&tx, T0 + 500, json!({"app": "late"})),
            bid(&tx, T0 + 100, json!({"app": "early"})),
            bid(&tx, T0 + 100, json!({"app": "tie"})),
            bid(&tx, T0 + 300, json!({"app": "middle"})),
            event("impression", &tx, T0 + 1_000),
        ];
        let out = run(&c, &sent);
        assert_eq!(out[&("ctr".to_string(), tx.clone())].features, app("early"));

        // A bid stamped before creation counts as at creation: it ties with
        // one at creation, and the first sent wins.
        let tx = txid("cd", T0);
        let sent = vec![
            bid(&tx, T0, json!({"app": "at"})),
            bid(&tx, T0 - 50, json!({"app": "before"})),
            event("impression", &tx, T0 + 1_000),
        ];
        let out = run(&c, &sent);
        assert_eq!(out[&("ctr".to_string(), tx.clone())].features, app("at"));
    }

    #[test]
    fn late_bid_copy_changes_nothing() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let sweep = T0 + c.windows_ms.impression + c.grace_ms.impression;
        let mut sent = vec![bid(&tx, T0 + 100, json!({"app": "kept"}))];
        sent.push(event("impression", &tx, T0 + 1_000));
        sent.push(late(bid(&tx, T0, json!({"app": "late"})), sweep));
        let out = run(&c, &sent);
        assert_eq!(out[&("ctr".to_string(), tx.clone())].features, app("kept"));

        // A bid only arriving late: an orphan.
        let tx = txid("cd", T0);
        let sent = vec![
            event("impression", &tx, T0 + 1_000),
            late(bid(&tx, T0, json!({})), sweep),
        ];
        assert!(run(&c, &sent).is_empty());
        // One millisecond before the sweep point is in time.
        let sent = vec![
            event("impression", &tx, T0 + 1_000),
            late(bid(&tx, T0, json!({})), sweep - 1),
        ];
        assert_eq!(label(&run(&c, &sent), "ctr", &tx), Some(0));
    }

    #[test]
    fn future_txid() {
        let c = Config::default();
        let horizon = T0 + c.max_future_ms;
        let at_horizon = txid("01", horizon);
        let beyond = txid("02", horizon + 1);
        let mut sent = shown(&at_horizon, horizon);
        sent.extend(shown(&beyond, horizon + 1));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "ctr", &at_horizon), Some(0));
        assert_eq!(label(&out, "ctr", &beyond), None);

        // A tick moves the reference; events before it were still refused.
        let mut sent = vec![bid(&beyond, horizon + 1, json!({}))];
        sent.push(tick(T0 + 1));
        sent.extend(shown(&beyond, horizon + 1));
        sent.push(event("click", &beyond, horizon + 2));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "ctr", &beyond), Some(1));

        // After the first tick the reference is the newest tick, not the
        // start value: a tick older than the start lowers it.
        let sent_after_old_tick: Vec<Sent> = std::iter::once(tick(T0 - HOUR))
            .chain(shown(&at_horizon, horizon))
            .collect();
        assert!(run(&c, &sent_after_old_tick).is_empty());
    }

    #[test]
    fn reference_never_decreases_and_far_ticks_are_refused() {
        let c = Config::default();
        let mf = c.max_future_ms;
        let tx = txid("ab", T0 + 2 * mf);

        // A tick too far ahead is refused: the txid stays in the future.
        let mut sent = vec![tick(T0 + mf + 1)];
        sent.extend(shown(&tx, T0 + 2 * mf));
        assert!(run(&c, &sent).is_empty());

        // Steps of at most max_future are accepted; an older tick afterwards
        // does not move the reference back.
        let mut sent = vec![tick(T0 + mf), tick(T0 + 2 * mf), tick(T0)];
        sent.extend(shown(&tx, T0 + 2 * mf));
        assert_eq!(label(&run(&c, &sent), "ctr", &tx), Some(0));

        // A malformed tick moves nothing.
        let mut sent = vec![
            raw("tick", &json!({"ts": T0 + mf}).to_string()),
            raw("tick", &json!({"publisher": 7, "ts": T0 + mf}).to_string()),
            raw("tick", &json!({"publisher": "p", "ts": 1.5}).to_string()),
            raw(
                "tick",
                &json!({"publisher": "p\u{0}", "ts": T0 + mf}).to_string(),
            ),
            raw(
                "tick_x",
                &json!({"publisher": "p", "ts": T0 + mf}).to_string(),
            ),
            raw(
                "ticks",
                &json!({"publisher": "p", "ts": T0 + mf}).to_string(),
            ),
        ];
        sent.push(tick(T0 + 2 * mf));
        sent.extend(shown(&tx, T0 + 2 * mf));
        assert!(run(&c, &sent).is_empty());
    }
}
