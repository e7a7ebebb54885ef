//! A shard and the profile process started before their database can be
//! reached (a host booting, PostgreSQL restarting, sessions cut while they
//! start) wait for it, retrying with back-off while hearing a stop, then
//! run as if it had been there all along.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use tidemark_testkit::exact::{config_text, free_endpoint};
use tidemark_testkit::profiles::{fence, profile_get};
use tidemark_testkit::{now_ms, tmp_dir, wait_for, Proc, Publisher, TestDb};

/// The Unix socket directory and port of a test database's URL.
fn socket_of(url: &str) -> (String, String) {
    let param = |key: &str| {
        let start = url.find(&format!("{key}=")).expect(key) + key.len() + 1;
        let rest = &url[start..];
        rest[..rest.find('&').unwrap_or(rest.len())].to_owned()
    };
    (param("host"), param("port"))
}

/// Forwards every connection made to `from` to PostgreSQL's socket `to`,
/// from when it is made: until then the URL pointing at `from` finds
/// nothing there, as when a server is not up yet.
fn forward(from: &Path, to: PathBuf) {
    let listener = UnixListener::bind(from).unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = UnixStream::connect(&to) else {
                continue;
            };
            let pipe = |mut a: UnixStream, mut b: UnixStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b);
                    let _ = b.shutdown(std::net::Shutdown::Write);
                })
            };
            pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
            pipe(server, client);
        }
    });
}

/// A URL to the database `db` through the socket directory `dir`, where
/// nothing listens yet.
fn later_url(db: &TestDb, label: &str) -> (String, PathBuf, PathBuf) {
    let (host, port) = socket_of(&db.url);
    let dir = tmp_dir().join(format!("later-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!(".s.PGSQL.{port}");
    let url = db.url.replacen(
        &format!("host={host}"),
        &format!("host={}", dir.display()),
        1,
    );
    (url, dir.join(&name), PathBuf::from(host).join(name))
}

fn wait_logged(proc: &Proc, what: &str) {
    wait_for(what, || proc.log().contains(what).then_some(()));
}

#[test]
fn a_shard_and_the_profile_process_wait_for_their_database() {
    let db = TestDb::new("later");
    let (url, socket, real) = later_url(&db, "up");
    let late = TestDb::external(&db.name, &url);
    let mut publ = Publisher::new();
    let config = "clock = \"wall\"\nbatch_delay = \"20ms\"\n";
    let mut profiles = Proc::profiles(&late, "later", &publ.endpoint, config);
    let mut shard = Proc::shard(&late, "x", &free_endpoint(), config_text(&[], "", ""));
    wait_logged(&profiles, "starting: database unavailable, retrying");
    wait_logged(&shard, "starting: database unavailable, retrying");
    // Each retry line names its process.
    wait_logged(&profiles, "starting{name=later}");
    wait_logged(&shard, "starting{shard=x}");
    forward(&socket, real);
    wait_logged(&shard, "shard started");
    wait_logged(&profiles, "profile process started");
    // Not only started: events published now are applied.
    publ.wait_subscribed("tick", 2);
    let now = now_ms();
    fence(&mut publ, &db.url, "later", now);
    assert_eq!(
        profile_get(&db.url, &["user:later"], now)[0]["counts"],
        serde_json::json!({"impression": 1, "click": 1})
    );
    profiles.stop();
    shard.stop();
    // The retries are counted as the database errors they were.
    let stopped = profiles.log();
    let stopped = stopped
        .lines()
        .find(|l| l.contains("profile process stopped cleanly"))
        .expect("a clean stop");
    assert!(stopped.contains("\"db_errors_transient\": "), "{stopped}");
}

#[test]
fn a_stop_while_waiting_for_the_database_is_clean() {
    let db = TestDb::new("never");
    let (url, _, _) = later_url(&db, "never");
    let never = TestDb::external(&db.name, &url);
    let mut shard = Proc::shard(&never, "x", &free_endpoint(), config_text(&[], "", ""));
    let mut profiles = Proc::profiles(&never, "never", &free_endpoint(), "");
    wait_logged(&shard, "starting: database unavailable, retrying");
    wait_logged(&profiles, "starting: database unavailable, retrying");
    shard.stop();
    profiles.stop();
    assert!(shard.log().contains("shard stopped before it started"));
    assert!(profiles
        .log()
        .contains("profile process stopped before it started"));
}

/// The sessions of a shard and a profile process cut again and again from
/// before they connect, for their first 15 s (migrations of an empty
/// database, schema, the start-up reads, then their work): each start-up step is retried,
/// neither process exits, and both end up serving.
#[test]
fn sessions_cut_while_they_start_are_retried_until_both_serve() {
    let db = TestDb::new("startcut");
    // Unmigrated, so the processes' migrations run under the cuts too.
    tidemark_testkit::Operator::begin(&db.url, "DROP SCHEMA tidemark CASCADE").commit();
    // Any session of the test database but the cutter's own.
    let cutter = tidemark_testkit::Cutter::start(&db.url, "%", 5, 60, false);
    let mut publ = Publisher::new();
    let config = "clock = \"wall\"\nbatch_delay = \"20ms\"\n";
    let mut profiles = Proc::profiles(&db, "startcut", &publ.endpoint, config);
    let mut shard = Proc::shard(&db, "x", &free_endpoint(), config_text(&[], "", ""));
    std::thread::sleep(std::time::Duration::from_secs(15));
    let cuts = cutter.stop();
    wait_logged(&shard, "shard started");
    wait_logged(&profiles, "profile process started");
    publ.wait_subscribed("tick", 2);
    let now = now_ms();
    fence(&mut publ, &db.url, "startcut", now);
    profiles.stop();
    shard.stop();
    assert!(cuts >= 5, "only {cuts} sessions cut");
    for (log, what) in [(shard.log(), "shard"), (profiles.log(), "profiles")] {
        assert!(
            log.contains("database unavailable, retrying") || log.contains("transient"),
            "the {what} met the cuts: {log}"
        );
    }
}
