//! `tidemark proxy`: the XSUB/XPUB forwarder (`tidemark_market::proxy`).

#[derive(clap::Args)]
pub struct Args {
    /// Publisher endpoints to connect to
    #[arg(long)]
    publishers: Vec<String>,
    /// Endpoints to bind for publishers that connect
    #[arg(long)]
    frontend: Vec<String>,
    /// Endpoints to bind for shards to connect to
    #[arg(long, required = true)]
    backend: Vec<String>,
    /// Serve Prometheus metrics (messages forwarded by kind) at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// Messages each connection may queue in each direction (at most 64 KiB each)
    #[arg(long, default_value_t = tidemark_market::proxy::DEFAULT_HWM,
          value_parser = clap::value_parser!(i32).range(1..))]
    hwm: i32,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let metrics = a.metrics_addr.as_deref();
    tidemark_market::proxy::run(&a.publishers, &a.frontend, &a.backend, metrics, a.hwm)?;
    Ok(())
}
