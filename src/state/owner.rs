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
use super::operations::{Operation, Operations, Peer, SessionEnd};
use super::series::Series;
use super::snapshot::{ServerRecord, Snapshot, Summary};
use super::verdict::{Reason, State, Transition};
use super::{Msg, Observation};
#[cfg(test)]
use crate::config::Settings;
use crate::config::{FleetPolicy, ServerSpec, TransportSpec};
use crate::probe::FailureReason;

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
    /// The conventions' `server.address` and `server.port`, for the sink.
    peer: Option<Peer>,
    /// When the open session opened, for its duration.
    opened_at: Option<Instant>,
    /// The health tool's name, for the sink.
    health_tool: Arc<str>,
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
                loss,
                detail,
                was_open,
            } => {
                let reason = Reason::from(loss);
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
            Observation::Task(seen) => {
                t.task(*seen, now);
                t.tick(now)
            }
            Observation::Checked(checked) => t.conditions_checked(&checked, now),
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
            | Observation::Credentials(_)
            | Observation::Certificate(_) => None,
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
    expected: usize,
    ops: Option<Arc<dyn Operations>>,
    windows: Arc<[crate::config::maintenance::Window]>,
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
            expected,
            ops: None,
            windows: Arc::from(Vec::new()),
        }
    }

    /// Tell `ops` about every probe and session end from now on.
    pub fn with_operations(mut self, ops: Option<Arc<dyn Operations>>) -> Self {
        self.ops = ops;
        self
    }

    /// Apply one message at `now`.
    pub fn apply(&mut self, msg: Msg, now: Instant) {
        match msg {
            Msg::Add { spec, stuck } => self.add(&spec, stuck, now),
            Msg::Remove(id) => {
                self.entries.remove(&id);
                if let Some(old) = self.snap.servers.remove(&id) {
                    count(&mut self.snap.counts, key(&old.status), -1);
                }
            }
            Msg::Policy(p) => self.snap.policy = p,
            Msg::Maintenance(windows) => self.windows = windows,
            Msg::Discovery(news) => self.snap.discovery.record(news),
            Msg::Server(id, event) => self.event(&id, event, now),
        }
    }

    fn add(&mut self, spec: &ServerSpec, stuck: tokio::sync::watch::Sender<u64>, now: Instant) {
        let id: Arc<str> = Arc::from(spec.id.as_str());
        let tracker = Tracker::new(spec, now);
        let tools: Vec<String> = spec.probes.tools.iter().map(|t| t.tool.clone()).collect();
        let mut record = ServerRecord {
            status: tracker.status().clone(),
            series: Series::new(&crate::probe::kinds(spec), &link_reasons(spec), &tools),
        };
        record.status.maintenance = maintenance(&self.windows, &record.status);
        count(&mut self.snap.counts, key(&record.status), 1);
        if let Some(old) = self.snap.servers.insert(id.clone(), Arc::new(record)) {
            count(&mut self.snap.counts, key(&old.status), -1);
        }
        self.entries.insert(
            id,
            Entry {
                tracker,
                stuck,
                sessions: 0,
                stuck_sent: 0,
                progress_seen: 0,
                peer: Peer::of(spec),
                opened_at: None,
                health_tool: Arc::from(spec.settings.health_check_tool.as_str()),
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
                | Observation::Certificate(_)
        );
        let record = Arc::make_mut(record);
        record.series.record(&obs);
        let told = self.ops.as_ref().and_then(|_| Told::of(entry, &obs, now));
        if let Some(tr) = entry.track(id, &mut record.series, obs, now) {
            record.series.state_changes += 1;
            log_transition(id, tr, &entry.tracker.status().detail);
        }
        entry.rebuild_if_stuck(now);
        let before = key(&record.status);
        if judged {
            let window = record.status.maintenance.take();
            record.status = entry.tracker.status().clone();
            record.status.maintenance = window;
        }
        // Windows open and close with the clock: looked at on every event,
        // and a server hears of one at least every probe interval.
        let open = maintenance(&self.windows, &record.status);
        if open != record.status.maintenance {
            record.status.maintenance = open;
        }
        if before != key(&record.status) {
            count(&mut self.snap.counts, before, -1);
            count(&mut self.snap.counts, key(&record.status), 1);
        }
        if let (Some(ops), Some(told)) = (&self.ops, told) {
            told.tell(ops.as_ref(), &record.status, entry);
        }
    }

    /// Latch readiness once every server has a verdict or `grace` passed.
    fn check_ready(&mut self, started: Instant, grace: Duration, now: Instant) -> bool {
        if self.snap.ready {
            return false;
        }
        let judged = self.snap.counts.total + self.snap.counts.maintenance >= self.expected
            && self.snap.counts.unknown == 0;
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
        &self.snap.counts
    }
}

/// What an observation tells the operations sink, taken before the
/// tracker consumes it and told once the status is judged.
enum Told {
    Probe(crate::probe::ProbeOutcome),
    SessionEnd(Duration, Option<&'static str>),
}

impl Told {
    fn of(entry: &mut Entry, obs: &Observation, now: Instant) -> Option<Told> {
        let ended = |entry: &mut Entry, error| {
            let opened = entry.opened_at.take()?;
            Some(Told::SessionEnd(
                now.saturating_duration_since(opened),
                error,
            ))
        };
        match obs {
            Observation::Probe { outcome, .. } => Some(Told::Probe(outcome.clone())),
            Observation::Opened { .. } => {
                entry.opened_at = Some(now);
                None
            }
            Observation::Down { loss, .. } => ended(entry, Some(Reason::from(*loss).as_str())),
            Observation::Closed => ended(entry, None),
            _ => None,
        }
    }

    fn tell(self, ops: &dyn Operations, status: &super::snapshot::ServerStatus, entry: &Entry) {
        let peer = entry.peer.as_ref();
        match self {
            Told::Probe(outcome) => {
                ops.operation(&Operation::of(status, peer, &entry.health_tool, &outcome))
            }
            Told::SessionEnd(duration, error) => ops.session_ended(&SessionEnd {
                status,
                peer,
                duration,
                error,
            }),
        }
    }
}

/// Take a tool listing: count a changed surface and log what changed.
fn record_tools(
    id: &str,
    t: &mut Tracker,
    series: &mut Series,
    surface: crate::transport::tools::ToolSurface,
) {
    if let Some(diff) = t.tools_listed(surface) {
        series.tools_changes += 1;
        tracing::info!(server = %id, changes = %diff, "tool surface changed");
    }
}

/// The reasons a session of this transport can be rebuilt for: the link
/// failures that apply to it, and being judged stuck.
fn link_reasons(spec: &ServerSpec) -> Vec<Reason> {
    use strum::VariantArray;
    let stdio = matches!(spec.transport, TransportSpec::Stdio { .. });
    crate::transport::LinkFailure::VARIANTS
        .iter()
        .filter(|f| f.applies_to(stdio))
        .map(|f| Reason::from(*f))
        .chain([Reason::Stuck])
        .collect()
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
    ops: Option<Arc<dyn Operations>>,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let mut owner = Owner::new(policy, expected).with_operations(ops);
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

/// The window `status`'s server is in now, if one is open.
fn maintenance(
    windows: &[crate::config::maintenance::Window],
    status: &super::snapshot::ServerStatus,
) -> Option<super::snapshot::InMaintenance> {
    if windows.is_empty() {
        return None;
    }
    let now = chrono::Utc::now();
    windows
        .iter()
        .filter(|w| w.covers(&status.id, &status.labels))
        .find_map(|w| {
            let until = w.open_until(now)?;
            Some(super::snapshot::InMaintenance {
                window: Arc::from(w.name.as_str()),
                until: std::time::SystemTime::from(until),
            })
        })
}

/// What a server counts as: its state, and whether it is in maintenance.
fn key(status: &super::snapshot::ServerStatus) -> (State, bool) {
    (status.status, status.maintenance.is_some())
}

/// Add `delta` (±1) servers counted as `key` to the counts: by state, or
/// apart while in maintenance (neither for nor against the policy).
fn count(counts: &mut Summary, (state, in_maintenance): (State, bool), delta: isize) {
    if in_maintenance {
        counts.maintenance = counts.maintenance.saturating_add_signed(delta);
        return;
    }
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
#[path = "owner_tests.rs"]
mod tests;
