//! Evaluation as the bidder lives it: a deterministic replay in event time.
//!
//! A row is readable from the shard clock at which it was emitted (its
//! `clock_ms`). Each arm learns the rows its rule lets it read, and
//! checkpoints at every slice boundary; an impression or click created
//! (bid) in a slice is scored with the arm's checkpoint at the slice's start,
//! against the market's true probability. Before a target's first row an
//! arm predicts its prior, one half. Scored: `ctr` and `p_install` (=
//! `ctr × (cvr_short + cvr_long)`) on impressions, `cvr_short` and `cvr_long`
//! on clicks, from one longest window (with grace) after the first bid and
//! the first slice in which every arm has read a row of a bid created a
//! whole slice after the target's first (so no arm's prior is scored, nor
//! a rate read from the few rows a first sweep happened to reach), through
//! the last transaction whose final rows were all emitted before the run
//! ended (only their outcome is known).
//!
//! The arms, on the same events:
//! - `early`: every row as emitted, weighed by kind (`tidemark_ftrl::Kind`):
//!   the learner as built.
//! - `naive`: an early target's provisional 0 and late 1 rows, unweighted
//!   (pooled, as are `early` and `oracle`).
//! - `final_only`: matured rows, each readable when the target's final
//!   sweep would have emitted it (a `late` row waits for its window's end):
//!   the learner without early feedback and without pools.
//! - `pooled_final`: the same rows, `cvr_short` and `cvr_long` pooled as
//!   the learner's configuration pools them: what pooling alone gives.
//! - `oracle`: every matured row readable at its bid: what knowing each
//!   final label at once would give ([`Setup::oracle_at_first_row`]: with the
//!   first row the shard wrote of its member instead, what the shard's rows
//!   would allow if each told its final label at once).
//! - `constant`: the label rate of the rows `final_only` has read (the
//!   online rate without early feedback; read as they arrive, late
//!   positives would come before their cohort's zeros and read high).
//!
//! After a shift, `p_install` is also scored with each arm's `cvr_long`
//! and the oracle's `ctr` and `cvr_short` (`cvr_long_only`): the part of
//! its gap that early feedback on `cvr_long` can close (with
//! [`Setup::oracle_at_first_row`] the oracle too reads those two from their
//! final rows).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};
use tidemark_ftrl::{Kind, Models, Row};
use tidemark_learner::Config;

use crate::store::Emitted;

/// The arms, in report order.
pub const ARMS: [&str; 6] = [
    "final_only",
    "pooled_final",
    "naive",
    "early",
    "oracle",
    "constant",
];
/// Indices of [`ARMS`].
const FINAL_ONLY: usize = 0;
const POOLED_FINAL: usize = 1;
const NAIVE: usize = 2;
const EARLY: usize = 3;
const ORACLE: usize = 4;
const CONSTANT: usize = 5;
/// The scored targets, in report order.
pub const TARGETS: [&str; 4] = ["ctr", "cvr_short", "cvr_long", "p_install"];
/// Before a target's first row, an arm predicts this.
const PRIOR: f64 = 0.5;

/// What the replay needs besides the rows.
pub struct Setup<'a> {
    /// The learner's configuration (every arm learns with it).
    pub config: &'a Config,
    /// Event time per slice.
    pub slice_ms: i64,
    /// After creation, when each target's final rows are emitted (its
    /// window and grace): when `final_only` reads a late row.
    pub final_offset_ms: [i64; 3],
    /// The market's shift, if it shifted (absolute event time).
    pub shift_at_ms: Option<i64>,
    /// When the oracle reads a row: by default just after its bid; `true`,
    /// with the first row its shard wrote of the member: an early target's
    /// when its window opened (its provisional row), any other's with its
    /// final row (SPEC 7 refuses early feedback for a window that starts
    /// at creation). No learner of the shard's rows hears of a member
    /// before that, and this oracle then knows its final label too. Not a
    /// strict bound on such learners: the order and timing of rows move
    /// the KL as much (docs/demo.md, "How far early feedback can go").
    pub oracle_at_first_row: bool,
}

/// One event scored: an impression (ctr, p_install) or a click (cvr_*).
struct Event {
    created: i64,
    features: Map<String, Value>,
    /// An impression: `[ctr, p_install]`; a click: `[cvr_short, cvr_long]`.
    truth: [f64; 2],
    click: bool,
}

/// Per arm, per target, per slice: `(Σ KL, events, Σ p̂, Σ p)`, and every
/// `(p̂, p)` scored for the rank correlation.
#[derive(Default, Clone)]
struct Tally {
    slices: BTreeMap<i64, (f64, u64, f64, f64)>,
    pairs: Vec<(f64, f64)>,
}

/// A row parsed: its target's index, the row, its kind and features.
type Parsed<'r> = (usize, &'r Emitted, Kind, Map<String, Value>);
/// What an arm reads: `(when, target, row index, row as learned)`.
type Read = (i64, usize, usize, Row);
/// An impression scored for `p_install`: its slice, its truth, and the
/// arm's `ctr`, `cvr_short` and `cvr_long` for it.
type Parts = (i64, f64, [f64; 3]);

/// Runs the replay; returns `targets.<t>.as_of_bid` per target, and the
/// `shift` object when the market shifted.
pub fn evaluate(rows: &[Emitted], setup: &Setup) -> anyhow::Result<(Map<String, Value>, Value)> {
    let (parsed, mut events) = parse(rows)?;
    // Transactions whose every final row was emitted before the run ended:
    // only their outcome is known, so only they are scored, and only their
    // rows are the oracle's (the others' late rows came, their zeros never).
    // The slowest shard's clock says how far every shard has emitted.
    let longest = setup.final_offset_ms.iter().copied().max().unwrap_or(0);
    let mut reached: BTreeMap<&str, i64> = BTreeMap::new();
    for r in rows {
        let at = reached.entry(&r.shard).or_insert(r.clock_ms);
        *at = (*at).max(r.clock_ms);
    }
    let settled = reached.values().copied().min().unwrap_or(0) - longest;
    events.retain(|e| e.created <= settled);
    let Some(first) = events.first() else {
        return Ok((Map::new(), Value::Null));
    };
    let slice = setup.slice_ms.max(1);
    let t0 = first.created.div_euclid(slice) * slice;
    // Scored from one longest window after the first bid (before,
    // positives, which mature first, would make the rates read look high)
    // and from the first slice at which every arm has read a row of a bid
    // created a whole slice after the target's first (of all three for
    // p_install): before, an arm predicts its prior, one half, or a rate
    // from the few rows the first sweep happened to reach (a sweep comes
    // every 500 ms of wall time, a minute of event time), whose KL would
    // swamp an arm's mean and move it with the machine's timing.
    let base = (t0 + longest).div_euclid(slice) * slice + slice;
    let reads = reads(&parsed, setup, settled);
    let mut whole = [i64::MAX; 3];
    for (t, r, _, _) in &parsed {
        whole[*t] = whole[*t].min(r.created_ms.saturating_add(slice));
    }
    let ready = |t: usize| {
        let created = |x: &Read| parsed[x.2].1.created_ms;
        let first = |r: &Vec<Read>| {
            (r.iter())
                .find(|x| x.1 == t && created(x) >= whole[t])
                .map(|x| x.0)
        };
        let at = reads.iter().map(first).collect::<Option<Vec<i64>>>();
        // A target some arm never reads a row of a whole slice after its
        // first (too short a run) is scored from `base`: its prior shows.
        let at = at.and_then(|a| a.into_iter().max()).unwrap_or(base);
        base.max(at.div_euclid(slice) * slice + slice * i64::from(at.rem_euclid(slice) != 0))
    };
    let mut from = [base; 4];
    for (t, f) in from.iter_mut().enumerate().take(3) {
        *f = ready(t);
    }
    from[3] = from[..3].iter().copied().max().unwrap_or(base);
    let (tallies, parts): (Vec<Vec<Tally>>, Vec<Vec<Parts>>) = reads
        .iter()
        .enumerate()
        .map(|(a, r)| replay(a, r, &parsed, &events, setup, (t0, from)))
        .unzip();
    let long_only = setup.shift_at_ms.map(|_| cvr_long_only(&parts));
    Ok(report(&tallies, setup, from, long_only))
}

/// Per arm, `p_install` tallied with `ctr` and `cvr_short` from the oracle
/// and only `cvr_long` from the arm: how much of the arm's `p_install` gap
/// is its `cvr_long`'s. `ctr` and `cvr_short` are learned from final rows
/// in every arm but the oracle at the bid (SPEC 7 refuses early feedback
/// for a window starting at creation), so after a shift their lag is a
/// part of `p_install`'s gap no arm can close.
fn cvr_long_only(parts: &[Vec<Parts>]) -> Vec<Tally> {
    let oracle = &parts[ORACLE];
    (parts.iter())
        .map(|arm| {
            // Every arm scores the same impressions, in the same order.
            assert_eq!(arm.len(), oracle.len(), "arms scored other impressions");
            let mut tally = Tally::default();
            for ((b, truth, p), (_, _, o)) in arm.iter().zip(oracle) {
                let predicted = (o[0] * (o[1] + p[2])).min(1.0);
                let s = tally.slices.entry(*b).or_default();
                s.0 += kl(*truth, predicted);
                s.1 += 1;
                s.2 += predicted;
                s.3 += truth;
            }
            tally
        })
        .collect()
}

/// The mean of the per-slice KLs of the slices starting at `at` or later.
fn mean_after(slices: &[(i64, f64)], at: i64) -> f64 {
    let after: Vec<f64> = slices.iter().filter(|s| s.0 >= at).map(|s| s.1).collect();
    after.iter().sum::<f64>() / after.len().max(1) as f64
}

/// The rows of the built-in targets, and the events to score: one per
/// impression (its ctr row) and per click (its cvr_short row, never
/// early), with the truth of the transaction, in bid order.
fn parse(rows: &[Emitted]) -> anyhow::Result<(Vec<Parsed<'_>>, Vec<Event>)> {
    let target_of = |t: &str| TARGETS[..3].iter().position(|n| *n == t);
    let mut parsed = Vec::with_capacity(rows.len());
    let mut events: Vec<Event> = Vec::new();
    for r in rows {
        let Some(t) = target_of(&r.target) else {
            continue;
        };
        let features: Map<String, Value> = serde_json::from_str(&r.features)?;
        let kind = Kind::parse(&r.kind).unwrap_or(Kind::Final);
        let truth = match t {
            0 => r.truth[0].zip(r.truth[3]),
            1 => r.truth[1].zip(r.truth[2]),
            _ => None,
        };
        if let Some((a, b)) = truth {
            events.push(Event {
                created: r.created_ms,
                features: features.clone(),
                truth: [a, b],
                click: t == 1,
            });
        }
        parsed.push((t, r, kind, features));
    }
    events.sort_by_key(|e| e.created);
    Ok((parsed, events))
}

/// What each arm reads, and when, in time order.
fn reads(parsed: &[Parsed], setup: &Setup, settled: i64) -> Vec<Vec<Read>> {
    // A target learned early: its shard wrote provisional rows.
    let mut early = [false; 3];
    for (t, _, kind, _) in parsed {
        early[*t] |= *kind == Kind::Provisional;
    }
    // When a shard without early feedback would have emitted a late row:
    // with its cohort's final rows (the first final row of the target
    // created at or after it), else one window and grace after creation.
    let mut finals: [Vec<(i64, i64)>; 3] = Default::default();
    for (t, r, kind, _) in parsed {
        if *kind == Kind::Final {
            finals[*t].push((r.created_ms, r.clock_ms));
        }
    }
    for f in &mut finals {
        f.sort_unstable();
        // Later cohorts are emitted no earlier: a running minimum from the end.
        for i in (0..f.len().saturating_sub(1)).rev() {
            f[i].1 = f[i].1.min(f[i + 1].1);
        }
    }
    let final_sweep = |t: usize, created: i64| {
        let f = &finals[t];
        let i = f.partition_point(|x| x.0 < created);
        f.get(i).map_or(created + setup.final_offset_ms[t], |x| x.1)
    };
    // Per early member, when its window opened (its provisional row).
    let mut opened: HashMap<(usize, &str), i64> = HashMap::new();
    if setup.oracle_at_first_row {
        for (t, r, kind, _) in parsed {
            if *kind == Kind::Provisional {
                opened.insert((*t, r.txid.as_str()), r.clock_ms);
            }
        }
    }
    let mut reads: Vec<Vec<Read>> = vec![Vec::new(); ARMS.len()];
    for (i, (t, r, kind, _)) in parsed.iter().enumerate() {
        let label = r.label;
        let matured = kind.matured();
        let at_final = match kind {
            Kind::Late => final_sweep(*t, r.created_ms),
            _ => r.clock_ms,
        };
        let plain = Row::plain(label);
        // final_only and constant: matured rows when the final sweep emits them.
        if matured {
            for arm in [FINAL_ONLY, POOLED_FINAL, CONSTANT] {
                reads[arm].push((at_final, *t, i, plain));
            }
        }
        // naive: provisional and late rows at face value, no final zero
        // of an early target (whose provisional already said 0).
        if !(*kind == Kind::Final && early[*t]) {
            reads[NAIVE].push((r.clock_ms, *t, i, plain));
        }
        let row = Row::of(label, *kind).member(&r.txid);
        reads[EARLY].push((r.clock_ms, *t, i, row));
        if matured && r.created_ms <= settled {
            // Just after its bid (never learned before it is scored), or
            // at the first row the shard wrote of its member: an early
            // target's when its window opened, any other's its final row.
            let at = if setup.oracle_at_first_row {
                let opened = opened.get(&(*t, r.txid.as_str()));
                opened.copied().unwrap_or(r.clock_ms)
            } else {
                r.created_ms + 1
            };
            reads[ORACLE].push((at, *t, i, plain));
        }
    }
    for (arm, r) in reads.iter_mut().enumerate() {
        let swept = [FINAL_ONLY, POOLED_FINAL, CONSTANT].contains(&arm)
            || (arm == ORACLE && setup.oracle_at_first_row);
        if swept {
            // A shard without early feedback writes a cohort's final rows,
            // ones and zeros, in one sweep, not its ones first: an early
            // target's rows of one sweep in creation order (the others
            // keep the order they were written in, as every arm reads them).
            // So are the labels an oracle learns with the first row of their
            // members (an early target's at its window's opening, others'
            // with their final rows): in the order written, a sweep's late
            // ones would come before its zeros, and the learner leans to the
            // labels it saw last.
            let created = |x: &Read| early[x.1].then(|| parsed[x.2].1.created_ms);
            r.sort_by_key(|x| (x.0, created(x)));
        } else {
            // Stable: rows of one sweep stay in the order they were written.
            r.sort_by_key(|x| x.0);
        }
    }
    reads
}

/// One arm's replay: at each slice boundary from `t0`, the rows read by
/// then learned, then the slice's events scored, each target's from its
/// `from`.
fn replay(
    arm: usize,
    reads: &[Read],
    parsed: &[Parsed],
    events: &[Event],
    setup: &Setup,
    (t0, from): (i64, [i64; 4]),
) -> (Vec<Tally>, Vec<Parts>) {
    let slice = setup.slice_ms.max(1);
    let end = events.last().map_or(t0, |e| e.created);
    let mut tallies = vec![Tally::default(); TARGETS.len()];
    let mut parts = Vec::new();
    let constant = arm == CONSTANT;
    let mut models = Models::new(setup.config.hashing.clone(), setup.config.window)
        .with_grid(setup.config.grid.clone());
    if arm != FINAL_ONLY {
        models = (models.with_pools(&setup.config.pools, |p| setup.config.pool_params(p)))
            .with_teachers(&setup.config.teaches);
    }
    // The constant arm: (rows, ones) read per target.
    let mut rate = [(0u64, 0u64); 3];
    // Events before every target's `from` are scored for none.
    let earliest = from.iter().copied().min().unwrap_or(t0);
    let (mut next, mut e, mut b) = (0, 0, t0);
    while b <= end {
        while next < reads.len() && reads[next].0 <= b {
            let (_, t, i, row) = reads[next];
            if constant {
                rate[t].0 += 1;
                rate[t].1 += u64::from(row.label);
            } else {
                let name = TARGETS[t];
                models.learn(name, || setup.config.params(name), &parsed[i].3, row);
            }
            next += 1;
        }
        while e < events.len() && events[e].created < b + slice {
            let ev = &events[e];
            e += 1;
            if ev.created < earliest {
                continue;
            }
            let p = |t: usize| match (constant, rate[t]) {
                (true, (0, _)) => PRIOR,
                (true, (n, ones)) => (ones as f64 + 0.5) / (n as f64 + 1.0),
                _ => models.predict(TARGETS[t], &ev.features).unwrap_or(PRIOR),
            };
            let scored: [(usize, f64, f64); 2] = if ev.click {
                [(1, p(1), ev.truth[0]), (2, p(2), ev.truth[1])]
            } else {
                let q = [p(0), p(1), p(2)];
                if setup.shift_at_ms.is_some() && ev.created >= from[3] {
                    parts.push((b, ev.truth[1], q));
                }
                let install = q[0] * (q[1] + q[2]);
                [(0, q[0], ev.truth[0]), (3, install.min(1.0), ev.truth[1])]
            };
            for (t, predicted, truth) in scored {
                if ev.created < from[t] {
                    continue;
                }
                let tally = &mut tallies[t];
                let s = tally.slices.entry(b).or_default();
                s.0 += kl(truth, predicted);
                s.1 += 1;
                s.2 += predicted;
                s.3 += truth;
                tally.pairs.push((predicted, truth));
            }
        }
        b += slice;
    }
    (tallies, parts)
}

/// KL divergence of a Bernoulli `q` from the truth `p`, in nats.
pub fn kl(p: f64, q: f64) -> f64 {
    let q = q.clamp(1e-9, 1.0 - 1e-9);
    let term = |a: f64, b: f64| if a <= 0.0 { 0.0 } else { a * (a / b).ln() };
    term(p, q) + term(1.0 - p, 1.0 - q)
}

/// Spearman's rank correlation of the pairs (average ranks on ties).
pub fn spearman(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 3 {
        return None;
    }
    let ranks = |key: &dyn Fn(&(f64, f64)) -> f64| {
        let mut idx: Vec<usize> = (0..pairs.len()).collect();
        idx.sort_by(|&a, &b| key(&pairs[a]).total_cmp(&key(&pairs[b])));
        let mut r = vec![0.0; pairs.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && key(&pairs[idx[j + 1]]) == key(&pairs[idx[i]]) {
                j += 1;
            }
            let avg = (i + j) as f64 / 2.0;
            for &k in &idx[i..=j] {
                r[k] = avg;
            }
            i = j + 1;
        }
        r
    };
    let (a, b) = (ranks(&|x| x.0), ranks(&|x| x.1));
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(&b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt())
}

/// Per slice `(start, mean KL)` of a tally.
fn slice_kl(t: &Tally) -> Vec<(i64, f64)> {
    t.slices
        .iter()
        .map(|(b, s)| (*b, s.0 / s.1.max(1) as f64))
        .collect()
}

/// Mean and standard error of the per-slice differences `other − early`.
fn paired(early: &[(i64, f64)], other: &[(i64, f64)]) -> Value {
    let d: Vec<f64> = early.iter().zip(other).map(|(e, o)| o.1 - e.1).collect();
    let n = d.len() as f64;
    if d.len() < 2 {
        return Value::Null;
    }
    let mean = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let se = (var / n).sqrt();
    json!({"diff": mean, "se": se, "z": if se > 0.0 { Some(mean / se) } else { None }})
}

/// Slices from the shift until an arm's KL stays within 10% of the
/// oracle's (or within 1e-4 nats) for two slices running.
fn slices_to_oracle(arm: &[(i64, f64)], oracle: &[(i64, f64)], at: i64) -> Option<usize> {
    let near: Vec<bool> = arm
        .iter()
        .zip(oracle)
        .filter(|(a, _)| a.0 >= at)
        .map(|(a, o)| a.1 <= o.1 * 1.1 || a.1 - o.1 <= 1e-4)
        .collect();
    near.windows(2).position(|w| w[0] && w[1])
}

fn report(
    tallies: &[Vec<Tally>],
    setup: &Setup,
    from: [i64; 4],
    long_only: Option<Vec<Tally>>,
) -> (Map<String, Value>, Value) {
    let finite = |x: f64| x.is_finite().then_some(x);
    let mut targets = Map::new();
    let mut shift = Map::new();
    let arm = |name: &str| ARMS.iter().position(|a| *a == name).expect("an arm");
    for (t, name) in TARGETS.iter().enumerate() {
        let kl_of = |a: usize| {
            let s = &tallies[a][t].slices;
            let (sum, n) = s.values().fold((0.0, 0u64), |(x, m), v| (x + v.0, m + v.1));
            sum / n.max(1) as f64
        };
        let (constant, oracle) = (kl_of(arm("constant")), kl_of(arm("oracle")));
        let slices: Vec<Vec<(i64, f64)>> =
            (0..ARMS.len()).map(|a| slice_kl(&tallies[a][t])).collect();
        let mut out = Map::new();
        for (a, arm_name) in ARMS.iter().enumerate() {
            let tally = &tallies[a][t];
            let (sp, st) = tally
                .slices
                .values()
                .fold((0.0, 0.0), |(x, y), v| (x + v.2, y + v.3));
            let kl = kl_of(a);
            out.insert(
                arm_name.to_string(),
                json!({
                    "kl": finite(kl),
                    "gap_closed": finite((constant - kl) / (constant - oracle)),
                    "calibration": finite(sp / st),
                    "spearman": spearman(&tally.pairs),
                    "events": tally.pairs.len(),
                }),
            );
        }
        let early = &slices[arm("early")];
        let vs: Map<String, Value> = ARMS
            .iter()
            .enumerate()
            .filter(|(_, n)| **n != "early")
            .map(|(a, n)| (n.to_string(), paired(early, &slices[a])))
            .collect();
        out.insert("early_vs".into(), Value::Object(vs));
        out.insert(
            "slices".into(),
            json!({
                "start_ms": early.iter().map(|s| s.0).collect::<Vec<_>>(),
                "kl": ARMS.iter().enumerate().map(|(a, n)| {
                    (n.to_string(), json!(slices[a].iter().map(|s| finite(s.1)).collect::<Vec<_>>()))
                }).collect::<Map<String, Value>>(),
                "calibration": ARMS.iter().enumerate().map(|(a, n)| {
                    let c: Vec<Option<f64>> = tallies[a][t].slices.values().map(|s| finite(s.2 / s.3)).collect();
                    (n.to_string(), json!(c))
                }).collect::<Map<String, Value>>(),
            }),
        );
        out.insert("from_ms".into(), json!(from[t]));
        targets.insert(name.to_string(), Value::Object(out));
        if let (Some(at), true) = (setup.shift_at_ms, t >= 2) {
            let oracle = &slices[arm("oracle")];
            let per: Map<String, Value> = ARMS
                .iter()
                .enumerate()
                .map(|(a, n)| {
                    let kl_after = mean_after(&slices[a], at);
                    let recovered = slices_to_oracle(&slices[a], oracle, at);
                    // Σp̂/Σp over the slices after the shift, from the
                    // `skip`th on.
                    let calibration = |skip: usize| {
                        let (q, p) = (tallies[a][t].slices.range(at..))
                            .skip(skip)
                            .fold((0.0, 0.0), |(q, p), (_, s)| (q + s.2, p + s.3));
                        finite(q / p)
                    };
                    let mut x = json!({
                        "kl_after": finite(kl_after),
                        "slices_to_oracle": recovered,
                        "calibration_after": calibration(0),
                        "calibration_after_recovery": recovered.and_then(calibration),
                    });
                    if let (Some(l), 3) = (&long_only, t) {
                        x["kl_after_cvr_long_only"] =
                            json!(finite(mean_after(&slice_kl(&l[a]), at)));
                    }
                    (n.to_string(), x)
                })
                .collect();
            shift.insert(name.to_string(), Value::Object(per));
        }
    }
    let shift = match setup.shift_at_ms {
        Some(at) => {
            shift.insert("at_ms".into(), json!(at));
            shift.insert("slice_ms".into(), json!(setup.slice_ms));
            Value::Object(shift)
        }
        None => Value::Null,
    };
    (targets, shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_at_the_truth_and_grows_away_from_it() {
        assert!(kl(0.3, 0.3).abs() < 1e-12);
        assert!(kl(0.3, 0.2) > 0.0 && kl(0.3, 0.1) > kl(0.3, 0.2));
        assert!(kl(0.0, 0.5).is_finite() && kl(1.0, 0.0).is_finite());
    }

    #[test]
    fn spearman_reads_ranks_only() {
        let up: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), f64::from(i).exp()))
            .collect();
        assert!((spearman(&up).unwrap() - 1.0).abs() < 1e-12);
        let down: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i), -f64::from(i))).collect();
        assert!((spearman(&down).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(spearman(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
    }

    const MIN: i64 = 60_000;

    /// Two hours of transactions, one a second, learned from final rows;
    /// cvr_long's first final rows are emitted five minutes after its
    /// window (and a slice) would have them read.
    fn two_hours() -> Vec<Emitted> {
        let row = |target: &str, g: i64, clock: i64| Emitted {
            target: target.to_owned(),
            // The truth's rates: a tenth clicks, a twentieth of clicks install.
            label: g % if target == "ctr" { 10 } else { 200 } == 0,
            kind: "final".to_owned(),
            features: format!(r#"{{"app":"a{}"}}"#, g % 3),
            clock_ms: clock,
            created_ms: g * 1000,
            truth: [Some(0.1), Some(0.05), Some(0.05), Some(0.01)],
            txid: format!("{g:x}"),
            shard: "s".to_owned(),
        };
        let mut rows = Vec::new();
        for g in 0..7200 {
            let created = g * 1000;
            rows.push(row("ctr", g, created + 10 * MIN));
            if g % 10 == 0 {
                rows.push(row("cvr_short", g, created + 10 * MIN));
                rows.push(row("cvr_long", g, (created + 30 * MIN).max(35 * MIN)));
            }
        }
        rows.sort_by_key(|r| r.clock_ms);
        rows
    }

    fn setup(config: &Config, shift_at_ms: Option<i64>) -> Setup<'_> {
        Setup {
            config,
            slice_ms: MIN,
            final_offset_ms: [10 * MIN, 10 * MIN, 30 * MIN],
            shift_at_ms,
            oracle_at_first_row: false,
        }
    }

    fn config() -> Config {
        Config::from_toml("checkpoint_dir = \"c\"\n[[sources]]\nname = \"a\"\n").unwrap()
    }

    #[test]
    fn no_arm_is_scored_on_its_prior_when_the_first_final_sweep_comes_late() {
        // The arms reading final rows only would predict one half for the
        // slices before cvr_long's first final sweep.
        let config = config();
        let (targets, _) = evaluate(&two_hours(), &setup(&config, None)).unwrap();
        let cvr_long = &targets["cvr_long"];
        assert_eq!(cvr_long["from_ms"], 35 * MIN);
        assert_eq!(targets["p_install"]["from_ms"], 35 * MIN);
        assert_eq!(
            targets["ctr"]["from_ms"],
            31 * MIN,
            "one longest window, then a slice"
        );
        for arm in ["constant", "final_only"] {
            let slices = cvr_long["slices"]["kl"][arm].as_array().unwrap();
            assert!(!slices.is_empty());
            for kl in slices {
                assert!(
                    kl.as_f64().unwrap() < 0.1,
                    "{arm} scored on its prior: {kl}"
                );
            }
        }
    }

    #[test]
    fn no_arm_is_scored_on_the_few_rows_a_first_sweep_reached() {
        // cvr_long's rows are emitted 30 min 59 s after their bids: at
        // 31 min the arms reading final rows have read one row, a positive,
        // and their rate reads 0.75 against a truth of 0.05.
        let mut rows = two_hours();
        for r in rows.iter_mut().filter(|r| r.target == "cvr_long") {
            r.clock_ms = r.created_ms + 30 * MIN + 59_000;
        }
        rows.sort_by_key(|r| r.clock_ms);
        let config = config();
        let (targets, _) = evaluate(&rows, &setup(&config, None)).unwrap();
        let cvr_long = &targets["cvr_long"];
        assert_eq!(cvr_long["from_ms"], 32 * MIN, "a whole slice of bids read");
        let first = &cvr_long["slices"]["kl"]["constant"][0];
        assert!(first.as_f64().unwrap() < 0.1, "{first}");
    }

    #[test]
    fn the_oracle_with_its_own_cvr_long_is_the_oracle() {
        let config = config();
        let (_, shift) = evaluate(&two_hours(), &setup(&config, Some(60 * MIN))).unwrap();
        let p = &shift["p_install"];
        for arm in ARMS {
            assert!(
                p[arm]["kl_after_cvr_long_only"].as_f64().unwrap() > 0.0,
                "{arm}"
            );
        }
        let o = &p["oracle"];
        let (all, long) = (o["kl_after"].as_f64(), o["kl_after_cvr_long_only"].as_f64());
        assert!((all.unwrap() - long.unwrap()).abs() < 1e-15, "{o}");
        assert!(shift["cvr_long"]["oracle"]["kl_after_cvr_long_only"].is_null());
    }

    #[test]
    fn an_arm_reaches_the_oracle_when_it_stays_near_for_two_slices() {
        let s = |v: &[f64]| -> Vec<(i64, f64)> {
            v.iter().enumerate().map(|(i, x)| (i as i64, *x)).collect()
        };
        let oracle = s(&[0.1, 0.1, 0.1, 0.1, 0.1, 0.1]);
        assert_eq!(
            slices_to_oracle(&s(&[0.5, 0.105, 0.3, 0.105, 0.1, 0.1]), &oracle, 1),
            Some(2)
        );
        assert_eq!(
            slices_to_oracle(&s(&[0.5, 0.5, 0.5, 0.5, 0.5, 0.105]), &oracle, 0),
            None
        );
    }

    #[test]
    fn the_oracle_at_first_row_reads_each_label_with_the_first_row_written_of_its_member() {
        let row = |target: &str, kind: &str, txid: &str, created: i64, clock: i64| Emitted {
            target: target.to_owned(),
            label: kind == "late",
            kind: kind.to_owned(),
            features: "{}".to_owned(),
            clock_ms: clock,
            created_ms: created,
            truth: [Some(0.1), Some(0.05), Some(0.05), Some(0.01)],
            txid: txid.to_owned(),
            shard: "s".to_owned(),
        };
        // b's bid came first; both windows opened in the sweep at 11 min.
        let rows = [
            row("ctr", "final", "b", 0, 10 * MIN),
            row("cvr_long", "provisional", "b", 0, 11 * MIN),
            row("cvr_long", "provisional", "a", 1000, 11 * MIN),
            row("cvr_long", "late", "a", 1000, 17 * MIN),
            row("cvr_long", "final", "b", 0, 31 * MIN),
        ];
        let (parsed, _) = parse(&rows).unwrap();
        let config = config();
        let oracle = |first_row| {
            let setup = Setup {
                oracle_at_first_row: first_row,
                ..setup(&config, None)
            };
            (reads(&parsed, &setup, i64::MAX)[ORACLE].iter())
                .map(|r| (r.2, r.0))
                .collect::<Vec<_>>()
        };
        // At their bids, or at the first row written of their members:
        // ctr (not early) with its final row; cvr_long's when its window
        // opened, in bid order: a's late one, written first, does not come
        // before b's zero.
        assert_eq!(oracle(false), [(0, 1), (4, 1), (3, 1001)]);
        assert_eq!(oracle(true), [(0, 10 * MIN), (4, 11 * MIN), (3, 11 * MIN)]);
    }
}
