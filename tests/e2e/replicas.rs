//! A replica's lag as readers see it (`tidemark.profile_status.replica_lag_ms`,
//! `--max-lag`): a receiver that stalls still says `streaming` and has
//! replayed all it received, so only its silence tells that it fell behind.

use std::time::Duration;

use tidemark_testkit::{bin, block_on, run_ok, tmp_dir, wait_until};

/// The standby's lag as its view reports it.
fn lag_ms(standby: &str) -> i64 {
    let s = standby.to_owned();
    block_on(async move {
        let c = tidemark_store::connect(&s).await.unwrap();
        c.query_one(
            "SELECT replica_lag_ms FROM tidemark.profile_status WHERE name = 'lag_test'",
            &[],
        )
        .await
        .map(|r| r.get::<_, Option<i64>>(0).unwrap_or(-1))
        .unwrap_or(-1)
    })
}

/// Which server `profile get` read from, within `max_lag`.
fn served(primary: &str, standby: &str, max_lag: &str) -> &'static str {
    let out = bin()
        .args(["profile", "get", "user:u1", "--json"])
        .args(["--database-url", primary, "--replica", standby])
        .args(["--max-lag", max_lag])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    match said.contains("served by replica") {
        true => "replica",
        false => "primary",
    }
}

/// Sends a signal to a process (`kill -SIG pid`).
fn signal(sig: &str, pid: i32) {
    assert!(
        tidemark_testkit::signal(pid as u32, sig),
        "kill -{sig} {pid}"
    );
}

/// Resumes a stopped process however the test ends.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal("CONT", self.0);
    }
}

#[test]
fn a_replica_whose_receiver_stalls_reads_as_lagging_and_readers_leave_it() {
    let home = tmp_dir().join(format!("replica-stall-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let h = home.to_str().unwrap();
    let out = run_ok(&["db", "up", "--standby", "--home", h]);
    let urls = String::from_utf8(out.stdout).unwrap();
    let [primary, standby] = urls.lines().collect::<Vec<_>>()[..] else {
        panic!("two URLs: {urls}")
    };
    let p = primary.to_owned();
    block_on(async move {
        let c = tidemark_store::connect(&p).await.unwrap();
        c.batch_execute(
            "INSERT INTO tidemark.profile_process (name, clock_ms) VALUES ('lag_test', 1)",
        )
        .await
        .unwrap();
    });
    // Caught up and streaming: within a small lag, and read from.
    let (limit, every) = (Duration::from_secs(60), Duration::from_millis(200));
    wait_until("the standby caught up", limit, every, || {
        (0..1000).contains(&lag_ms(standby)).then_some(())
    });
    assert_eq!(served(primary, standby, "5s"), "replica");
    let s = standby.to_owned();
    let receiver: i32 = block_on(async move {
        let c = tidemark_store::connect(&s).await.unwrap();
        c.query_one("SELECT pid FROM pg_stat_wal_receiver", &[])
            .await
            .unwrap()
            .get(0)
    });
    signal("STOP", receiver);
    let resume = Resume(receiver);
    let p = primary.to_owned();
    block_on(async move {
        let c = tidemark_store::connect(&p).await.unwrap();
        c.batch_execute("UPDATE tidemark.profile_process SET clock_ms = 2 WHERE name = 'lag_test'")
            .await
            .unwrap();
    });
    // The embedded standby's receiver pings a silent primary after 5 s:
    // past that, its silence is lag.
    let lag = wait_until("the stalled replica's lag to grow", limit, every, || {
        Some(lag_ms(standby)).filter(|l| *l > 2000)
    });
    assert_eq!(served(primary, standby, "1s"), "primary", "lag {lag} ms");
    drop(resume);
    // Caught up, readers come back to it. (Not at once: between the view
    // saying so and the reader asking, newly received WAL not yet replayed
    // makes the lag read as the age of the last transaction replayed, the
    // update made during the stall; CI's loaded box showed it once.)
    wait_until("readers back on the resumed replica", limit, every, || {
        ((0..1000).contains(&lag_ms(standby)) && served(primary, standby, "5s") == "replica")
            .then_some(())
    });
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    cluster.destroy().unwrap();
    std::fs::remove_dir_all(&home).unwrap();
}
