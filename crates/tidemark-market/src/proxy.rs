//! `tidemark proxy`: an XSUB/XPUB forwarder so publishers and shards need to
//! know one address. Subscriptions travel upstream, so filtering still happens
//! at the publishers.

/// Runs the forwarder until the process ends.
pub fn run(
    xsub_connect: &[String],
    xsub_bind: &[String],
    xpub_bind: &[String],
) -> Result<(), String> {
    let ctx = zmq::Context::new();
    let up = ctx.socket(zmq::XSUB).map_err(|e| format!("zmq: {e}"))?;
    let down = ctx.socket(zmq::XPUB).map_err(|e| format!("zmq: {e}"))?;
    for s in [&up, &down] {
        s.set_rcvhwm(0).map_err(|e| format!("hwm: {e}"))?;
        s.set_sndhwm(0).map_err(|e| format!("hwm: {e}"))?;
    }
    for ep in xsub_connect {
        up.connect(ep)
            .map_err(|e| format!("--publishers {ep}: {e}"))?;
    }
    for ep in xsub_bind {
        up.bind(ep).map_err(|e| format!("--frontend {ep}: {e}"))?;
    }
    for ep in xpub_bind {
        down.bind(ep).map_err(|e| format!("--backend {ep}: {e}"))?;
    }
    tracing::info!(?xsub_connect, ?xsub_bind, ?xpub_bind, "proxy forwarding");
    zmq::proxy(&up, &down).map_err(|e| format!("proxy: {e}"))
}
