//! `tidemark-bench proxy`: messages per second through `tidemark proxy`,
//! from one PUB to one SUB, for this build and, with `--old-bin`, another
//! one, interleaved run by run so the box's drift hits both alike.

use std::path::Path;
use std::time::{Duration, Instant};

use tidemark_testkit::{free_addr, terminate};

/// One run: `messages` of `size` bytes through a proxy of `bin`; msgs/s.
fn run_once(bin: &Path, messages: u64, size: usize) -> anyhow::Result<f64> {
    let (front, back) = (free_addr(), free_addr());
    let mut proxy = std::process::Command::new(bin)
        .args(["proxy", "--frontend", &format!("tcp://{front}")])
        .args(["--backend", &format!("tcp://{back}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB)?;
    sub.set_rcvhwm(0)?;
    sub.set_rcvtimeo(5_000)?;
    sub.connect(&format!("tcp://{back}"))?;
    sub.set_subscribe(b"bid-")?;
    let publ = ctx.socket(zmq::PUB)?;
    publ.set_sndhwm(0)?;
    publ.connect(&format!("tcp://{front}"))?;
    // Until one message comes through, the subscription is on its way.
    let payload = vec![b'x'; size];
    loop {
        publ.send("bid-warm", zmq::SNDMORE)?;
        publ.send(&payload, 0)?;
        sub.set_rcvtimeo(100)?;
        if sub.recv_multipart(0).is_ok() {
            break;
        }
    }
    while sub.recv_multipart(zmq::DONTWAIT).is_ok() {}
    sub.set_rcvtimeo(5_000)?;
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        while got < messages && sub.recv_multipart(0).is_ok() {
            got += 1;
        }
        (got, Instant::now())
    });
    for _ in 0..messages {
        publ.send("bid-0123", zmq::SNDMORE)?;
        publ.send(&payload, 0)?;
    }
    let (got, done) = reader.join().expect("the reader");
    terminate(&mut proxy);
    anyhow::ensure!(got == messages, "{got} of {messages} messages came through");
    Ok(messages as f64 / done.duration_since(started).as_secs_f64())
}

/// Interleaved runs of this build's proxy and, with `old`, another's.
pub fn run(
    new: &Path,
    old: Option<&Path>,
    messages: u64,
    size: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    let mut figures: Vec<(&str, Vec<f64>)> = vec![("this build", Vec::new())];
    if old.is_some() {
        figures.push(("--old-bin", Vec::new()));
    }
    for round in 0..rounds {
        for (i, bin) in [Some(new), old].into_iter().flatten().enumerate() {
            let rate = run_once(bin, messages, size)?;
            println!("round {round} {:<11} {:>10.0} msgs/s", figures[i].0, rate);
            figures[i].1.push(rate);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    for (name, mut v) in figures {
        v.sort_by(f64::total_cmp);
        println!(
            "{name:<11} median {:>10.0} msgs/s over {} runs of {messages} x {size} B",
            v[v.len() / 2],
            v.len()
        );
    }
    Ok(())
}
