//! Every metric mcpmon exports, in one registry. Label values are server ids
//! (from the config) and bounded enums; nothing a server says becomes a label
//! except its name and version on the `_info` series, truncated and replaced
//! when they change.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{
    CounterVec, Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::verdict::State;

/// Probe kinds, the `probe` label.
pub const PROBES: [&str; 4] = ["ping", "discover", "health_check", "tool"];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The registry and handles to every metric.
pub struct Metrics {
    registry: Registry,
    /// `mcpmon_server_up`
    pub server_up: IntGaugeVec,
    /// `mcpmon_server_state`
    pub server_state: IntGaugeVec,
    /// `mcpmon_ping_duration_seconds`
    pub ping_duration: HistogramVec,
    /// `mcpmon_probes_total`
    pub probes: IntCounterVec,
    /// `mcpmon_probe_failures_total`
    pub probe_failures: IntCounterVec,
    /// `mcpmon_reconnects_total`
    pub reconnects: IntCounterVec,
    /// `mcpmon_health_check_duration_seconds`
    pub health_check_duration: HistogramVec,
    /// `mcpmon_server_info`
    pub server_info: IntGaugeVec,
    /// `mcpmon_fleet_servers`
    pub fleet_servers: IntGaugeVec,
    /// `mcpmon_health_check_value`
    pub health_check_value: GaugeVec,
    /// `mcpmon_server_last_check_timestamp_seconds`
    pub last_check: GaugeVec,
    /// `mcpmon_server_state_changes_total`
    pub state_changes: IntCounterVec,
    /// `mcpmon_session_start_timestamp_seconds`
    pub session_start: GaugeVec,
    /// `mcpmon_server_tools`
    pub tools: IntGaugeVec,
    /// `mcpmon_probes_skipped_total`
    pub probes_skipped: IntCounterVec,
    /// `mcpmon_progress_interval_seconds`
    pub progress_interval: HistogramVec,
    /// `mcpmon_tool_call_duration_seconds`
    pub tool_call_duration: HistogramVec,
    /// `mcpmon_tool_call_cancellations_total`
    pub tool_call_cancellations: IntCounterVec,
    /// `mcpmon_session_closes_total`
    pub session_closes: IntCounterVec,
    /// `mcpmon_child_cpu_seconds_total`
    pub child_cpu: CounterVec,
    /// `mcpmon_child_resident_memory_bytes`
    pub child_rss: IntGaugeVec,
    /// `mcpmon_server_reason`
    pub server_reason: IntGaugeVec,
    /// `mcpmon_server_health_check_present`
    pub health_check_present: IntGaugeVec,
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
    info_labels: Mutex<HashMap<String, [String; 4]>>,
    reasons: Mutex<HashMap<String, &'static str>>,
    health_fields: Mutex<HashMap<String, Vec<String>>>,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("mcpmon")
}

fn hopts(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace("mcpmon")
        .buckets(LATENCY_BUCKETS.to_vec())
}

impl Metrics {
    /// Build and register every metric.
    pub fn new(revision: &str) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let m = Metrics {
            server_up: IntGaugeVec::new(
                opts(
                    "server_up",
                    "1 if the server is healthy or degraded, 0 otherwise.",
                ),
                &["server"],
            )?,
            server_state: IntGaugeVec::new(
                opts(
                    "server_state",
                    "Current state of the server, one series per state (1 = current).",
                ),
                &["server", "state"],
            )?,
            ping_duration: HistogramVec::new(
                hopts(
                    "ping_duration_seconds",
                    "Round trip of liveness probes (ping or server/discover) that were answered.",
                ),
                &["server"],
            )?,
            probes: IntCounterVec::new(
                opts("probes_total", "Probes sent, by kind."),
                &["server", "probe"],
            )?,
            probe_failures: IntCounterVec::new(
                opts(
                    "probe_failures_total",
                    "Probes that failed, by kind and bounded reason.",
                ),
                &["server", "probe", "reason"],
            )?,
            reconnects: IntCounterVec::new(
                opts(
                    "reconnects_total",
                    "Sessions rebuilt after being lost, by reason.",
                ),
                &["server", "reason"],
            )?,
            health_check_duration: HistogramVec::new(
                hopts(
                    "health_check_duration_seconds",
                    "Duration of health_check tool calls that were answered.",
                ),
                &["server"],
            )?,
            server_info: IntGaugeVec::new(
                opts(
                    "server_info",
                    "Descriptive data about the server's current session (always 1).",
                ),
                &[
                    "server",
                    "transport",
                    "protocol_version",
                    "server_name",
                    "server_version",
                ],
            )?,
            fleet_servers: IntGaugeVec::new(
                opts("fleet_servers", "Servers per state."),
                &["state"],
            )?,
            health_check_value: GaugeVec::new(
                opts(
                    "health_check_value",
                    "Numeric top-level fields of the last health_check result.",
                ),
                &["server", "field"],
            )?,
            last_check: GaugeVec::new(
                opts(
                    "server_last_check_timestamp_seconds",
                    "Unix time of the last probe result.",
                ),
                &["server"],
            )?,
            state_changes: IntCounterVec::new(
                opts(
                    "server_state_changes_total",
                    "State transitions of the server.",
                ),
                &["server"],
            )?,
            session_start: GaugeVec::new(
                opts(
                    "session_start_timestamp_seconds",
                    "Unix time the current session opened.",
                ),
                &["server"],
            )?,
            tools: IntGaugeVec::new(
                opts("server_tools", "Tools the server listed at session start."),
                &["server"],
            )?,
            probes_skipped: IntCounterVec::new(
                opts(
                    "probes_skipped_total",
                    "Probe ticks skipped because the previous probe of that kind was still in flight.",
                ),
                &["server", "probe"],
            )?,
            progress_interval: HistogramVec::new(
                HistogramOpts::new(
                    "progress_interval_seconds",
                    "Time between consecutive progress notifications of one request.",
                )
                .namespace("mcpmon")
                .buckets(vec![
                    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                ]),
                &["server"],
            )?,
            tool_call_duration: HistogramVec::new(
                HistogramOpts::new(
                    "tool_call_duration_seconds",
                    "Duration of synthetic tool calls, answered or not.",
                )
                .namespace("mcpmon")
                .buckets(vec![
                    0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                    300.0,
                ]),
                &["server", "tool"],
            )?,
            tool_call_cancellations: IntCounterVec::new(
                opts(
                    "tool_call_cancellations_total",
                    "Synthetic tool calls cancelled, by which deadline fired.",
                ),
                &["server", "tool", "reason"],
            )?,
            session_closes: IntCounterVec::new(
                opts(
                    "session_closes_total",
                    "Sessions closed, by bounded reason.",
                ),
                &["server", "reason"],
            )?,
            child_cpu: CounterVec::new(
                opts(
                    "child_cpu_seconds_total",
                    "CPU time used by the stdio server's process tree.",
                ),
                &["server"],
            )?,
            child_rss: IntGaugeVec::new(
                opts(
                    "child_resident_memory_bytes",
                    "Resident memory of the stdio server's process tree.",
                ),
                &["server"],
            )?,
            server_reason: IntGaugeVec::new(
                opts(
                    "server_reason",
                    "Why the server is in its state (bounded set; one series per server, always 1).",
                ),
                &["server", "reason"],
            )?,
            health_check_present: IntGaugeVec::new(
                opts(
                    "server_health_check_present",
                    "1 if the server's current session lists the health tool.",
                ),
                &["server"],
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
            registry,
            info_labels: Mutex::new(HashMap::new()),
            reasons: Mutex::new(HashMap::new()),
            health_fields: Mutex::new(HashMap::new()),
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
        r.register(Box::new(m.server_up.clone()))?;
        r.register(Box::new(m.server_state.clone()))?;
        r.register(Box::new(m.ping_duration.clone()))?;
        r.register(Box::new(m.probes.clone()))?;
        r.register(Box::new(m.probe_failures.clone()))?;
        r.register(Box::new(m.reconnects.clone()))?;
        r.register(Box::new(m.health_check_duration.clone()))?;
        r.register(Box::new(m.server_info.clone()))?;
        r.register(Box::new(m.fleet_servers.clone()))?;
        r.register(Box::new(m.health_check_value.clone()))?;
        r.register(Box::new(m.last_check.clone()))?;
        r.register(Box::new(m.state_changes.clone()))?;
        r.register(Box::new(m.session_start.clone()))?;
        r.register(Box::new(m.tools.clone()))?;
        r.register(Box::new(m.probes_skipped.clone()))?;
        r.register(Box::new(m.progress_interval.clone()))?;
        r.register(Box::new(m.tool_call_duration.clone()))?;
        r.register(Box::new(m.tool_call_cancellations.clone()))?;
        r.register(Box::new(m.session_closes.clone()))?;
        r.register(Box::new(m.child_cpu.clone()))?;
        r.register(Box::new(m.child_rss.clone()))?;
        r.register(Box::new(m.server_reason.clone()))?;
        r.register(Box::new(m.health_check_present.clone()))?;
        r.register(Box::new(m.fleet_available.clone()))?;
        r.register(Box::new(m.fleet_min_available.clone()))?;
        r.register(Box::new(m.alive_tasks.clone()))?;
        r.register(Box::new(m.config_reload_ok.clone()))?;
        // process_* (memory, fds, CPU) of mcpmon itself, read from /proc at scrape time.
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        r.register(Box::new(m.config_reload_time.clone()))?;
        for s in State::ALL {
            m.fleet_servers.with_label_values(&[s.as_str()]).set(0);
        }
        Ok(m)
    }

    /// Create the series of a new server so they exist before the first probe.
    pub fn add_server(&self, id: &str) {
        self.set_state(id, State::Unknown);
        self.set_reason(id, "starting");
        self.health_check_present.with_label_values(&[id]).set(0);
        // Other per-server series appear with their first event: at 10 000
        // servers, every pre-created series is 10 000 more lines per scrape.
        self.state_changes.with_label_values(&[id]);
    }

    /// Drop every series of a server that left the fleet (or restarts with
    /// new settings). Label values are bounded enums plus the configured tool
    /// names, so every possible series can be named.
    pub fn forget(&self, id: &str, tools: &[String]) {
        use crate::session::RequestError;
        use crate::verdict::Reason;
        let failure_labels = RequestError::LABELS.iter().copied().chain(["tool_error"]);
        let reasons: Vec<&str> = Reason::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(["shutdown"])
            .collect();
        for s in State::ALL {
            let _ = self.server_state.remove_label_values(&[id, s.as_str()]);
        }
        for probe in PROBES {
            let _ = self.probes.remove_label_values(&[id, probe]);
            let _ = self.probes_skipped.remove_label_values(&[id, probe]);
            for label in failure_labels.clone() {
                let _ = self.probe_failures.remove_label_values(&[id, probe, label]);
            }
        }
        for reason in &reasons {
            let _ = self.reconnects.remove_label_values(&[id, reason]);
            let _ = self.session_closes.remove_label_values(&[id, reason]);
            let _ = self.server_reason.remove_label_values(&[id, reason]);
        }
        for tool in tools {
            let _ = self.tool_call_duration.remove_label_values(&[id, tool]);
            for reason in ["request_timeout", "max_request_timeout"] {
                let _ = self
                    .tool_call_cancellations
                    .remove_label_values(&[id, tool, reason]);
            }
        }
        let _ = self.server_up.remove_label_values(&[id]);
        let _ = self.state_changes.remove_label_values(&[id]);
        let _ = self.ping_duration.remove_label_values(&[id]);
        let _ = self.health_check_duration.remove_label_values(&[id]);
        let _ = self.progress_interval.remove_label_values(&[id]);
        let _ = self.last_check.remove_label_values(&[id]);
        let _ = self.session_start.remove_label_values(&[id]);
        let _ = self.tools.remove_label_values(&[id]);
        let _ = self.health_check_present.remove_label_values(&[id]);
        let _ = self.child_cpu.remove_label_values(&[id]);
        let _ = self.child_rss.remove_label_values(&[id]);
        if let Some(old) = self
            .info_labels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
        {
            let _ = self
                .server_info
                .remove_label_values(&[id, &old[0], &old[1], &old[2], &old[3]]);
        }
        self.set_health_fields(id, &[]);
        self.health_fields
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        self.reasons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Publish a server's state on `_state` and `_up`.
    pub fn set_state(&self, id: &str, state: State) {
        for s in State::ALL {
            self.server_state
                .with_label_values(&[id, s.as_str()])
                .set(i64::from(s == state));
        }
        let up = matches!(state, State::Healthy | State::Degraded);
        self.server_up.with_label_values(&[id]).set(i64::from(up));
    }

    /// Replace the server's reason series.
    pub fn set_reason(&self, id: &str, reason: &'static str) {
        let mut known = self.reasons.lock().unwrap_or_else(|p| p.into_inner());
        match known.get(id) {
            Some(old) if *old == reason => return,
            Some(old) => {
                let _ = self.server_reason.remove_label_values(&[id, old]);
            }
            None => {}
        }
        self.server_reason.with_label_values(&[id, reason]).set(1);
        known.insert(id.to_owned(), reason);
    }

    /// Replace the server's `_info` series.
    pub fn set_info(&self, id: &str, transport: &str, protocol: &str, name: &str, version: &str) {
        let labels = [
            transport.to_owned(),
            protocol.to_owned(),
            name.to_owned(),
            version.to_owned(),
        ];
        let mut known = self.info_labels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = known.get(id)
            && old != &labels
        {
            let _ = self
                .server_info
                .remove_label_values(&[id, &old[0], &old[1], &old[2], &old[3]]);
        }
        self.server_info
            .with_label_values(&[id, transport, protocol, name, version])
            .set(1);
        known.insert(id.to_owned(), labels);
    }

    /// Replace the server's health_check values.
    pub fn set_health_fields(&self, id: &str, fields: &[(String, f64)]) {
        let mut known = self.health_fields.lock().unwrap_or_else(|p| p.into_inner());
        let names: Vec<String> = fields.iter().map(|(k, _)| k.clone()).collect();
        if let Some(old) = known.get(id) {
            for f in old.iter().filter(|f| !names.contains(f)) {
                let _ = self.health_check_value.remove_label_values(&[id, f]);
            }
        }
        for (k, v) in fields {
            self.health_check_value.with_label_values(&[id, k]).set(*v);
        }
        known.insert(id.to_owned(), names);
    }

    /// Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            self.alive_tasks
                .set(i64::try_from(rt.metrics().num_alive_tasks()).unwrap_or(i64::MAX));
        }
        let mut buf = Vec::with_capacity(64 * 1024);
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}
