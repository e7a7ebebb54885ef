//! An oversized event costs only itself (SPEC 2, v1.3): an honest publisher
//! whose events now and then exceed 64 KiB (but not the 1 MiB transport
//! limit) loses those events and nothing else, on the same connection, row
//! by row against `tidemark-reference`.

use std::time::Duration;

use tidemark_reference as reference;
use tidemark_testkit::exact::*;
use tidemark_testkit::{Proc, Publisher, TestDb};

/// `line` padded past 64 KiB with an unknown field (SPEC 3 ignores those):
/// the same event, too large to accept.
fn padded(line: &str) -> String {
    let body = line.strip_suffix('}').expect("a JSON object");
    format!(r#"{body},"pad":"{}"}}"#, "x".repeat(70_000))
}

#[test]
fn oversized_events_cost_themselves_only_row_by_row() {
    let m = market("oversize", "60s", 300.0, &[]);
    let db = TestDb::new("oversize_alone");
    let mut publ = Publisher::new();
    let config = config_text(&[], "", "");
    let mut shard = Proc::shard(&db, "x", &publ.endpoint, &config);
    publ.wait_subscribed("tick", 2);
    let mut sent: Vec<Vec<Vec<u8>>> = Vec::new();
    let send = |sent: &mut Vec<Vec<Vec<u8>>>, f: Vec<Vec<u8>>| {
        publ.raw(&[&f[0], &f[1]]);
        sent.push(f);
    };
    let mut ticker = Ticker::default();
    let mut oversized = 0;
    for (i, line) in m.lines.iter().enumerate() {
        ticker.before(&publ, line);
        // Every 97th event goes out padded first (refused), then as it is.
        if i % 97 == 0 {
            let f = frames_of(line);
            send(&mut sent, vec![f[0].clone(), padded(line).into_bytes()]);
            oversized += 1;
        }
        if i % 211 == 0 {
            // A topic over 128 bytes, refused alone too.
            let f = frames_of(line);
            let mut topic = f[0].clone();
            topic.extend_from_slice(&[b'0'; 128]);
            send(&mut sent, vec![topic, f[1].clone()]);
            oversized += 1;
        }
        send(&mut sent, frames_of(line));
        if i % 500 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let end = m.end_ms + TAIL_MS;
    let mut t = ticker.last();
    while t < end {
        t = (t + 10_000).min(end);
        publ.tick(t);
        std::thread::sleep(Duration::from_millis(40));
    }
    wait_swept(
        &db,
        "x",
        end - LATENESS_MS - 1_000,
        Duration::from_secs(120),
    );
    shard.stop();
    eprintln!("{} events, {oversized} oversized", m.lines.len());
    assert!(m.lines.len() >= 10_000, "{}", m.lines.len());
    let sent: Vec<reference::Sent> = sent
        .into_iter()
        .map(|frames| reference::Sent {
            frames,
            clock_at_least: None,
        })
        .collect();
    assert_same("oversize", &observed(&db, "x"), &expected(&config, &sent));
    assert_eq!(counter(&db, "x", "rejected_oversize"), oversized);
    assert_eq!(counter(&db, "x", "connections_restored"), 0);
}
