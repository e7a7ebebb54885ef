//! Prometheus metrics for Tidemark's long-running processes: a `/metrics`
//! endpoint in the text exposition format, its samples taken at scrape time
//! from the process's own state (atomic counters, the last status it saved),
//! so a scrape never waits on PostgreSQL and costs nothing between scrapes.
//!
//! Owns: metric naming (`tidemark_` prefix), the exposition
//! (`prometheus-client`) and the listener (`tiny_http`, one thread). Knows
//! nothing of shards or learners: they hand it a closure that lists samples.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Whether a metric only goes up (resetting when the process restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotone within a run; exposed with the `_total` suffix.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted into buckets (`Sample::buckets`), `value`
    /// their sum: `_bucket`, `_sum` and `_count` series.
    Histogram,
}

/// One value of one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its name after `tidemark_` (and before `_total` for counters).
    pub name: String,
    /// What it measures, for `# HELP`.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Its labels.
    pub labels: Vec<(&'static str, String)>,
    /// Its value (a histogram's: the sum of what it observed).
    pub value: f64,
    /// A histogram's `(upper bound, observations at or under it)`,
    /// cumulative, the last bound +Inf; empty for counters and gauges.
    pub buckets: Vec<(f64, u64)>,
}

type Collect = dyn Fn() -> Vec<Sample> + Send + Sync;

/// Samples a process posts at its own pace (after a batch, at a
/// checkpoint), served as they last stood.
#[derive(Debug, Clone, Default)]
pub struct Board(Arc<std::sync::Mutex<Vec<Sample>>>);

impl Board {
    /// Replaces what the board shows.
    pub fn post(&self, samples: Vec<Sample>) {
        if let Ok(mut b) = self.0.lock() {
            *b = samples;
        }
    }

    /// What it shows now.
    pub fn read(&self) -> Vec<Sample> {
        self.0.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

/// A counter sample.
pub fn counter(
    name: &str,
    help: &'static str,
    labels: &[(&'static str, &str)],
    value: f64,
) -> Sample {
    Sample {
        name: name.to_owned(),
        help,
        kind: Kind::Counter,
        labels: labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        value,
        buckets: Vec::new(),
    }
}

/// A histogram sample: `buckets` cumulative (the last +Inf), `sum` the
/// total observed.
pub fn histogram(
    name: &str,
    help: &'static str,
    labels: &[(&'static str, &str)],
    buckets: Vec<(f64, u64)>,
    sum: f64,
) -> Sample {
    Sample {
        kind: Kind::Histogram,
        buckets,
        ..counter(name, help, labels, sum)
    }
}

/// A gauge sample.
pub fn gauge(
    name: &str,
    help: &'static str,
    labels: &[(&'static str, &str)],
    value: f64,
) -> Sample {
    Sample {
        kind: Kind::Gauge,
        ..counter(name, help, labels, value)
    }
}

/// Calls the process's closure on each scrape and encodes what it lists.
struct Samples(Arc<Collect>);

impl fmt::Debug for Samples {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Samples")
    }
}

impl Collector for Samples {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let mut by_name: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
        for s in (self.0)() {
            by_name.entry(s.name.clone()).or_default().push(s);
        }
        for (name, samples) in by_name {
            let first = &samples[0];
            // A metric without labels is written without braces.
            let bare = samples.len() == 1 && first.labels.is_empty();
            let name = format!("tidemark_{name}");
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

/// The text a scrape returns for `collect`'s samples.
pub fn render(collect: Arc<Collect>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Samples(collect)));
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

/// Serves `GET /metrics` on `addr` (`host:port`) from a thread of its own;
/// every other path is 404.
pub fn serve(
    addr: &str,
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
                    tiny_http::Response::from_string(render(collect.clone())).with_header(header)
                } else {
                    tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
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
        let text = render(Arc::new(|| {
            vec![histogram(
                "lookup_seconds",
                "help text",
                &[("reader", "bidder")],
                vec![(0.001, 3), (0.01, 5), (f64::INFINITY, 6)],
                0.75,
            )]
        }));
        for line in [
            "# TYPE tidemark_lookup_seconds histogram",
            r#"tidemark_lookup_seconds_sum{reader="bidder"} 0.75"#,
            r#"tidemark_lookup_seconds_count{reader="bidder"} 6"#,
            r#"tidemark_lookup_seconds_bucket{le="0.001",reader="bidder"} 3"#,
            r#"tidemark_lookup_seconds_bucket{le="0.01",reader="bidder"} 5"#,
            r#"tidemark_lookup_seconds_bucket{le="+Inf",reader="bidder"} 6"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn counters_and_gauges_render_in_the_text_format() {
        let text = render(Arc::new(|| {
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
        }));
        assert!(
            text.contains("# TYPE tidemark_events_received counter"),
            "{text}"
        );
        assert!(
            text.contains(r#"tidemark_events_received_total{shard="s0",type="bid"} 7"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tidemark_buffer_rows{shard="s0"} 12"#),
            "{text}"
        );
        assert!(
            text.contains("# HELP tidemark_buffer_rows help text"),
            "{text}"
        );
    }
}
