//! Every metric mcpmon exports: the families rendered from a snapshot
//! (declared in `families`, written through [`text::Writer`] by
//! `server` and `fleet`), straight to text, since at 10 000 servers
//! that is hundreds of thousands of lines, too many to build as a
//! `prometheus` crate tree per scrape; and mcpmon's own process series
//! (reloads, HTTP requests, the shard, `process_*`) in a `prometheus`
//! registry, written by the app and the web layer and rendered after them.

mod fleet;
mod server;
mod text;

use std::sync::Mutex;

use prometheus::{Encoder, Gauge, IntGaugeVec, Opts, Registry, TextEncoder};

pub use crate::output::families::Family;
pub use text::{Escaped, Float, Writer};

use crate::state::Snapshot;

/// Which per-server duration histograms `/metrics` carries
/// (`--metrics.histograms`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Histograms {
    /// Liveness round trips in four buckets (and synthetic tool calls in
    /// four; progress intervals as count and sum), enough for the
    /// dashboards' quantiles and the latency alert.
    #[default]
    Small,
    /// Every bucket: liveness and health checks in 14, progress intervals
    /// in 12, tool calls in 14.
    Classic,
    /// No per-server duration histograms.
    Off,
}

/// What the per-server part of `/metrics` carries. The default keeps a
/// server within [`SERIES_BUDGET`] series of mcpmon's own.
#[derive(Clone, Copy, Debug, Default)]
pub struct Exposition {
    /// The duration histograms.
    pub histograms: Histograms,
    /// Also the descriptive series (session start, tool counts, stdio
    /// memory) and every counter from zero (`--metrics.detail`).
    pub detail: bool,
}

impl Exposition {
    /// Everything: classic histograms and every descriptive series.
    pub const FULL: Exposition = Exposition {
        histograms: Histograms::Classic,
        detail: true,
    };
}

/// Most series of mcpmon's own per healthy server at the default
/// exposition (the fields a server reports in its health check come on top,
/// at most `health_check_max_fields`). `docs/metrics.md` itemises it.
pub const SERIES_BUDGET: usize = 22;

/// Every metric: the per-server and fleet families, rendered from a
/// snapshot, plus mcpmon's own series in a `prometheus` registry.
pub struct Metrics {
    registry: Registry,
    /// What the per-server part carries.
    exposition: Exposition,
    /// Each family's size at the last scrape, to allocate its buffer once.
    last_sizes: Mutex<Vec<usize>>,
    /// `mcpmon_runtime_alive_tasks`
    pub alive_tasks: prometheus::IntGauge,
    /// `mcpmon_config_last_reload_successful`
    config_reload_ok: Gauge,
    /// `mcpmon_config_last_reload_success_timestamp_seconds`
    config_reload_time: Gauge,
    /// Bumped by every change a snapshot's generation does not show, so a
    /// shared render is never reused across one.
    version: std::sync::atomic::AtomicU64,
    /// `mcpmon_http_requests_total{handler, code}`
    pub http_requests: prometheus::IntCounterVec,
    /// `mcpmon_http_request_duration_seconds{handler}`
    pub http_duration: prometheus::HistogramVec,
    /// `mcpmon_shard_info{index, count}`
    shard_info: IntGaugeVec,
    /// `mcpmon_location_info{location}`
    location_info: IntGaugeVec,
    /// `mcpmon_history_writes_total{result}`: the history's flushes.
    pub history_writes: prometheus::IntCounterVec,
    /// `mcpmon_otlp_exports_total{signal, result}` and
    /// `mcpmon_otlp_spans_dropped_total{reason}`: what the OTLP push did.
    pub otlp: crate::output::otlp::Counters,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("mcpmon")
}

impl Metrics {
    /// Build and register mcpmon's own metrics; servers are rendered as
    /// `exposition` says.
    pub fn new(revision: &str, exposition: Exposition) -> Result<Metrics, prometheus::Error> {
        let m = Metrics {
            registry: Registry::new(),
            exposition,
            last_sizes: Mutex::new(Vec::new()),
            version: std::sync::atomic::AtomicU64::new(0),
            alive_tasks: prometheus::IntGauge::with_opts(opts(
                "runtime_alive_tasks",
                "Tasks alive in mcpmon's async runtime (flat in a steady fleet).",
            ))?,
            config_reload_ok: Gauge::with_opts(opts(
                "config_last_reload_successful",
                "Whether the last configuration load succeeded.",
            ))?,
            config_reload_time: Gauge::with_opts(opts(
                "config_last_reload_success_timestamp_seconds",
                "Unix time of the last successful configuration load.",
            ))?,
            http_requests: prometheus::IntCounterVec::new(
                opts(
                    "http_requests_total",
                    "Requests to mcpmon's own endpoints, by route and status code.",
                ),
                &["handler", "code"],
            )?,
            http_duration: prometheus::HistogramVec::new(
                prometheus::HistogramOpts::new(
                    "http_request_duration_seconds",
                    "Time to answer requests to mcpmon's own endpoints, by route.",
                )
                .namespace("mcpmon")
                .buckets(vec![0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0]),
                &["handler"],
            )?,
            shard_info: IntGaugeVec::new(
                opts(
                    "shard_info",
                    "This replica's shard: it monitors the servers whose id hashes to index (hashmod of count). Always 1.",
                ),
                &["index", "count"],
            )?,
            location_info: IntGaugeVec::new(
                opts(
                    "location_info",
                    "Where this replica probes from (--location), always 1: rules join it on instance to tell a server down from several places from a broken path.",
                ),
                &["location"],
            )?,
            history_writes: prometheus::IntCounterVec::new(
                opts(
                    "history_writes_total",
                    "Flushes of the history file by result (ok, failed): a failed one loses that flush, never a probe.",
                ),
                &["result"],
            )?,
            otlp: crate::output::otlp::Counters::new(
                prometheus::IntCounterVec::new(
                    opts(
                        "otlp_exports_total",
                        "OTLP pushes by signal (metrics, traces) and result (ok, failed).",
                    ),
                    &["signal", "result"],
                )?,
                prometheus::IntCounterVec::new(
                    opts(
                        "otlp_spans_dropped_total",
                        "Probe spans never delivered: queue_full, or export_failed.",
                    ),
                    &["reason"],
                )?,
            ),
        };
        let build = IntGaugeVec::new(
            opts("build_info", "Build of mcpmon (always 1)."),
            &["version", "revision"],
        )?;
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), revision])
            .set(1);
        let r = &m.registry;
        r.register(Box::new(build))?;
        r.register(Box::new(m.alive_tasks.clone()))?;
        r.register(Box::new(m.config_reload_ok.clone()))?;
        r.register(Box::new(m.config_reload_time.clone()))?;
        r.register(Box::new(m.http_requests.clone()))?;
        r.register(Box::new(m.http_duration.clone()))?;
        r.register(Box::new(m.shard_info.clone()))?;
        r.register(Box::new(m.location_info.clone()))?;
        r.register(Box::new(m.history_writes.clone()))?;
        for family in m.otlp.families() {
            r.register(Box::new(family))?;
        }
        // process_* (memory, fds, CPU) of mcpmon itself, read from /proc at scrape time.
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(m)
    }

    /// Record the outcome of loading the config file.
    pub fn record_reload(&self, ok: bool) {
        self.config_reload_ok.set(if ok { 1.0 } else { 0.0 });
        if ok {
            self.config_reload_time.set(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
            );
        }
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// This replica's shard (`index` of `count`; 0 of 1 when unsharded).
    pub fn set_shard(&self, index: u64, count: u64) {
        self.shard_info
            .with_label_values(&[&index.to_string(), &count.to_string()])
            .set(1);
        self.bump();
    }

    /// Where this replica probes from.
    pub fn set_location(&self, location: &str) {
        self.location_info.reset();
        self.location_info.with_label_values(&[location]).set(1);
        self.bump();
    }

    fn bump(&self) {
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Count in `mcpmon_state_reads_stale_total{reason}` the reads that
    /// `reads` saw served stale (see [`crate::state::reader::StaleReads`]).
    pub fn count_stale_reads(
        &self,
        reads: std::sync::Arc<crate::state::reader::StaleReads>,
    ) -> Result<(), prometheus::Error> {
        let counter = prometheus::IntCounterVec::new(
            opts(
                "state_reads_stale_total",
                "Reads of the fleet's state answered from the snapshot last published because the state owner did not answer: timeout (none within 500 ms), queue_full (too many reads waiting). Above 0, pages lag what mcpmon knows.",
            ),
            &["reason"],
        )?;
        self.registry
            .register(Box::new(StaleReadsCollector { reads, counter }))
    }

    /// Changes since start to what a render shows besides the snapshot
    /// (process metrics aside, which change all the time).
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Prometheus text exposition of `snap` and of mcpmon itself. Every
    /// family is declared (HELP and TYPE) even when it has no samples.
    pub fn render(&self, snap: &Snapshot) -> String {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            self.alive_tasks
                .set(i64::try_from(rt.metrics().num_alive_tasks()).unwrap_or(i64::MAX));
        }
        let sizes = self
            .last_sizes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut w = Writer::with_sizes(&sizes);
        let now = tokio::time::Instant::now();
        for (id, r) in &snap.servers {
            server::render(id, r, self.exposition, now, &mut w);
        }
        fleet::render(snap, &mut w);
        *self.last_sizes.lock().unwrap_or_else(|p| p.into_inner()) = w.sizes();
        let mut out = String::new();
        w.finish(&mut out);
        let mut buf = Vec::with_capacity(16 * 1024);
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        out.push_str(&String::from_utf8_lossy(&buf));
        out
    }
}

/// `mcpmon_state_reads_stale_total`, read from the readers' counts at
/// each scrape.
struct StaleReadsCollector {
    reads: std::sync::Arc<crate::state::reader::StaleReads>,
    counter: prometheus::IntCounterVec,
}

impl prometheus::core::Collector for StaleReadsCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        for (reason, n) in self.reads.counts() {
            let c = self.counter.with_label_values(&[reason]);
            c.inc_by(n.saturating_sub(c.get()));
        }
        self.counter.collect()
    }
}

#[cfg(test)]
mod tests;
