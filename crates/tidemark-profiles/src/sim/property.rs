//! The property test: random streams through [`Sim`] and
//! `tidemark-reference` (SPEC 11 written out alone), the tables compared
//! with the reference after every batch.

use proptest::prelude::*;
use tidemark_reference::profiles::{CounterSpec, Profiles, Setup};

use super::*;

const KINDS: [&str; 4] = ["a", "a1", "b", "d"];
/// Every type's `dedup` in the property test.
const DEDUP: i64 = 2 * HOUR;
const DAY: i64 = 24 * HOUR;

/// `user`: mostly absent or one of four, sometimes not a string.
fn user() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        4 => Just(None),
        6 => (0..4u8).prop_map(|u| Some(json!(format!("u{u}")))),
        1 => Just(Some(json!(7))),
    ]
}

/// `ids`: absent, or up to four entries of kinds in [`KINDS`] with one
/// of three values (so chains and persons past the cap form), sometimes
/// a bad entry (a bad kind, `user` inside, an empty value).
fn ids() -> impl Strategy<Value = Option<Value>> {
    let good =
        (0..KINDS.len(), 1..4u8).prop_map(|(k, v)| (KINDS[k].to_string(), json!(v.to_string())));
    let bad = prop_oneof![
        Just(("Bad".to_string(), json!("x"))),
        Just(("user".to_string(), json!("u1"))),
        Just(("b".to_string(), json!(""))),
    ];
    let entry = prop_oneof![8 => good, 1 => bad];
    prop_oneof![
        1 => Just(None),
        6 => prop::collection::vec(entry, 0..5).prop_map(|v| {
            Some(Value::Object(v.into_iter().collect()))
        }),
    ]
}

/// A message: one of three types, one of 24 txids (so copies happen,
/// of one type or another) created up to three hours after [`T0`],
/// `ts` one of 12 values, within 12 ms (so first ts tie) or 20 minutes
/// apart (so counters decay); now and then the clock moves on before
/// it is received (so copies turn stale, [`DEDUP`] behind it).
fn msg() -> impl Strategy<Value = Msg> {
    let ts = prop_oneof![0..12i64, (0..12i64).prop_map(|t| t * 20 * 60_000)];
    let tick = prop_oneof![11 => Just(0), 1 => (1..=90i64).prop_map(|m| m * 60_000)];
    (0..3usize, 0..24u128, ts, user(), ids(), tick).prop_map(
        |(type_index, n, ts, user, ids, tick)| Msg {
            type_index,
            n,
            ts: T0 + ts,
            user,
            ids,
            created: T0 + (n as i64 % 4) * HOUR,
            tick,
        },
    )
}

/// The reference, having received nothing.
fn reference(max_ids: usize, blocklist_after: u64) -> Profiles {
    Profiles::new(Setup {
        counters: vec![CounterSpec {
            name: "clk".to_string(),
            event: "click".to_string(),
            half_life_ms: HOUR,
        }],
        max_ids,
        blocklist_after,
        dedup_ms: TYPES.iter().map(|t| (t.to_string(), DEDUP)).collect(),
        ..Setup::default()
    })
}

/// The reference receives `m` at `clock` (nothing is future).
fn receive(p: &mut Profiles, m: &Msg, clock: Option<i64>) {
    let (topic, payload) = m.wire();
    p.receive(topic.as_bytes(), payload.as_bytes(), T0 + DAY, clock);
}

/// Every identifier the messages could carry (good ones).
fn pool() -> Vec<String> {
    let mut v: Vec<String> = (0..4).map(|u| format!("user:u{u}")).collect();
    for k in KINDS {
        v.extend((1..4).map(|n| format!("{k}:{n}")));
    }
    v
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Compares what the simulated tables hold with the reference, and
/// returns the first difference.
fn compare(sim: &Sim, want: &Profiles) -> Result<(), String> {
    sim.check_rows();
    let at = T0 + HOUR;
    for id in pool() {
        let (mut got, mut exp) = (sim.get(&id, at), want.get(&id, at));
        let (g, e) = (
            got["counters"]["clk"].as_f64().unwrap(),
            exp["counters"]["clk"].as_f64().unwrap(),
        );
        if !close(g, e) {
            return Err(format!("counter of {id}: {g} vs {e}"));
        }
        got["counters"] = Value::Null;
        exp["counters"] = Value::Null;
        if got != exp {
            return Err(format!(
                "profile of {id}:\n core      {got}\n reference {exp}"
            ));
        }
        if sim.person(&id) != want.person(&id) {
            return Err(format!(
                "person of {id}: {:?} vs {:?}",
                sim.person(&id),
                want.person(&id)
            ));
        }
        if sim.trail(&id) != want.trail(&id, 0, i64::MAX, None) {
            return Err(format!("trail of {id}"));
        }
    }
    let refusals: Vec<(String, u64)> = sim
        .db()
        .ids
        .iter()
        .filter(|(_, s)| s.refusals > 0)
        .map(|(id, s)| (id.clone(), s.refusals as u64))
        .collect();
    if refusals != want.refusals() {
        return Err(format!("refusals {refusals:?} vs {:?}", want.refusals()));
    }
    let blocklist: Vec<(String, u64)> = sim
        .db()
        .ids
        .iter()
        .filter(|(_, s)| s.blocklisted)
        .map(|(id, s)| (id.clone(), s.refusals as u64))
        .collect();
    if blocklist != want.blocklist() {
        return Err(format!("blocklist {blocklist:?} vs {:?}", want.blocklist()));
    }
    // As a set: link groups commit in any order (`groups`), and each
    // merge's masters say what stood when it happened.
    let mut merges: Vec<(i64, String, String, String)> = sim
        .db()
        .merges
        .iter()
        .map(|m| (m.ts, m.txid.clone(), m.master.clone(), m.absorbed.clone()))
        .collect();
    let mut want_merges = want.merges().to_vec();
    merges.sort();
    want_merges.sort();
    if merges != want_merges {
        return Err(format!("merge log {merges:?} vs {want_merges:?}"));
    }
    let mut counts: BTreeMap<String, u64> = want.counts();
    counts.insert("merges".into(), want.merges().len() as u64);
    counts.insert("blocklisted".into(), want.blocklist().len() as u64);
    counts.retain(|_, n| *n > 0);
    let got: BTreeMap<String, u64> = sim
        .db()
        .counts
        .iter()
        .map(|(k, v)| (k.clone(), *v as u64))
        .collect();
    if got != counts {
        return Err(format!("counts {got:?} vs {counts:?}"));
    }
    Ok(())
}

/// Runs `msgs` through a [`Sim`] in batches of `sizes` (cycled), the
/// tables compared with the reference after every batch.
fn run(
    msgs: &[Msg],
    sizes: &[usize],
    max_ids: usize,
    blocklist_after: u64,
    workers: usize,
    link_chunk: usize,
    cut: Option<usize>,
) -> Result<(), String> {
    let mut sim = Sim::with(max_ids, blocklist_after as i32, workers, link_chunk);
    sim.dedup = vec![DEDUP; TYPES.len()];
    let mut want = reference(max_ids, blocklist_after);
    // Each message as accepted: stamped with the clock it was received at.
    let mut clock = None;
    let events: Vec<Event> = msgs
        .iter()
        .map(|m| {
            if m.tick > 0 {
                clock = Some(clock.unwrap_or(T0) + m.tick);
            }
            Event {
                accepted: clock,
                ..m.event()
            }
        })
        .collect();
    let mut done = 0;
    for size in sizes.iter().cycle() {
        if done == msgs.len() {
            break;
        }
        let end = (done + size).min(msgs.len());
        let next = (end + size).min(msgs.len());
        sim.cut = cut;
        // Applied once the whole batch is in, the clock moved on since
        // its first event was accepted.
        sim.batch_then(events[done..end].to_vec(), &events[end..next]);
        for (m, e) in msgs[done..end].iter().zip(&events[done..end]) {
            receive(&mut want, m, e.accepted);
        }
        done = end;
        compare(&sim, &want).map_err(|e| format!("after {done} messages: {e}"))?;
    }
    Ok(())
}

/// Cases of the property test.
const CASES: u32 = 1000;

/// The pipeline, link stage and workers, batch after batch over the
/// tables they leave, know what the reference knows: persons, masters,
/// sizes, blocklist, refusals, per-type counts, first and last,
/// counters, trails, the merge log and counts by reason (stale copies
/// among them, judged by the clock each was accepted at while the
/// clock moves on before its batch is applied); on random streams
/// (1-59 messages), in batches of random sizes, with random `max_ids`
/// (1-6), `blocklist_after` (0-3), workers (1-3), link-stage
/// transaction sizes (1-7), and in half the cases every connection cut
/// after 0-11 transactions of each batch and its rest judged again, as
/// after a lost connection.
#[test]
fn the_core_agrees_with_the_reference() {
    let config = ProptestConfig {
        cases: CASES,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let case = (
        prop::collection::vec(msg(), 1..60),
        prop::collection::vec(1..20usize, 1..6),
        1..7usize,
        0..4u64,
        1..4usize,
        1..8usize,
        prop::option::of(0..12usize),
    );
    let result = proptest::test_runner::TestRunner::new(config).run(
        &case,
        |(msgs, sizes, max_ids, blocklist_after, workers, link_chunk, cut)| {
            let ran = run(
                &msgs,
                &sizes,
                max_ids,
                blocklist_after,
                workers,
                link_chunk,
                cut,
            );
            if let Err(e) = ran {
                let stream: Vec<String> = msgs.iter().map(|m| m.wire().1).collect();
                let stream = stream.join("\n");
                prop_assert!(
                    false,
                    "{}\nbatches {:?}, cut {:?}\nstream:\n{}",
                    e,
                    sizes,
                    cut,
                    stream
                );
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// "Once per distinct other person" when, within one event, the other
/// person grew by a merge between two refused steps: the anchor's person
/// (user:a's) stays one person as it grows, whichever side's number the
/// merge keeps (the larger's, s:1's, below), so p:1 and z:1 are charged
/// once each, as the reference charges them (until 2026-12-08 the core
/// charged them twice).
#[test]
fn a_person_grown_between_two_refusals_is_one_other_person() {
    let msg = |n: u128, user: Option<Value>, ids: Value| Msg {
        type_index: 0,
        n,
        ts: T0,
        user,
        ids: Some(ids),
        created: T0,
        tick: 0,
    };
    let msgs = [
        msg(1, None, json!({"p": "1", "q": "1", "r": "1", "z": "1"})),
        msg(2, None, json!({"s": "1", "t": "1"})),
        // user:a (new) vs p:1's person (4): refused; user:a + s:1's
        // (2): merged, into s:1's number; that (3) vs z:1's person (4):
        // refused.
        msg(3, Some(json!("a")), json!({"p": "1", "s": "1", "z": "1"})),
    ];
    let mut sim = Sim::new(4, 100);
    sim.batch(msgs.iter().map(Msg::event).collect());
    let mut want = reference(4, 100);
    for m in &msgs {
        receive(&mut want, m, None);
    }
    let once = [("p:1".to_string(), 1), ("z:1".to_string(), 1)];
    assert_eq!(want.refusals(), once);
    assert_eq!(compare(&sim, &want), Ok(()));
    assert_eq!(sim.db().counts["links_refused"], 2);
}

#[test]
fn one_event_one_batch_matches() {
    let msgs = vec![Msg {
        type_index: 1,
        n: 1,
        ts: T0,
        user: Some(json!("u0")),
        ids: Some(json!({"a": "1"})),
        created: T0,
        tick: 0,
    }];
    assert_eq!(run(&msgs, &[1], 50, 100, 2, 500, None), Ok(()));
}
