//! The demo's report as data: `report.json` is built here from what the run
//! measured, and the page (`crate::html`) and the text on stdout are both
//! rendered from that one value, so they cannot disagree with it.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::evaluate::TargetEval;
use crate::progress::Sample;

/// Everything the report states.
pub struct Inputs<'a> {
    /// Events published, and per type.
    pub events: u64,
    /// See `events`.
    pub by_type: &'a [(String, u64)],
    /// Wall seconds of the whole demo.
    pub seconds: f64,
    /// Whether a signal stopped it early.
    pub interrupted: bool,
    /// The database it wrote.
    pub database: &'a str,
    /// The evaluation per target.
    pub targets: &'a BTreeMap<String, TargetEval>,
    /// The online learner's own progressive logloss per target (last checkpoint).
    pub online: &'a BTreeMap<String, f64>,
    /// The profile database's bridging against the market's true persons,
    /// and its stored persons.
    pub bridging: Option<(tidemark_market::Quality, usize)>,
    /// Samples taken while it ran.
    pub samples: &'a [Sample],
    /// Delays from creation drawn by the market: clicks', installs' (ms).
    pub delays: &'a (Vec<i64>, Vec<i64>),
    /// Windows (ms): impression, click, install_short, install_long.
    pub windows: [i64; 4],
    /// What the bids carried from the profiles: what the bidder derived
    /// from the counters (with `raw_counters`, the counters too), then `person`.
    pub profile_features: &'a [String],
    /// The market's install delays preset.
    pub delays_preset: tidemark_market::Delays,
    /// The market's shift, if any: its event time (ms since the epoch) and kind.
    pub shift: Option<(i64, tidemark_market::Shift)>,
}

fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// The report as JSON.
pub fn build(i: &Inputs) -> Value {
    let mut targets = Map::new();
    for (name, t) in i.targets {
        let deciles = |ds: &[crate::Decile]| -> Vec<Value> {
            ds.iter()
                .map(|d| json!({"rows": d.rows, "predicted": num(d.predicted), "observed": num(d.observed)}))
                .collect()
        };
        let over_time: Vec<Value> = t
            .over_time
            .iter()
            .map(|(s, n, a, b, c)| json!([num(*s), n, num(*a), num(*b), num(*c)]))
            .collect();
        targets.insert(
            name.clone(),
            json!({
                "rows": t.rows,
                "label_rate": num(t.label_rate),
                "logloss": num(t.logloss),
                "auc": num(t.auc),
                "truth_logloss": t.truth_logloss.map_or(Value::Null, num),
                "truth_rows": t.truth_rows,
                "baseline_logloss": num(t.baseline_logloss),
                "online_baseline_logloss": num(t.online_baseline_logloss),
                "gap_closed": t.gap_closed.map_or(Value::Null, num),
                "without_profiles_logloss": num(t.without_profiles_logloss),
                "profile_lift": num(t.without_profiles_logloss - t.logloss),
                "without_counters_logloss": num(t.without_counters_logloss),
                "counter_lift": num(t.without_counters_logloss - t.logloss),
                "online_logloss": i.online.get(name).copied().map_or(Value::Null, num),
                "calibration": deciles(&t.calibration),
                "calibration_all": deciles(&t.calibration_all),
                "calibration_without_profiles": deciles(&t.calibration_without),
                "over_time": over_time,
                "tuning": t.tuning.as_ref().map(|u| json!({
                    "alpha": num(u.chosen.alpha), "l2": num(u.chosen.l2),
                    "rate_only": u.chosen.is_rate_only(), "settings": u.settings,
                    "switches": u.switches.iter()
                        .map(|(s, row, p)| json!({"seconds": num(*s), "row": row, "alpha": num(p.alpha),
                            "l2": num(p.l2), "rate_only": p.is_rate_only()}))
                        .collect::<Vec<_>>(),
                })),
            }),
        );
    }
    let mut series: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for (k, s) in i.samples.iter().enumerate() {
        series.entry("t").or_default().push(num(s.t));
        let rate = match k.checked_sub(1).map(|p| &i.samples[p]) {
            Some(p) if s.t > p.t => (s.received - p.received) as f64 / (s.t - p.t),
            _ => 0.0,
        };
        series.entry("events_per_s").or_default().push(num(rate));
        series
            .entry("profile_events")
            .or_default()
            .push(json!(s.profile_events));
        series.entry("learned").or_default().push(json!(s.learned));
    }
    let tiers: Vec<&String> = i
        .samples
        .iter()
        .flat_map(|s| s.tiers.iter().map(|t| &t.0))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let per = |get: &dyn Fn(&Sample, &str) -> Value, names: &[&String]| -> Map<String, Value> {
        names
            .iter()
            .map(|n| {
                let v: Vec<Value> = i.samples.iter().map(|s| get(s, n)).collect();
                ((*n).clone(), Value::Array(v))
            })
            .collect()
    };
    let buffer = per(
        &|s, n| json!(s.tiers.iter().find(|t| t.0 == n).map_or(0, |t| t.1)),
        &tiers,
    );
    let names: Vec<&String> = i.targets.keys().collect();
    let observations = per(
        &|s, n| json!(s.observations.get(n).copied().unwrap_or(0)),
        &names,
    );
    let [imp, click, short, long] = i.windows;
    json!({
        "events": i.events,
        "seconds": num(i.seconds),
        "interrupted": i.interrupted,
        "database": i.database,
        "published": i.by_type.iter().map(|(t, n)| (t.clone(), json!(n))).collect::<Map<_, _>>(),
        "market": {
            "delays": i.delays_preset.name(),
            "shift": {
                "at_ms": i.shift.map(|s| s.0),
                "kind": i.shift.map(|s| s.1.name()),
            },
        },
        "windows_ms": {"impression": imp, "click": click, "install_short": short, "install_long": long},
        "profile_features": i.profile_features,
        "targets": targets,
        "bridging": i.bridging.as_ref().map_or(Value::Null, |(q, persons)| json!({
            "purity": num(q.purity()), "completeness": num(q.completeness()),
            "persons": persons, "identifiers": q.identifiers, "bridged": q.bridged,
            "mixed": q.mixed, "multi_identifier_true_persons": q.multi, "whole": q.whole})),
        "series": {
            "t": series.remove("t").unwrap_or_default(),
            "events_per_s": series.remove("events_per_s").unwrap_or_default(),
            "profile_events": series.remove("profile_events").unwrap_or_default(),
            "learned": series.remove("learned").unwrap_or_default(),
            "buffer_rows": buffer,
            "observations": observations,
        },
        "delays": {
            "click": histogram(&i.delays.0, click),
            "install": histogram(&i.delays.1, long),
        },
    })
}

/// The as-of-bid replay's lines: per target, each arm's mean KL from the
/// truth and the share of the constant→oracle gap it closes; after a shift,
/// each arm's KL after it and the slices it took to reach the oracle.
fn as_of_bid_text(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let Some(targets) = v["targets"].as_object() else {
        return s;
    };
    let arms = crate::asof::ARMS;
    for (name, t) in targets {
        let a = &t["as_of_bid"];
        if a.is_null() {
            continue;
        }
        if s.is_empty() {
            let _ = writeln!(
                s,
                "as of bid time (mean KL from the truth, nats; gap = share of constant→oracle closed):"
            );
        }
        let cells: Vec<String> = arms
            .iter()
            .map(|arm| {
                let kl = a[arm]["kl"].as_f64().unwrap_or(f64::NAN);
                let gap = a[arm]["gap_closed"].as_f64().unwrap_or(f64::NAN);
                format!("{arm} {kl:.5} ({:.0}%)", gap * 100.0)
            })
            .collect();
        let _ = writeln!(s, "  {name:<10} {}", cells.join("  "));
    }
    if let Some(at_ms) = v["shift"]["at_ms"].as_i64() {
        let _ = writeln!(
            s,
            "after the shift at {at_ms} (KL after; slices to the oracle):"
        );
        for t in ["cvr_long", "p_install"] {
            let cells: Vec<String> = arms
                .iter()
                .map(|arm| {
                    let x = &v["shift"][t][arm];
                    let kl = x["kl_after"].as_f64().unwrap_or(f64::NAN);
                    let n = x["slices_to_oracle"]
                        .as_u64()
                        .map_or("never".to_owned(), |n| n.to_string());
                    format!("{arm} {kl:.5} ({n})")
                })
                .collect();
            let _ = writeln!(s, "  {t:<10} {}", cells.join("  "));
        }
        // ctr and cvr_short learn from final rows in every arm but the
        // oracle: what the arms' cvr_long alone leaves of p_install's gap.
        let cells: Vec<String> = arms
            .iter()
            .map(|arm| {
                let x = &v["shift"]["p_install"][arm]["kl_after_cvr_long_only"];
                format!("{arm} {:.5}", x.as_f64().unwrap_or(f64::NAN))
            })
            .collect();
        let _ = writeln!(
            s,
            "  p_install with the oracle's ctr and cvr_short: {}",
            cells.join("  ")
        );
    }
    s
}

/// Puts the as-of-bid replay (`crate::asof`) in the report: under each
/// target as `as_of_bid`, and the `shift` figures at the top.
pub fn add_as_of_bid(value: &mut Value, (targets, shift): (serde_json::Map<String, Value>, Value)) {
    for (t, v) in targets {
        if let Some(target) = value["targets"].get_mut(&t).and_then(Value::as_object_mut) {
            target.insert("as_of_bid".into(), v);
        } else if let Some(all) = value["targets"].as_object_mut() {
            all.insert(t, json!({ "as_of_bid": v }));
        }
    }
    value["shift"] = shift;
}

/// 40 bins over `[0, 1.25 × window]` (later delays in the last bin's count
/// of `beyond`).
fn histogram(delays: &[i64], window: i64) -> Value {
    let top = window as f64 * 1.25;
    let width = top / 40.0;
    let mut bins = vec![0u64; 40];
    let mut beyond = 0u64;
    for d in delays {
        let k = (*d as f64 / width) as usize;
        match bins.get_mut(k) {
            Some(b) => *b += 1,
            None => beyond += 1,
        }
    }
    let bins: Vec<Value> = bins
        .iter()
        .enumerate()
        .map(|(k, n)| json!([k as f64 * width, (k + 1) as f64 * width, n]))
        .collect();
    json!({"bins": bins, "beyond": beyond, "total": delays.len()})
}

/// Reads a number at a `/`-separated path (`targets/ctr/logloss`).
pub fn at(v: &Value, path: &str) -> Option<f64> {
    v.pointer(&format!("/{path}")).and_then(Value::as_f64)
}

/// The per-target table as text, for stdout.
pub fn text(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "  {:<10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>12} {:>8} {:>14}\n",
        "target",
        "rows",
        "rate",
        "logloss",
        "truth",
        "baseline",
        "online c.",
        "gap",
        "auc",
        "no profiles",
        "lift",
        "counters' lift"
    );
    let Some(targets) = v["targets"].as_object() else {
        return s;
    };
    for name in targets.keys() {
        let g = |k: &str| at(v, &format!("targets/{name}/{k}")).unwrap_or(f64::NAN);
        let _ = writeln!(
            s,
            "  {name:<10} {:>8} {:>8.5} {:>9.5} {:>9.5} {:>9.5} {:>9.5} {:>6.1}% {:>8.4} {:>12.5} {:>8.5} {:>14}",
            g("rows"),
            g("label_rate"),
            g("logloss"),
            g("truth_logloss"),
            g("baseline_logloss"),
            g("online_baseline_logloss"),
            g("gap_closed") * 100.0,
            g("auc"),
            g("without_profiles_logloss"),
            g("profile_lift"),
            match g("counter_lift") {
                x if x.is_nan() => "-".to_owned(),
                x => format!("{x:.5}"),
            },
        );
    }
    for (name, t) in targets {
        let u = &t["tuning"];
        if let (Some(a), Some(l), Some(sw)) = (
            u["alpha"].as_f64(),
            u["l2"].as_f64(),
            u["switches"].as_array(),
        ) {
            let last = sw.last().and_then(|x| x["seconds"].as_f64());
            let chosen = match u["rate_only"].as_bool() {
                Some(true) => "the label rate alone".to_owned(),
                _ => format!("alpha {a} l2 {l}"),
            };
            let _ = writeln!(
                s,
                "  {name:<10} tuned over {} settings: {chosen} at the end, {} switches{}",
                u["settings"],
                sw.len(),
                last.map_or(String::new(), |x| format!(", the last {x:.0} s in"))
            );
        }
    }
    s.push_str(&as_of_bid_text(v));
    if let (Some(p), Some(c)) = (at(v, "bridging/purity"), at(v, "bridging/completeness")) {
        let _ = writeln!(
            s,
            "  bridging: purity {p:.3}, completeness {c:.3} against the market's true persons"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_market::{Delays, Shift};

    fn market(delays: Delays, shift: Option<(i64, Shift)>) -> Value {
        let (targets, online) = (BTreeMap::new(), BTreeMap::new());
        build(&Inputs {
            events: 0,
            by_type: &[],
            seconds: 1.0,
            interrupted: false,
            database: "db",
            targets: &targets,
            online: &online,
            bridging: None,
            samples: &[],
            delays: &(Vec::new(), Vec::new()),
            windows: [1, 2, 3, 4],
            profile_features: &[],
            delays_preset: delays,
            shift,
        })["market"]
            .clone()
    }

    #[test]
    fn the_report_says_the_markets_delays_and_shift() {
        assert_eq!(
            market(Delays::Default, None),
            json!({"delays": "default", "shift": {"at_ms": null, "kind": null}})
        );
        assert_eq!(
            market(Delays::Criteo, Some((1_700_000_000_000, Shift::Delays))),
            json!({"delays": "criteo", "shift": {"at_ms": 1_700_000_000_000i64, "kind": "delays"}})
        );
    }
}
