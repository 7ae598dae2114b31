//! One server's samples, from its published record. Label values are its
//! id (from the config) and bounded enums; nothing a server says becomes a
//! label except its name and version on the `_info` series, truncated and
//! replaced when they change.

use super::text::{Float, Writer};
use super::{Exposition, Histograms};
use crate::output::families::Family;
use crate::state::ServerRecord;
use crate::state::series::{Counters, Series, unix_seconds};
use crate::state::verdict::State;
use tokio::time::Instant;

use crate::state::series::LATENCY_KEPT as SMALL_LATENCY;
/// The `le` bounds the small exposition keeps of tool call histograms.
const SMALL_TOOL_CALL: &[&str] = &["0.1", "1", "10", "60"];

/// Write every sample of server `id`, its clocks read at `now`.
pub fn render(id: &str, r: &ServerRecord, x: Exposition, now: Instant, w: &mut Writer) {
    // Ids are restricted to `[A-Za-z0-9_.-]`; the writer escapes anyway.
    let server = ("server", id);
    status(server, r, w);
    descriptive(server, r, x, w);
    counters(server, &r.series, x, w);
    let spent = r.series.uptime.at(now);
    w.sample(Family::ObservedSeconds, &[server], Float(spent.observed()));
    w.sample(Family::DownSeconds, &[server], Float(spent.down));
    durations(server, &r.series, x, w);
}

/// Up, state, reason, `_info` and the operator's labels.
fn status(server: (&str, &str), r: &ServerRecord, w: &mut Writer) {
    let st = &r.status;
    let up = st.status.is_up();
    w.sample(Family::Up, &[server], u8::from(up));
    for s in State::ALL {
        w.sample(
            Family::State,
            &[server, ("state", s.as_str())],
            u8::from(s == st.status),
        );
    }
    w.sample(Family::Reason, &[("reason", st.reason.as_str()), server], 1);
    if let Some(i) = &st.server_info {
        let health = if r.series.health_check_present {
            "true"
        } else {
            "false"
        };
        w.sample(
            Family::Info,
            &[
                ("health_check", health),
                ("protocol_version", &i.protocol_version),
                server,
                ("server_name", &i.name),
                ("server_version", &i.version),
                ("transport", st.transport),
            ],
            1,
        );
    }
    // Every server has the series, labels or not, so a `group_left` join
    // never drops one (kube-state-metrics' kube_pod_labels does the same).
    // The config sorted them by exported name, which sorts before `server`.
    let mut labels: Vec<(&str, &str)> = st
        .labels
        .iter()
        .map(|l| (l.exported.as_str(), l.value.as_str()))
        .collect();
    labels.push(server);
    w.sample(Family::Labels, &labels, 1);
    if let Some(said) = &st.operator
        && let Some(ready) = said.ready
    {
        w.sample(
            Family::OperatorReady,
            &[("kind", said.kind.as_str()), server],
            u8::from(ready),
        );
    }
}

/// Tools, timestamps, child process and credentials.
fn descriptive(server: (&str, &str), r: &ServerRecord, x: Exposition, w: &mut Writer) {
    let v = &r.series;
    if let (Some(t), true) = (&r.status.tools, x.detail) {
        w.sample(Family::Tools, &[server], t.surface.tools.len());
        w.sample(Family::ToolsInvalid, &[server], t.invalid().count());
    }
    // A counter nothing has moved is left out by default: it appears with
    // its first increment (what `rate()` then misses is that one event).
    if x.detail || v.tools_changes > 0 {
        w.sample(Family::ToolsChanges, &[server], v.tools_changes);
    }
    for (f, value, always) in [
        (Family::SessionStart, time(r.status.session_started), false),
        (Family::LastCheck, time(r.status.last_check), true),
        (Family::ChildCpu, v.child_cpu, true),
    ] {
        if let (Some(value), true) = (value, always || x.detail) {
            w.sample(f, &[server], Float(value));
        }
    }
    if let Some((at, refreshable)) = v.token_expiry {
        let refreshable = if refreshable { "true" } else { "false" };
        w.sample(
            Family::TokenExpiry,
            &[("refreshable", refreshable), server],
            Float(at),
        );
    }
    if let Some(m) = &r.status.maintenance {
        w.sample(Family::Maintenance, &[server, ("window", &m.window)], 1);
    }
    for t in &r.status.tasks {
        let labels = [server, ("tool", &*t.tool)];
        w.sample(Family::ToolTaskBusy, &labels, u8::from(t.busy));
    }
    if let Some(at) = v.tls_cert_expiry {
        w.sample(Family::TlsCertExpiry, &[server], Float(at));
    }
    if let Some(version) = v.tls_version {
        w.sample(Family::TlsVersion, &[server, ("version", version)], 1);
    }
    if let (Some(n), true) = (v.child_rss, x.detail) {
        w.sample(Family::ChildRss, &[server], n);
    }
    if x.detail {
        let failures = r.status.consecutive_failures;
        w.sample(Family::ConsecutiveFailures, &[server], failures);
    }
}

/// Counters of probes, failures, reconnects and closes.
fn counters(server: (&str, &str), v: &Series, x: Exposition, w: &mut Writer) {
    w.sample(Family::StateChanges, &[server], v.state_changes);
    for (f, counters) in [
        (Family::Probes, &v.probes),
        (Family::ProbesSkipped, &v.probes_skipped),
        (Family::ProbesThrottled, &v.probes_throttled),
    ] {
        for (probe, n) in shown(counters, x) {
            w.sample(f, &[("probe", probe.as_str()), server], n);
        }
    }
    for (condition, n) in &v.condition_failures {
        w.sample(
            Family::ConditionFailures,
            &[("condition", condition), server],
            *n,
        );
    }
    for ((probe, reason), n) in shown(&v.probe_failures, x) {
        let labels = [
            ("probe", probe.as_str()),
            ("reason", reason.as_str()),
            server,
        ];
        w.sample(Family::ProbeFailures, &labels, n);
    }
    for (reason, n) in shown(&v.reconnects, x) {
        w.sample(
            Family::Reconnects,
            &[("reason", reason.as_str()), server],
            n,
        );
    }
    for (reason, n) in &v.session_closes {
        let reason = reason.map_or("shutdown", |r| r.as_str());
        w.sample(Family::SessionCloses, &[("reason", reason), server], n);
    }
}

/// Histograms, health-check values and the synthetic tool calls.
fn durations(server: (&str, &str), v: &Series, x: Exposition, w: &mut Writer) {
    for (f, h) in [
        (Family::PingDuration, &v.ping_duration),
        (Family::HealthCheckDuration, &v.health_check_duration),
        (Family::ProgressInterval, &v.progress_interval),
    ] {
        if let (Some(h), Some(keep)) = (h, kept(x.histograms, f)) {
            w.histogram(f, &[server], h, keep);
        }
    }
    for (field, value) in &v.health_check_values {
        w.sample(
            Family::HealthCheckValue,
            &[("field", field), server],
            Float(*value),
        );
    }
    for t in &v.tool_calls {
        let labels = [server, ("tool", t.tool.as_str())];
        if let (Some(h), Some(keep)) = (&t.duration, kept(x.histograms, Family::ToolCallDuration)) {
            w.histogram(Family::ToolCallDuration, &labels, h, keep);
        }
        for (reason, n) in &t.cancellations {
            let labels = [
                ("reason", reason.as_str()),
                server,
                ("tool", t.tool.as_str()),
            ];
            w.sample(Family::ToolCallCancellations, &labels, n);
        }
        if let Some(n) = t.task_polls {
            w.sample(Family::ToolTaskPolls, &labels, n);
        }
    }
}

/// Which buckets of the histogram family `f` a render writes: `None`
/// leaves it out, `Some(None)` writes every bucket. Small keeps liveness
/// and tool calls in four buckets each, and progress intervals (of a server
/// that sent progress at all) as their count and sum.
pub fn kept(h: Histograms, f: Family) -> Option<Option<&'static [&'static str]>> {
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
    c.iter().filter(move |(_, n)| x.detail || *n > 0)
}

/// A published time as a `_timestamp_seconds` value.
fn time(t: Option<std::time::SystemTime>) -> Option<f64> {
    t.map(unix_seconds)
}
