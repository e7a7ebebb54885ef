//! TLS to PostgreSQL when the database URL asks for it (libpq's `sslmode`,
//! `sslrootcert`): a cluster of its own serving TLS on 127.0.0.1, a CA and
//! a certificate made by the `openssl` command, each mode checked by what
//! the server says of the session (`pg_stat_ssl`) or by the refusal.

use std::path::PathBuf;

use tidemark_testkit::{block_on, free_addr, query_i64, run_ok, Proc, Publisher, TestDb};

/// Whether the session of `url` is encrypted, as the server sees it; the
/// error's text when it cannot connect.
fn encrypted(url: &str) -> Result<bool, String> {
    let url = url.to_owned();
    block_on(async move {
        let c = tidemark_store::connect(&url)
            .await
            .map_err(|e| e.to_string())?;
        let row = c
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get(0))
    })
}

#[test]
fn the_url_asks_for_tls_and_gets_what_libpq_would_give() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tls");
    let home = dir.join("home");
    let cluster = tidemark_store::Cluster::new(&home).unwrap();
    let _ = cluster.destroy();
    // Stopped however the test ends.
    struct Down(tidemark_store::Cluster);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = self.0.destroy();
        }
    }
    let _down = Down(tidemark_store::Cluster::new(&home).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    tidemark_testkit::certificates(&dir.join("certs")).unwrap();
    let port: u16 = free_addr().rsplit(':').next().unwrap().parse().unwrap();
    let certs = dir.join("certs");
    run_ok(&[
        "db",
        "up",
        "--home",
        home.to_str().unwrap(),
        "--port",
        &port.to_string(),
        "--tls-cert",
        certs.join("server.crt").to_str().unwrap(),
        "--tls-key",
        certs.join("server.key").to_str().unwrap(),
    ]);
    let socket_url = cluster.url();
    let ca = dir.join("certs/ca.crt").display().to_string();
    let other = dir.join("certs/other.crt").display().to_string();
    // TCP asks for the password `db up` generated (SPEC 9).
    let pw = cluster.password().unwrap();
    let url = |host: &str, query: &str| {
        format!("postgresql://tidemark:{pw}@{host}:{port}/tidemark?{query}")
    };
    tidemark_testkit::wait_for("the server serving TLS", || {
        encrypted(&url("127.0.0.1", "sslmode=require"))
            .ok()
            .filter(|s| *s)
    });

    let full = url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert_eq!(encrypted(&url("127.0.0.1", "sslmode=disable")), Ok(false));
    assert_eq!(encrypted(&url("127.0.0.1", "sslmode=prefer")), Ok(true));
    assert_eq!(
        encrypted(&url("127.0.0.1", "")),
        Ok(true),
        "prefer by default"
    );
    assert_eq!(encrypted(&full), Ok(true));
    // verify-ca checks the chain only: a name the certificate lacks passes.
    let by_name =
        |mode: &str, root: &str| url("localhost", &format!("sslmode={mode}&sslrootcert={root}"));
    assert_eq!(encrypted(&by_name("verify-ca", &ca)), Ok(true));
    let e = encrypted(&by_name("verify-full", &ca)).unwrap_err();
    assert!(e.contains("certificate") && e.contains("localhost"), "{e}");
    // Another CA: refused by verify-ca, and by require too once a root file is
    // given (libpq's rule), but not by require without one.
    let e = encrypted(&url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={other}"),
    ))
    .unwrap_err();
    assert!(
        e.contains("UnknownIssuer") || e.contains("unknown issuer"),
        "{e}"
    );
    let e = encrypted(&url(
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={other}"),
    ))
    .unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");
    let e = encrypted(&url(
        "127.0.0.1",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
    ))
    .unwrap_err();
    assert!(
        e.contains("sslmode=verify-full needs the server's root certificate"),
        "{e}"
    );
    let e = encrypted(&url("127.0.0.1", "sslmode=sometimes")).unwrap_err();
    assert!(e.contains("invalid sslmode"), "{e}");
    // libpq's key=value form.
    let pairs = format!(
        "host=127.0.0.1 port={port} user=tidemark password={pw} dbname=tidemark sslmode=verify-full sslrootcert='{ca}'"
    );
    assert_eq!(encrypted(&pairs), Ok(true));

    // A shard and a bidder's lookup over TLS, seen encrypted by the server.
    let db = TestDb::external("tidemark", &full);
    let publisher = Publisher::new();
    let mut shard = Proc::shard(&db, "tls", &publisher.endpoint, "");
    let sessions = |name: &str| {
        query_i64(
            &socket_url,
            &format!(
                "SELECT count(*) FILTER (WHERE s.ssl) * 1000 + count(*) FROM pg_stat_activity a
                 JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = '{name}'"
            ),
        )
    };
    tidemark_testkit::wait_for("the shard's sessions", || {
        sessions("tidemark shard tls").filter(|n| *n > 0)
    });
    let n = sessions("tidemark shard tls").unwrap();
    assert_eq!(
        n / 1000,
        n % 1000,
        "every session of the shard encrypted ({n})"
    );
    shard.stop();
    let out = run_ok(&[
        "profile",
        "get",
        "user:nobody",
        "--json",
        "--database-url",
        &full,
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("user:nobody"));
    cluster.destroy().unwrap();
}
