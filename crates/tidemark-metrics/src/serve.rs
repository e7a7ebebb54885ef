//! The exposition and the listener: samples rendered under their
//! component's prefix, with the build and process metrics every endpoint
//! adds.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::{gauge, Kind, Sample};

type Collect = dyn Fn() -> Vec<Sample> + Send + Sync;

/// Calls the process's closure on each scrape and encodes what it lists
/// under `tidemark_<component>_`, then the build and process metrics.
struct Samples {
    component: &'static str,
    collect: Arc<Collect>,
}

impl fmt::Debug for Samples {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Samples")
    }
}

impl Collector for Samples {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let prefix = format!("tidemark_{}_", self.component);
        encode_group(&mut encoder, &prefix, (self.collect)())?;
        let build = gauge(
            "tidemark_build_info",
            "the build serving these metrics (always 1)",
            &[
                ("component", self.component),
                ("version", env!("CARGO_PKG_VERSION")),
            ],
            1.0,
        );
        let mut extras = crate::process::samples();
        extras.push(build);
        encode_group(&mut encoder, "", extras)
    }
}

/// Encodes `samples` grouped by name, each name after `prefix`.
fn encode_group(
    encoder: &mut DescriptorEncoder<'_>,
    prefix: &str,
    samples: Vec<Sample>,
) -> Result<(), fmt::Error> {
    let mut by_name: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for s in samples {
        by_name.entry(s.name.clone()).or_default().push(s);
    }
    for (name, samples) in by_name {
        let first = &samples[0];
        // A metric without labels is written without braces.
        let bare = samples.len() == 1 && first.labels.is_empty();
        let name = format!("{prefix}{name}");
        let kind = match first.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        };
        let mut m = encoder.encode_descriptor(&name, first.help, None, kind)?;
        if bare {
            put(first, m)?;
            continue;
        }
        for s in &samples {
            let labels: Vec<(&str, &str)> =
                s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            put(s, m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Encodes one sample as its kind; whole numbers print as integers.
fn put(s: &Sample, mut m: MetricEncoder<'_>) -> Result<(), fmt::Error> {
    let v = s.value;
    let whole = v.fract() == 0.0 && v.abs() < 9e15;
    match s.kind {
        Kind::Histogram => {
            // The encoder sums per-bucket counts itself.
            let mut below = 0;
            let per_bucket: Vec<(f64, u64)> = s
                .buckets
                .iter()
                .map(|(b, n)| {
                    let d = n.saturating_sub(below);
                    below = *n;
                    (*b, d)
                })
                .collect();
            let count = s.buckets.last().map_or(0, |b| b.1);
            m.encode_histogram::<NoLabelSet>(v, count, &per_bucket, None)
        }
        Kind::Counter if whole && v >= 0.0 => ConstCounter::new(v as u64).encode(m),
        Kind::Counter => ConstCounter::new(v).encode(m),
        Kind::Gauge if whole => ConstGauge::new(v as i64).encode(m),
        Kind::Gauge => ConstGauge::new(v).encode(m),
    }
}

/// The text a scrape of `component` returns for `collect`'s samples.
pub fn render(component: &'static str, collect: Arc<Collect>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Samples { component, collect }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing to a String");
    out
}

/// A running `/metrics` endpoint; it stops when dropped.
pub struct Endpoint {
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The address it listens on (the port chosen if `:0` was asked).
    pub addr: String,
}

/// Why the endpoint could not start.
#[derive(Debug)]
pub struct ServeError(pub String);

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metrics endpoint: {}", self.0)
    }
}

impl std::error::Error for ServeError {}

/// How long a main loop may go without turning before `/readyz` fails.
pub const READY_SILENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves `GET /metrics` on `addr` (`host:port`) from a thread of its own,
/// `collect`'s samples named for `component` (see [the crate](crate)),
/// `/healthz` (the process is up) and `/readyz` (started, its main loop
/// turning: [`crate::alive`]); every other path is 404.
pub fn serve(
    addr: &str,
    component: &'static str,
    collect: impl Fn() -> Vec<Sample> + Send + Sync + 'static,
) -> Result<Endpoint, ServeError> {
    let server =
        Arc::new(tiny_http::Server::http(addr).map_err(|e| ServeError(format!("{addr}: {e}")))?);
    let bound = server
        .server_addr()
        .to_ip()
        .map_or_else(|| addr.to_owned(), |a| a.to_string());
    let collect: Arc<Collect> = Arc::new(collect);
    let s = server.clone();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for req in s.incoming_requests() {
                let response = if req.url() == "/metrics" {
                    let header = tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"text/plain; version=0.0.4; charset=utf-8"[..],
                    )
                    .expect("a valid header");
                    tiny_http::Response::from_string(render(component, collect.clone()))
                        .with_header(header)
                } else if req.url() == "/healthz" {
                    // Serving at all is the signal: the endpoint lives as
                    // long as its process, whose threads exit it on a panic.
                    tiny_http::Response::from_string(format!("ok {component}\n"))
                } else if req.url() == "/readyz" {
                    // Started, and its main loop turning (a slow or absent
                    // database does not stop the loop: it retries).
                    match crate::alive::check(READY_SILENCE) {
                        Ok(()) => tiny_http::Response::from_string(format!("ready {component}\n")),
                        Err(why) => tiny_http::Response::from_string(format!("not ready: {why}\n"))
                            .with_status_code(503),
                    }
                } else {
                    tiny_http::Response::from_string("see /metrics, /healthz or /readyz\n")
                        .with_status_code(404)
                };
                let _ = req.respond(response);
            }
        })
        .map_err(|e| ServeError(e.to_string()))?;
    Ok(Endpoint {
        server,
        thread: Some(thread),
        addr: bound,
    })
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram;

    fn sample(name: &str, kind: Kind, labels: &[(&'static str, &str)], value: f64) -> Sample {
        Sample {
            name: name.to_owned(),
            help: "help text",
            kind,
            labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            value,
            buckets: Vec::new(),
        }
    }

    #[test]
    fn a_histogram_renders_cumulative_buckets_sum_and_count() {
        let text = render(
            "reader",
            Arc::new(|| {
                vec![histogram(
                    "lookup_seconds",
                    "help text",
                    &[("reader", "bidder")],
                    vec![(0.001, 3), (0.01, 5), (f64::INFINITY, 6)],
                    0.75,
                )]
            }),
        );
        for line in [
            "# TYPE tidemark_reader_lookup_seconds histogram",
            r#"tidemark_reader_lookup_seconds_sum{reader="bidder"} 0.75"#,
            r#"tidemark_reader_lookup_seconds_count{reader="bidder"} 6"#,
            r#"tidemark_reader_lookup_seconds_bucket{le="0.001",reader="bidder"} 3"#,
            r#"tidemark_reader_lookup_seconds_bucket{le="0.01",reader="bidder"} 5"#,
            r#"tidemark_reader_lookup_seconds_bucket{le="+Inf",reader="bidder"} 6"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn counters_and_gauges_render_in_the_text_format() {
        let text = render(
            "shard",
            Arc::new(|| {
                vec![
                    sample(
                        "events_received",
                        Kind::Counter,
                        &[("shard", "s0"), ("type", "bid")],
                        7.0,
                    ),
                    sample(
                        "events_received",
                        Kind::Counter,
                        &[("shard", "s0"), ("type", "click")],
                        2.0,
                    ),
                    sample("buffer_rows", Kind::Gauge, &[("shard", "s0")], 12.0),
                    sample("age_seconds", Kind::Gauge, &[], 1.5),
                ]
            }),
        );
        assert!(
            text.contains("# TYPE tidemark_shard_events_received counter"),
            "{text}"
        );
        assert!(
            text.contains(r#"tidemark_shard_events_received_total{shard="s0",type="bid"} 7"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tidemark_shard_buffer_rows{shard="s0"} 12"#),
            "{text}"
        );
        assert!(
            text.contains("# HELP tidemark_shard_buffer_rows help text"),
            "{text}"
        );
    }

    #[test]
    fn every_endpoint_adds_its_build_and_the_process_metrics() {
        let text = render("proxy", Arc::new(Vec::new));
        let build = format!(
            r#"tidemark_build_info{{component="proxy",version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&build), "{text}");
        for series in [
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(series), "{series} in\n{text}");
        }
    }
}
