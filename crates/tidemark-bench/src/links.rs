//! Issue 11's shapes: a chain of merges, a balanced tree of merges (the
//! largest absorbed side SPEC 11 allows) and a 10,000-identifier star, each
//! published in one burst; prints how long the process took, its longest
//! transaction, and checks the outcome SPEC 11 prescribes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tidemark_reader::Reader;
use tidemark_store::Cluster;
use tidemark_wire::Txid;

use crate::fresh_db;
use crate::profiles::{applied, spawn_profiles, Xacts};

/// The `n`th impression, at `ts`, carrying `who` (its `user` and `ids`).
fn event(n: usize, ts: i64, who: &str) -> (String, String) {
    let txid = Txid::new(0x5ba9e << 32 | n as u128, ts as u64);
    (
        format!("impression-{}", txid.as_str()),
        format!(
            r#"{{"type":"impression","txid":"{}","ts":{ts},{who}}}"#,
            txid.as_str()
        ),
    )
}

/// The tree's identifier `i`: its kind is the number of trailing zeros, so
/// the two identifiers of a link have different kinds.
fn node(i: usize) -> String {
    match i {
        0 => r#""root":"x0""#.to_string(),
        i => format!(r#""k{}":"x{i}""#, i.trailing_zeros()),
    }
}

struct Shape {
    name: &'static str,
    config: &'static str,
    events: Vec<(String, String)>,
    /// (identifier, size, master, blocklisted) expected afterwards.
    expect: (&'static str, usize, String, bool),
}

fn shapes(t: i64) -> Vec<Shape> {
    // Chain: 1,000 persons of two identifiers (a, b), then b_i linked to
    // a_{i+1}: 999 merges into one person of 2,000. Pairs further along are
    // older, so the master moves to the absorbed side at every merge.
    let mut chain = Vec::new();
    for i in 0..1000 {
        let who = format!(r#""user":"a{i}","ids":{{"device":"b{i}"}}"#);
        chain.push(event(i, t - i as i64, &who));
    }
    for i in 0..999 {
        let who = format!(r#""user":"a{}","ids":{{"device":"b{i}"}}"#, i + 1);
        chain.push(event(1000 + i, t, &who));
    }
    // Tree: 2,000 identifiers merged pairwise, level by level; the last
    // merge absorbs 976 identifiers into 1,024.
    let mut tree = Vec::new();
    let mut step = 1;
    while step < 2000 {
        for i in (0..2000).step_by(2 * step) {
            if i + step < 2000 {
                let n = tree.len();
                let who = format!(r#""ids":{{{},{}}}"#, node(i), node(i + step));
                tree.push(event(n, t, &who));
            }
        }
        step *= 2;
    }
    // Star: 10,000 identifiers each linked to one carrier IP. 49 merge; the
    // hub, always the larger side, is charged 101 times and blocklisted.
    let star = (0..10_000)
        .map(|i| event(i, t, &format!(r#""user":"s{i}","ids":{{"ip":"hub"}}"#)))
        .collect();
    vec![
        Shape {
            name: "chain: 1,000 pairs, then 999 links growing one person to 2,000 identifiers (max_ids = 2000)",
            config: "max_ids = 2000",
            events: chain,
            expect: ("user:a0", 2000, "device:b999".into(), false),
        },
        Shape {
            name: "tree of 1,999 merges, last one absorbing 976 identifiers (max_ids = 2000)",
            config: "max_ids = 2000",
            events: tree,
            expect: ("root:x0", 2000, "k0:x1".into(), false),
        },
        Shape {
            name:
                "star of 10,000 identifiers on one IP (defaults: max_ids 50, blocklist_after 100)",
            config: "",
            events: star,
            expect: ("ip:hub", 50, "ip:hub".into(), true),
        },
    ]
}

/// Runs each shape against a fresh database and a fresh profile process.
pub async fn run(bin: &Path, cluster: &Cluster) -> anyhow::Result<()> {
    let dir = PathBuf::from("target/bench-home/links");
    std::fs::create_dir_all(&dir)?;
    let t = tidemark_market::now_ms() - 60_000;
    for (k, shape) in shapes(t).into_iter().enumerate() {
        let url = fresh_db(cluster, "bench_links").await?;
        let endpoint = format!("tcp://127.0.0.1:{}", 57420 + k);
        let mut child = spawn_profiles(bin, &dir, &url, &endpoint, shape.config)?;
        let c = tidemark_store::connect(&url).await?;
        let xacts = Xacts::watch(&url).await?;
        let ctx = zmq::Context::new();
        let sock = ctx.socket(zmq::PUB)?;
        sock.set_sndhwm(0)?;
        sock.bind(&endpoint)?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let start = Instant::now();
        for (topic, payload) in &shape.events {
            sock.send_multipart([topic.as_bytes(), payload.as_bytes()], 0)?;
        }
        let n = shape.events.len() as i64;
        while applied(&c).await? < n {
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(120),
                "{}: only {} of {n} applied after 120 s",
                shape.name,
                applied(&c).await?
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let took = start.elapsed();
        let xacts = xacts.report().await?;
        crate::terminate(&mut child);
        let (id, size, master, blocklisted) = &shape.expect;
        let got = Reader::new(&url, 1)?.get(&[id], t).await?.remove(0);
        let merges = crate::store::merges(&c).await?;
        println!(
            "{}: {n} events applied in {:.0} ms; {merges} merges; {id}: size {}, master {}, blocklisted {}\n  {xacts}",
            shape.name,
            took.as_secs_f64() * 1e3,
            got.size,
            got.master,
            got.blocklisted
        );
        anyhow::ensure!(
            (got.size as usize, &got.master, got.blocklisted) == (*size, master, *blocklisted),
            "{}: expected size {size}, master {master}, blocklisted {blocklisted}",
            shape.name
        );
    }
    Ok(())
}
