//! A shard's observations (SPEC 5): which transactions are in each
//! target's population and with which label, decided per transaction from
//! the copies in time for each window's sweep, with the features of the bid
//! kept.

use std::collections::BTreeMap;

use super::config::{Config, Given};
use super::early::{self, Matured};
use super::intake::{after, intake, Transaction};
use super::message::{Feature, Sent};

/// An observation's `kind` (SPEC 5, v1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An early target's label 0 at its window's start.
    Provisional,
    /// An early target's label 1, when its event arrived.
    Late,
    /// Every other observation.
    Final,
}

impl Kind {
    /// As the `kind` column spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Provisional => "provisional",
            Kind::Late => "late",
            Kind::Final => "final",
        }
    }
}

/// One (target, txid)'s matured observation (`kind` `late` or `final`),
/// and whether a `provisional` row came before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// 0 or 1.
    pub label: i16,
    /// The bid's features, by name.
    pub features: BTreeMap<String, Feature>,
    /// `Late` or `Final`.
    pub kind: Kind,
    /// An early target's member: a `provisional` 0 row comes first.
    pub provisional: bool,
    /// `late` rows: `delay_ms` lies in this range (a shard's row gives one value).
    pub delay_ms: Option<(i64, i64)>,
}

impl Expected {
    /// Whether `got`, a row as a shard wrote it, is what this expects: the
    /// same in every field, its `delay_ms` within the range.
    pub fn admits(&self, got: &Expected) -> bool {
        let delay = match (self.delay_ms, got.delay_ms) {
            (None, None) => true,
            (Some((lo, hi)), Some((d, e))) => d == e && lo <= d && d <= hi,
            _ => false,
        };
        delay
            && self.label == got.label
            && self.kind == got.kind
            && self.provisional == got.provisional
            && self.features == got.features
    }
}

/// What a transaction yields for one target.
enum Outcome {
    /// One `final` row with this label.
    Label(bool),
    /// An early target: `provisional` 0, then this.
    Early(Matured),
}

/// Every observation (target, txid) -> Expected that one shard with `config`
/// must emit once all windows have been swept, given the messages sent to it
/// in this order (a single publisher). `reference_start_ms` is the max_future
/// reference before the first tick (SPEC 1).
pub fn expected(
    config: &Config,
    sent: &[Sent],
    reference_start_ms: i64,
) -> BTreeMap<(String, String), Expected> {
    // Decided in txid order, into one list per target, so the final map is
    // built from sorted rows.
    let mut rows: BTreeMap<&str, Vec<(String, Expected)>> = BTreeMap::new();
    for (key, tx) in intake(config, sent, reference_start_ms) {
        let Some((_, features)) = &tx.bid else {
            continue; // an orphan, or no bid in time
        };
        let txid = format!("{key:032x}");
        for (target, outcome) in labels(config, &tx) {
            let (label, kind, provisional, delay_ms) = match outcome {
                Outcome::Label(l) => (l, Kind::Final, false, None),
                Outcome::Early(Matured::Final) => (false, Kind::Final, true, None),
                Outcome::Early(Matured::Late { lo, hi }) => {
                    (true, Kind::Late, true, Some((lo, hi)))
                }
            };
            let observation = Expected {
                label: i16::from(label),
                features: features.clone(),
                kind,
                provisional,
                delay_ms,
            };
            rows.entry(target)
                .or_default()
                .push((txid.clone(), observation));
        }
    }
    rows.into_iter()
        .flat_map(|(target, list)| {
            list.into_iter()
                .map(move |(txid, observation)| ((target.to_string(), txid), observation))
        })
        .collect()
}

/// The labels of a transaction whose bid was in time, by target, in the
/// order emitted: none when it was not shown.
fn labels<'c>(config: &'c Config, tx: &Transaction) -> Vec<(&'c str, Outcome)> {
    let windows = config.windows_ms;
    let grace = config.grace_ms;
    let created = tx.created;

    let impression_end = after(created, windows.impression, 0);
    let impression_sweep = after(created, windows.impression, grace.impression);
    let shown = tx
        .earliest("impression", impression_sweep)
        .is_some_and(|ts| ts <= impression_end);
    if !shown {
        return Vec::new();
    }

    let mut out = Vec::new();
    let click_end = after(created, windows.click, 0);
    let click_sweep = after(created, windows.click, grace.click);
    let clicked = tx
        .earliest("click", click_sweep)
        .is_some_and(|ts| ts <= click_end);
    out.push(("ctr", Outcome::Label(clicked)));

    if clicked {
        let short_end = after(created, windows.install_short, 0);
        let short_sweep = after(created, windows.install_short, grace.install_short);
        let short = tx
            .earliest("install", short_sweep)
            .is_some_and(|ts| ts <= short_end);
        out.push(("cvr_short", Outcome::Label(short)));

        let long_end = after(created, windows.install_long, 0);
        let long_sweep = after(created, windows.install_long, grace.install_long);
        let long = if config.cvr_long_early {
            let (window, start) = early::cvr_long(config);
            let start = start.max(windows.click + grace.click);
            Outcome::Early(early::matured(config, tx, "install", window, start))
        } else {
            Outcome::Label(
                tx.earliest("install", long_sweep)
                    .is_some_and(|ts| short_end < ts && ts <= long_end),
            )
        };
        out.push(("cvr_long", long));
    }

    for target in &config.targets {
        let in_population = match target.given {
            Given::Impression => true,
            Given::Click => clicked,
        };
        if !in_population {
            continue;
        }
        if target.early {
            let (window, start) = early::configured(target);
            // Not before its population is known.
            let population = match target.given {
                Given::Impression => windows.impression + grace.impression,
                Given::Click => windows.click + grace.click,
            };
            let m = early::matured(config, tx, &target.event, window, start.max(population));
            out.push((target.name.as_str(), Outcome::Early(m)));
            continue;
        }
        let start = after(created, target.after_ms, 0);
        let end = after(created, target.until_ms, 0);
        let sweep = after(created, target.until_ms, target.grace_ms);
        let label = tx
            .earliest(&target.event, sweep)
            .is_some_and(|ts| ts <= end && (target.after_ms <= 0 || ts > start));
        out.push((target.name.as_str(), Outcome::Label(label)));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{bid, event, label, late, run, shown, txid, HOUR, MINUTE, T0};
    use super::super::{Feature, Target};
    use super::*;

    #[test]
    fn full_funnel() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let mut sent = vec![bid(
            &tx,
            T0,
            json!({"app": "a", "n": 3, "ok": true, "x": 1.5}),
        )];
        sent.push(event("impression", &tx, T0 + 1_000));
        sent.push(event("click", &tx, T0 + 2_000));
        sent.push(event("install", &tx, T0 + 3_000));
        let out = run(&c, &sent);
        assert_eq!(out.len(), 3);
        assert_eq!(label(&out, "ctr", &tx), Some(1));
        assert_eq!(label(&out, "cvr_short", &tx), Some(1));
        assert_eq!(label(&out, "cvr_long", &tx), Some(0));
        let features = &out[&("ctr".to_string(), tx.clone())].features;
        assert_eq!(features["app"], Feature::Str("a".into()));
        assert_eq!(features["n"], Feature::Num(3.0));
        assert_eq!(features["ok"], Feature::Bool(true));
        assert_eq!(features["x"], Feature::Num(1.5));
    }

    #[test]
    fn no_click_gives_ctr_zero_only() {
        let tx = txid("ab", T0);
        let out = run(&Config::default(), &shown(&tx, T0));
        assert_eq!(out.len(), 1);
        assert_eq!(label(&out, "ctr", &tx), Some(0));
    }

    #[test]
    fn orphan_and_unshown_are_outside_every_population() {
        let c = Config::default();
        let orphan = txid("01", T0);
        let unshown = txid("02", T0);
        let sent = vec![
            event("impression", &orphan, T0 + 1),
            event("click", &orphan, T0 + 2),
            bid(&unshown, T0, json!({})),
            event("click", &unshown, T0 + 2),
            event("install", &unshown, T0 + 3),
        ];
        assert!(run(&c, &sent).is_empty());
    }

    #[test]
    fn impression_window_boundaries() {
        let c = Config::default();
        let w = c.windows_ms.impression;
        for (offset, in_population) in [(w, true), (w + 1, false), (-5_000, true)] {
            let tx = txid("ab", T0);
            let sent = vec![
                bid(&tx, T0, json!({})),
                event("impression", &tx, T0 + offset),
            ];
            let out = run(&c, &sent);
            assert_eq!(
                out.contains_key(&("ctr".into(), tx)),
                in_population,
                "{offset}"
            );
        }
    }

    #[test]
    fn late_impression_is_outside_the_population() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let sweep = T0 + c.windows_ms.impression + c.grace_ms.impression;
        let sent = vec![
            bid(&tx, T0, json!({})),
            late(event("impression", &tx, T0 + 1_000), sweep),
        ];
        assert!(run(&c, &sent).is_empty());
    }

    #[test]
    fn click_window_boundaries() {
        let c = Config::default();
        let w = c.windows_ms.click;
        for (offset, expected_label) in [(w, 1), (w + 1, 0), (-1, 1)] {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + offset));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "ctr", &tx), Some(expected_label), "{offset}");
            let cvr = out.contains_key(&("cvr_short".into(), tx.clone()));
            assert_eq!(cvr, expected_label == 1);
        }
    }

    #[test]
    fn late_click() {
        let c = Config::default();
        let sweep_offset = c.windows_ms.click + c.grace_ms.click;
        for (clock, expected_label) in [(sweep_offset, 0), (sweep_offset - 1, 1)] {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(late(event("click", &tx, T0 + 10_000), T0 + clock));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "ctr", &tx), Some(expected_label), "{clock}");
        }
    }

    #[test]
    fn cvr_boundaries() {
        let c = Config::default();
        let s = c.windows_ms.install_short;
        let l = c.windows_ms.install_long;
        let cases = [
            (0, 1, 0),
            (s, 1, 0),
            (s + 1, 0, 1),
            (l, 0, 1),
            (l + 1, 0, 0),
        ];
        for (offset, short, long) in cases {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + 2_000));
            sent.push(event("install", &tx, T0 + offset));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "cvr_short", &tx), Some(short), "{offset}");
            assert_eq!(label(&out, "cvr_long", &tx), Some(long), "{offset}");
        }
    }

    #[test]
    fn install_late_for_short_but_in_time_for_long() {
        let c = Config::default();
        let tx = txid("ab", T0);
        let short_sweep = T0 + c.windows_ms.install_short + c.grace_ms.install_short;
        let long_sweep = T0 + c.windows_ms.install_long + c.grace_ms.install_long;
        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        sent.push(late(event("install", &tx, T0 + 3_000), short_sweep));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "cvr_short", &tx), Some(0));
        assert_eq!(label(&out, "cvr_long", &tx), Some(0)); // in the short window

        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        let install = event("install", &tx, T0 + c.windows_ms.install_short + 1);
        sent.push(late(install, short_sweep));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "cvr_long", &tx), Some(1));

        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        let install = event("install", &tx, T0 + c.windows_ms.install_short + 1);
        sent.push(late(install, long_sweep));
        assert_eq!(label(&run(&c, &sent), "cvr_long", &tx), Some(0));
    }

    #[test]
    fn duplicate_installs_earliest_in_time_copy_decides() {
        // SPEC 3: among copies in time, the earliest ts wins. An install
        // copy inside install_short makes cvr_long 0 even if another copy
        // falls inside (install_short, install_long].
        let c = Config::default();
        let tx = txid("ab", T0);
        let mut sent = shown(&tx, T0);
        sent.push(event("click", &tx, T0 + 2_000));
        sent.push(event("install", &tx, T0 + c.windows_ms.install_short + 10));
        sent.push(event("install", &tx, T0 + 3_000));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "cvr_short", &tx), Some(1));
        assert_eq!(label(&out, "cvr_long", &tx), Some(0));
    }

    #[test]
    fn custom_target_with_after() {
        let c = Config {
            custom_types: vec!["open".into()],
            targets: vec![
                Target {
                    name: "open_late".into(),
                    given: Given::Click,
                    event: "open".into(),
                    after_ms: HOUR,
                    until_ms: 2 * HOUR,
                    grace_ms: MINUTE,
                    early: false,
                },
                Target {
                    name: "open_any".into(),
                    given: Given::Impression,
                    event: "open".into(),
                    after_ms: 0,
                    until_ms: 2 * HOUR,
                    grace_ms: MINUTE,
                    early: false,
                },
            ],
            ..Config::default()
        };
        let cases = [
            (HOUR, 0, 1),
            (HOUR + 1, 1, 1),
            (2 * HOUR, 1, 1),
            (2 * HOUR + 1, 0, 0),
            (-5, 0, 1),
        ];
        for (offset, late_label, any_label) in cases {
            let tx = txid("ab", T0);
            let mut sent = shown(&tx, T0);
            sent.push(event("click", &tx, T0 + 2_000));
            sent.push(event("open", &tx, T0 + offset));
            let out = run(&c, &sent);
            assert_eq!(label(&out, "open_late", &tx), Some(late_label), "{offset}");
            assert_eq!(label(&out, "open_any", &tx), Some(any_label), "{offset}");
        }

        // Without a click, only the impression-given target is emitted.
        let tx = txid("ab", T0);
        let mut sent = shown(&tx, T0);
        sent.push(event("open", &tx, T0 + HOUR + 5));
        let out = run(&c, &sent);
        assert_eq!(label(&out, "open_late", &tx), None);
        assert_eq!(label(&out, "open_any", &tx), Some(1));
        assert_eq!(out.len(), 2);

        // Late for the target's sweep (until + grace).
        let mut sent = shown(&tx, T0);
        let open = event("open", &tx, T0 + HOUR + 5);
        sent.push(late(open, T0 + 2 * HOUR + MINUTE));
        assert_eq!(label(&run(&c, &sent), "open_any", &tx), Some(0));
        let mut sent = shown(&tx, T0);
        let open = event("open", &tx, T0 + HOUR + 5);
        sent.push(late(open, T0 + 2 * HOUR + MINUTE - 1));
        assert_eq!(label(&run(&c, &sent), "open_any", &tx), Some(1));

        // A custom type not configured is not received.
        let c2 = Config {
            custom_types: vec![],
            ..c.clone()
        };
        let mut sent = shown(&tx, T0);
        sent.push(event("open", &tx, T0 + 5));
        assert_eq!(label(&run(&c2, &sent), "open_any", &tx), Some(0));
    }

    /// `n` transactions shown, every other one clicked: `2.5 n` messages.
    fn many(n: i64) -> Vec<Sent> {
        let mut sent = Vec::new();
        for i in 0..n {
            let created = T0 + i / 10;
            let tx = txid(&format!("{i:08x}"), created);
            sent.extend(shown(&tx, created));
            if i % 2 == 0 {
                sent.push(event("click", &tx, created + 10));
            }
        }
        sent
    }

    #[test]
    fn many_messages() {
        let out = run(&Config::default(), &many(20_000));
        assert_eq!(out.len(), 20_000 + 2 * 10_000);
    }

    /// A timing run: `cargo test --release -p tidemark-reference -- --ignored --nocapture`.
    #[test]
    #[ignore = "a timing run, for --release"]
    fn throughput() {
        let sent = many(1_000_000);
        let start = std::time::Instant::now();
        let out = run(&Config::default(), &sent);
        eprintln!("{} messages in {:?}", sent.len(), start.elapsed());
        assert_eq!(out.len(), 2_000_000);
    }
}
