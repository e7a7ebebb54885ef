//! `tidemark proxy`: an XSUB/XPUB forwarder so publishers and shards need to
//! know one address. Subscriptions travel upstream, so filtering still happens
//! at the publishers.

use crate::publisher::PublishError;

/// Runs the forwarder until the process ends.
pub fn run(
    xsub_connect: &[String],
    xsub_bind: &[String],
    xpub_bind: &[String],
) -> Result<(), PublishError> {
    let socket = |what: &'static str| move |error| PublishError::Socket { what, error };
    let endpoint = |option: &'static str, ep: &str| {
        let endpoint = ep.to_owned();
        move |error| PublishError::Endpoint {
            option,
            endpoint,
            error,
        }
    };
    let ctx = zmq::Context::new();
    let up = ctx.socket(zmq::XSUB).map_err(socket("create"))?;
    let down = ctx.socket(zmq::XPUB).map_err(socket("create"))?;
    for s in [&up, &down] {
        s.set_rcvhwm(0).map_err(socket("rcvhwm"))?;
        s.set_sndhwm(0).map_err(socket("sndhwm"))?;
    }
    for ep in xsub_connect {
        up.connect(ep).map_err(endpoint("--publishers", ep))?;
    }
    for ep in xsub_bind {
        up.bind(ep).map_err(endpoint("--frontend", ep))?;
    }
    for ep in xpub_bind {
        down.bind(ep).map_err(endpoint("--backend", ep))?;
    }
    tracing::info!(?xsub_connect, ?xsub_bind, ?xpub_bind, "proxy forwarding");
    zmq::proxy(&up, &down).map_err(socket("proxy"))
}
