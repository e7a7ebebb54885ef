//! Operations: what TLS to PostgreSQL costs, and what a metrics
//! scrape costs. One cluster of its own, listening on 127.0.0.1 with TLS on
//! (a CA and certificate made by the `openssl` command), measured in one run
//! three ways: the unix socket, TCP without TLS, TCP with `verify-full`.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use tidemark_store::Cluster;

const PORT: u16 = 55_433;

/// A cluster serving TLS on 127.0.0.1:PORT; returns the CA's path.
async fn tls_cluster(home: &Path) -> anyhow::Result<(Cluster, String)> {
    let cluster = Cluster::new(home)?;
    let _ = cluster.destroy();
    let certs = home.join("certs");
    tidemark_testkit::certificates(&certs).map_err(anyhow::Error::msg)?;
    cluster.use_tls(&certs.join("server.crt"), &certs.join("server.key"))?;
    tidemark_store::up(&cluster, Some(PORT)).await?;
    Ok((cluster, certs.join("ca.crt").display().to_string()))
}

fn quantiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    (q(0.5), q(0.99))
}

/// Connect and first query; lookups of 1 and 100 identifiers; COPY.
async fn measure(label: &str, url: &str, samples: usize, copy_rows: usize) -> anyhow::Result<()> {
    let mut connects = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let c = tidemark_store::connect(url).await?;
        crate::store::ping(&c).await?;
        connects.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let c = tidemark_store::connect(url).await?;
    let ssl = crate::store::ssl(&c).await?;
    let reader = tidemark_reader::Reader::new(url, 1)?;
    let ids: Vec<String> = (0..100).map(|i| format!("user:bench{i}")).collect();
    let mut lookups = [Vec::new(), Vec::new()];
    for (k, n) in [1, 100].into_iter().enumerate() {
        let asked: Vec<&str> = ids[..n].iter().map(String::as_str).collect();
        reader.get(&asked, 0).await?;
        for _ in 0..samples {
            let t = Instant::now();
            reader.get(&asked, 0).await?;
            lookups[k].push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let t = Instant::now();
    crate::store::copy_rows(&c, copy_rows).await?;
    let copy = t.elapsed().as_secs_f64();
    let mb = copy_rows as f64 * 100.0 / 1e6;
    let (c50, c99) = quantiles(connects);
    let (a50, a99) = quantiles(std::mem::take(&mut lookups[0]));
    let (b50, b99) = quantiles(std::mem::take(&mut lookups[1]));
    println!(
        "{label:<24} tls {ssl:<5}  connect p50 {c50:.2} ms p99 {c99:.2} ms | get 1 id p50 {a50:.3} p99 {a99:.3} ms | get 100 ids p50 {b50:.3} p99 {b99:.3} ms | COPY {:.0} MB/s ({:.0}k rows/s)",
        mb / copy,
        copy_rows as f64 / copy / 1e3
    );
    Ok(())
}

/// GET /metrics against an endpoint serving `n` samples.
fn scrapes(n: usize, times: usize) -> anyhow::Result<()> {
    let samples: Vec<tidemark_metrics::Sample> = (0..n)
        .map(|i| {
            tidemark_metrics::counter(
                "events",
                "help",
                &[("shard", "s0"), ("type", &format!("t{i}"))],
                i as f64,
            )
        })
        .collect();
    let e = tidemark_metrics::serve("127.0.0.1:0", "bench", move || samples.clone())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut v = Vec::new();
    let mut bytes = 0;
    for _ in 0..times {
        let t = Instant::now();
        let mut s = std::net::TcpStream::connect(&e.addr)?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
        let mut body = Vec::new();
        s.read_to_end(&mut body)?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
        bytes = body.len();
    }
    let (p50, p99) = quantiles(v);
    println!(
        "metrics scrape of {n} series ({bytes} bytes): p50 {p50:.3} ms p99 {p99:.3} ms (n={times})"
    );
    Ok(())
}

/// `tidemark-bench ops`.
pub async fn run(samples: usize, copy_rows: usize) -> anyhow::Result<()> {
    let home = std::path::PathBuf::from("target/bench-tls-home");
    let (cluster, ca) = tls_cluster(&home).await?;
    let pw = cluster.password()?;
    let tcp = format!("postgresql://tidemark:{pw}@127.0.0.1:{PORT}/tidemark");
    measure("unix socket", &cluster.url(), samples, copy_rows).await?;
    measure(
        "tcp, sslmode=disable",
        &format!("{tcp}?sslmode=disable"),
        samples,
        copy_rows,
    )
    .await?;
    measure(
        "tcp, verify-full",
        &format!("{tcp}?sslmode=verify-full&sslrootcert={ca}"),
        samples,
        copy_rows,
    )
    .await?;
    cluster.destroy()?;
    for n in [50, 500] {
        scrapes(n, 2000)?;
    }
    Ok(())
}
