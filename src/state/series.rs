//! A server's counters and histograms: plain data, written only by the state
//! owner (through [`Series`]'s methods, from the same observations the
//! evidence is judged on) and published in its snapshots, so `/metrics`
//! renders exactly what `/health` shows for the same generation. Rendering
//! lives in [`crate::output::metrics`].

use super::Loss;
use crate::probe::{Answer, Deadline, FailureReason, ProbeKind};
use crate::state::verdict::{Reason, State};
use std::sync::Arc;
use tokio::time::Instant;

/// Upper bounds of a histogram's buckets, with their `le` label values
/// spelled once (formatting floats is most of a scrape's cost otherwise).
#[derive(Debug)]
pub struct Buckets {
    /// Upper bounds.
    pub bounds: &'static [f64],
    /// The same, as `le` label values.
    pub le: &'static [&'static str],
}

macro_rules! buckets {
    ($($b:literal),+ $(,)?) => {
        Buckets { bounds: &[$($b as f64),+], le: &[$(stringify!($b)),+] }
    };
}

/// Buckets of liveness and health-check durations.
pub const LATENCY_BUCKETS: Buckets = buckets![
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
];
/// The `le` bounds of [`LATENCY_BUCKETS`] every exposition keeps of the
/// liveness histogram (the small one keeps only these): the latency
/// objectives' thresholds, the 0.5 s alert's among them.
pub const LATENCY_KEPT: &[&str] = crate::config::slo::LATENCY_THRESHOLDS;
/// Buckets of intervals between progress notifications.
pub const PROGRESS_BUCKETS: Buckets =
    buckets![0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/// Buckets of synthetic tool call durations.
pub const TOOL_CALL_BUCKETS: Buckets = buckets![
    0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300
];

/// A histogram's observations: per-bucket counts (not cumulative), sum and count.
#[derive(Clone, Debug)]
pub struct Histogram {
    /// Its buckets.
    pub buckets: &'static Buckets,
    /// Observations per bucket (not cumulative).
    pub counts: Box<[u64]>,
    /// Sum of observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new(buckets: &'static Buckets) -> Self {
        Histogram {
            buckets,
            counts: vec![0; buckets.bounds.len()].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    /// Record one observation.
    pub fn observe(&mut self, v: f64) {
        if let Some(i) = self.buckets.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

/// Counters keyed by bounded label values, in first-seen order.
///
/// Shared until written: the published snapshot holds a copy of every
/// server's series, so the first observation after a publish copies the
/// series, and only the counters it moves pay for their own copy.
#[derive(Clone, Debug)]
pub struct Counters<K>(Arc<[(K, u64)]>);

impl<K: PartialEq + Clone> Counters<K> {
    /// Add one.
    pub fn inc(&mut self, key: K) {
        match self.0.iter().position(|(k, _)| *k == key) {
            Some(i) => Arc::make_mut(&mut self.0)[i].1 += 1,
            None => self.add(key, 1),
        }
    }

    /// Make the series exist at 0.
    pub fn declare(&mut self, key: K) {
        if !self.0.iter().any(|(k, _)| *k == key) {
            self.add(key, 0);
        }
    }

    /// A key not seen before: rare (label values are bounded), so the
    /// counters are copied whole.
    fn add(&mut self, key: K, n: u64) {
        self.0 = self.0.iter().cloned().chain([(key, n)]).collect();
    }
}

impl<K> Counters<K> {
    /// Each key and its count, in first-seen order.
    pub fn iter(&self) -> std::slice::Iter<'_, (K, u64)> {
        self.0.iter()
    }
}

impl<'a, K> IntoIterator for &'a Counters<K> {
    type Item = &'a (K, u64);
    type IntoIter = std::slice::Iter<'a, (K, u64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K> Default for Counters<K> {
    fn default() -> Self {
        Counters(Arc::new([]))
    }
}

/// Where a server's time goes, as the history and the availability SLI
/// count it: judged healthy, degraded or unhealthy outside maintenance, or
/// in a maintenance window (time with no verdict yet goes nowhere). In
/// seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Spent {
    /// Healthy.
    pub healthy: f64,
    /// Degraded (up, but not well).
    pub degraded: f64,
    /// Unhealthy: down.
    pub down: f64,
    /// In a maintenance window, whatever the verdict.
    pub maintenance: f64,
}

impl Spent {
    /// Seconds with a verdict outside maintenance: the SLI's total.
    pub fn observed(&self) -> f64 {
        self.healthy + self.degraded + self.down
    }

    /// `self - earlier`, each part at least 0.
    pub fn since(&self, earlier: &Spent) -> Spent {
        Spent {
            healthy: (self.healthy - earlier.healthy).max(0.0),
            degraded: (self.degraded - earlier.degraded).max(0.0),
            down: (self.down - earlier.down).max(0.0),
            maintenance: (self.maintenance - earlier.maintenance).max(0.0),
        }
    }

    fn part(&mut self, (state, in_maintenance): (State, bool)) -> Option<&mut f64> {
        if in_maintenance {
            return Some(&mut self.maintenance);
        }
        match state {
            State::Healthy => Some(&mut self.healthy),
            State::Degraded => Some(&mut self.degraded),
            State::Unhealthy => Some(&mut self.down),
            State::Unknown => None,
        }
    }
}

/// A server's clocks: where its time went so far. They move with time, not
/// with probes (a server that cannot be reached is probed no more, and is
/// down all the same), so each read adds the time since the last change of
/// what the server counts as.
#[derive(Clone, Debug, Default)]
pub struct Uptime {
    spent: Spent,
    /// Since when, and as what, the server counts.
    since: Option<(Instant, (State, bool))>,
}

impl Uptime {
    /// From `now`, the server counts as `state`, in maintenance or not.
    pub fn enter(&mut self, now: Instant, key: (State, bool)) {
        self.spent = self.at(now);
        self.since = Some((now, key));
    }

    /// Where the time went, up to `now`.
    pub fn at(&self, now: Instant) -> Spent {
        let mut spent = self.spent;
        if let Some((since, key)) = self.since
            && let Some(part) = spent.part(key)
        {
            *part += now.saturating_duration_since(since).as_secs_f64();
        }
        spent
    }
}

/// One synthetic tool probe's series.
#[derive(Clone, Debug)]
pub struct ToolSeries {
    /// The tool (a configured name).
    pub tool: String,
    /// Call durations, from the first call.
    pub duration: Option<Histogram>,
    /// Cancellations by deadline.
    pub cancellations: Counters<Deadline>,
    /// `tasks/get` requests of its tasks, once it was called as one.
    pub task_polls: Option<u64>,
    /// The latest task's id and the polls of it already counted.
    task_counted: Option<(String, u32)>,
}

/// A server's counters and histograms.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Whether the current session lists the health tool.
    pub health_check_present: bool,
    /// State transitions.
    pub state_changes: u64,
    /// Where its time went: the availability SLI and the history's rows.
    pub uptime: Uptime,
    /// Probe runs, by kind, each counted once: when it turns late or
    /// ends, whichever comes first (a run cut off by its session's end has
    /// no outcome and is not counted). The failure ratios' denominator.
    pub probes: Counters<ProbeKind>,
    /// Probe ticks skipped, by kind (throttled probes included).
    pub probes_skipped: Counters<ProbeKind>,
    /// Probes answered with a throttle (429, or 503 with `Retry-After`).
    pub probes_throttled: Counters<ProbeKind>,
    /// Failed probes, by kind and reason.
    pub probe_failures: Counters<(ProbeKind, FailureReason)>,
    /// Sessions rebuilt, by the reason the last one ended.
    pub reconnects: Counters<Reason>,
    /// Sessions closed, by reason (`None`: shutdown or removal).
    pub session_closes: Counters<Option<Reason>>,
    /// Answered liveness round trips.
    pub ping_duration: Option<Histogram>,
    /// Answered health check durations.
    pub health_check_duration: Option<Histogram>,
    /// Numeric fields of the last health check.
    pub health_check_values: Vec<(String, f64)>,
    /// Intervals between progress notifications.
    pub progress_interval: Option<Histogram>,
    /// Synthetic tool probes, one entry per configured tool.
    pub tool_calls: Vec<ToolSeries>,
    /// CPU seconds of the stdio process tree (all sessions).
    pub child_cpu: Option<f64>,
    /// The current process's CPU seconds already counted in `child_cpu`.
    cpu_counted: f64,
    /// Resident memory of the stdio process tree.
    pub child_rss: Option<u64>,
    /// Unix time the credentials expire, and whether mcpmon refreshes them.
    pub token_expiry: Option<(f64, bool)>,
    /// Tool surface changes seen (listings whose hash differed).
    pub tools_changes: u64,
    /// Unix time the HTTPS server's presented chain first expires.
    pub tls_cert_expiry: Option<f64>,
    /// The TLS version its latest handshake spoke.
    pub tls_version: Option<&'static str>,
    /// Evaluations of a condition that did not hold, by condition name.
    pub condition_failures: Counters<std::sync::Arc<str>>,
}

impl Series {
    /// The series of a server just added: every counter it will use starts
    /// at 0, so `rate()` sees its first increment.
    pub fn new(kinds: &[ProbeKind], link_reasons: &[Reason], tools: &[String]) -> Self {
        let mut s = Series::default();
        for &k in kinds {
            s.probes.declare(k);
            s.probe_failures.declare((k, FailureReason::Timeout));
        }
        for &r in link_reasons {
            s.reconnects.declare(r);
        }
        for t in tools {
            if !s.tool_calls.iter().any(|x| &x.tool == t) {
                s.tool_calls.push(ToolSeries {
                    tool: t.clone(),
                    duration: None,
                    cancellations: Counters::default(),
                    task_polls: None,
                    task_counted: None,
                });
            }
        }
        s
    }

    // What each observation counts. The owner's `apply` tells each one
    // here (what a server is and when it was last checked are its
    // status's to say: the series only count).

    /// A connection attempt starts, after `after` ended the last one.
    pub fn connecting(&mut self, after: Option<Loss>) {
        if let Some(loss) = after {
            self.reconnects.inc(Reason::from(loss));
        }
    }

    /// A session opened (a new process counts its CPU from zero).
    pub fn opened(&mut self, health_check: bool) {
        self.health_check_present = health_check;
        self.cpu_counted = 0.0;
    }

    /// A tool listing says whether the health tool is there.
    pub fn listed(&mut self, health_check: bool) {
        self.health_check_present = health_check;
    }

    /// A session ended: lost for `loss`, or closed by mcpmon (`None`).
    pub fn closed(&mut self, loss: Option<Loss>) {
        self.session_closes.inc(loss.map(Reason::from));
    }

    /// A probe's tick was skipped.
    pub fn skipped(&mut self, kind: ProbeKind) {
        self.probes_skipped.inc(kind);
    }

    /// A probe went past its timeout (its answer may still come): the
    /// run is counted now, with its timeout.
    pub fn late(&mut self, kind: ProbeKind) {
        self.probes.inc(kind);
        self.probe_failures.inc((kind, FailureReason::Timeout));
    }

    /// The HTTPS server presented a chain.
    pub fn certificate(&mut self, c: &crate::transport::tls::PeerCertificate) {
        self.tls_cert_expiry = Some(unix_seconds(c.not_after));
        self.tls_version = c.version.or(self.tls_version);
    }

    /// The credentials changed (or went).
    pub fn credentials(&mut self, c: Option<crate::transport::Credentials>) {
        self.token_expiry = c.map(|c| (unix_seconds(c.expires), c.refreshable));
    }

    /// A sample of the child's process tree: the CPU counter only moves
    /// forward, whatever the process.
    pub fn process(&mut self, sample: &crate::transport::ProcessSample) {
        let cpu = sample.cpu.as_secs_f64();
        *self.child_cpu.get_or_insert(0.0) += (cpu - self.cpu_counted).max(0.0);
        self.cpu_counted = self.cpu_counted.max(cpu);
        self.child_rss = Some(sample.rss_bytes);
    }

    /// Progress notifications' intervals.
    pub fn progress(&mut self, p: &crate::transport::Progress) {
        for i in &p.intervals {
            self.observe_progress_interval(*i);
        }
    }

    /// Count a task's polls from what each report says it has made, so a
    /// report lost on the way is made good by the next.
    pub fn task_polled(&mut self, seen: &crate::probe::task::TaskSeen) {
        let Some(t) = self.tool_calls.iter_mut().find(|t| *t.tool == *seen.tool) else {
            return;
        };
        let before = match &t.task_counted {
            Some((id, n)) if *id == seen.task_id => *n,
            _ => 0,
        };
        *t.task_polls.get_or_insert(0) += u64::from(seen.polls.saturating_sub(before));
        t.task_counted = Some((seen.task_id.clone(), seen.polls.max(before)));
    }

    /// Conditions evaluated: count the ones that did not hold.
    pub fn conditions(&mut self, checked: &[crate::probe::conditions::Checked]) {
        for c in checked.iter().filter(|c| c.failure.is_some()) {
            self.condition_failures.inc(c.name.clone());
        }
    }

    /// A probe ended: the run (a late one was counted when it went late),
    /// its duration, its tool's series, its failure by reason (a late
    /// one's timeout was counted then too), and the conditions it checked.
    pub fn probed(&mut self, outcome: &crate::probe::ProbeOutcome, was_late: bool) {
        if !was_late {
            self.probes.inc(outcome.kind);
        }
        self.conditions(&outcome.conditions);
        let secs = outcome.duration.as_secs_f64();
        match (&outcome.result, outcome.kind) {
            (Ok(_), k) if k.is_liveness() => self.observe_ping(secs),
            (Ok(Answer::Health(report)), _) => {
                self.observe_health_check(secs);
                self.health_check_values.clone_from(&report.fields);
            }
            _ => {}
        }
        if let Some(tool) = &outcome.tool {
            let cancelled = outcome.result.as_ref().err().and_then(|f| f.cancelled);
            self.observe_tool_call(tool, secs, cancelled);
        }
        match outcome.failure() {
            Some(FailureReason::Timeout) if was_late => {}
            Some(FailureReason::Throttled) => {
                self.probes_skipped.inc(outcome.kind);
                self.probes_throttled.inc(outcome.kind);
            }
            Some(reason) => self.probe_failures.inc((outcome.kind, reason)),
            None => {}
        }
    }

    /// Record an answered liveness round trip.
    pub fn observe_ping(&mut self, secs: f64) {
        self.ping_duration
            .get_or_insert_with(|| Histogram::new(&LATENCY_BUCKETS))
            .observe(secs);
    }

    /// Record an answered health check's duration.
    pub fn observe_health_check(&mut self, secs: f64) {
        self.health_check_duration
            .get_or_insert_with(|| Histogram::new(&LATENCY_BUCKETS))
            .observe(secs);
    }

    /// Record the time between two progress notifications of one request.
    pub fn observe_progress_interval(&mut self, secs: f64) {
        self.progress_interval
            .get_or_insert_with(|| Histogram::new(&PROGRESS_BUCKETS))
            .observe(secs);
    }

    /// Record a synthetic tool call; unknown tools are ignored (the series
    /// set is fixed by the configuration).
    pub fn observe_tool_call(&mut self, tool: &str, secs: f64, cancelled: Option<Deadline>) {
        if let Some(t) = self.tool_calls.iter_mut().find(|t| t.tool == tool) {
            t.duration
                .get_or_insert_with(|| Histogram::new(&TOOL_CALL_BUCKETS))
                .observe(secs);
            if let Some(d) = cancelled {
                t.cancellations.inc(d);
            }
        }
    }
}

/// Seconds since the Unix epoch, for the `_timestamp_seconds` series.
pub fn unix_now() -> f64 {
    unix_seconds(std::time::SystemTime::now())
}

/// `t` in seconds since the Unix epoch (0 before it), as the
/// `_timestamp_seconds` series and OTLP's gauges give times.
pub fn unix_seconds(t: std::time::SystemTime) -> f64 {
    (t.duration_since(std::time::UNIX_EPOCH)).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ProcessSample;
    use crate::transport::procstat::RunState;

    #[test]
    fn uptime_counts_judged_time_by_state_and_maintenance_apart() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let parts = |x: Spent| (x.healthy, x.degraded, x.down, x.maintenance);
        let mut u = Uptime::default();
        assert_eq!(
            u.at(at(5)),
            Spent::default(),
            "nothing entered, nothing counted"
        );
        u.enter(at(0), (State::Unknown, false));
        assert_eq!(
            u.at(at(3)),
            Spent::default(),
            "no verdict yet is not observed"
        );
        u.enter(at(3), (State::Healthy, false));
        assert_eq!(parts(u.at(at(13))), (10.0, 0.0, 0.0, 0.0));
        u.enter(at(13), (State::Degraded, false));
        u.enter(at(18), (State::Unhealthy, false));
        assert_eq!(parts(u.at(at(20))), (10.0, 5.0, 2.0, 0.0));
        u.enter(at(20), (State::Unhealthy, true));
        let x = u.at(at(80));
        assert_eq!(parts(x), (10.0, 5.0, 2.0, 60.0), "maintenance is apart");
        assert_eq!((x.observed(), x.down), (17.0, 2.0), "and out of the SLI");
        u.enter(at(80), (State::Unhealthy, false));
        assert_eq!(parts(u.at(at(81)).since(&x)), (0.0, 0.0, 1.0, 0.0));
        assert_eq!(
            u.at(at(79)),
            x,
            "a read before the last change adds nothing"
        );
    }

    #[test]
    fn child_cpu_only_moves_forward_and_a_new_process_counts_from_zero() {
        let mut s = Series::default();
        let cpu = |ms| ProcessSample {
            state: RunState::Alive,
            cpu: std::time::Duration::from_millis(ms),
            rss_bytes: 1,
        };
        s.process(&cpu(2500));
        s.process(&cpu(2000));
        assert_eq!(
            s.child_cpu,
            Some(2.5),
            "a sample that went back counts nothing"
        );
        s.opened(true);
        s.process(&cpu(1000));
        assert_eq!(s.child_cpu, Some(3.5), "the new process's second is added");
    }
}
