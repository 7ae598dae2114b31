//! When each probe of one session is due: the clocks of a probe loop, the
//! liveness probe in flight, the tool probes' own schedules, and the
//! jitter and holds that keep a fleet from moving in step.

use std::time::Duration;

use futures::stream::FuturesUnordered;
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};

use crate::config::{Settings, ToolProbe};
use crate::probe::{self, FailureReason, ProbeKind, ProbeOutcome};
use crate::state::Observation;
use crate::transport::budget::BUDGET;
use crate::transport::tools::ToolSurface;
use crate::transport::{BoxFuture, RequestError, Session};

/// A probe's answer, once it comes.
pub(super) type Running<'a> = BoxFuture<'a, ProbeOutcome>;

/// The timers of one session's probe loop. Made once per session: a
/// timer made afresh each turn registers and unregisters a waiter, twice a
/// ping.
pub(super) struct Clocks {
    /// The next liveness probe.
    pub(super) ping_due: std::pin::Pin<Box<Sleep>>,
    /// Liveness probes due so far: each one's jitter differs.
    pings: u64,
    pub(super) health_check: Interval,
    /// The next tool listing.
    pub(super) tools_due: std::pin::Pin<Box<Sleep>>,
    listed_at: Instant,
    /// /proc and progress are read at least once a second while they
    /// matter: "stopped", "busy" and "stuck" must not wait for a ping.
    pub(super) evidence: Interval,
    /// Until when the server asked not to be called (Retry-After).
    hold_until: Option<Instant>,
}

impl Clocks {
    /// The first liveness probe goes at once: the session's first verdict
    /// waits for it (the handshake is no liveness answer). The opening
    /// listed the tools, so the next listing is due `relist` from now.
    pub(super) fn new(s: &Settings, relist: Duration) -> Clocks {
        let mut health_check = tokio::time::interval(s.health_check_interval.0);
        health_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut evidence = tokio::time::interval(s.ping_interval.0.min(Duration::from_secs(1)));
        evidence.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Clocks {
            ping_due: Box::pin(tokio::time::sleep_until(Instant::now())),
            pings: 0,
            health_check,
            tools_due: Box::pin(tokio::time::sleep(relist)),
            listed_at: Instant::now(),
            evidence,
            hold_until: None,
        }
    }

    /// Later liveness probes come every `interval`, jittered per server.
    pub(super) fn next_ping(&mut self, interval: Duration, id: &str) {
        self.pings += 1;
        let next = Instant::now() + jittered(interval, id, self.pings);
        self.ping_due.as_mut().reset(next);
    }

    /// Whether the server asked not to be called for now.
    pub(super) fn held(&self) -> bool {
        self.hold_until.is_some_and(|h| Instant::now() < h)
    }

    /// Hold off when the outcome asked to (a throttled probe).
    pub(super) fn hold(&mut self, outcome: &ProbeOutcome) {
        if let Some(wait) = hold_for(outcome) {
            self.hold_until = Some(Instant::now() + wait);
        }
    }

    /// Start a listing now.
    pub(super) fn list<'s>(
        &mut self,
        session: &'s dyn Session,
        timeout: Duration,
    ) -> BoxFuture<'s, Result<ToolSurface, RequestError>> {
        self.listed_at = Instant::now();
        session.list_tools(timeout)
    }

    /// A server's `list_changed` asks for a listing, but no sooner than
    /// the budget allows after the last one: a storm of them is one
    /// listing now and then, not a listing each. Whether one may start now;
    /// if not, the next is brought forward to the soonest allowed.
    pub(super) fn may_relist(&mut self) -> bool {
        let soonest = self.listed_at + BUDGET.relist_every;
        if Instant::now() >= soonest {
            return true;
        }
        if self.tools_due.deadline() > soonest {
            self.tools_due.as_mut().reset(soonest);
        }
        false
    }

    /// The next listing, `after` from now (jittered when the server set it).
    pub(super) fn relist(&mut self, after: Duration, id: &str) {
        let after = jittered(after, id, self.pings);
        self.tools_due.as_mut().reset(Instant::now() + after);
    }
}

/// The liveness probe in flight. Past `late_at` it is reported late, but
/// kept: its answer, whenever it comes, is still evidence.
pub(super) struct InFlight<'a> {
    pub(super) fut: Running<'a>,
    pub(super) late_at: Instant,
    pub(super) late: bool,
}

impl<'a> InFlight<'a> {
    /// Send a liveness probe. The request may stay in flight past
    /// `stuck_after`: the owner judges stuck from silence, and the answer
    /// must never race that judgement.
    pub(super) fn start(session: &'a dyn Session, s: &Settings) -> Self {
        InFlight {
            fut: Box::pin(probe::liveness::run(session, s.stuck_after.0 * 2)),
            late_at: Instant::now() + s.ping_timeout.0,
            late: false,
        }
    }
}

/// Where a task probe's polls are told.
pub(super) type TaskReport = std::sync::Arc<dyn Fn(probe::task::TaskSeen) + Send + Sync>;

/// Schedules of the synthetic tool probes, one call in flight per probe.
pub(super) struct ToolProbes<'a> {
    due: Vec<Instant>,
    interval: Vec<Duration>,
    in_flight: Vec<bool>,
    /// Whether each is called as a task, from the latest listing.
    as_task: Vec<bool>,
    report: TaskReport,
    pub(super) calls: FuturesUnordered<BoxFuture<'a, (usize, ProbeOutcome)>>,
}

impl<'a> ToolProbes<'a> {
    /// The probes of a session whose opening listed `listed`.
    pub(super) fn new(probes: &[ToolProbe], listed: &ToolSurface, report: TaskReport) -> Self {
        let now = Instant::now();
        let mut tools = ToolProbes {
            due: vec![now; probes.len()],
            interval: probes.iter().map(|p| p.interval).collect(),
            in_flight: vec![false; probes.len()],
            as_task: vec![false; probes.len()],
            report,
            calls: FuturesUnordered::new(),
        };
        tools.listed(probes, listed);
        tools
    }

    /// Read from a listing which probes are called as tasks.
    pub(super) fn listed(&mut self, probes: &[ToolProbe], surface: &ToolSurface) {
        for (i, p) in probes.iter().enumerate() {
            let support = surface
                .tools
                .iter()
                .find(|t| t.name == p.tool)
                .map(|t| t.task_support)
                .unwrap_or_default();
            self.as_task[i] = probe::task::wanted(p.task, support);
        }
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.iter().min().copied()
    }

    /// Start the probes due now, each rescheduled one interval later; what
    /// happened to each, in order: sent, or skipped because its last call
    /// is still running or the server asked to wait (`held`).
    pub(super) fn start_due(
        &mut self,
        session: &'a dyn Session,
        probes: &'a [ToolProbe],
        held: bool,
    ) -> Vec<Observation> {
        let now = Instant::now();
        let mut out = Vec::new();
        for (i, p) in probes.iter().enumerate() {
            if self.due[i] > now {
                continue;
            }
            self.due[i] = now + self.interval[i];
            if self.in_flight[i] || held {
                out.push(Observation::Skipped(ProbeKind::Tool));
                continue;
            }
            out.push(Observation::Sent(ProbeKind::Tool));
            self.in_flight[i] = true;
            let (as_task, report) = (self.as_task[i], self.report.clone());
            self.calls.push(Box::pin(async move {
                let outcome =
                    probe::tool::run(session, p, p.request_timeout, as_task, &*report).await;
                (i, outcome)
            }));
        }
        out
    }

    /// Whether any call is outstanding.
    pub(super) fn busy(&self) -> bool {
        !self.calls.is_empty()
    }

    /// Probe `i` answered; it may be sent again.
    pub(super) fn answered(&mut self, i: usize) {
        self.in_flight[i] = false;
    }
}

/// When to list the tools again: when the server says the listing goes
/// stale (`ttlMs`, 2026-07-28), no sooner than a ping interval (at least a
/// second) and no later than an hour; without one, every `tools_interval`.
pub(crate) fn relist_after(ttl: Option<Duration>, s: &Settings) -> Duration {
    match ttl {
        Some(ttl) => ttl.clamp(
            s.ping_interval.0.max(Duration::from_secs(1)),
            Duration::from_secs(3600).max(s.ping_interval.0),
        ),
        None => s.tools_interval.0,
    }
}

/// Longest wait a `Retry-After` can impose: a server asking for an hour is
/// still checked every minute.
pub const MAX_HOLD: Duration = Duration::from_secs(60);

/// How long to send nothing after a throttled probe: what the server asked
/// for, at most [`MAX_HOLD`]. (The owner does not count that silence
/// towards `stuck_after`.)
pub(super) fn hold_for(o: &ProbeOutcome) -> Option<Duration> {
    let f = o.result.as_ref().err()?;
    if f.reason != FailureReason::Throttled {
        return None;
    }
    Some(f.retry_after?.min(MAX_HOLD))
}

/// `period`, give or take a tenth, different for each server and each
/// turn `n` (and the same for the same ones, so runs repeat). The 2026-07-28
/// caching rules ask a client that polls for jitter; without it a fleet
/// opened together, or reconnected together after an outage, stays in step
/// and pings in the same millisecond ever after.
pub(super) fn jittered(period: Duration, id: &str, n: u64) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (id, n).hash(&mut h);
    // A fraction in [0, 1) from the hash's top 24 bits.
    let fraction = (h.finish() >> 40) as f64 / f64::from(1u32 << 24);
    period.mul_f64(0.9 + 0.2 * fraction)
}
