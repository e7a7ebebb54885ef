//! The embedded cluster's secrets and files, as an attacker on the same
//! machine meets them (SPEC 9): the password shows in no log and in no
//! output of `db up`, and a link the server's user plants in its own
//! directory is not followed by root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use tidemark_testkit::{block_on, free_addr, run_ok, tmp_dir};

/// A fresh home only its owner can enter, and its cluster destroyed on drop.
struct Home(PathBuf);

impl Home {
    fn new(label: &str) -> Home {
        let dir = tmp_dir().join(format!("secrets-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        Home(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn cluster(&self) -> tidemark_store::Cluster {
        tidemark_store::Cluster::new(&self.0).unwrap()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        if let Ok(c) = tidemark_store::Cluster::new(&self.0) {
            let _ = c.destroy();
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn port() -> String {
    free_addr().rsplit(':').next().unwrap().to_owned()
}

#[test]
fn the_password_shows_in_no_server_log_and_no_output_of_db_up() {
    let home = Home::new("password");
    let port = port();
    run_ok(&["db", "up", "--home", home.path(), "--port", &port]);
    let cluster = home.cluster();
    let socket = cluster.url();
    // Every statement logged from now on, as an operator debugging might.
    block_on(async move {
        let c = tidemark_store::connect(&socket).await.unwrap();
        c.batch_execute("ALTER SYSTEM SET log_statement = 'all'")
            .await
            .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = run_ok(&["db", "up", "--home", home.path(), "--port", &port]);
    let password = cluster.password().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!printed.contains(&password), "db up printed it: {printed}");
    let log = std::fs::read_to_string(cluster.dir().join("server.log")).unwrap();
    assert!(
        log.contains("pg_advisory_xact_lock"),
        "statements are logged: {log}"
    );
    assert!(!log.contains(&password), "the server logged it: {log}");
    // And it is still the password TCP asks for.
    let url = String::from_utf8(run_ok(&["db", "url", "--home", home.path()]).stdout).unwrap();
    assert!(url.contains(&password), "{url}");
    let url = url.trim().to_owned();
    block_on(async move { tidemark_store::connect(&url).await.map(|_| ()) }).unwrap();
}

/// As root the server runs as an unprivileged user, who owns its directory
/// and could plant links there; links at the names `db up` writes (the TLS
/// key and certificate, the settings and their temporaries) must leave the
/// files they point at untouched, in content and owner.
#[test]
fn links_planted_in_the_data_directory_are_replaced_not_followed() {
    if !std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        eprintln!("not root: the server runs as this user, whose own links are its business");
        return;
    }
    let home = Home::new("links");
    run_ok(&["db", "up", "--home", home.path()]);
    let cluster = home.cluster();
    let data = cluster.dir().join("data");
    let certs = home.0.join("certs");
    tidemark_testkit::certificates(&certs).unwrap();
    // Root's files, which only root may read or write.
    let victims = home.0.join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    let planted = [
        "server.key",
        "server.crt",
        "tidemark.conf.tmp",
        "pg_hba.conf.tmp",
    ];
    for name in planted {
        let victim = victims.join(name);
        std::fs::write(&victim, "root's own\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = data.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
    }
    let port = port();
    run_ok(&[
        "db",
        "up",
        "--home",
        home.path(),
        "--port",
        &port,
        "--tls-cert",
        certs.join("server.crt").to_str().unwrap(),
        "--tls-key",
        certs.join("server.key").to_str().unwrap(),
    ]);
    for name in planted {
        let victim = victims.join(name);
        let m = std::fs::metadata(&victim).unwrap();
        assert_eq!(
            (std::fs::read_to_string(&victim).unwrap().as_str(), m.uid()),
            ("root's own\n", 0),
            "{name}'s link was followed"
        );
    }
    for name in ["server.key", "server.crt", "tidemark.conf"] {
        let m = std::fs::symlink_metadata(data.join(name)).unwrap();
        assert!(m.file_type().is_file(), "{name} is a file of its own");
        assert_ne!(m.uid(), 0, "{name} belongs to the server's user");
        assert_eq!(m.mode() & 0o777, 0o600, "{name}");
    }
    let key = std::fs::read(certs.join("server.key")).unwrap();
    assert_eq!(std::fs::read(data.join("server.key")).unwrap(), key);
}
