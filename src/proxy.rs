//! `tidemark proxy`: the XSUB/XPUB forwarder (`tidemark_market::proxy`).

use std::path::PathBuf;

use tidemark_intake::curve::{read_secret_key_file, Client, Curve};
use tidemark_market::proxy::ProxyOptions;

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
    /// Serve Prometheus metrics (messages forwarded by kind, refusals) at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// Messages each connection may queue in each direction (from publishers
    /// frames of up to 1 MiB, the transport limit; to shards up to 64 KiB)
    #[arg(long, default_value_t = tidemark_market::proxy::DEFAULT_HWM,
          value_parser = clap::value_parser!(i32).range(1..))]
    hwm: i32,
    /// The proxy's own CURVE secret key (`tidemark keys new`): its key as a
    /// server to its publishers (with --curve-publishers) and as a publisher
    /// to the fleet (with --curve-server-key)
    #[arg(long, value_name = "FILE")]
    curve_secret_key: Option<PathBuf>,
    /// The fleet's public key (FLEET.pub): shards are reached over CURVE,
    /// where they list this proxy as a `forwarder`
    #[arg(long, value_name = "FILE", requires = "curve_secret_key")]
    curve_server_key: Option<PathBuf>,
    /// The publishers let in: a TOML file of `[[publishers]]` entries
    /// (`name`, `public_key`, optional `forwarder`); their ticks go on only
    /// under their listed names. Publishers use this proxy's public key as
    /// their --curve-server-key
    #[arg(long, value_name = "FILE", requires = "curve_secret_key")]
    curve_publishers: Option<PathBuf>,
    /// With --curve-server-key and no --curve-publishers: forward whatever
    /// any process that reaches the frontend sends, ticks under any name,
    /// to shards that trust this proxy as a `forwarder`. Refused without it
    #[arg(long, requires = "curve_server_key")]
    open_publishers: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    use crate::Misconfigured as Bad;
    let listen = match (&a.curve_secret_key, &a.curve_publishers) {
        (Some(key), Some(list)) => Some(Curve {
            secret: read_secret_key_file(key).map_err(Bad)?,
            publishers: tidemark_intake::config::read_publishers(list).map_err(Bad)?,
        }),
        _ => None,
    };
    let forward = match (&a.curve_secret_key, &a.curve_server_key) {
        (Some(key), Some(server)) => Some(Client::from_files(key, server).map_err(Bad)?),
        _ => None,
    };
    if a.curve_secret_key.is_some() && listen.is_none() && forward.is_none() {
        let needs = "--curve-secret-key needs --curve-publishers, --curve-server-key or both";
        return Err(Bad(needs.into()).into());
    }
    if forward.is_some() && listen.is_none() && !a.open_publishers {
        let open = "--curve-server-key without --curve-publishers: shards trust this proxy as a \
                    forwarder, so any process that reaches its frontend could publish through it, \
                    ticks under any name; list the publishers with --curve-publishers FILE, or pass \
                    --open-publishers to forward them unchecked";
        return Err(Bad(open.into()).into());
    }
    tidemark_market::proxy::run(&ProxyOptions {
        publishers: a.publishers,
        frontend: a.frontend,
        backend: a.backend,
        metrics_addr: a.metrics_addr,
        hwm: a.hwm,
        listen,
        forward,
    })?;
    Ok(())
}
