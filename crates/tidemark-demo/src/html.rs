//! The report page (`report/index.html`): one self-contained file, rendered
//! from `report.json`'s value alone: tables whose cells name the JSON number
//! they show (`data-key`), inline SVG charts, and the JSON itself embedded.

use std::fmt::Write as _;

use serde_json::Value;

use crate::report::at;
use crate::svg::{bars, esc, histogram, lines, Series};

const COLORS: [&str; 6] = [
    "#2c7fb8", "#d95f0e", "#31a354", "#756bb1", "#636363", "#e7298a",
];

fn arr(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
        .unwrap_or_default()
}

fn cell(v: &Value, key: &str, digits: usize) -> String {
    match at(v, key) {
        Some(x) if digits == 0 => format!(r#"<td data-key="{key}">{x:.0}</td>"#),
        Some(x) => format!(r#"<td data-key="{key}">{x:.digits$}</td>"#),
        None => format!(r#"<td data-key="{key}">–</td>"#),
    }
}

fn over<'a>(t: &[f64], name: &'a str, color: &'a str, ys: Vec<f64>) -> Series<'a> {
    Series {
        name,
        color,
        points: t.iter().copied().zip(ys).collect(),
        dashed: false,
        dots: false,
    }
}

/// One line per key of a `{name: [values]}` object, over the times `t`.
fn per_name<'a>(t: &[f64], o: &'a Value) -> Vec<Series<'a>> {
    o.as_object()
        .map(|m| {
            m.iter()
                .enumerate()
                .map(|(k, (n, ys))| over(t, n, COLORS[k % 6], arr(ys)))
                .collect()
        })
        .unwrap_or_default()
}

/// The page.
pub fn page(v: &Value) -> String {
    let targets: Vec<String> = v["targets"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut h = String::new();
    summary(&mut h, v);
    targets_table(&mut h, v, &targets);
    bridging(&mut h, v);
    run_charts(&mut h, v);
    h.push_str("</div><h2>The model against the truth</h2><div class=\"charts\">");
    for t in &targets {
        h.push_str(&logloss_over_time(v, t));
        h.push_str(&calibration(v, t));
    }
    as_of_bid(&mut h, v, &targets);
    h.push_str("</div><h2>Delays and windows</h2><div class=\"charts\">");
    delay_charts(&mut h, v);
    h.push_str("</div><h2>Profile lift</h2><div class=\"charts\">");
    h.push_str(&lift_chart(v, &targets));
    let _ = write!(
        h,
        r#"</div><p class="note">Profile features the bids carried: {}.</p><script type="application/json" id="report">{}</script></body></html>"#,
        esc(&v["profile_features"].to_string()),
        v.to_string().replace("</", "<\\/")
    );
    h
}

/// The as-of-bid replay (`crate::asof`): each arm's figures, and its KL
/// from the truth per slice of event time, the shift marked in the title.
fn as_of_bid(h: &mut String, v: &Value, targets: &[String]) {
    let arms = crate::asof::ARMS;
    let with: Vec<&String> = targets
        .iter()
        .filter(|t| !v["targets"][t.as_str()]["as_of_bid"].is_null())
        .collect();
    if with.is_empty() {
        return;
    }
    h.push_str("</div><h2>As of bid time</h2><table><tr><th>target</th><th>arm</th><th>KL</th><th>gap closed</th><th>Σp̂/Σp</th><th>Spearman</th></tr>");
    for t in &with {
        for arm in arms {
            let key = |k: &str| format!("targets/{t}/as_of_bid/{arm}/{k}");
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{arm}</td>{}{}{}{}</tr>",
                esc(t),
                cell(v, &key("kl"), 5),
                cell(v, &key("gap_closed"), 3),
                cell(v, &key("calibration"), 3),
                cell(v, &key("spearman"), 3),
            );
        }
    }
    h.push_str("</table><div class=\"charts\">");
    let shift = v["shift"]["at_ms"].as_f64();
    for t in with {
        let s = &v["targets"][t.as_str()]["as_of_bid"]["slices"];
        let start = arr(&s["start_ms"]);
        let t0 = start.first().copied().unwrap_or(0.0);
        let minutes: Vec<f64> = start.iter().map(|x| (x - t0) / 60_000.0).collect();
        let series: Vec<Series> = arms
            .iter()
            .enumerate()
            .map(|(k, arm)| over(&minutes, arm, COLORS[k % 6], arr(&s["kl"][*arm])))
            .collect();
        let title = match shift {
            Some(at) => format!(
                "{t}: KL per slice (shift at minute {:.0})",
                (at - t0) / 60_000.0
            ),
            None => format!("{t}: KL per slice"),
        };
        h.push_str(&lines(
            &title,
            "minutes of event time",
            "KL (nats)",
            &series,
            true,
        ));
    }
}

/// The page's head and style, and what ran.
fn summary(h: &mut String, v: &Value) {
    h.push_str(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Tidemark demo report</title><style>
body{font-family:sans-serif;margin:24px;max-width:1180px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:12px}
.charts svg{border:1px solid #ddd;background:#fff}p.note{color:#555;max-width:900px}</style></head><body>
<h1>Tidemark demo report</h1>"#,
    );
    let events = at(v, "events").unwrap_or(0.0);
    let seconds = at(v, "seconds").unwrap_or(f64::NAN);
    let _ = write!(
        h,
        r#"<p><span data-key="events">{events:.0}</span> events published in a run of <span data-key="seconds">{seconds:.1}</span> s; database <code>{}</code>.{}</p>"#,
        esc(v["database"].as_str().unwrap_or("")),
        if v["interrupted"].as_bool() == Some(true) {
            " <b>Stopped early by a signal: the figures cover what ran.</b>"
        } else {
            ""
        }
    );
}

/// The table of targets, a row each, and the settings each one's tuning chose.
fn targets_table(h: &mut String, v: &Value, targets: &[String]) {
    h.push_str(r#"<h2>Targets</h2><p class="note">Progressive validation: each observation is predicted before it is learned, in emission order. <i>truth</i> is the market's own probability of each row's label (the floor); <i>baseline</i> predicts the label rate everywhere (in hindsight); <i>online constant</i> predicts before each row the label rate of the rows before it, as a learner without features would; <i>p_install</i> is the bidder's figure, ctr × (cvr_short + cvr_long) predicted for each impression from the same pass, labelled by an install within the long window; <i>gap closed</i> is the learner's share of the distance from baseline to truth; <i>no profiles</i> is the same learner on the same rows without what the bidder read from the profiles (the click rate derived from the counters, and the person); <i>counters' lift</i> is what the counters alone saved, as the bidder sent them, the person kept.</p>
<table><tr><th>target</th><th>rows</th><th>label rate</th><th>logloss</th><th>AUC</th><th>truth</th><th>baseline</th><th>online constant</th><th>gap closed</th><th>no profiles</th><th>profile lift</th><th>counters' lift</th><th>online learner</th></tr>"#);
    for t in targets {
        let k = |f: &str| format!("targets/{t}/{f}");
        let _ = write!(
            h,
            "<tr><td>{}</td>{}{}{}{}{}{}{}{}{}{}{}{}</tr>",
            esc(t),
            cell(v, &k("rows"), 0),
            cell(v, &k("label_rate"), 5),
            cell(v, &k("logloss"), 5),
            cell(v, &k("auc"), 4),
            cell(v, &k("truth_logloss"), 5),
            cell(v, &k("baseline_logloss"), 5),
            cell(v, &k("online_baseline_logloss"), 5),
            cell(v, &k("gap_closed"), 3),
            cell(v, &k("without_profiles_logloss"), 5),
            cell(v, &k("profile_lift"), 5),
            cell(v, &k("counter_lift"), 5),
            cell(v, &k("online_logloss"), 5),
        );
    }
    h.push_str("</table>");
    let tuned: Vec<String> = targets
        .iter()
        .filter_map(|t| {
            let u = &v["targets"][t]["tuning"];
            let n = u["switches"].as_array()?.len();
            let chosen = match u["rate_only"].as_bool() {
                Some(true) => "the label rate alone".to_owned(),
                _ => format!("alpha {} and l2 {}", u["alpha"], u["l2"]),
            };
            Some(format!(
                "{}: {chosen} of {} settings ({n} switches)",
                esc(t),
                u["settings"]
            ))
        })
        .collect();
    if !tuned.is_empty() {
        let _ = write!(
            h,
            r#"<p class="note">Each target learned with several settings side by side and predicted with the one of lowest recent loss; at the end: {}.</p>"#,
            tuned.join("; ")
        );
    }
}

/// Bridging against the market's true persons, when the report has it.
fn bridging(h: &mut String, v: &Value) {
    if v["bridging"].is_object() {
        let _ = write!(
            h,
            r#"<h2>Bridging</h2><p>Against the market's true persons: purity {} and completeness {} over {} identifiers in {} stored persons.</p>"#,
            cell(v, "bridging/purity", 3).replace("td", "span"),
            cell(v, "bridging/completeness", 3).replace("td", "span"),
            cell(v, "bridging/identifiers", 0).replace("td", "span"),
            cell(v, "bridging/persons", 0).replace("td", "span"),
        );
    }
}

/// The run's charts: events through the shards, buffer rows, observations.
fn run_charts(h: &mut String, v: &Value) {
    h.push_str(r#"<h2>The run</h2><div class="charts">"#);
    let t = arr(&v["series"]["t"]);
    let over = |name, color, ys| over(&t, name, color, ys);
    let s = &v["series"];
    h.push_str(&lines(
        "Events through the shards",
        "seconds",
        "events/s",
        &[over("events/s", COLORS[0], arr(&s["events_per_s"]))],
        true,
    ));
    let tiers = per_name(&t, &s["buffer_rows"]);
    h.push_str(&lines(
        "Buffer rows per phase",
        "seconds",
        "rows",
        &tiers,
        true,
    ));
    let obs = per_name(&t, &s["observations"]);
    h.push_str(&lines(
        "Observations per target",
        "seconds",
        "rows",
        &obs,
        true,
    ));
}

/// Target `t`'s logloss per slice of emission time: the learner, without
/// profiles, and the truth's floor.
fn logloss_over_time(v: &Value, t: &str) -> String {
    let ot = v["targets"][t]["over_time"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let col = |i: usize| -> Vec<(f64, f64)> {
        ot.iter()
            .map(|r| {
                (
                    r[0].as_f64().unwrap_or(f64::NAN),
                    r[i].as_f64().unwrap_or(f64::NAN),
                )
            })
            .collect()
    };
    let series = [
        Series {
            name: "learner",
            color: COLORS[0],
            points: col(2),
            dashed: false,
            dots: true,
        },
        Series {
            name: "no profiles",
            color: COLORS[1],
            points: col(3),
            dashed: false,
            dots: false,
        },
        Series {
            name: "truth (floor)",
            color: COLORS[2],
            points: col(4),
            dashed: true,
            dots: false,
        },
    ];
    lines(
        &format!("{t}: logloss per slice of emission time"),
        "seconds",
        "logloss",
        &series,
        false,
    )
}

/// Target `t`'s calibration over the later half, with and without
/// profiles, against the diagonal.
fn calibration(v: &Value, t: &str) -> String {
    let cal = |key: &str| -> Vec<(f64, f64)> {
        v["targets"][t][key]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| {
                        let g = |k: &str| d[k].as_f64().unwrap_or(f64::NAN);
                        (g("predicted"), g("observed"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (with, without) = (cal("calibration"), cal("calibration_without_profiles"));
    let hi = with
        .iter()
        .chain(&without)
        .map(|p| p.0.max(p.1))
        .fold(0.0, f64::max);
    let series = [
        Series {
            name: "learner",
            color: COLORS[0],
            points: with,
            dashed: false,
            dots: true,
        },
        Series {
            name: "no profiles",
            color: COLORS[1],
            points: without,
            dashed: false,
            dots: true,
        },
        Series {
            name: "perfect",
            color: COLORS[4],
            points: vec![(0.0, 0.0), (hi, hi)],
            dashed: true,
            dots: false,
        },
    ];
    lines(
        &format!("{t}: calibration, later half (observed vs predicted)"),
        "predicted",
        "observed",
        &series,
        true,
    )
}

/// The click and install delays from creation, with their windows marked.
fn delay_charts(h: &mut String, v: &Value) {
    let minutes = |ms: f64| ms / 60_000.0;
    let w = |k: &str| minutes(at(v, &format!("windows_ms/{k}")).unwrap_or(f64::NAN));
    for (kind, marks, color) in [
        ("click", vec![(w("click"), "click window")], COLORS[0]),
        (
            "install",
            vec![
                (w("install_short"), "install_short"),
                (w("install_long"), "install_long"),
            ],
            COLORS[1],
        ),
    ] {
        let b: Vec<(f64, f64, f64)> = v["delays"][kind]["bins"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        (
                            minutes(x[0].as_f64().unwrap_or(0.0)),
                            minutes(x[1].as_f64().unwrap_or(0.0)),
                            x[2].as_f64().unwrap_or(0.0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        h.push_str(&histogram(
            &format!(
                "{kind}s: event time from creation (later: {})",
                v["delays"][kind]["beyond"]
            ),
            "minutes of event time",
            &b,
            color,
            &marks,
        ));
    }
}

/// Logloss saved by the profiles, per target.
fn lift_chart(v: &Value, targets: &[String]) -> String {
    let lift: Vec<(String, f64)> = targets
        .iter()
        .filter_map(|t| {
            let with = at(v, &format!("targets/{t}/logloss"))?;
            let without = at(v, &format!("targets/{t}/without_profiles_logloss"))?;
            Some((t.clone(), (without - with) / without * 100.0))
        })
        .collect();
    let items: Vec<(&str, f64, &str)> = lift
        .iter()
        .enumerate()
        .map(|(k, (t, x))| (t.as_str(), *x, COLORS[k % 6]))
        .collect();
    bars(
        "Profile lift: logloss saved by what the bidder read from the profiles",
        "% of the logloss without them (higher is better)",
        &items,
    )
}
