//! Late labels learned early (SPEC 5, v1.3), one transaction at a time with
//! explicit ticks: a `provisional` 0 at the `install_short` sweep, a `late`
//! 1 as soon as the install arrives (before that sweep, inside its grace; or
//! after it, across a restart and a `kill -9`), a `final` 0 at the long
//! window's end otherwise, each once, in `seq` order.

use std::collections::BTreeMap;
use std::time::Duration;

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
