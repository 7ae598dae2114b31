//! The state owner: the one task that writes fleet state. Supervisors send
//! it [`Msg`]s; it runs each server's evidence tracker and the verdict,
//! keeps each server's counters, and publishes numbered [`Snapshot`]s
//! through a `watch` channel. Readers never hold a lock across I/O, and
//! because a server's status and counters are published together,
//! `/metrics` and `/health` of one generation always agree.
//!
//! Publishing is coalesced (at most every [`PUBLISH_EVERY`]) and driven by
//! messages: an idle fleet wakes the owner for nothing, and a probe sent
//! waits (up to [`QUIET_LAG`]) to be published with its result.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::evidence::Tracker;
use super::series::Series;
use super::snapshot::{ServerRecord, Snapshot, Summary};
use super::verdict::{Reason, State, Transition};
use super::{Msg, Observation};
#[cfg(test)]
use crate::config::Settings;
use crate::config::{FleetPolicy, Protocol, ServerSpec, TransportSpec};
use crate::probe::{FailureReason, ProbeKind};

/// Longest delay between a change and its appearance in snapshots.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// Longest delay for a change that alters no verdict (a probe sent or
/// skipped): it usually rides along with the probe's result a moment
/// later, so a probe costs one publish and no timer wake-up of its own.
pub const QUIET_LAG: Duration = Duration::from_secs(1);

/// Whether a message only moves counters: published within [`QUIET_LAG`].
fn quiet(msg: &Msg) -> bool {
    matches!(
        msg,
        Msg::Server(_, Observation::Sent(_) | Observation::Skipped(_))
    )
}

/// What the owner keeps per server beside the published record.
struct Entry {
    tracker: Tracker,
    stuck: tokio::sync::watch::Sender<u64>,
    /// Sessions opened so far; a rebuild request names the current one.
    sessions: u64,
    /// The session a rebuild was already requested for.
    stuck_sent: u64,
    progress_seen: u64,
}

impl Entry {
    /// Hand `obs` to the tracker (logging what is news); the transition it
    /// causes, if any.
    fn track(
        &mut self,
        id: &str,
        series: &mut Series,
        obs: Observation,
        now: Instant,
    ) -> Option<Transition> {
        let t = &mut self.tracker;
        match obs {
            Observation::Opened {
                era,
                info,
                tools,
                handshake,
                ..
            } => {
                self.sessions += 1;
                self.progress_seen = 0;
                let count = tools.as_ref().map_or(0, |t| t.tools.len());
                if let Some(surface) = tools {
                    record_tools(id, t, series, surface);
                }
                tracing::info!(
                    server = %id,
                    era = ?era,
                    protocol = %info.protocol_version,
                    server_name = %info.name,
                    server_version = %info.version,
                    tools = count,
                    handshake_ms = handshake.as_millis() as u64,
                    "session opened"
                );
                t.session_opened(era, info, handshake, now)
            }
            Observation::Tools { tools, .. } => {
                record_tools(id, t, series, tools);
                t.tick(now)
            }
            Observation::Down {
                reason,
                detail,
                was_open,
            } => {
                // Once per change: a lost session, or a new kind of failure.
                // Retries failing the same way are expected; they log at debug.
                let detail = t.scrub(&detail);
                if was_open || t.down_reason() != Some(reason) {
                    let what = if was_open {
                        "session lost"
                    } else {
                        "cannot open session"
                    };
                    tracing::warn!(server = %id, reason = reason.as_str(), detail = %detail, "{what}");
                } else {
                    tracing::debug!(server = %id, reason = reason.as_str(), detail = %detail, "cannot open session, again");
                }
                t.link_down(reason, &detail, now)
            }
            Observation::Skipped(_) | Observation::Tick => t.tick(now),
            Observation::Late(_, timeout) => t.liveness_late(timeout, now),
            Observation::Probe { outcome, was_late } => {
                if let Err(f) = &outcome.result
                    && outcome.failure() != Some(FailureReason::Throttled)
                {
                    tracing::debug!(server = %id, probe = outcome.kind.as_str(), error = %t.scrub(&f.detail), "probe failed");
                }
                t.probe(&outcome, was_late, now)
            }
            Observation::Process(sample) => t.process(&sample, now),
            Observation::Progress(p) => {
                if p.count != self.progress_seen {
                    self.progress_seen = p.count;
                    t.activity(now);
                }
                t.tick(now)
            }
            Observation::Connecting { .. }
            | Observation::Closed
            | Observation::Sent(_)
            | Observation::Credentials(_) => None,
        }
    }

    /// Ask the supervisor to rebuild the session once it is judged stuck
    /// (once per session).
    fn rebuild_if_stuck(&mut self, now: Instant) {
        if self.tracker.is_stuck(now) && self.stuck_sent != self.sessions {
            self.stuck_sent = self.sessions;
            self.stuck.send_replace(self.sessions);
        }
    }
}

/// The owner's state; [`run`] drives it, tests call [`Owner::apply`] directly.
pub struct Owner {
    entries: HashMap<Arc<str>, Entry>,
    snap: Snapshot,
    counts: Summary,
    expected: usize,
}

impl Owner {
    /// An owner for a fleet of `expected` servers under `policy`.
    pub fn new(policy: FleetPolicy, expected: usize) -> Self {
        Owner {
            entries: HashMap::new(),
            snap: Snapshot {
                policy,
                ..Snapshot::default()
            },
            counts: Summary::default(),
            expected,
        }
    }

    /// Apply one message at `now`.
    pub fn apply(&mut self, msg: Msg, now: Instant) {
        match msg {
            Msg::Add { spec, stuck } => self.add(&spec, stuck, now),
            Msg::Remove(id) => {
                self.entries.remove(&id);
                if let Some(old) = self.snap.servers.remove(&id) {
                    count(&mut self.counts, old.status.status, -1);
                }
            }
            Msg::Policy(p) => self.snap.policy = p,
            Msg::Discovery(news) => self.snap.discovery.record(news),
            Msg::Server(id, event) => self.event(&id, event, now),
        }
    }

    fn add(&mut self, spec: &ServerSpec, stuck: tokio::sync::watch::Sender<u64>, now: Instant) {
        let id: Arc<str> = Arc::from(spec.id.as_str());
        let tracker = Tracker::new(spec, now);
        let tools: Vec<String> = spec.tool_probes.iter().map(|t| t.tool.clone()).collect();
        let record = ServerRecord {
            status: tracker.status().clone(),
            series: Series::new(&probe_kinds(spec), link_reasons(spec), &tools),
        };
        count(&mut self.counts, record.status.status, 1);
        if let Some(old) = self.snap.servers.insert(id.clone(), Arc::new(record)) {
            count(&mut self.counts, old.status.status, -1);
        }
        self.entries.insert(
            id,
            Entry {
                tracker,
                stuck,
                sessions: 0,
                stuck_sent: 0,
                progress_seen: 0,
            },
        );
    }

    fn event(&mut self, id: &Arc<str>, obs: Observation, now: Instant) {
        // Observations of a server already removed are late news; drop them.
        let (Some(entry), Some(record)) = (self.entries.get_mut(id), self.snap.servers.get_mut(id))
        else {
            return;
        };
        // Observations that only count leave the verdict as it was; copying
        // the status (strings and lists) for them would be half the work.
        let judged = !matches!(
            obs,
            Observation::Connecting { .. }
                | Observation::Closed
                | Observation::Sent(_)
                | Observation::Credentials(_)
        );
        let record = Arc::make_mut(record);
        record.series.record(&obs, record.status.transport);
        if let Some(tr) = entry.track(id, &mut record.series, obs, now) {
            record.series.state_changes += 1;
            log_transition(id, tr, &entry.tracker.status().detail);
        }
        entry.rebuild_if_stuck(now);
        if !judged {
            return;
        }
        let old = record.status.status;
        record.status = entry.tracker.status().clone();
        if old != record.status.status {
            count(&mut self.counts, old, -1);
            count(&mut self.counts, record.status.status, 1);
        }
    }

    /// Latch readiness once every server has a verdict or `grace` passed.
    fn check_ready(&mut self, started: Instant, grace: Duration, now: Instant) -> bool {
        if self.snap.ready {
            return false;
        }
        let judged = self.counts.total >= self.expected && self.counts.unknown == 0;
        if judged || now.saturating_duration_since(started) >= grace {
            self.snap.ready = true;
            tracing::info!(
                after_ms = now.saturating_duration_since(started).as_millis() as u64,
                "fleet ready"
            );
            return true;
        }
        false
    }

    /// The next snapshot (numbered one higher than the last).
    pub fn publish(&mut self) -> Arc<Snapshot> {
        self.snap.generation += 1;
        Arc::new(self.snap.clone())
    }

    /// Running counts per state.
    #[cfg(test)]
    pub fn counts(&self) -> &Summary {
        &self.counts
    }
}

/// The probe kinds a server will run, so their counters exist from the start.
fn probe_kinds(spec: &ServerSpec) -> Vec<ProbeKind> {
    let mut kinds = match &spec.protocol {
        Protocol::Pinned(v) if crate::config::is_modern(v) => {
            vec![ProbeKind::Discover]
        }
        Protocol::Pinned(_) => vec![ProbeKind::Ping],
        Protocol::Auto => vec![ProbeKind::Ping, ProbeKind::Discover],
    };
    kinds.push(ProbeKind::HealthCheck);
    if !spec.tool_probes.is_empty() {
        kinds.push(ProbeKind::Tool);
    }
    kinds
}

/// Take a tool listing: count a changed surface and log what changed.
fn record_tools(
    id: &str,
    t: &mut Tracker,
    series: &mut Series,
    surface: crate::transport::tools::ToolSurface,
) {
    let invalid = surface.tools.iter().filter(|x| x.problem.is_some()).count();
    if let Some(diff) = t.tools_listed(surface) {
        series.tools_changes += 1;
        tracing::info!(server = %id, changes = %diff, "tool surface changed");
    }
    series.tools_invalid = invalid;
}

/// The reasons a session of this transport can be rebuilt for.
fn link_reasons(spec: &ServerSpec) -> &'static [Reason] {
    match spec.transport {
        TransportSpec::Stdio { .. } => &[
            Reason::Exited,
            Reason::ConnectFailed,
            Reason::HandshakeFailed,
            Reason::Stuck,
        ],
        TransportSpec::Http { .. } => &[
            Reason::Unreachable,
            Reason::ConnectFailed,
            Reason::HandshakeFailed,
            Reason::Unauthenticated,
            Reason::Forbidden,
            Reason::Throttled,
            Reason::Stuck,
        ],
    }
}

fn log_transition(id: &str, t: Transition, detail: &str) {
    tracing::info!(
        server = %id,
        from = t.from.as_str(),
        to = t.to.as_str(),
        reason = t.reason.as_str(),
        detail = %detail,
        "state changed"
    );
}

/// Run the state owner until cancelled. `grace` bounds how long `/-/ready`
/// waits for first verdicts.
pub async fn run(
    mut rx: mpsc::Receiver<Msg>,
    tx: watch::Sender<Arc<Snapshot>>,
    policy: FleetPolicy,
    expected: usize,
    grace: Duration,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let mut owner = Owner::new(policy, expected);
    let mut last_publish = started;
    // A change waiting to be published, and when it will be.
    let mut publish_at: Option<Instant> = Some(started);
    loop {
        let ready_at = (!owner.snap.ready).then_some(started + grace);
        let wake = [publish_at, ready_at].into_iter().flatten().min();
        tokio::select! {
            _ = cancel.cancelled() => break,
            msg = rx.recv() => {
                let Some(msg) = msg else { break };
                let now = Instant::now();
                let mut all_quiet = quiet(&msg);
                owner.apply(msg, now);
                // Drain what is queued so a burst costs one publish.
                while let Ok(msg) = rx.try_recv() {
                    all_quiet &= quiet(&msg);
                    owner.apply(msg, now);
                }
                let at = if all_quiet {
                    now + QUIET_LAG
                } else {
                    (last_publish + PUBLISH_EVERY).max(now)
                };
                publish_at = Some(publish_at.map_or(at, |p| p.min(at)));
            }
            _ = async { tokio::time::sleep_until(wake.expect("guarded")).await }, if wake.is_some() => {}
        }
        let now = Instant::now();
        if owner.check_ready(started, grace, now) {
            publish_at = Some(now);
        }
        if publish_at.is_some_and(|at| at <= now) {
            tx.send_replace(owner.publish());
            last_publish = now;
            publish_at = None;
        }
    }
}

/// Add `delta` (±1) servers in `state` to the counts.
fn count(counts: &mut Summary, state: State, delta: isize) {
    let slot = match state {
        State::Healthy => &mut counts.healthy,
        State::Degraded => &mut counts.degraded,
        State::Unhealthy => &mut counts.unhealthy,
        State::Unknown => &mut counts.unknown,
    };
    *slot = slot.saturating_add_signed(delta);
    counts.total = counts.total.saturating_add_signed(delta);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::testing::{add, answered, event, opened, spec};
    use State::*;

    fn snap(states: &[State], policy: FleetPolicy) -> Snapshot {
        let mut servers = imbl::OrdMap::new();
        for (i, st) in states.iter().enumerate() {
            let t = Tracker::new(&spec(&format!("s{i}")), Instant::now());
            let mut status = t.status().clone();
            status.status = *st;
            let record = ServerRecord {
                status,
                series: Series::default(),
            };
            servers.insert(Arc::from(format!("s{i}").as_str()), Arc::new(record));
        }
        Snapshot {
            servers,
            policy,
            ready: true,
            generation: 1,
            discovery: Default::default(),
        }
    }

    fn walked(o: &Owner) -> (usize, usize, usize, usize, usize) {
        let w = o.snap.summary();
        (w.total, w.healthy, w.degraded, w.unhealthy, w.unknown)
    }

    fn counted(o: &Owner) -> (usize, usize, usize, usize, usize) {
        let c = o.counts();
        (c.total, c.healthy, c.degraded, c.unhealthy, c.unknown)
    }

    #[test]
    fn running_counts_match_a_full_walk_through_events_and_removals() {
        let now = Instant::now();
        let mut o = Owner::new(FleetPolicy::default(), 4);
        let down = || Observation::Down {
            reason: Reason::Exited,
            detail: "gone".into(),
            was_open: true,
        };
        type Step<'a> = Box<dyn Fn(&mut Owner) + 'a>;
        let steps: Vec<Step> = vec![
            Box::new(|o| add(o, &spec("s0"), now)),
            Box::new(|o| add(o, &spec("s1"), now)),
            Box::new(|o| event(o, "s0", opened(), now)),
            Box::new(|o| add(o, &spec("s2"), now)),
            Box::new(|o| event(o, "s2", down(), now)),
            Box::new(|o| event(o, "s1", opened(), now)),
            Box::new(|o| event(o, "s0", down(), now)),
            Box::new(|o| o.apply(Msg::Remove(Arc::from("s2")), now)),
            Box::new(|o| o.apply(Msg::Remove(Arc::from("absent")), now)),
            Box::new(|o| event(o, "absent", opened(), now)),
            // Added again: a fresh record replaces the old one.
            Box::new(|o| add(o, &spec("s1"), now)),
            Box::new(|o| add(o, &spec("s3"), now)),
        ];
        for step in steps {
            step(&mut o);
            assert_eq!(counted(&o), walked(&o));
        }
        assert_eq!(counted(&o), (3, 0, 0, 1, 2));
    }

    #[test]
    fn every_publish_has_a_new_generation() {
        let mut o = Owner::new(FleetPolicy::default(), 1);
        let a = o.publish();
        add(&mut o, &spec("a"), Instant::now());
        let b = o.publish();
        assert!(b.generation > a.generation);
        assert_eq!(b.servers.len(), 1);
        assert_eq!(a.servers.len(), 0, "a published snapshot never changes");
    }

    #[test]
    fn counters_start_at_zero_and_count_once() {
        let now = Instant::now();
        let mut o = Owner::new(FleetPolicy::default(), 1);
        add(&mut o, &spec("a"), now);
        let s = o.publish();
        let series = &s.servers["a"].series;
        assert!(series.probes.0.iter().all(|(_, n)| *n == 0));
        assert!(series.probes.0.iter().any(|(k, _)| *k == ProbeKind::Ping));
        assert!(
            series
                .reconnects
                .0
                .iter()
                .any(|(r, n)| *r == Reason::Exited && *n == 0)
        );
        event(&mut o, "a", opened(), now);
        event(&mut o, "a", Observation::Sent(ProbeKind::Ping), now);
        event(
            &mut o,
            "a",
            Observation::Late(ProbeKind::Ping, Duration::from_secs(5)),
            now,
        );
        let late = crate::state::testing::failed(ProbeKind::Ping, FailureReason::Timeout);
        event(
            &mut o,
            "a",
            Observation::Probe {
                outcome: late,
                was_late: true,
            },
            now,
        );
        event(
            &mut o,
            "a",
            Observation::Probe {
                outcome: answered(ProbeKind::Ping, 3),
                was_late: false,
            },
            now,
        );
        let s = o.publish();
        let series = &s.servers["a"].series;
        let failures: u64 = series.probe_failures.0.iter().map(|(_, n)| n).sum();
        assert_eq!(failures, 1, "a late probe's timeout is counted once");
        assert_eq!(series.ping_duration.as_ref().map(|h| h.count), Some(1));
    }

    #[test]
    fn a_stuck_session_is_handed_back_to_its_supervisor_once() {
        let t0 = Instant::now();
        let mut o = Owner::new(FleetPolicy::default(), 1);
        let (tx, rx) = tokio::sync::watch::channel(0);
        o.apply(
            Msg::Add {
                spec: Arc::new(spec("a")),
                stuck: tx,
            },
            t0,
        );
        event(&mut o, "a", opened(), t0);
        event(
            &mut o,
            "a",
            Observation::Late(ProbeKind::Ping, Duration::from_secs(5)),
            t0 + Duration::from_secs(5),
        );
        assert_eq!(*rx.borrow(), 0);
        let later = t0 + Settings::default().stuck_after.0;
        event(&mut o, "a", Observation::Tick, later);
        assert_eq!(*rx.borrow(), 1, "session 1 must be rebuilt");
        let s = o.publish();
        assert_eq!(s.servers["a"].status.reason, Reason::Stuck);
    }

    #[test]
    fn summary_counts_and_percentage() {
        let s = snap(
            &[Healthy, Healthy, Degraded, Unhealthy],
            FleetPolicy::default(),
        )
        .summary();
        assert_eq!(
            (s.total, s.healthy, s.degraded, s.unhealthy, s.unknown),
            (4, 2, 1, 1, 0)
        );
        assert_eq!(s.health_percentage, 50.0);
        let s = snap(&[Healthy, Healthy, Unhealthy], FleetPolicy::default()).summary();
        assert_eq!(s.health_percentage, 66.67);
    }

    #[test]
    fn policy_decides_the_fleet_verdict() {
        let strict = FleetPolicy::default();
        assert_eq!(
            snap(&[Healthy, Healthy], strict.clone()).verdict(),
            (Healthy, true)
        );
        assert_eq!(
            snap(&[Healthy, Degraded], strict.clone()).verdict(),
            (Degraded, true)
        );
        assert_eq!(
            snap(&[Healthy, Unhealthy], strict.clone()).verdict(),
            (Unhealthy, false)
        );
        assert_eq!(
            snap(&[Unknown, Unknown], strict.clone()).verdict(),
            (Unknown, false)
        );
        assert_eq!(snap(&[], strict).verdict(), (Healthy, true));
        let half = FleetPolicy {
            min_available_percentage: 50.0,
            degraded_is_available: false,
        };
        assert_eq!(
            snap(&[Healthy, Unhealthy], half.clone()).verdict(),
            (Degraded, true)
        );
        assert_eq!(
            snap(&[Degraded, Degraded, Healthy], half).verdict(),
            (Unhealthy, false)
        );
    }
}
