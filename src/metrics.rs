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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, RwLock};

use prometheus::{Encoder, Gauge, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::verdict::State;

/// Probe kinds, the `probe` label.
pub const PROBES: [&str; 4] = ["ping", "discover", "health_check", "tool"];

/// Upper bounds of a histogram's buckets, with their `le` label values
/// spelled once (formatting floats is most of a scrape's cost otherwise).
#[derive(Debug)]
struct Buckets {
    bounds: &'static [f64],
    le: &'static [&'static str],
}

macro_rules! buckets {
    ($($b:literal),+ $(,)?) => {
        Buckets { bounds: &[$($b as f64),+], le: &[$(stringify!($b)),+] }
    };
}

const LATENCY_BUCKETS: Buckets = buckets![
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
];
const PROGRESS_BUCKETS: Buckets = buckets![0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const TOOL_CALL_BUCKETS: Buckets = buckets![
    0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300
];

/// The per-server families, in the order they are rendered.
#[derive(Clone, Copy)]
enum Family {
    Up,
    State,
    Reason,
    Info,
    HealthCheckPresent,
    Tools,
    SessionStart,
    LastCheck,
    StateChanges,
    Probes,
    ProbesSkipped,
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
}

const FAMILIES: usize = 22;

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
        "Descriptive data about the server's current session (always 1).",
    ),
    (
        "mcpmon_server_health_check_present",
        "gauge",
        "1 if the server's current session lists the health tool.",
    ),
    (
        "mcpmon_server_tools",
        "gauge",
        "Tools the server listed at session start.",
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
        "Probe ticks skipped because the previous probe of that kind was still in flight.",
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
];

/// A histogram's observations: per-bucket counts (not cumulative), sum and count.
#[derive(Debug)]
struct Histogram {
    buckets: &'static Buckets,
    counts: Box<[u64]>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(buckets: &'static Buckets) -> Self {
        Histogram {
            buckets,
            counts: vec![0; buckets.bounds.len()].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.buckets.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// Write `_bucket`, `_sum` and `_count` lines; `labels` is the label set
    /// without braces, e.g. `server="a"`.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (le, n) in self.buckets.le.iter().zip(self.counts.iter()) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}",
            self.count,
            Float(self.sum),
            self.count
        );
    }
}

/// Counters keyed by bounded label values; only those incremented exist.
#[derive(Debug)]
struct Counters<K>(Vec<(K, u64)>);

impl<K: PartialEq> Counters<K> {
    fn inc(&mut self, key: K) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => self.0.push((key, 1)),
        }
    }
}

impl<K> Default for Counters<K> {
    fn default() -> Self {
        Counters(Vec::new())
    }
}

/// One synthetic tool probe's series.
#[derive(Debug)]
struct ToolSeries {
    tool: String,
    duration: Option<Histogram>,
    cancellations: Counters<&'static str>,
}

/// A server's values. Optional ones appear with their first event: at
/// 10 000 servers, every pre-created series is 10 000 more lines per scrape.
#[derive(Debug)]
struct Values {
    state: State,
    reason: &'static str,
    /// transport, protocol_version, server_name, server_version.
    info: Option<Box<[String; 4]>>,
    health_check_present: bool,
    tools: Option<u64>,
    session_start: Option<f64>,
    last_check: Option<f64>,
    state_changes: u64,
    probes: Counters<&'static str>,
    probes_skipped: Counters<&'static str>,
    probe_failures: Counters<(&'static str, &'static str)>,
    reconnects: Counters<&'static str>,
    session_closes: Counters<&'static str>,
    ping_duration: Option<Histogram>,
    health_check_duration: Option<Histogram>,
    health_check_values: Vec<(String, f64)>,
    progress_interval: Option<Histogram>,
    tool_calls: Vec<ToolSeries>,
    child_cpu: Option<f64>,
    child_rss: Option<u64>,
}

/// The series of one server. Cheap to write: one uncontended lock, no
/// label lookups.
#[derive(Debug)]
pub struct ServerSeries {
    /// `server="<id>"`; ids are restricted to `[A-Za-z0-9_.-]`, so they
    /// need no escaping.
    label: String,
    values: Mutex<Values>,
}

impl ServerSeries {
    fn new(id: &str, tools: &[String]) -> Self {
        let mut tool_calls: Vec<ToolSeries> = Vec::new();
        for t in tools {
            if !tool_calls.iter().any(|s| &s.tool == t) {
                tool_calls.push(ToolSeries {
                    tool: t.clone(),
                    duration: None,
                    cancellations: Counters::default(),
                });
            }
        }
        ServerSeries {
            label: format!("server=\"{id}\""),
            values: Mutex::new(Values {
                state: State::Unknown,
                reason: "starting",
                info: None,
                health_check_present: false,
                tools: None,
                session_start: None,
                last_check: None,
                state_changes: 0,
                probes: Counters::default(),
                probes_skipped: Counters::default(),
                probe_failures: Counters::default(),
                reconnects: Counters::default(),
                session_closes: Counters::default(),
                ping_duration: None,
                health_check_duration: None,
                health_check_values: Vec::new(),
                progress_interval: None,
                tool_calls,
                child_cpu: None,
                child_rss: None,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Values) -> R) -> R {
        // A panic while holding the lock leaves plain numbers; keep using them.
        f(&mut self.values.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Publish the server's state on `_state` and `_up`.
    pub fn set_state(&self, state: State) {
        self.with(|v| v.state = state);
    }

    /// Replace the server's reason series.
    pub fn set_reason(&self, reason: &'static str) {
        self.with(|v| v.reason = reason);
    }

    /// Replace the server's `_info` series.
    pub fn set_info(&self, transport: &str, protocol: &str, name: &str, version: &str) {
        // The session already bounds name and version (see `session::truncate`).
        let labels = [transport, protocol, name, version].map(str::to_owned);
        self.with(|v| v.info = Some(Box::new(labels)));
    }

    /// Whether the current session lists the health tool.
    pub fn set_health_check_present(&self, present: bool) {
        self.with(|v| v.health_check_present = present);
    }

    /// Tools listed at session start.
    pub fn set_tools(&self, n: usize) {
        self.with(|v| v.tools = Some(n as u64));
    }

    /// Unix time the current session opened.
    pub fn set_session_start(&self, unix: f64) {
        self.with(|v| v.session_start = Some(unix));
    }

    /// Unix time of the last probe result.
    pub fn set_last_check(&self, unix: f64) {
        self.with(|v| v.last_check = Some(unix));
    }

    /// Count a state transition.
    pub fn state_changed(&self) {
        self.with(|v| v.state_changes += 1);
    }

    /// Count a probe sent.
    pub fn probe_sent(&self, probe: &'static str) {
        self.with(|v| v.probes.inc(probe));
    }

    /// Count a probe tick skipped because the last probe is in flight.
    pub fn probe_skipped(&self, probe: &'static str) {
        self.with(|v| v.probes_skipped.inc(probe));
    }

    /// Count a failed probe.
    pub fn probe_failed(&self, probe: &'static str, reason: &'static str) {
        self.with(|v| v.probe_failures.inc((probe, reason)));
    }

    /// Count a session rebuilt after being lost.
    pub fn reconnected(&self, reason: &'static str) {
        self.with(|v| v.reconnects.inc(reason));
    }

    /// Count a session closed.
    pub fn session_closed(&self, reason: &'static str) {
        self.with(|v| v.session_closes.inc(reason));
    }

    /// Record an answered liveness probe's round trip.
    pub fn observe_ping(&self, secs: f64) {
        self.with(|v| {
            v.ping_duration
                .get_or_insert_with(|| Histogram::new(&LATENCY_BUCKETS))
                .observe(secs)
        });
    }

    /// Record an answered health_check's duration.
    pub fn observe_health_check(&self, secs: f64) {
        self.with(|v| {
            v.health_check_duration
                .get_or_insert_with(|| Histogram::new(&LATENCY_BUCKETS))
                .observe(secs)
        });
    }

    /// Record the time between two progress notifications of one request.
    pub fn observe_progress_interval(&self, secs: f64) {
        self.with(|v| {
            v.progress_interval
                .get_or_insert_with(|| Histogram::new(&PROGRESS_BUCKETS))
                .observe(secs)
        });
    }

    /// Record a synthetic tool call's duration. Unknown tools are ignored:
    /// the series set is fixed by the configuration.
    pub fn observe_tool_call(&self, tool: &str, secs: f64) {
        self.with(|v| {
            if let Some(t) = v.tool_calls.iter_mut().find(|t| t.tool == tool) {
                t.duration
                    .get_or_insert_with(|| Histogram::new(&TOOL_CALL_BUCKETS))
                    .observe(secs);
            }
        });
    }

    /// Count a synthetic tool call cancelled at `reason`'s deadline.
    pub fn tool_call_cancelled(&self, tool: &str, reason: &'static str) {
        self.with(|v| {
            if let Some(t) = v.tool_calls.iter_mut().find(|t| t.tool == tool) {
                t.cancellations.inc(reason);
            }
        });
    }

    /// Replace the health_check values.
    pub fn set_health_fields(&self, fields: &[(String, f64)]) {
        self.with(|v| {
            v.health_check_values.clear();
            v.health_check_values.extend_from_slice(fields);
        });
    }

    /// Add to the child CPU counter; a negative amount (a new process
    /// starting from zero) only makes the series appear.
    pub fn child_cpu_add(&self, secs: f64) {
        self.with(|v| *v.child_cpu.get_or_insert(0.0) += secs.max(0.0));
    }

    /// Resident memory of the child process tree.
    pub fn set_child_rss(&self, bytes: u64) {
        self.with(|v| v.child_rss = Some(bytes));
    }

    /// Append this server's lines to each family's buffer.
    fn render(&self, out: &mut [String; FAMILIES]) {
        let l = self.label.as_str();
        let name = |f: Family| FAMILY_META[f as usize].0;
        self.with(|v| {
            let up = matches!(v.state, State::Healthy | State::Degraded);
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
                        u8::from(s == v.state)
                    ),
                );
            }
            put(
                out,
                Family::Reason,
                format_args!(
                    "{}{{reason=\"{}\",{l}}} 1\n",
                    name(Family::Reason),
                    v.reason
                ),
            );
            if let Some(i) = &v.info {
                put(
                out,
                    Family::Info,
                    format_args!(
                        "{}{{protocol_version=\"{}\",{l},server_name=\"{}\",server_version=\"{}\",transport=\"{}\"}} 1\n",
                        name(Family::Info),
                        Escaped(&i[1]),
                        Escaped(&i[2]),
                        Escaped(&i[3]),
                        Escaped(&i[0])
                    ),
                );
            }
            put(
                out,
                Family::HealthCheckPresent,
                format_args!(
                    "{}{{{l}}} {}\n",
                    name(Family::HealthCheckPresent),
                    u8::from(v.health_check_present)
                ),
            );
            if let Some(n) = v.tools {
                put(out, Family::Tools, format_args!("{}{{{l}}} {n}\n", name(Family::Tools)));
            }
            for (f, value) in [
                (Family::SessionStart, v.session_start),
                (Family::LastCheck, v.last_check),
                (Family::ChildCpu, v.child_cpu),
            ] {
                if let Some(x) = value {
                    put(out, f, format_args!("{}{{{l}}} {}\n", name(f), Float(x)));
                }
            }
            if let Some(n) = v.child_rss {
                put(
                out,
                    Family::ChildRss,
                    format_args!("{}{{{l}}} {n}\n", name(Family::ChildRss)),
                );
            }
            put(
                out,
                Family::StateChanges,
                format_args!("{}{{{l}}} {}\n", name(Family::StateChanges), v.state_changes),
            );
            for (f, counters) in [
                (Family::Probes, &v.probes),
                (Family::ProbesSkipped, &v.probes_skipped),
            ] {
                for (probe, n) in &counters.0 {
                    put(out, f, format_args!("{}{{probe=\"{probe}\",{l}}} {n}\n", name(f)));
                }
            }
            for ((probe, reason), n) in &v.probe_failures.0 {
                put(
                out,
                    Family::ProbeFailures,
                    format_args!(
                        "{}{{probe=\"{probe}\",reason=\"{reason}\",{l}}} {n}\n",
                        name(Family::ProbeFailures)
                    ),
                );
            }
            for (f, counters) in [
                (Family::Reconnects, &v.reconnects),
                (Family::SessionCloses, &v.session_closes),
            ] {
                for (reason, n) in &counters.0 {
                    put(out, f, format_args!("{}{{reason=\"{reason}\",{l}}} {n}\n", name(f)));
                }
            }
            for (f, h) in [
                (Family::PingDuration, &v.ping_duration),
                (Family::HealthCheckDuration, &v.health_check_duration),
                (Family::ProgressInterval, &v.progress_interval),
            ] {
                if let Some(h) = h {
                    h.render(&mut out[f as usize], name(f), l);
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
                if let Some(h) = &t.duration {
                    let labels = format!("{l},tool=\"{tool}\"");
                    h.render(
                        &mut out[Family::ToolCallDuration as usize],
                        name(Family::ToolCallDuration),
                        &labels,
                    );
                }
                for (reason, n) in &t.cancellations.0 {
                    put(
                out,
                        Family::ToolCallCancellations,
                        format_args!(
                            "{}{{reason=\"{reason}\",{l},tool=\"{tool}\"}} {n}\n",
                            name(Family::ToolCallCancellations)
                        ),
                    );
                }
            }
        });
    }
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

/// Every metric: per-server series plus the fleet-wide registry.
pub struct Metrics {
    registry: Registry,
    servers: RwLock<BTreeMap<String, Arc<ServerSeries>>>,
    /// Each family's size at the last scrape, to allocate its buffer once.
    last_sizes: Mutex<[usize; FAMILIES]>,
    /// `mcpmon_fleet_servers`
    pub fleet_servers: IntGaugeVec,
    /// `mcpmon_fleet_available_ratio`
    pub fleet_available: Gauge,
    /// `mcpmon_fleet_policy_min_available_ratio`
    pub fleet_min_available: Gauge,
    /// `mcpmon_runtime_alive_tasks`
    pub alive_tasks: prometheus::IntGauge,
    /// `mcpmon_config_last_reload_successful`
    pub config_reload_ok: Gauge,
    /// `mcpmon_config_last_reload_success_timestamp_seconds`
    pub config_reload_time: Gauge,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("mcpmon")
}

impl Metrics {
    /// Build and register the fleet-wide metrics.
    pub fn new(revision: &str) -> Result<Metrics, prometheus::Error> {
        let m = Metrics {
            registry: Registry::new(),
            servers: RwLock::new(BTreeMap::new()),
            last_sizes: Mutex::new([0; FAMILIES]),
            fleet_servers: IntGaugeVec::new(
                opts("fleet_servers", "Servers per state."),
                &["state"],
            )?,
            fleet_available: Gauge::with_opts(opts(
                "fleet_available_ratio",
                "Share of servers available under the fleet policy (0-1).",
            ))?,
            fleet_min_available: Gauge::with_opts(opts(
                "fleet_policy_min_available_ratio",
                "Least available share the fleet policy requires (0-1).",
            ))?,
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
        r.register(Box::new(m.fleet_servers.clone()))?;
        r.register(Box::new(m.fleet_available.clone()))?;
        r.register(Box::new(m.fleet_min_available.clone()))?;
        r.register(Box::new(m.alive_tasks.clone()))?;
        r.register(Box::new(m.config_reload_ok.clone()))?;
        r.register(Box::new(m.config_reload_time.clone()))?;
        // process_* (memory, fds, CPU) of mcpmon itself, read from /proc at scrape time.
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        for s in State::ALL {
            m.fleet_servers.with_label_values(&[s.as_str()]).set(0);
        }
        Ok(m)
    }

    /// Create a server's series, replacing any it had, and return the handle
    /// its supervisor writes through. `tools` are the configured tool
    /// probes' tool names.
    pub fn add_server(&self, id: &str, tools: &[String]) -> Arc<ServerSeries> {
        let series = Arc::new(ServerSeries::new(id, tools));
        self.servers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), series.clone());
        series
    }

    /// Drop every series of a server that left the fleet (or restarts with
    /// new settings). A handle still held by a stopping supervisor keeps
    /// working but is no longer rendered.
    pub fn forget(&self, id: &str) {
        self.servers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            self.alive_tasks
                .set(i64::try_from(rt.metrics().num_alive_tasks()).unwrap_or(i64::MAX));
        }
        // Take the handles and let go of the map: adding a server never
        // waits for a scrape.
        let servers: Vec<Arc<ServerSeries>> = self
            .servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let sizes = *self.last_sizes.lock().unwrap_or_else(|p| p.into_inner());
        let mut families: [String; FAMILIES] =
            std::array::from_fn(|i| String::with_capacity(sizes[i] + sizes[i] / 8));
        for s in &servers {
            s.render(&mut families);
        }
        *self.last_sizes.lock().unwrap_or_else(|p| p.into_inner()) =
            std::array::from_fn(|i| families[i].len());
        let size = families.iter().map(String::len).sum::<usize>() + 16 * 1024;
        let mut out = String::with_capacity(size);
        for ((name, kind, help), lines) in FAMILY_META.iter().zip(&families) {
            if !lines.is_empty() {
                let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
                out.push_str(lines);
            }
        }
        let mut buf = Vec::with_capacity(16 * 1024);
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        out.push_str(&String::from_utf8_lossy(&buf));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str, prefix: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn new_server_has_only_its_always_on_series() {
        let m = Metrics::new("test").expect("metrics");
        m.add_server("a", &[]);
        let text = m.render();
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
            lines(&text, "mcpmon_server_state_changes_total{"),
            ["mcpmon_server_state_changes_total{server=\"a\"} 0"]
        );
        for absent in [
            "mcpmon_probes_total",
            "mcpmon_ping_duration_seconds",
            "mcpmon_server_info",
            "mcpmon_server_tools",
            "mcpmon_child_cpu_seconds_total",
        ] {
            assert!(!text.contains(absent), "{absent} rendered before any event");
        }
        assert!(text.contains("mcpmon_build_info{"));
        assert!(text.contains("mcpmon_fleet_servers{state=\"healthy\"} 0"));
    }

    #[test]
    fn histograms_are_cumulative_and_counters_count() {
        let m = Metrics::new("test").expect("metrics");
        let s = m.add_server("a", &["slow".to_owned()]);
        s.observe_ping(0.0003);
        s.observe_ping(0.002);
        s.observe_ping(20.0);
        s.probe_sent("ping");
        s.probe_sent("ping");
        s.probe_failed("ping", "timeout");
        s.observe_tool_call("slow", 0.2);
        s.observe_tool_call("unknown", 0.2);
        s.tool_call_cancelled("slow", "request_timeout");
        let text = m.render();
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
        assert_eq!(
            lines(&text, "mcpmon_ping_duration_seconds_sum{"),
            ["mcpmon_ping_duration_seconds_sum{server=\"a\"} 20.0023"]
        );
        assert_eq!(
            lines(&text, "mcpmon_probes_total{"),
            ["mcpmon_probes_total{probe=\"ping\",server=\"a\"} 2"]
        );
        assert_eq!(
            lines(&text, "mcpmon_probe_failures_total{"),
            ["mcpmon_probe_failures_total{probe=\"ping\",reason=\"timeout\",server=\"a\"} 1"]
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
        // One HELP and TYPE per family, before its first sample.
        assert_eq!(
            text.matches("# TYPE mcpmon_ping_duration_seconds histogram")
                .count(),
            1
        );
    }

    #[test]
    fn values_from_servers_are_escaped_and_replaced() {
        let m = Metrics::new("test").expect("metrics");
        let s = m.add_server("a", &[]);
        s.set_info("http", "2025-06-18", "we\"ird\\name\n", "1.0");
        s.set_health_fields(&[("queue \"depth\"".to_owned(), 3.5)]);
        s.set_health_fields(&[("load".to_owned(), f64::INFINITY)]);
        let text = m.render();
        let info = lines(&text, "mcpmon_server_info{");
        assert_eq!(info.len(), 1);
        assert!(
            info[0].contains(r#"server_name="we\"ird\\name\n""#),
            "{}",
            info[0]
        );
        assert!(
            info[0].ends_with(r#"server_version="1.0",transport="http"} 1"#),
            "{}",
            info[0]
        );
        assert_eq!(
            lines(&text, "mcpmon_health_check_value{"),
            ["mcpmon_health_check_value{field=\"load\",server=\"a\"} +Inf"]
        );
    }

    #[test]
    fn forgotten_servers_vanish_and_replaced_ones_start_fresh() {
        let m = Metrics::new("test").expect("metrics");
        let old = m.add_server("a", &[]);
        m.add_server("b", &[]);
        old.probe_sent("ping");
        m.forget("a");
        // A stopping supervisor may still write; nothing is rendered for it.
        old.probe_sent("ping");
        let text = m.render();
        assert!(!text.contains("server=\"a\""));
        assert!(text.contains("server=\"b\""));
        let new = m.add_server("a", &[]);
        new.state_changed();
        let text = m.render();
        assert!(lines(&text, "mcpmon_probes_total{").is_empty());
        assert!(text.contains("mcpmon_server_state_changes_total{server=\"a\"} 1"));
    }
}
