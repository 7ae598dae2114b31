//! Every metric mcpmon exports. Label values are server ids (from the
//! config) and bounded enums; nothing a server says becomes a label except
//! its name and version on the `_info` series, truncated and replaced when
//! they change.
//!
//! Per-server series live in one [`ServerSeries`] per server. Its supervisor
//! writes through a handle, so the probe path does no label lookups, and a
//! scrape renders them straight to text: at 10 000 servers that is hundreds
//! of thousands of lines, too many to build as a `prometheus` crate
//! `MetricFamily` tree per scrape. Fleet-wide and process series stay in a
//! `prometheus` registry, rendered after them.

use std::fmt::Write as _;
use std::sync::Mutex;

use prometheus::{Encoder, Gauge, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::state::series::{Counters, Histogram};
use crate::state::verdict::State;
use crate::state::{ServerRecord, Snapshot};

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
pub const SERIES_BUDGET: usize = 20;

/// The `le` bounds the small exposition keeps of liveness histograms: the
/// alert's 0.5 s threshold needs a bound at it and one above.
const SMALL_LATENCY: &[&str] = &["0.01", "0.1", "0.5", "2.5"];
/// The `le` bounds the small exposition keeps of tool call histograms.
const SMALL_TOOL_CALL: &[&str] = &["0.1", "1", "10", "60"];

/// The per-server families, in the order they are rendered.
#[derive(Clone, Copy)]
enum Family {
    Up,
    State,
    Reason,
    Info,
    Labels,
    Tools,
    ToolsChanges,
    ToolsInvalid,
    SessionStart,
    LastCheck,
    StateChanges,
    Probes,
    ProbesSkipped,
    ProbesThrottled,
    ProbeFailures,
    Reconnects,
    SessionCloses,
    PingDuration,
    HealthCheckDuration,
    HealthCheckValue,
    ProgressInterval,
    ToolCallDuration,
    ToolCallCancellations,
    ChildCpu,
    ChildRss,
    TokenExpiry,
}

const FAMILIES: usize = 26;

/// Name, type and help of each family, indexed by [`Family`].
const FAMILY_META: [(&str, &str, &str); FAMILIES] = [
    (
        "mcpmon_server_up",
        "gauge",
        "1 if the server is healthy or degraded, 0 otherwise.",
    ),
    (
        "mcpmon_server_state",
        "gauge",
        "Current state of the server, one series per state (1 = current).",
    ),
    (
        "mcpmon_server_reason",
        "gauge",
        "Why the server is in its state (bounded set; one series per server, always 1).",
    ),
    (
        "mcpmon_server_info",
        "gauge",
        "Descriptive data about the server's current session (always 1); health_check says whether it lists the health tool.",
    ),
    (
        "mcpmon_server_labels",
        "gauge",
        "The operator's labels of the server (label_<name>), always 1: join with group_left.",
    ),
    (
        "mcpmon_server_tools",
        "gauge",
        "Tools in the server's latest listing.",
    ),
    (
        "mcpmon_server_tools_changes_total",
        "counter",
        "Tool listings whose surface (names, schemas, annotations) differed from the one before.",
    ),
    (
        "mcpmon_server_tools_invalid",
        "gauge",
        "Listed tools whose name or input schema breaks the spec's rules (a warning, never a verdict).",
    ),
    (
        "mcpmon_session_start_timestamp_seconds",
        "gauge",
        "Unix time the current session opened.",
    ),
    (
        "mcpmon_server_last_check_timestamp_seconds",
        "gauge",
        "Unix time of the last probe result.",
    ),
    (
        "mcpmon_server_state_changes_total",
        "counter",
        "State transitions of the server.",
    ),
    ("mcpmon_probes_total", "counter", "Probes sent, by kind."),
    (
        "mcpmon_probes_skipped_total",
        "counter",
        "Probe ticks skipped: the previous probe of that kind was still in flight, or the server asked to wait (throttled).",
    ),
    (
        "mcpmon_probes_throttled_total",
        "counter",
        "Probes the server answered with HTTP 429, or 503 with Retry-After.",
    ),
    (
        "mcpmon_probe_failures_total",
        "counter",
        "Probes that failed, by kind and bounded reason.",
    ),
    (
        "mcpmon_reconnects_total",
        "counter",
        "Sessions rebuilt after being lost, by reason.",
    ),
    (
        "mcpmon_session_closes_total",
        "counter",
        "Sessions closed, by bounded reason.",
    ),
    (
        "mcpmon_ping_duration_seconds",
        "histogram",
        "Round trip of liveness probes (ping or server/discover) that were answered.",
    ),
    (
        "mcpmon_health_check_duration_seconds",
        "histogram",
        "Duration of health_check tool calls that were answered.",
    ),
    (
        "mcpmon_health_check_value",
        "gauge",
        "Numeric top-level fields of the last health_check result.",
    ),
    (
        "mcpmon_progress_interval_seconds",
        "histogram",
        "Time between consecutive progress notifications of one request.",
    ),
    (
        "mcpmon_tool_call_duration_seconds",
        "histogram",
        "Duration of synthetic tool calls, answered or not.",
    ),
    (
        "mcpmon_tool_call_cancellations_total",
        "counter",
        "Synthetic tool calls cancelled, by which deadline fired.",
    ),
    (
        "mcpmon_child_cpu_seconds_total",
        "counter",
        "CPU time used by the stdio server's process tree.",
    ),
    (
        "mcpmon_child_resident_memory_bytes",
        "gauge",
        "Resident memory of the stdio server's process tree.",
    ),
    (
        "mcpmon_auth_token_expiry_timestamp_seconds",
        "gauge",
        "Unix time the server's credentials expire: OAuth tokens (refreshable=\"true\", renewed by mcpmon) and static bearer tokens that are JWTs (refreshable=\"false\").",
    ),
];

/// Write a histogram's `_bucket`, `_sum` and `_count` lines; `labels` is
/// the label set without braces, e.g. `server="a"`. With `keep`, only the
/// buckets with those `le` values are written (still cumulative, so the
/// coarser histogram is exact at its bounds).
fn render_histogram(
    h: &Histogram,
    out: &mut String,
    name: &str,
    labels: &str,
    keep: Option<&[&str]>,
) {
    let mut cumulative = 0;
    for (le, n) in h.buckets.le.iter().zip(h.counts.iter()) {
        cumulative += n;
        if keep.is_none_or(|k| k.contains(le)) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}",
        h.count,
        Float(h.sum),
        h.count
    );
}

/// Append one server's lines to each family's buffer.
fn render_server(id: &str, r: &ServerRecord, x: Exposition, out: &mut [String; FAMILIES]) {
    // Ids are restricted to `[A-Za-z0-9_.-]`, so they need no escaping.
    let l = format!("server=\"{id}\"");
    let l = l.as_str();
    let name = |f: Family| FAMILY_META[f as usize].0;
    let st = &r.status;
    let v = &r.series;
    let up = matches!(st.status, State::Healthy | State::Degraded);
    put(
        out,
        Family::Up,
        format_args!("{}{{{l}}} {}\n", name(Family::Up), u8::from(up)),
    );
    for s in State::ALL {
        put(
            out,
            Family::State,
            format_args!(
                "{}{{{l},state=\"{}\"}} {}\n",
                name(Family::State),
                s.as_str(),
                u8::from(s == st.status)
            ),
        );
    }
    put(
        out,
        Family::Reason,
        format_args!(
            "{}{{reason=\"{}\",{l}}} 1\n",
            name(Family::Reason),
            st.reason.as_str()
        ),
    );
    if let Some(i) = &v.info {
        put(
            out,
            Family::Info,
            format_args!(
                "{}{{health_check=\"{}\",protocol_version=\"{}\",{l},server_name=\"{}\",server_version=\"{}\",transport=\"{}\"}} 1\n",
                name(Family::Info),
                v.health_check_present,
                Escaped(&i[1]),
                Escaped(&i[2]),
                Escaped(&i[3]),
                Escaped(&i[0])
            ),
        );
    }
    // Every server has the series, labels or not, so a `group_left` join
    // never drops one (kube-state-metrics' kube_pod_labels does the same).
    {
        // Sorted by exported name in the config; written straight out.
        let buf = &mut out[Family::Labels as usize];
        let _ = write!(buf, "{}{{", name(Family::Labels));
        for lab in st.labels.iter() {
            let _ = write!(buf, "{}=\"{}\",", lab.exported, Escaped(&lab.value));
        }
        let _ = writeln!(buf, "{l}}} 1");
    }
    if let (Some(n), true) = (st.tools, x.detail) {
        put(
            out,
            Family::Tools,
            format_args!("{}{{{l}}} {n}\n", name(Family::Tools)),
        );
        put(
            out,
            Family::ToolsInvalid,
            format_args!(
                "{}{{{l}}} {}\n",
                name(Family::ToolsInvalid),
                v.tools_invalid
            ),
        );
    }
    // A counter nothing has moved is left out by default: it appears with
    // its first increment (what `rate()` then misses is that one event).
    if x.detail || v.tools_changes > 0 {
        put(
            out,
            Family::ToolsChanges,
            format_args!(
                "{}{{{l}}} {}\n",
                name(Family::ToolsChanges),
                v.tools_changes
            ),
        );
    }
    for (f, value, always) in [
        (Family::SessionStart, v.session_start, false),
        (Family::LastCheck, v.last_check, true),
        (Family::ChildCpu, v.child_cpu, true),
    ] {
        if let (Some(value), true) = (value, always || x.detail) {
            put(
                out,
                f,
                format_args!("{}{{{l}}} {}\n", name(f), Float(value)),
            );
        }
    }
    if let Some((at, refreshable)) = v.token_expiry {
        put(
            out,
            Family::TokenExpiry,
            format_args!(
                "{}{{refreshable=\"{refreshable}\",{l}}} {}\n",
                name(Family::TokenExpiry),
                Float(at)
            ),
        );
    }
    if let (Some(n), true) = (v.child_rss, x.detail) {
        put(
            out,
            Family::ChildRss,
            format_args!("{}{{{l}}} {n}\n", name(Family::ChildRss)),
        );
    }
    put(
        out,
        Family::StateChanges,
        format_args!(
            "{}{{{l}}} {}\n",
            name(Family::StateChanges),
            v.state_changes
        ),
    );
    for (f, counters) in [
        (Family::Probes, &v.probes),
        (Family::ProbesSkipped, &v.probes_skipped),
        (Family::ProbesThrottled, &v.probes_throttled),
    ] {
        for (probe, n) in shown(counters, x) {
            put(
                out,
                f,
                format_args!("{}{{probe=\"{}\",{l}}} {n}\n", name(f), probe.as_str()),
            );
        }
    }
    for ((probe, reason), n) in shown(&v.probe_failures, x) {
        put(
            out,
            Family::ProbeFailures,
            format_args!(
                "{}{{probe=\"{}\",reason=\"{}\",{l}}} {n}\n",
                name(Family::ProbeFailures),
                probe.as_str(),
                reason.as_str()
            ),
        );
    }
    for (reason, n) in shown(&v.reconnects, x) {
        put(
            out,
            Family::Reconnects,
            format_args!(
                "{}{{reason=\"{}\",{l}}} {n}\n",
                name(Family::Reconnects),
                reason.as_str()
            ),
        );
    }
    for (reason, n) in &v.session_closes.0 {
        put(
            out,
            Family::SessionCloses,
            format_args!(
                "{}{{reason=\"{}\",{l}}} {n}\n",
                name(Family::SessionCloses),
                reason.map_or("shutdown", |r| r.as_str())
            ),
        );
    }
    for (f, h) in [
        (Family::PingDuration, &v.ping_duration),
        (Family::HealthCheckDuration, &v.health_check_duration),
        (Family::ProgressInterval, &v.progress_interval),
    ] {
        if let (Some(h), Some(keep)) = (h, kept(x.histograms, f)) {
            render_histogram(h, &mut out[f as usize], name(f), l, keep);
        }
    }
    for (field, x) in &v.health_check_values {
        put(
            out,
            Family::HealthCheckValue,
            format_args!(
                "{}{{field=\"{}\",{l}}} {}\n",
                name(Family::HealthCheckValue),
                Escaped(field),
                Float(*x)
            ),
        );
    }
    for t in &v.tool_calls {
        let tool = Escaped(&t.tool);
        if let (Some(h), Some(keep)) = (&t.duration, kept(x.histograms, Family::ToolCallDuration)) {
            let labels = format!("{l},tool=\"{tool}\"");
            render_histogram(
                h,
                &mut out[Family::ToolCallDuration as usize],
                name(Family::ToolCallDuration),
                &labels,
                keep,
            );
        }
        for (reason, n) in &t.cancellations.0 {
            put(
                out,
                Family::ToolCallCancellations,
                format_args!(
                    "{}{{reason=\"{}\",{l},tool=\"{tool}\"}} {n}\n",
                    name(Family::ToolCallCancellations),
                    reason.as_str()
                ),
            );
        }
    }
}

/// Which buckets of the histogram family `f` a render writes: `None`
/// leaves it out, `Some(None)` writes every bucket. Small keeps liveness
/// and tool calls in four buckets each, and progress intervals (of a server
/// that sent progress at all) as their count and sum.
fn kept(h: Histograms, f: Family) -> Option<Option<&'static [&'static str]>> {
    match (h, f) {
        (Histograms::Off, _) => None,
        (Histograms::Classic, _) => Some(None),
        (Histograms::Small, Family::PingDuration) => Some(Some(SMALL_LATENCY)),
        (Histograms::Small, Family::ToolCallDuration) => Some(Some(SMALL_TOOL_CALL)),
        (Histograms::Small, Family::ProgressInterval) => Some(Some(&[])),
        (Histograms::Small, _) => None,
    }
}

/// The counters a render shows: all with `detail`, else those above zero.
fn shown<K>(c: &Counters<K>, x: Exposition) -> impl Iterator<Item = &(K, u64)> {
    c.0.iter().filter(move |(_, n)| x.detail || *n > 0)
}

/// Append one formatted line to a family's buffer.
fn put(out: &mut [String; FAMILIES], f: Family, line: std::fmt::Arguments<'_>) {
    // Writing into a String cannot fail.
    let _ = out[f as usize].write_fmt(line);
}

/// A label value escaped for the text format.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.0.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
            return f.write_str(self.0);
        }
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A sample value in the text format's spelling of infinities and NaN.
struct Float(f64);

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let x = self.0;
        if x.is_nan() {
            f.write_str("NaN")
        } else if x.is_infinite() {
            f.write_str(if x > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            write!(f, "{x}")
        }
    }
}

/// Every metric: the per-server and fleet families, rendered from a
/// snapshot, plus mcpmon's own series in a `prometheus` registry.
pub struct Metrics {
    registry: Registry,
    /// What the per-server part carries.
    exposition: Exposition,
    /// Each family's size at the last scrape, to allocate its buffer once.
    last_sizes: Mutex<[usize; FAMILIES]>,
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
    /// `mcpmon_sd_refresh_failures_total{mechanism}`
    sd_failures: prometheus::IntCounterVec,
    /// `mcpmon_sd_servers{mechanism}`
    sd_servers: IntGaugeVec,
    /// `mcpmon_sd_entries_rejected_total{mechanism, reason}`
    sd_rejected: prometheus::IntCounterVec,
    /// `mcpmon_shard_info{index, count}`
    shard_info: IntGaugeVec,
}

/// Discovery mechanisms, as the `mechanism` label (Prometheus's values).
pub const SD_MECHANISMS: [&str; 2] = ["file", "http"];
/// Why a discovered entry is left out, as the `reason` label.
pub const SD_REJECTIONS: [&str; 3] = ["invalid", "stdio_refused", "duplicate"];

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
            last_sizes: Mutex::new([0; FAMILIES]),
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
            sd_failures: prometheus::IntCounterVec::new(
                opts(
                    "sd_refresh_failures_total",
                    "Discovery refreshes that failed (unreadable, unreachable or not a list); the source keeps its last good list.",
                ),
                &["mechanism"],
            )?,
            sd_servers: IntGaugeVec::new(
                opts(
                    "sd_servers",
                    "Valid servers each discovery mechanism currently returns, before sharding.",
                ),
                &["mechanism"],
            )?,
            sd_rejected: prometheus::IntCounterVec::new(
                opts(
                    "sd_entries_rejected_total",
                    "Discovered entries left out: invalid, stdio_refused (an http_sd entry asked to start a process), duplicate (id already taken).",
                ),
                &["mechanism", "reason"],
            )?,
            shard_info: IntGaugeVec::new(
                opts(
                    "shard_info",
                    "This replica's shard: it monitors the servers whose id hashes to index (hashmod of count). Always 1.",
                ),
                &["index", "count"],
            )?,
        };
        for mechanism in SD_MECHANISMS {
            m.sd_failures.with_label_values(&[mechanism]);
            m.sd_servers.with_label_values(&[mechanism]);
            for reason in SD_REJECTIONS {
                m.sd_rejected.with_label_values(&[mechanism, reason]);
            }
        }
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
        r.register(Box::new(m.sd_failures.clone()))?;
        r.register(Box::new(m.sd_servers.clone()))?;
        r.register(Box::new(m.sd_rejected.clone()))?;
        r.register(Box::new(m.shard_info.clone()))?;
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

    /// A discovery refresh of `mechanism` failed.
    pub fn record_sd_failure(&self, mechanism: &str) {
        self.sd_failures.with_label_values(&[mechanism]).inc();
        self.bump();
    }

    /// Entries of `mechanism` left out for `reason` (see [`SD_REJECTIONS`]).
    pub fn record_sd_rejected(&self, mechanism: &str, reason: &str, n: u64) {
        self.sd_rejected
            .with_label_values(&[mechanism, reason])
            .inc_by(n);
        self.bump();
    }

    /// Valid servers `mechanism` returns now.
    pub fn set_sd_servers(&self, mechanism: &str, n: usize) {
        self.sd_servers
            .with_label_values(&[mechanism])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        self.bump();
    }

    fn bump(&self) {
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
        let sizes = *self.last_sizes.lock().unwrap_or_else(|p| p.into_inner());
        let mut families: [String; FAMILIES] =
            std::array::from_fn(|i| String::with_capacity(sizes[i] + sizes[i] / 8));
        for (id, r) in &snap.servers {
            render_server(id, r, self.exposition, &mut families);
        }
        *self.last_sizes.lock().unwrap_or_else(|p| p.into_inner()) =
            std::array::from_fn(|i| families[i].len());
        let size = families.iter().map(String::len).sum::<usize>() + 16 * 1024;
        let mut out = String::with_capacity(size);
        for ((name, kind, help), lines) in FAMILY_META.iter().zip(&families) {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
            out.push_str(lines);
        }
        render_fleet(snap, &mut out);
        let mut buf = Vec::with_capacity(16 * 1024);
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        out.push_str(&String::from_utf8_lossy(&buf));
        out
    }
}

/// The fleet-wide families, from the same snapshot as the servers'.
fn render_fleet(snap: &Snapshot, out: &mut String) {
    let s = snap.summary();
    let _ = write!(
        out,
        "# HELP mcpmon_fleet_servers Servers per state.\n# TYPE mcpmon_fleet_servers gauge\n"
    );
    for (state, n) in [
        ("healthy", s.healthy),
        ("degraded", s.degraded),
        ("unhealthy", s.unhealthy),
        ("unknown", s.unknown),
    ] {
        let _ = writeln!(out, "mcpmon_fleet_servers{{state=\"{state}\"}} {n}");
    }
    let _ = write!(
        out,
        "# HELP mcpmon_fleet_available_ratio Share of servers available under the fleet policy (0-1).\n\
         # TYPE mcpmon_fleet_available_ratio gauge\n\
         mcpmon_fleet_available_ratio {}\n\
         # HELP mcpmon_fleet_available_servers Servers available under the fleet policy (sum it across shards).\n\
         # TYPE mcpmon_fleet_available_servers gauge\n\
         mcpmon_fleet_available_servers {}\n\
         # HELP mcpmon_fleet_policy_min_available_ratio Least available share the fleet policy requires (0-1).\n\
         # TYPE mcpmon_fleet_policy_min_available_ratio gauge\n\
         mcpmon_fleet_policy_min_available_ratio {}\n\
         # HELP mcpmon_snapshot_generation Number of the published snapshot this exposition was rendered from.\n\
         # TYPE mcpmon_snapshot_generation gauge\n\
         mcpmon_snapshot_generation {}\n",
        Float(snap.available_ratio_of(&s)),
        snap.available_of(&s),
        Float(snap.policy.min_available_percentage / 100.0),
        snap.generation
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::config::{FleetPolicy, ToolProbe};
    use crate::probe::health_check::{HealthReport, Reported};
    use crate::probe::{Answer, Deadline, Failure, FailureReason, ProbeKind, ProbeOutcome};
    use crate::state::owner::Owner;
    use crate::state::series::LATENCY_BUCKETS;
    use crate::state::testing::{add, answered, event, opened, spec};
    use crate::state::{Event, Msg};

    fn lines(text: &str, prefix: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    fn render(o: &mut Owner) -> String {
        Metrics::new("test", Exposition::FULL)
            .expect("metrics")
            .render(&o.publish())
    }

    /// A healthy server as it looks after a while: session open with the
    /// health tool, pings and health checks answered, tools listed, stdio
    /// process sampled, a state change behind it.
    fn healthy_for_a_while(o: &mut Owner, id: &str, labels: usize, http: bool) {
        let now = Instant::now();
        let mut s = spec(id);
        if http {
            s.transport = crate::config::TransportSpec::Http {
                url: "http://127.0.0.1:1/mcp".parse().expect("url"),
                headers: vec![],
                bearer_token: None,
                oauth2: None,
            };
        }
        s.labels = (0..labels)
            .map(|i| crate::config::Label {
                name: format!("l{i}"),
                exported: format!("label_l{i}"),
                value: "v".into(),
            })
            .collect();
        add(o, &s, now);
        let mut open = opened();
        if let Event::Opened { health_check, .. } = &mut open {
            *health_check = true;
        }
        event(o, id, open, now);
        let probe = |o: &mut Owner, outcome: ProbeOutcome| {
            event(o, id, Event::Sent(outcome.kind), now);
            let was_late = false;
            event(o, id, Event::Probe { outcome, was_late }, now);
        };
        for ms in [1, 3, 40, 700] {
            probe(o, answered(ProbeKind::Ping, ms));
        }
        probe(
            o,
            ProbeOutcome {
                kind: ProbeKind::HealthCheck,
                tool: None,
                duration: Duration::from_millis(2),
                result: Ok(Answer::Health(HealthReport {
                    status: Reported::Healthy,
                    fields: vec![],
                    is_error: false,
                })),
            },
        );
        if http {
            return;
        }
        event(
            o,
            id,
            Event::Process(crate::transport::ProcessSample {
                state: crate::transport::procstat::RunState::Alive,
                cpu: Duration::from_millis(30),
                rss_bytes: 1 << 20,
            }),
            now,
        );
    }

    /// Series of `id` in an exposition.
    fn series_of(text: &str, id: &str) -> Vec<String> {
        let needle = format!("server=\"{id}\"");
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains(&needle))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_healthy_server_stays_within_the_series_budget_by_default() {
        let mut o = Owner::new(FleetPolicy::default(), 2);
        healthy_for_a_while(&mut o, "stdio", 3, false);
        healthy_for_a_while(&mut o, "http", 3, true);
        let snap = o.publish();
        let count = |x: Exposition, id: &str| {
            assert_eq!(snap.servers[id].status.status, State::Healthy);
            let text = Metrics::new("test", x).expect("metrics").render(&snap);
            series_of(&text, id)
        };
        for id in ["stdio", "http"] {
            let default = count(Exposition::default(), id);
            assert!(
                default.len() <= SERIES_BUDGET,
                "{id}: {} series at the default exposition, budget {SERIES_BUDGET}:\n{}",
                default.len(),
                default.join("\n")
            );
            // The small histogram is the classic one, exact at its bounds.
            let classic = count(Exposition::FULL, id);
            for line in default.iter().filter(|l| l.contains("_bucket{")) {
                assert!(
                    classic.contains(line),
                    "{line} not in the classic histogram"
                );
            }
        }
        // The counts docs/metrics.md gives for each setting: (histograms,
        // detail) -> (stdio, http).
        for (histograms, detail, want) in [
            (Histograms::Small, false, (20, 19)),
            (Histograms::Off, false, (13, 12)),
            (Histograms::Classic, false, (47, 46)),
            (Histograms::Small, true, (33, 34)),
            (Histograms::Classic, true, (60, 61)),
        ] {
            let x = Exposition { histograms, detail };
            let got = (count(x, "stdio").len(), count(x, "http").len());
            assert_eq!(got, want, "{x:?}");
        }
    }

    #[test]
    fn a_new_server_has_its_always_on_series_and_counters_at_zero() {
        let mut o = Owner::new(FleetPolicy::default(), 1);
        add(&mut o, &spec("a"), Instant::now());
        let text = render(&mut o);
        assert_eq!(
            lines(&text, "mcpmon_server_up{"),
            ["mcpmon_server_up{server=\"a\"} 0"]
        );
        assert_eq!(
            lines(&text, "mcpmon_server_state{"),
            [
                "mcpmon_server_state{server=\"a\",state=\"healthy\"} 0",
                "mcpmon_server_state{server=\"a\",state=\"degraded\"} 0",
                "mcpmon_server_state{server=\"a\",state=\"unhealthy\"} 0",
                "mcpmon_server_state{server=\"a\",state=\"unknown\"} 1",
            ]
        );
        assert_eq!(
            lines(&text, "mcpmon_server_reason{"),
            ["mcpmon_server_reason{reason=\"starting\",server=\"a\"} 1"]
        );
        assert_eq!(
            lines(&text, "mcpmon_probes_total{"),
            [
                "mcpmon_probes_total{probe=\"ping\",server=\"a\"} 0",
                "mcpmon_probes_total{probe=\"discover\",server=\"a\"} 0",
                "mcpmon_probes_total{probe=\"health_check\",server=\"a\"} 0",
            ]
        );
        assert!(
            lines(&text, "mcpmon_reconnects_total{")
                .contains(&"mcpmon_reconnects_total{reason=\"exited\",server=\"a\"} 0".to_owned())
        );
        for absent in [
            "mcpmon_ping_duration_seconds_bucket",
            "mcpmon_server_info{",
            "mcpmon_server_tools{",
            "mcpmon_child_cpu_seconds_total{",
        ] {
            assert!(!text.contains(absent), "{absent} rendered before any event");
        }
        // Every family is declared, samples or not.
        for (name, kind, _) in FAMILY_META {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} undeclared"
            );
        }
        assert!(text.contains("mcpmon_build_info{"));
        assert!(text.contains("mcpmon_fleet_servers{state=\"unknown\"} 1"));
        assert!(text.contains("mcpmon_snapshot_generation 1\n"));
    }

    #[test]
    fn histograms_are_cumulative_and_counters_count() {
        let now = Instant::now();
        let mut o = Owner::new(FleetPolicy::default(), 1);
        let mut s = spec("a");
        s.tool_probes.push(ToolProbe {
            tool: "slow".into(),
            arguments: Default::default(),
            interval: Duration::from_secs(60),
            request_timeout: Duration::from_secs(1),
            max_request_timeout: Duration::from_secs(2),
        });
        add(&mut o, &s, now);
        event(&mut o, "a", opened(), now);
        for ms in [0, 2, 20_000] {
            event(&mut o, "a", Event::Sent(ProbeKind::Ping), now);
            let mut outcome = answered(ProbeKind::Ping, ms);
            outcome.duration = Duration::from_micros(ms * 1000 + 300);
            event(
                &mut o,
                "a",
                Event::Probe {
                    outcome,
                    was_late: false,
                },
                now,
            );
        }
        let cancelled = ProbeOutcome {
            kind: ProbeKind::Tool,
            tool: Some("slow".into()),
            duration: Duration::from_millis(200),
            result: Err(Failure {
                reason: FailureReason::Timeout,
                detail: "cancelled".into(),
                link_lost: false,
                cancelled: Some(Deadline::RequestTimeout),
                retry_after: None,
            }),
        };
        event(
            &mut o,
            "a",
            Event::Probe {
                outcome: cancelled,
                was_late: false,
            },
            now,
        );
        let text = render(&mut o);
        let b = lines(&text, "mcpmon_ping_duration_seconds_bucket{");
        assert_eq!(b.len(), LATENCY_BUCKETS.bounds.len() + 1);
        assert_eq!(
            b[0],
            "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"0.0005\"} 1"
        );
        assert_eq!(
            b[2],
            "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"0.0025\"} 2"
        );
        assert_eq!(
            b[13],
            "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"10\"} 2"
        );
        assert_eq!(
            b[14],
            "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"+Inf\"} 3"
        );
        assert_eq!(
            lines(&text, "mcpmon_ping_duration_seconds_count{"),
            ["mcpmon_ping_duration_seconds_count{server=\"a\"} 3"]
        );
        assert!(
            lines(&text, "mcpmon_probes_total{")
                .contains(&"mcpmon_probes_total{probe=\"ping\",server=\"a\"} 3".to_owned())
        );
        assert!(
            lines(&text, "mcpmon_probe_failures_total{").contains(
                &"mcpmon_probe_failures_total{probe=\"tool\",reason=\"timeout\",server=\"a\"} 1"
                    .to_owned()
            )
        );
        assert_eq!(
            lines(&text, "mcpmon_tool_call_duration_seconds_count{"),
            ["mcpmon_tool_call_duration_seconds_count{server=\"a\",tool=\"slow\"} 1"]
        );
        assert_eq!(
            lines(&text, "mcpmon_tool_call_cancellations_total{"),
            [
                "mcpmon_tool_call_cancellations_total{reason=\"request_timeout\",server=\"a\",tool=\"slow\"} 1"
            ]
        );
        assert_eq!(
            text.matches("# TYPE mcpmon_ping_duration_seconds histogram")
                .count(),
            1
        );
    }

    #[test]
    fn operator_labels_are_one_escaped_series() {
        let mut o = Owner::new(FleetPolicy::default(), 1);
        let mut s = spec("a");
        s.labels = vec![crate::config::Label {
            name: "team".into(),
            exported: "label_team".into(),
            value: "pay\"ments\\x".into(),
        }];
        add(&mut o, &s, Instant::now());
        let text = render(&mut o);
        assert_eq!(
            lines(&text, "mcpmon_server_labels{"),
            [r#"mcpmon_server_labels{label_team="pay\"ments\\x",server="a"} 1"#]
        );
    }

    #[test]
    fn values_from_servers_are_escaped() {
        let now = Instant::now();
        let mut o = Owner::new(FleetPolicy::default(), 1);
        add(&mut o, &spec("a"), now);
        event(
            &mut o,
            "a",
            Event::Opened {
                era: crate::transport::Era::Legacy,
                info: crate::transport::ServerInfo {
                    protocol_version: "2025-06-18".into(),
                    name: "we\"ird\\name".into(),
                    version: "1.0".into(),
                },
                tools: None,
                handshake: Duration::ZERO,
                health_check: true,
            },
            now,
        );
        let report = HealthReport {
            status: Reported::Healthy,
            fields: vec![("load".to_owned(), f64::INFINITY)],
            is_error: false,
        };
        let outcome = ProbeOutcome {
            kind: ProbeKind::HealthCheck,
            tool: None,
            duration: Duration::from_millis(1),
            result: Ok(Answer::Health(report)),
        };
        event(
            &mut o,
            "a",
            Event::Probe {
                outcome,
                was_late: false,
            },
            now,
        );
        let text = render(&mut o);
        let info = lines(&text, "mcpmon_server_info{");
        assert_eq!(info.len(), 1);
        assert!(
            info[0].contains(r#"server_name="we\"ird\\name""#),
            "{}",
            info[0]
        );
        assert!(
            info[0].ends_with(r#"server_version="1.0",transport="stdio"} 1"#),
            "{}",
            info[0]
        );
        assert_eq!(
            lines(&text, "mcpmon_health_check_value{"),
            ["mcpmon_health_check_value{field=\"load\",server=\"a\"} +Inf"]
        );
        assert!(
            info[0].starts_with(r#"mcpmon_server_info{health_check="true","#),
            "{}",
            info[0]
        );
    }

    #[test]
    fn removed_servers_vanish_and_readded_ones_start_fresh() {
        let now = Instant::now();
        let mut o = Owner::new(FleetPolicy::default(), 2);
        add(&mut o, &spec("a"), now);
        add(&mut o, &spec("b"), now);
        event(&mut o, "a", Event::Sent(ProbeKind::Ping), now);
        o.apply(Msg::Remove("a".into()), now);
        // A stopping supervisor may still report; nothing is rendered for it.
        event(&mut o, "a", Event::Sent(ProbeKind::Ping), now);
        let text = render(&mut o);
        assert!(!text.contains("server=\"a\""));
        assert!(text.contains("server=\"b\""));
        add(&mut o, &spec("a"), now);
        let text = render(&mut o);
        assert!(text.contains("mcpmon_probes_total{probe=\"ping\",server=\"a\"} 0"));
    }
}
