//! Hostile and broken peers against real processes (issue "trust
//! boundary"): what each one is refused, what is counted, and that honest
//! traffic is kept.

use std::time::Duration;

use tidemark_testkit::exact::counter;
use tidemark_testkit::{now_ms, wait_for, Publisher, ShardProc, TestDb};
use tidemark_wire::Txid;

const BID: &str = r#""features":{"app":"a"}"#;

/// A panic on the intake thread ends the process with a failure status (so
/// `Restart=on-failure` restarts it), after what intake had accepted is
/// written.
#[test]
fn a_panic_in_intake_exits_non_zero_after_writing_what_was_accepted() {
    let db = TestDb::new("panic");
    let mut publ = Publisher::new();
    let mut shard = ShardProc::start_env(
        "shard",
        &db,
        "p",
        &publ.endpoint,
        "batch_delay = \"20ms\"",
        &[("TIDEMARK_FAULT", "intake_panic")],
    );
    publ.wait_subscribed("tick", 2);
    let now = now_ms();
    for n in 0..5u128 {
        publ.event("bid", &Txid::new(n, now as u64), now, BID);
    }
    let fault = format!(r#"{BID},"fault":1"#);
    publ.event("bid", &Txid::new(9, now as u64), now, &fault);
    let status = wait_for("the shard to exit", || {
        std::thread::sleep(Duration::from_millis(50));
        shard.child.try_wait().unwrap()
    });
    let log = shard.log();
    assert!(!status.success(), "{status}; log:\n{log}");
    assert!(log.contains("fault injected: intake_panic"), "{log}");
    assert_eq!(counter(&db, "p", "received_bid"), 5, "{log}");
    assert_eq!(counter(&db, "p", "rows_written"), 5, "{log}");
}
