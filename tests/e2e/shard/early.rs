//! Late labels learned early (SPEC 5, v1.3), one transaction at a time with
//! explicit ticks: a `provisional` 0 at the `install_short` sweep, a `late`
//! 1 as soon as the install arrives (before that sweep, inside its grace; or
//! after it, across a restart and a `kill -9`), a `final` 0 at the long
//! window's end otherwise, each once, in `seq` order; and a market's rows
//! against the reference, learned offline as the online learner weighs them.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_reference as reference;
use tidemark_testkit::exact::{
    assert_same, config_text, expected, finish, free_endpoint, market, observed, replay, sent_of,
    wait_all_swept,
};
use tidemark_testkit::run_ok;

use super::*;

/// Event clock without lateness; install windows 120s/300s with 10s of grace.
const EARLY: &str = r#"
clock = "event"
lateness = "0s"
publisher_timeout = "1h"
period = "100ms"
batch_delay = "20ms"
[windows]
impression = "10s"
click = "60s"
install_short = "120s"
install_long = "300s"
[grace]
impression = "0s"
click = "0s"
install_short = "10s"
install_long = "10s"
[feedback]
cvr_long = "early"
"#;

/// `(target, txid) -> [(kind, label, delay_ms)]` in `seq` order.
type Stream = BTreeMap<(String, String), Vec<(String, i16, Option<i64>)>>;

fn stream(db: &TestDb) -> Stream {
    let mut out = Stream::new();
    let rows = query_rows(
        &db.url,
        "SELECT target, txid, kind, label::text, delay_ms::text FROM tidemark.observations ORDER BY seq",
    );
    for r in rows {
        let s = |i: usize| r[i].clone().unwrap();
        out.entry((s(0), s(1))).or_default().push((
            s(2),
            s(3).parse().unwrap(),
            r[4].as_deref().map(|d| d.parse().unwrap()),
        ));
    }
    out
}

fn shown_and_clicked(publ: &mut Publisher, x: &Txid) {
    let c = x.created_ms() as i64;
    publ.event("bid", x, c + 10, BID);
    publ.event("impression", x, c + 500, "");
    publ.event("click", x, c + S, "");
}

#[test]
fn an_early_target_emits_provisional_then_late_or_final_once_each() {
    let db = TestDb::new("early");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "e", &publ.endpoint, EARLY);
    publ.wait_subscribed("tick", 2);
    publ.tick(T0 - 20 * S);
    let c = T0;
    let x = |n: u128| tx(n, c);
    // 1: an install in the long window, received inside the grace before the
    //    install_short sweep (c + 130s): late in the provisional batch.
    // 2: an install received after that sweep, before a restart: late at the next sweep.
    // 3: an install received after a restart and a kill -9: late then.
    // 4: no install: final 0 at the long sweep (c + 310s).
    // 5: an install in the short window: cvr_short 1, cvr_long final 0.
    // 6: an install received after the long sweep: late for it, final 0.
    // 7: not clicked: ctr only.
    for n in 1..=6 {
        shown_and_clicked(&mut publ, &x(n));
    }
    publ.event("bid", &x(7), c + 10, BID);
    publ.event("impression", &x(7), c + 500, "");
    publ.event("install", &x(5), c + 30 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    publ.tick_steps(T0 - 20 * S, c + 125 * S);
    wait_clock(&db, "e", c + 125 * S);
    publ.event("install", &x(1), c + 125 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    publ.tick(c + 131 * S);
    wait_clock(&db, "e", c + 131 * S);
    let s = stream(&db);
    let long = |s: &Stream, n: u128| s.get(&("cvr_long".to_owned(), x(n).to_string())).cloned();
    let p = ("provisional".to_owned(), 0, None);
    assert_eq!(
        long(&s, 1),
        Some(vec![p.clone(), ("late".into(), 1, Some(125 * S))])
    );
    for n in [2, 3, 4, 5, 6] {
        assert_eq!(long(&s, n), Some(vec![p.clone()]), "{n}");
    }
    assert_eq!(long(&s, 7), None);

    publ.event("install", &x(2), c + 140 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    publ.tick(c + 150 * S);
    wait_clock(&db, "e", c + 150 * S);
    assert_eq!(
        long(&stream(&db), 2),
        Some(vec![p.clone(), ("late".into(), 1, Some(140 * S))])
    );

    shard.stop();
    shard.restart();
    publ.wait_subscribed("tick", 4);
    publ.event("install", &x(3), c + 200 * S, "");
    // An earlier-stamped copy of 2's install changes nothing now.
    publ.event("install", &x(2), c + 130 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    shard.kill9();
    shard.restart();
    publ.wait_subscribed("tick", 6);
    // What the killed process held is sent again, as a retrying publisher would.
    publ.event("install", &x(3), c + 200 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    publ.tick(c + 250 * S);
    wait_clock(&db, "e", c + 250 * S);
    assert_eq!(
        long(&stream(&db), 3),
        Some(vec![p.clone(), ("late".into(), 1, Some(200 * S))])
    );

    publ.tick_steps(c + 250 * S, c + 400 * S);
    wait_clock(&db, "e", c + 400 * S);
    publ.event("install", &x(6), c + 290 * S, "");
    std::thread::sleep(Duration::from_millis(300));
    shard.stop();

    let s = stream(&db);
    let fin = ("final".to_owned(), 0, None);
    assert_eq!(
        long(&s, 2),
        Some(vec![p.clone(), ("late".into(), 1, Some(140 * S))])
    );
    assert_eq!(long(&s, 4), Some(vec![p.clone(), fin.clone()]));
    assert_eq!(long(&s, 5), Some(vec![p.clone(), fin.clone()]));
    assert_eq!(long(&s, 6), Some(vec![p.clone(), fin.clone()]));
    let short = |n: u128| s[&("cvr_short".to_owned(), x(n).to_string())].clone();
    assert_eq!(short(5), vec![("final".to_owned(), 1, None)]);
    assert_eq!(short(1), vec![fin.clone()]);
    assert_eq!(
        s[&("ctr".to_owned(), x(7).to_string())],
        vec![("final".to_owned(), 0, None)]
    );
    assert_eq!(s.len(), 7 + 6 * 2);
    assert_eq!(
        counter(&db, "e", "late_install"),
        1,
        "6's; 2's old copy was in time, and changed nothing"
    );
    // seq is gap-free from 1; matured rows are what `kind <> 'provisional'` reads.
    let r = query_rows(
        &db.url,
        "SELECT count(*)::text, max(seq)::text, count(*) FILTER (WHERE kind <> 'provisional')::text FROM tidemark.observations",
    );
    assert_eq!(r[0][0], r[0][1]);
    assert_eq!(r[0][2].as_deref(), Some("19"));
    // Nothing is left behind in the buffer once every phase has passed.
    assert_eq!(
        query_i64(&db.url, "SELECT count(*) FROM shard_e.early"),
        Some(0)
    );
}

/// A shard that learned cvr_long from final labels, restarted learning it
/// early: transactions already past their `install_short` sweep get their
/// provisional row at the first sweep, before any late or final one.
#[test]
fn turning_early_on_gives_members_in_flight_their_provisional_row() {
    let db = TestDb::new("early_on");
    let mut publ = Publisher::new();
    let plain = EARLY.replace("[feedback]\ncvr_long = \"early\"\n", "");
    let mut shard = Proc::shard(&db, "o", &publ.endpoint, &plain);
    publ.wait_subscribed("tick", 2);
    publ.tick(T0 - 20 * S);
    let (installed, none) = (tx(1, T0), tx(2, T0));
    for x in [&installed, &none] {
        shown_and_clicked(&mut publ, x);
    }
    std::thread::sleep(Duration::from_millis(200));
    publ.tick_steps(T0 - 20 * S, T0 + 140 * S);
    wait_clock(&db, "o", T0 + 140 * S);
    shard.stop();
    let mut shard = Proc::shard(&db, "o", &publ.endpoint, EARLY);
    publ.wait_subscribed("tick", 4);
    publ.event("install", &installed, T0 + 200 * S, "");
    std::thread::sleep(Duration::from_millis(200));
    publ.tick_steps(T0 + 140 * S, T0 + 400 * S);
    wait_clock(&db, "o", T0 + 400 * S);
    shard.stop();
    let s = stream(&db);
    let long = |x: &Txid| s[&("cvr_long".to_owned(), x.to_string())].clone();
    let p = ("provisional".to_owned(), 0, None);
    assert_eq!(
        long(&installed),
        vec![p.clone(), ("late".into(), 1, Some(200 * S))]
    );
    assert_eq!(long(&none), vec![p, ("final".into(), 0, None)]);
}

#[test]
fn exact_with_early_feedback_for_built_in_and_configured_targets() {
    // Long enough that installs land in the long window (120s–300s after
    // creation) before the market's span ends.
    let m = market(
        "early",
        "8m",
        100.0,
        &["--custom-types", "open", "--delays", "criteo"],
    );
    let targets = r#"
[feedback]
cvr_long = "early"
[[targets]]
name = "open_late"
given = "click"
event = "open"
after = "20s"
until = "90s"
grace = "5s"
feedback = "early"
"#;
    let db = TestDb::new("early");
    let endpoint = free_endpoint();
    let config = config_text(&[], r#"custom_types = ["open"]"#, targets);
    let mut shard = Proc::shard(&db, "x", &endpoint, &config);
    finish(replay(&m.path, &endpoint, "0"));
    wait_all_swept(&db, "x", &m);
    shard.stop();
    let want = expected(&config, &sent_of(&m.lines));
    for t in ["cvr_long", "open_late"] {
        let late = want
            .iter()
            .filter(|((target, _), e)| target == t && e.kind == reference::Kind::Late)
            .count();
        assert!(late > 0, "{t}: no late row to check");
    }
    assert_same("early", &observed(&db, "x"), &want);
    early_rows_learned_offline(&db);
}

/// `export --kinds all` carries every row and its kind; `learn --input`
/// weighs them by kind (docs/learner.md) and measures matured rows only.
fn early_rows_learned_offline(db: &TestDb) {
    let dir = tidemark_testkit::tmp_dir().join("exact");
    let (tsv, weights) = (dir.join("early.tsv"), dir.join("early.weights"));
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    run_ok(&[
        "export",
        "--target",
        "cvr_long",
        "--kinds",
        "all",
        "--database-url",
        &db.url,
        "--output",
        &path(&tsv),
    ]);
    let text = std::fs::read_to_string(&tsv).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("label\t:kind\t:txid\t"));
    let kinds: Vec<(String, String)> = lines
        .map(|l| {
            let mut c = l.split('\t');
            (c.next().unwrap().to_owned(), c.next().unwrap().to_owned())
        })
        .collect();
    let count = |k: &str| kinds.iter().filter(|(_, kind)| kind == k).count() as i64;
    let in_db = |k: &str| {
        query_i64(
            &db.url,
            &format!("SELECT count(*) FROM tidemark.observations WHERE target = 'cvr_long' AND kind = '{k}'"),
        )
        .unwrap()
    };
    for k in ["provisional", "late", "final"] {
        assert_eq!(count(k), in_db(k), "{k}");
    }
    assert_eq!(count("provisional"), count("late") + count("final"));
    let out = run_ok(&[
        "learn",
        "--input",
        &path(&tsv),
        "--header",
        "--json",
        "--weights",
        &path(&weights),
    ]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["rows"], count("late") + count("final"));
    assert_eq!(r["provisional"], count("provisional"));
    assert_eq!(r["positives"], count("late"));
    let w: Vec<f64> = std::fs::read_to_string(&weights)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(w.len(), kinds.len());
    for ((label, kind), w) in kinds.iter().zip(&w) {
        match kind.as_str() {
            "late" => assert_eq!((label.as_str(), *w), ("1", 1.0)),
            "final" => assert_eq!((label.as_str(), *w), ("0", 0.0)),
            _ => assert!(label == "0" && (0.0..=1.0).contains(w), "{w}"),
        }
    }
    // Matured only, as export writes by default: no kind column.
    let out = run_ok(&["export", "--target", "cvr_long", "--database-url", &db.url]);
    let matured = String::from_utf8(out.stdout).unwrap();
    assert!(!matured.starts_with("label\t:kind"));
    assert_eq!(
        matured.lines().count() as i64,
        1 + count("late") + count("final")
    );
}

/// The database refuses an early target's row (SPEC 12): it is set aside in
/// `tidemark.emission_gaps` once, its member gets no further row of that
/// target (no late row after a refused provisional one, no final 0 after a
/// refused late one), and the other members go on.
#[test]
fn an_early_row_the_database_refuses_is_set_aside_once_and_ends_its_member() {
    let db = TestDb::new("early_refused");
    let mut publ = Publisher::new();
    let mut shard = Proc::shard(&db, "r", &publ.endpoint, EARLY);
    publ.wait_subscribed("tick", 2);
    // A constraint stands in for any value PostgreSQL cannot take: a bid
    // whose `poison` feature names a kind has its row of that kind refused.
    let refuse = "ALTER TABLE tidemark.observations ADD CONSTRAINT no_poison \
                  CHECK (features->>'poison' IS DISTINCT FROM kind)";
    let url = db.url.clone();
    tidemark_testkit::block_on(async move {
        let c = tidemark_store::connect(&url).await.unwrap();
        c.batch_execute(refuse).await.unwrap()
    });
    publ.tick(T0 - 20 * S);
    let c = T0;
    let (late, prov, ok) = (tx(1, c), tx(2, c), tx(3, c));
    for (x, features) in [
        (&late, r#""features":{"poison":"late"}"#),
        (&prov, r#""features":{"poison":"provisional"}"#),
        (&ok, BID),
    ] {
        publ.event("bid", x, c + 10, features);
        publ.event("impression", x, c + 500, "");
        publ.event("click", x, c + S, "");
    }
    std::thread::sleep(Duration::from_millis(200));
    // Past the install_short sweep (c + 130s): the provisional rows.
    publ.tick_steps(T0 - 20 * S, c + 135 * S);
    wait_clock(&db, "r", c + 135 * S);
    for x in [&late, &prov, &ok] {
        publ.event("install", x, c + 140 * S, "");
    }
    std::thread::sleep(Duration::from_millis(200));
    // Through the long window's end (c + 310s), sweep after sweep.
    publ.tick_steps(c + 135 * S, c + 400 * S);
    wait_clock(&db, "r", c + 400 * S);
    shard.stop();
    let s = stream(&db);
    let long = |x: &Txid| s.get(&("cvr_long".to_owned(), x.to_string())).cloned();
    let p = ("provisional".to_owned(), 0, None);
    assert_eq!(long(&late), Some(vec![p.clone()]), "no final 0 after it");
    assert_eq!(long(&prov), None, "no late row without its provisional one");
    assert_eq!(
        long(&ok),
        Some(vec![p, ("late".to_owned(), 1, Some(140 * S))])
    );
    // Their other targets' rows are final ones, which the constraint takes.
    for x in [&late, &prov] {
        assert!(s.contains_key(&("ctr".to_owned(), x.to_string())));
    }
    let mut gaps = query_rows(
        &db.url,
        "SELECT target, txid FROM tidemark.emission_gaps WHERE shard = 'r'",
    );
    gaps.sort();
    let mut want = vec![
        vec![Some("cvr_long".to_owned()), Some(late.to_string())],
        vec![Some("cvr_long".to_owned()), Some(prov.to_string())],
    ];
    want.sort();
    assert_eq!(gaps, want, "each set aside once");
    assert_eq!(counter(&db, "r", "emission_gaps"), 2);
}
