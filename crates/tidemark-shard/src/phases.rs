//! Phase arithmetic (SPEC 5, seed 004 "Waiting for events"): targets, their
//! windows, the watermark of each phase, and where an arriving event belongs.
//! Pure: no IO; all times are milliseconds since the epoch.
//!
//! A phase is swept for a transaction created at `c` once the clock passes
//! `c + offset`; its watermark is `clock - offset`, so a transaction is swept
//! for the phase exactly when `c <= watermark`.

use std::time::Duration;

use tidemark_wire::{EventType, Types};

use crate::config::{Config, Given};

/// What a target labels, in milliseconds after creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDef {
    /// The target's name.
    pub name: String,
    /// Its population.
    pub given: Given,
    /// The event type whose arrival makes the label 1.
    pub event: EventType,
    /// Label 1 when the earliest such event has `after < ts - c <= until` (`after = 0`: `ts - c <= until`).
    pub after: i64,
    /// Label 1 for an event at most this long after creation.
    pub until: i64,
    /// When its observations are emitted, after creation: window + grace, and
    /// never before its population is known.
    pub offset: i64,
    /// `feedback = "early"` (SPEC 5): when its provisional rows are emitted,
    /// after creation: the sweep of the window's start (`after` + grace; for
    /// `cvr_long` the `install_short` sweep), never before the population.
    pub start: Option<i64>,
}

impl TargetDef {
    /// Whether an event `dt` ms after creation (clamped at 0) falls in the label window.
    pub fn covers(&self, dt: i64) -> bool {
        dt <= self.until && (self.after == 0 || dt > self.after)
    }
}

/// Every phase of a shard, derived from its configuration.
#[derive(Debug, Clone)]
pub struct Phases {
    /// Bids and impressions are consolidated, and transactions without both dropped, at this offset.
    pub impression_offset: i64,
    /// The impression window: a later impression is outside every window.
    pub impression_window: i64,
    /// `ctr`, `cvr_short`, `cvr_long`, then configured targets, sorted by offset.
    pub targets: Vec<TargetDef>,
    /// After this offset, only transactions with a click are still needed.
    pub unclicked_offset: i64,
    /// After this offset, nothing about a transaction is needed.
    pub last_offset: i64,
    /// The click window: a click at `ts - c <= click_window` puts a transaction in the `given = click` population.
    pub click_window: i64,
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

impl Phases {
    /// The phases of a configuration.
    pub fn new(config: &Config) -> Phases {
        let w = &config.windows;
        let g = &config.grace;
        let impression_offset = ms(w.impression + g.impression);
        let click_offset = impression_offset.max(ms(w.click + g.click));
        let short_offset = click_offset.max(ms(w.install_short + g.install_short));
        let population_offset = |given: Given| match given {
            Given::Impression => impression_offset,
            Given::Click => click_offset,
        };
        let mut targets = vec![
            TargetDef {
                name: "ctr".into(),
                given: Given::Impression,
                event: EventType::Click,
                after: 0,
                until: ms(w.click),
                offset: click_offset,
                start: None,
            },
            TargetDef {
                name: "cvr_short".into(),
                given: Given::Click,
                event: EventType::Install,
                after: 0,
                until: ms(w.install_short),
                offset: short_offset,
                start: None,
            },
            TargetDef {
                name: "cvr_long".into(),
                given: Given::Click,
                event: EventType::Install,
                after: ms(w.install_short),
                until: ms(w.install_long),
                offset: click_offset.max(ms(w.install_long + g.install_long)),
                start: config.cvr_long_early.then_some(short_offset),
            },
        ];
        for t in &config.targets {
            targets.push(TargetDef {
                name: t.name.clone(),
                given: t.given,
                event: config.types.lookup(&t.event).expect("validated"),
                after: ms(t.after),
                until: ms(t.until),
                offset: population_offset(t.given).max(ms(t.until + t.grace)),
                start: t
                    .early
                    .then(|| population_offset(t.given).max(ms(t.after + t.grace))),
            });
        }
        // Stable: equal offsets keep configuration order.
        targets.sort_by_key(|t| t.offset);
        let unclicked_offset = targets
            .iter()
            .filter(|t| t.given == Given::Impression)
            .map(|t| t.offset)
            .max()
            .unwrap_or(click_offset)
            .max(click_offset);
        let last_offset = targets
            .iter()
            .map(|t| t.offset)
            .max()
            .unwrap_or(click_offset);
        Phases {
            impression_offset,
            impression_window: ms(w.impression),
            targets,
            unclicked_offset,
            last_offset,
            click_window: ms(w.click),
        }
    }

    /// The longest a transaction can matter after creation.
    pub fn horizon(&self) -> i64 {
        self.last_offset
    }
}

/// Watermarks over creation time, one per phase, each only ever moving forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermarks {
    /// The impression phase's watermark.
    pub impression: i64,
    /// One per target, in `Phases::targets` order.
    pub targets: Vec<i64>,
    /// One per target: its provisional phase's watermark (early targets;
    /// for the others the same as `targets`, and unused).
    pub starts: Vec<i64>,
    /// Below this, only clicked transactions are kept (in `long`).
    pub unclicked: i64,
    /// Below this, nothing is kept.
    pub last: i64,
}

impl Watermarks {
    /// Where every watermark stands when the clock reads `clock`.
    pub fn at(phases: &Phases, clock: i64) -> Watermarks {
        Watermarks {
            impression: clock - phases.impression_offset,
            targets: phases.targets.iter().map(|t| clock - t.offset).collect(),
            starts: phases
                .targets
                .iter()
                .map(|t| clock - t.start.unwrap_or(t.offset))
                .collect(),
            unclicked: clock - phases.unclicked_offset,
            last: clock - phases.last_offset,
        }
    }

    /// Elementwise max: watermarks never move back, even if the windows were shortened.
    pub fn max(&self, other: &Watermarks) -> Watermarks {
        let max = |a: &[i64], b: &[i64]| a.iter().zip(b).map(|(a, b)| *a.max(b)).collect();
        Watermarks {
            impression: self.impression.max(other.impression),
            targets: max(&self.targets, &other.targets),
            starts: max(&self.starts, &other.starts),
            unclicked: self.unclicked.max(other.unclicked),
            last: self.last.max(other.last),
        }
    }
}

/// Where an event goes, decided against the current watermarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Append to the fresh tier: its transaction has not been consolidated yet.
    Fresh,
    /// Merge into the consolidated row of an impressed transaction.
    Consolidated,
    /// Merge into the long-wait row of a clicked transaction.
    LongWait,
    /// Every window this event could count for has been swept.
    Late,
    /// Its time falls in no window of any target: it can never change a label.
    OutsideWindows,
}

/// Decides where an event of `kind`, created at `c`, stamped `ts`, belongs.
pub fn route(phases: &Phases, wm: &Watermarks, kind: EventType, c: i64, ts: i64) -> Route {
    let dt = (ts - c).max(0);
    let in_time = match kind {
        // Bids carry what the auction said; auctions are not subscribed (SPEC 4).
        EventType::Auction => return Route::OutsideWindows,
        EventType::Bid | EventType::Impression => {
            if kind == EventType::Impression && dt > phases.impression_window {
                return Route::OutsideWindows;
            }
            c > wm.impression
        }
        _ => {
            let mut relevant = phases
                .targets
                .iter()
                .zip(&wm.targets)
                .filter(|(t, _)| t.event == kind && t.covers(dt))
                .peekable();
            if relevant.peek().is_none() {
                return Route::OutsideWindows;
            }
            relevant.any(|(_, w)| c > *w)
        }
    };
    if !in_time {
        Route::Late
    } else if c > wm.impression {
        Route::Fresh
    } else if c > wm.unclicked {
        Route::Consolidated
    } else {
        Route::LongWait
    }
}

/// `(phase, offset, watermark)` rows as saved in `tidemark.watermarks`.
pub fn marks(phases: &Phases, wm: &Watermarks) -> Vec<(String, i64, i64)> {
    let mut m = vec![(
        "impression".to_owned(),
        phases.impression_offset,
        wm.impression,
    )];
    for (t, w) in phases.targets.iter().zip(&wm.targets) {
        m.push((t.name.clone(), t.offset, *w));
    }
    for (t, w) in phases.targets.iter().zip(&wm.starts) {
        if let Some(start) = t.start {
            m.push((provisional_phase(&t.name), start, *w));
        }
    }
    m.push(("unclicked".into(), phases.unclicked_offset, wm.unclicked));
    m.push(("last".into(), phases.last_offset, wm.last));
    m
}

/// The name under which an early target's provisional watermark is saved.
pub fn provisional_phase(target: &str) -> String {
    format!("{target}.provisional")
}

/// The sweep that moves the watermarks from `old` to where `clock` puts
/// them (never back): consolidate what the impression phase passed; emit
/// each target whose watermark moved, in offset order; copy the clicked rows
/// to `long` once every target reading unclicked rows has emitted (later
/// targets then read `long` below the new unclicked watermark); forget
/// what the last phase passed. Ranges are `(lo, hi]` of creation time, and
/// start no earlier than the epoch.
pub fn plan(
    phases: &Phases,
    types: &Types,
    old: &Watermarks,
    clock: i64,
) -> (Watermarks, SweepPlan) {
    let floor = |v: i64| v.max(0);
    let new = Watermarks::at(phases, clock).max(old);
    let consolidate =
        (new.impression > old.impression).then_some((floor(old.impression), new.impression));
    let keep_clicked = || {
        (new.unclicked > old.unclicked).then_some(SweepStep::KeepClicked {
            lo: floor(old.unclicked),
            hi: new.unclicked,
        })
    };
    // Each target's emissions at their offsets: an early target's
    // provisional rows and the late rows due at its start, its final rows at
    // its end. Stable: equal offsets keep target order.
    let mut due: Vec<(i64, usize, Emission)> = Vec::new();
    for (i, t) in phases.targets.iter().enumerate() {
        match t.start {
            Some(start) => {
                due.push((start, i, Emission::Provisional));
                due.push((start, i, Emission::Late));
                due.push((t.offset, i, Emission::FinalZero));
            }
            None => due.push((t.offset, i, Emission::Final)),
        }
    }
    due.sort_by_key(|d| d.0);
    let mut steps = Vec::new();
    let mut unclicked = floor(old.unclicked);
    let mut moved = false;
    for (offset, i, emission) in due {
        if !moved && offset > phases.unclicked_offset {
            steps.extend(keep_clicked());
            unclicked = new.unclicked;
            moved = true;
        }
        // Late rows: every transaction given its provisional row and not yet
        // its final one, at each sweep (an event may have arrived since).
        let (lo, hi) = match emission {
            Emission::Provisional => (old.starts[i], new.starts[i]),
            Emission::Late => (old.targets[i], new.starts[i]),
            Emission::Final | Emission::FinalZero => (old.targets[i], new.targets[i]),
        };
        // Late looks run when the clock moved; every other step when its
        // own range is not empty.
        let moved = emission != Emission::Late || new != *old;
        if hi > lo && moved {
            let t = &phases.targets[i];
            steps.push(SweepStep::Emit {
                target: TargetSql {
                    name: t.name.clone(),
                    given_click: t.given == Given::Click,
                    event: types.name(t.event).to_owned(),
                    after_ms: t.after,
                    until_ms: t.until,
                },
                emission,
                lo: floor(lo),
                hi,
                unclicked,
            });
        }
    }
    if !moved {
        steps.extend(keep_clicked());
    }
    let plan = SweepPlan {
        clock,
        consolidate,
        steps,
        forget_through: (new.last > old.last).then_some(new.last),
        marks: marks(phases, &new),
    };
    (new, plan)
}

/// A phase that emits observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSql {
    /// The target's name.
    pub name: String,
    /// Population: `false` = every impressed transaction, `true` = those clicked in the click window.
    pub given_click: bool,
    /// The labelling event's type name (one of `Layout::event_types`).
    pub event: String,
    /// Label 1 only for an event strictly later than this after creation.
    pub after_ms: i64,
    /// Label 1 for an event at most this long after creation.
    pub until_ms: i64,
}

/// One sweep transaction: what to consolidate, emit, keep and forget, over
/// which creation times, and the progress saved with it.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPlan {
    /// The clock the sweep brings the shard to.
    pub clock: i64,
    /// Consolidate transactions created in `(lo, hi]` (the impression phase).
    pub consolidate: Option<(i64, i64)>,
    /// The emissions and the move of clicked rows, in the order to run them.
    pub steps: Vec<SweepStep>,
    /// Forget long-wait transactions created at or before this (the last phase).
    pub forget_through: Option<i64>,
    /// Every watermark after the sweep: `(phase, offset_ms, wm_ms)`.
    pub marks: Vec<(String, i64, i64)>,
}

/// Which observations of a target a step emits (SPEC 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emission {
    /// A target learned from final labels: every member, its label, kind `final`.
    Final,
    /// An early target's window start: every member, label 0, kind `provisional`.
    Provisional,
    /// An early target: members whose qualifying event has arrived and that
    /// have no `late` row yet, label 1, kind `late`, with `delay_ms`.
    Late,
    /// An early target's window end: members without a `late` row, label 0, kind `final`.
    FinalZero,
}

/// A step of a sweep after consolidation.
#[derive(Debug, Clone, PartialEq)]
pub enum SweepStep {
    /// Copy transactions created in `(lo, hi]` that were clicked in time to
    /// `long`, before their `txns` partition is dropped.
    KeepClicked {
        /// Exclusive lower bound of creation time.
        lo: i64,
        /// Inclusive upper bound of creation time.
        hi: i64,
    },
    /// Emit a target's observations of transactions created in `(lo, hi]`.
    Emit {
        /// The target.
        target: TargetSql,
        /// Which of its rows.
        emission: Emission,
        /// Exclusive lower bound of creation time.
        lo: i64,
        /// Inclusive upper bound of creation time.
        hi: i64,
        /// The unclicked watermark at this step: below it only `long` holds rows.
        unclicked: i64,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const H: i64 = 3_600_000;
    const M: i64 = 60_000;

    fn config(extra: &str) -> Config {
        Config::parse(&format!(
            "name = \"t\"\nendpoints = [\"tcp://127.0.0.1:1\"]\ncustom_types = [\"open\"]\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn default_offsets() {
        let p = Phases::new(&config(""));
        assert_eq!(p.impression_offset, 2 * M + 30_000);
        let names: Vec<_> = p
            .targets
            .iter()
            .map(|t| (t.name.as_str(), t.offset))
            .collect();
        assert_eq!(
            names,
            [
                ("ctr", H + 5 * M),
                ("cvr_short", 30 * H),
                ("cvr_long", 7 * 24 * H + 6 * H)
            ]
        );
        assert_eq!(p.unclicked_offset, H + 5 * M);
        assert_eq!(p.last_offset, 7 * 24 * H + 6 * H);
    }

    #[test]
    fn a_target_waits_for_its_population() {
        let p = Phases::new(&config(
            "[[targets]]\nname = \"o\"\ngiven = \"click\"\nevent = \"open\"\nuntil = \"1h\"\n",
        ));
        let o = p.targets.iter().find(|t| t.name == "o").unwrap();
        assert_eq!(
            o.offset,
            H + 5 * M,
            "cannot be emitted before clicks are known"
        );
        let p = Phases::new(&config(
            "[[targets]]\nname = \"o\"\ngiven = \"impression\"\nevent = \"open\"\nuntil = \"2h\"\ngrace = \"1m\"\n",
        ));
        assert_eq!(
            p.unclicked_offset,
            2 * H + M,
            "impressed rows are kept for it"
        );
    }

    #[test]
    fn window_boundaries_are_inclusive_at_the_end() {
        let p = Phases::new(&config(""));
        let ctr = &p.targets[0];
        assert!(ctr.covers(0));
        assert!(ctr.covers(H));
        assert!(!ctr.covers(H + 1));
        let long = &p.targets[2];
        assert!(!long.covers(24 * H));
        assert!(long.covers(24 * H + 1));
        assert!(long.covers(7 * 24 * H));
    }

    #[test]
    fn routing_follows_the_watermarks() {
        let p = Phases::new(&config(""));
        let c = 1_000 * H;
        // Clock just past the impression sweep of c.
        let wm = Watermarks::at(&p, c + p.impression_offset);
        assert_eq!(route(&p, &wm, EventType::Bid, c, c), Route::Late);
        assert_eq!(route(&p, &wm, EventType::Bid, c + 1, c + 1), Route::Fresh);
        assert_eq!(
            route(&p, &wm, EventType::Click, c, c + 10 * M),
            Route::Consolidated
        );
        assert_eq!(
            route(&p, &wm, EventType::Click, c, c + H + 1),
            Route::OutsideWindows
        );
        assert_eq!(
            route(&p, &wm, EventType::Impression, c + 1, c + 3 * M),
            Route::OutsideWindows
        );
        // Clicks before creation count as at creation.
        assert_eq!(
            route(&p, &wm, EventType::Click, c, c - 5),
            Route::Consolidated
        );
        let wm = Watermarks::at(&p, c + p.unclicked_offset);
        assert_eq!(route(&p, &wm, EventType::Click, c, c + 10 * M), Route::Late);
        assert_eq!(
            route(&p, &wm, EventType::Install, c, c + 2 * H),
            Route::LongWait
        );
        // An install in the short window arriving after its sweep is late even
        // though the long window is still open.
        let wm = Watermarks::at(&p, c + 30 * H);
        assert_eq!(
            route(&p, &wm, EventType::Install, c, c + 2 * H),
            Route::Late
        );
        assert_eq!(
            route(&p, &wm, EventType::Install, c, c + 25 * H),
            Route::LongWait
        );
        assert_eq!(
            route(&p, &wm, EventType::Custom(0), c, c),
            Route::OutsideWindows
        );
    }

    #[test]
    fn watermarks_never_move_back() {
        let p = Phases::new(&config(""));
        let a = Watermarks::at(&p, 10 * H);
        let b = Watermarks::at(&p, 9 * H);
        assert_eq!(a.max(&b), a);
    }

    fn steps(sweep: &SweepPlan) -> Vec<String> {
        sweep
            .steps
            .iter()
            .map(|s| match s {
                SweepStep::KeepClicked { lo, hi } => format!("keep {lo}..{hi}"),
                SweepStep::Emit {
                    target,
                    emission: Emission::Final,
                    lo,
                    hi,
                    unclicked,
                } => format!("{} {lo}..{hi} u{unclicked}", target.name),
                SweepStep::Emit {
                    target,
                    emission,
                    lo,
                    hi,
                    ..
                } => format!("{}:{emission:?} {lo}..{hi}", target.name),
            })
            .collect()
    }

    #[test]
    fn a_plan_emits_in_offset_order_and_keeps_clicked_rows_before_later_targets() {
        let c = config("");
        let p = Phases::new(&c);
        let start = Watermarks::at(&p, 10 * H);
        // A clock past every phase of the first hour: all targets emit.
        let (new, sweep) = plan(&p, &c.types, &start, 11 * H + 8 * 24 * H);
        assert_eq!(sweep.consolidate, Some((start.impression, new.impression)));
        let s = steps(&sweep);
        let names: Vec<&str> = s.iter().map(|s| s.split(' ').next().unwrap()).collect();
        // ctr reads unclicked rows; the clicked ones move to long before cvr_*.
        assert_eq!(names, ["ctr", "keep", "cvr_short", "cvr_long"]);
        let keep = &sweep.steps[1];
        assert_eq!(
            keep,
            &SweepStep::KeepClicked {
                lo: start.unclicked,
                hi: new.unclicked
            }
        );
        match &sweep.steps[2] {
            SweepStep::Emit {
                target, unclicked, ..
            } => {
                assert_eq!(
                    *unclicked, new.unclicked,
                    "cvr reads long below the new mark"
                );
                assert!(target.given_click);
                assert_eq!(target.event, "install");
            }
            other => panic!("{other:?}"),
        }
        match &sweep.steps[0] {
            SweepStep::Emit { unclicked, .. } => assert_eq!(*unclicked, start.unclicked),
            other => panic!("{other:?}"),
        }
        assert_eq!(sweep.forget_through, Some(new.last));
        assert_eq!(sweep.marks.len(), p.targets.len() + 3);
        assert_eq!(
            sweep.marks[0],
            ("impression".into(), p.impression_offset, new.impression)
        );
    }

    #[test]
    fn a_plan_does_nothing_where_no_watermark_moved() {
        let c = config("");
        let p = Phases::new(&c);
        let wm = Watermarks::at(&p, 10 * H);
        let (new, sweep) = plan(&p, &c.types, &wm, 10 * H);
        assert_eq!(new, wm);
        assert_eq!(sweep.consolidate, None);
        assert!(sweep.steps.is_empty());
        assert_eq!(sweep.forget_through, None);
        // A clock going back moves nothing back.
        let (new, sweep) = plan(&p, &c.types, &wm, 9 * H);
        assert_eq!(new, wm);
        assert!(sweep.steps.is_empty());
    }

    #[test]
    fn a_first_plan_starts_its_ranges_at_the_epoch() {
        let c = config("");
        let p = Phases::new(&c);
        let (_, sweep) = plan(&p, &c.types, &Watermarks::at(&p, i64::MIN / 4), 3 * H);
        assert_eq!(sweep.consolidate.unwrap().0, 0);
        for s in &sweep.steps {
            if let SweepStep::Emit { lo, .. } = s {
                assert_eq!(*lo, 0);
            }
        }
    }

    #[test]
    fn a_small_step_emits_only_the_phases_it_crosses() {
        let c = config("");
        let p = Phases::new(&c);
        let wm = Watermarks::at(&p, 10 * H);
        // One minute later: impression and ctr move; cvr_* do too (their
        // offsets are fixed), but the unclicked mark moves with ctr's.
        let (new, sweep) = plan(&p, &c.types, &wm, 10 * H + M);
        assert_eq!(sweep.consolidate, Some((wm.impression, wm.impression + M)));
        assert_eq!(new.last, wm.last + M);
        let s = steps(&sweep);
        assert_eq!(
            s[0],
            format!(
                "ctr {}..{} u{}",
                wm.targets[0],
                wm.targets[0] + M,
                wm.unclicked
            )
        );
        assert_eq!(s[1], format!("keep {}..{}", wm.unclicked, wm.unclicked + M));
    }

    #[test]
    fn an_early_target_emits_at_its_start_every_sweep_and_at_its_end() {
        let c = config("[feedback]\ncvr_long = \"early\"");
        let p = Phases::new(&c);
        let long = p.targets.iter().find(|t| t.name == "cvr_long").unwrap();
        let short = p.targets.iter().find(|t| t.name == "cvr_short").unwrap();
        assert_eq!(long.start, Some(short.offset), "the install_short sweep");
        assert!(p
            .targets
            .iter()
            .all(|t| t.name == "cvr_long" || t.start.is_none()));

        let wm = Watermarks::at(&p, 10 * 24 * H);
        let (new, sweep) = plan(&p, &c.types, &wm, 10 * 24 * H + M);
        let s = steps(&sweep);
        let (ws, wl) = (wm.starts[2], wm.targets[2]);
        assert_eq!(
            s,
            [
                format!(
                    "ctr {}..{} u{}",
                    wm.targets[0],
                    wm.targets[0] + M,
                    wm.unclicked
                ),
                format!("keep {}..{}", wm.unclicked, wm.unclicked + M),
                format!(
                    "cvr_short {}..{} u{}",
                    wm.targets[1],
                    wm.targets[1] + M,
                    new.unclicked
                ),
                format!("cvr_long:Provisional {ws}..{}", ws + M),
                // Late rows: everything provisional and not final, new rows included.
                format!("cvr_long:Late {wl}..{}", ws + M),
                format!("cvr_long:FinalZero {wl}..{}", wl + M),
            ]
        );
        let saved: Vec<&str> = sweep.marks.iter().map(|m| m.0.as_str()).collect();
        assert!(saved.contains(&"cvr_long.provisional"));
        assert_eq!(
            sweep
                .marks
                .iter()
                .find(|m| m.0 == "cvr_long.provisional")
                .unwrap()
                .2,
            new.starts[2]
        );
        // A clock that does not move emits nothing, late rows included.
        let (_, idle) = plan(&p, &c.types, &new, 10 * 24 * H + M);
        assert!(idle.steps.is_empty());
    }

    #[test]
    fn a_configured_early_target_starts_after_its_population_and_window_start() {
        let c = config(
            "[[targets]]\nname = \"o\"\ngiven = \"click\"\nevent = \"open\"\nafter = \"2h\"\nuntil = \"1d\"\ngrace = \"10m\"\nfeedback = \"early\"\n",
        );
        let p = Phases::new(&c);
        let o = p.targets.iter().find(|t| t.name == "o").unwrap();
        assert_eq!(o.start, Some(2 * H + 10 * M));
        assert_eq!(o.offset, 24 * H + 10 * M);
        let c = config(
            "[[targets]]\nname = \"o\"\ngiven = \"click\"\nevent = \"open\"\nafter = \"1m\"\nuntil = \"1d\"\nfeedback = \"early\"\n",
        );
        let o = Phases::new(&c)
            .targets
            .into_iter()
            .find(|t| t.name == "o")
            .unwrap();
        assert_eq!(o.start, Some(H + 5 * M), "not before clicks are known");
    }

    proptest::proptest! {
        /// For any transaction and any sequence of sweeps (the clock moving
        /// by arbitrary steps), an early target's plans select it for exactly
        /// one provisional step, then for a late look at every sweep while it
        /// sits between its start and its end, then for exactly one final
        /// step, in the sweep of the last look; a plain target's, for exactly
        /// one final step.
        #[test]
        fn each_member_is_emitted_once_per_kind_in_order(
            created in 0i64..2 * H,
            steps in proptest::collection::vec(1i64..20 * M, 1..120),
        ) {
            let c = config("[feedback]\ncvr_long = \"early\"\n[windows]\ninstall_short = \"2h\"\ninstall_long = \"5h\"");
            let p = Phases::new(&c);
            let mut wm = Watermarks::at(&p, i64::MIN / 4);
            let mut clock = 0;
            // Per (target, emission): the sweeps that selected the transaction.
            let mut seen: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
            for (sweep, step) in steps.iter().enumerate() {
                clock += step;
                let (new, plan) = plan(&p, &c.types, &wm, clock);
                for s in &plan.steps {
                    if let SweepStep::Emit { target, emission, lo, hi, .. } = s {
                        if *lo < created && created <= *hi {
                            seen.entry((target.name.clone(), format!("{emission:?}")))
                                .or_default()
                                .push(sweep);
                        }
                    }
                }
                wm = new;
            }
            let count = |t: &str, e: &str| seen.get(&(t.into(), e.into())).map_or(0, Vec::len);
            let first = |t: &str, e: &str| seen.get(&(t.into(), e.into())).and_then(|v| v.first().copied());
            let long = p.targets.iter().find(|t| t.name == "cvr_long").unwrap();
            let provisional_due = clock - long.start.unwrap() >= created;
            let final_due = clock - long.offset >= created;
            proptest::prop_assert_eq!(count("cvr_long", "Provisional"), usize::from(provisional_due));
            proptest::prop_assert_eq!(count("cvr_long", "FinalZero"), usize::from(final_due));
            proptest::prop_assert_eq!(count("cvr_long", "Final"), 0);
            proptest::prop_assert_eq!(count("cvr_short", "Final"), usize::from(clock - p.targets[1].offset >= created));
            if let Some(pr) = first("cvr_long", "Provisional") {
                let looks = &seen[&("cvr_long".to_owned(), "Late".to_owned())];
                proptest::prop_assert_eq!(looks[0], pr);
                proptest::prop_assert!(looks.windows(2).all(|w| w[1] == w[0] + 1));
                let end = first("cvr_long", "FinalZero").unwrap_or(steps.len() - 1);
                proptest::prop_assert_eq!(*looks.last().unwrap(), end);
            }
        }
    }
}
