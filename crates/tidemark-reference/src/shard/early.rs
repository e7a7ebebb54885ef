//! Late labels learned early (SPEC 5, v1.3): what an early-feedback target
//! emits for one member of its population, after its `provisional` 0.
//!
//! Written from the contract's words, per transaction and in the order the
//! copies were sent:
//! - A copy of the label's event type counts if it reached the shard before
//!   the sweep of some window of that type containing its time (any target's:
//!   `ctr` for clicks, `cvr_short` and `cvr_long` for installs, configured
//!   ones for their event); otherwise it was late, and changes nothing.
//! - Of the copies that count, the earliest-stamped wins (SPEC 3). At the
//!   window start's sweep, the winner so far decides if there is one:
//!   inside the window, `late` 1 at once; outside (e.g. an install inside
//!   `install_short` for `cvr_long`), `final` 0 at the end.
//! - Without one, each later copy that counts lowers the winner; the first
//!   time the winner lies inside the window, `late` 1 follows at the next
//!   sweep, and later copies change nothing. Never: `final` 0.
//!
//! `delay_ms` is the winner's time from creation when the late row is
//! written. A copy whose arrival the test did not pin to the clock (a
//! replay's) counts as come before the start's sweep, but a sweep may fall
//! between two such copies: the range then reaches the winner when the
//! first one came. Copies arriving between two sweeps are written together, so the
//! oracle gives the range the value must fall in: from the earliest copy
//! inside the window that counts to the winner when the first one came.

use super::config::{Config, Target};
use super::intake::{after, before, Transaction};

/// The matured row of an early target's member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Matured {
    /// `late` 1, `delay_ms` within `[lo, hi]`.
    Late { lo: i64, hi: i64 },
    /// `final` 0.
    Final,
}

/// A label window of one target: `(after, until]` after creation (from
/// creation when `after` is 0), swept at `sweep` after creation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pub(super) after: i64,
    pub(super) until: i64,
    pub(super) sweep: i64,
}

impl Window {
    fn contains(&self, dt: i64) -> bool {
        dt <= self.until && (self.after == 0 || dt > self.after)
    }
}

/// Every window an event of type `kind` can count for.
fn windows_of(config: &Config, kind: &str) -> Vec<Window> {
    let (w, g) = (config.windows_ms, config.grace_ms);
    let mut out = Vec::new();
    if kind == "click" {
        out.push(Window {
            after: 0,
            until: w.click,
            sweep: w.click + g.click,
        });
    }
    if kind == "install" {
        out.push(Window {
            after: 0,
            until: w.install_short,
            sweep: w.install_short + g.install_short,
        });
        out.push(Window {
            after: w.install_short,
            until: w.install_long,
            sweep: w.install_long + g.install_long,
        });
    }
    for t in config.targets.iter().filter(|t| t.event == kind) {
        out.push(Window {
            after: t.after_ms,
            until: t.until_ms,
            sweep: t.until_ms + t.grace_ms,
        });
    }
    out
}

/// The window of the built-in `cvr_long`, and its start's sweep (the
/// `install_short` sweep).
pub(super) fn cvr_long(config: &Config) -> (Window, i64) {
    let (w, g) = (config.windows_ms, config.grace_ms);
    let window = Window {
        after: w.install_short,
        until: w.install_long,
        sweep: w.install_long + g.install_long,
    };
    (window, w.install_short + g.install_short)
}

/// A configured early target's window, and its start's sweep (`after` + grace).
pub(super) fn configured(target: &Target) -> (Window, i64) {
    let window = Window {
        after: target.after_ms,
        until: target.until_ms,
        sweep: target.until_ms + target.grace_ms,
    };
    (window, target.after_ms + target.grace_ms)
}

/// The matured row of a member of an early target labelled by `kind` in
/// `window`, whose start is swept `start` after creation.
pub(super) fn matured(
    config: &Config,
    tx: &Transaction,
    kind: &str,
    window: Window,
    start: i64,
) -> Matured {
    let created = tx.created;
    let windows = windows_of(config, kind);
    // The copies that count, in the order sent: (time from creation, before
    // the start's sweep, its arrival clock unknown). After the window's own
    // sweep, nothing changes it.
    let counted: Vec<(i64, bool, bool)> = tx
        .copies(kind)
        .filter(|(_, seen)| before(*seen, after(created, window.sweep, 0)))
        .filter_map(|(ts, seen)| {
            let dt = ts - created;
            let counts = windows
                .iter()
                .any(|w| w.contains(dt) && before(seen, after(created, w.sweep, 0)));
            counts.then(|| (dt, before(seen, after(created, start, 0)), seen.is_none()))
        })
        .collect();
    let earliest_inside = counted
        .iter()
        .map(|(dt, ..)| *dt)
        .filter(|dt| window.contains(*dt))
        .min();
    let at_start = counted
        .iter()
        .filter(|(_, b, _)| *b)
        .map(|(dt, ..)| *dt)
        .min();
    // The first winner inside the window, in the order sent: what the late
    // row carries if a sweep came right after that copy.
    let first_inside = counted
        .iter()
        .scan(i64::MAX, |w, (dt, ..)| {
            *w = (*w).min(*dt);
            Some(*w)
        })
        .find(|w| window.contains(*w));
    let late = |winner: i64| Matured::Late {
        lo: earliest_inside.unwrap_or(winner).min(winner),
        hi: winner,
    };
    match at_start {
        // Copies whose arrival is unknown (a replay's) are taken to have come
        // before the start's sweep, which decides the kind; but they may have
        // come after it, a sweep between two of them, and then the late row
        // carries the winner when the first one came.
        Some(winner) if window.contains(winner) => match counted.iter().any(|c| c.2) {
            true => Matured::Late {
                lo: winner,
                hi: first_inside.unwrap_or(winner).max(winner),
            },
            false => late(winner),
        },
        Some(_) => Matured::Final,
        None => {
            let mut winner = i64::MAX;
            for (dt, ..) in counted.iter().filter(|(_, b, _)| !b) {
                winner = winner.min(*dt);
                if window.contains(winner) {
                    return late(winner);
                }
            }
            Matured::Final
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{event, late, run, shown, txid, HOUR, T0};
    use super::super::{Config, Expected, Kind};
    use super::*;

    fn early() -> Config {
        Config {
            cvr_long_early: true,
            ..Config::default()
        }
    }

    fn long_row(config: &Config, installs: Vec<Sent>) -> Option<Expected> {
        let tx = txid("ab", T0);
        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        sent.extend(installs);
        run(config, &sent).remove(&("cvr_long".to_string(), tx))
    }

    use super::super::Sent;

    fn install(dt: i64, seen: Option<i64>) -> Sent {
        let e = event("install", &txid("ab", T0), T0 + dt);
        match seen {
            Some(k) => late(e, T0 + k),
            None => e,
        }
    }

    #[test]
    fn copies_of_unknown_arrival_may_be_a_sweep_apart() {
        // A later-stamped copy sent first: a sweep may fall between the two
        // (the late row then carries it), or not (the earlier one).
        let c = early();
        let dt = c.windows_ms.install_short + HOUR;
        let row = long_row(&c, vec![install(dt + 470, None), install(dt, None)]).unwrap();
        assert_eq!(row.delay_ms, Some((dt, dt + 470)));
        // Known to have come before the start's sweep: written together.
        let (_, start) = cvr_long(&c);
        let both = vec![
            install(dt + 470, Some(start - 2)),
            install(dt, Some(start - 1)),
        ];
        assert_eq!(long_row(&c, both).unwrap().delay_ms, Some((dt, dt)));
    }

    #[test]
    fn an_install_in_the_long_window_is_late_whenever_it_arrives_before_the_end() {
        let c = early();
        let (window, start) = cvr_long(&c);
        let dt = c.windows_ms.install_short + HOUR;
        for seen in [None, Some(start - 1), Some(start), Some(window.sweep - 1)] {
            let row = long_row(&c, vec![install(dt, seen)]).unwrap();
            assert_eq!(row.label, 1, "{seen:?}");
            assert_eq!(row.kind, Kind::Late);
            assert!(row.provisional);
            assert_eq!(row.delay_ms, Some((dt, dt)));
        }
        let row = long_row(&c, vec![install(dt, Some(window.sweep))]).unwrap();
        assert_eq!(
            (row.label, row.kind, row.provisional),
            (0, Kind::Final, true)
        );
        assert_eq!(row.delay_ms, None);
    }

    #[test]
    fn an_install_in_the_short_window_makes_the_long_final_zero() {
        let c = early();
        let (_, start) = cvr_long(&c);
        let long = c.windows_ms.install_short + HOUR;
        // Both before the start's sweep: the earliest (short) wins.
        let row = long_row(&c, vec![install(long, None), install(HOUR, None)]).unwrap();
        assert_eq!((row.label, row.kind), (0, Kind::Final));
        // A short-stamped copy arriving after the install_short sweep is
        // late for it and counts for nothing: the long copy decides.
        let row = long_row(
            &c,
            vec![install(HOUR, Some(start)), install(long, Some(start + 1))],
        )
        .unwrap();
        assert_eq!((row.label, row.kind), (1, Kind::Late));
        // Once late, an earlier-stamped copy inside the window changes
        // nothing but the range the value written may take.
        let row = long_row(
            &c,
            vec![
                install(long, Some(start)),
                install(long - 5, Some(start + 9)),
            ],
        )
        .unwrap();
        assert_eq!(row.delay_ms, Some((long - 5, long)));
    }

    #[test]
    fn other_targets_stay_final_and_unclicked_transactions_get_nothing() {
        let c = early();
        let tx = txid("cd", T0);
        let out = run(&c, &shown(&tx, T0));
        assert_eq!(out.len(), 1);
        let ctr = &out[&("ctr".to_string(), tx)];
        assert_eq!((ctr.kind, ctr.provisional), (Kind::Final, false));
        let row = long_row(&c, vec![]).unwrap();
        assert_eq!(
            (row.label, row.kind, row.provisional),
            (0, Kind::Final, true)
        );
        let plain = long_row(&Config::default(), vec![]).unwrap();
        assert!(!plain.provisional);
    }

    #[test]
    fn a_configured_early_target_counts_copies_for_its_neighbours_windows() {
        let c = Config::from_toml(
            "custom_types = [\"open\"]\n\
             [[targets]]\nname = \"late_open\"\ngiven = \"click\"\nevent = \"open\"\nafter = \"2h\"\nuntil = \"4h\"\ngrace = \"10m\"\nfeedback = \"early\"\n\
             [[targets]]\nname = \"any_open\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"6h\"\ngrace = \"10m\"\n",
        )
        .unwrap();
        let tx = txid("ab", T0);
        let row = |opens: Vec<(i64, Option<i64>)>| {
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + 2_000));
            for (dt, seen) in opens {
                let e = event("open", &tx, T0 + dt);
                sent.push(match seen {
                    Some(k) => late(e, T0 + k),
                    None => e,
                });
            }
            run(&c, &sent)
                .remove(&("late_open".to_string(), tx.clone()))
                .unwrap()
        };
        // A copy at 5h counts for any_open after the start: the winner is
        // outside; a later copy at 3h lowers it inside.
        let start = 2 * HOUR + 10 * 60_000;
        let r = row(vec![(5 * HOUR, Some(start)), (3 * HOUR, Some(start + 1))]);
        assert_eq!(
            (r.kind, r.delay_ms),
            (Kind::Late, Some((3 * HOUR, 3 * HOUR)))
        );
        // A copy at 1h before the start wins: final.
        let r = row(vec![(HOUR, None), (3 * HOUR, None)]);
        assert_eq!(r.kind, Kind::Final);
    }
}
