//! Per-server evidence: what the supervisor reported, turned into the
//! verdict's [`Evidence`], the published [`ServerStatus`] and the event
//! timeline. No I/O: the state owner (or `mcpmon probe`) calls it with what
//! happened and the monotonic `now` the judgment runs on; wall-clock times
//! are read only to stamp what is published.
//!
//! A session's first verdict waits for its first liveness answer (or
//! failure): the handshake is timed and published as what it is, never as
//! a liveness sample, so a server that takes two seconds to start is not
//! `slow` for its first seconds. The detail published is always the text of
//! the published reason's own evidence.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::snapshot::{
    Change, EventKind, HISTORY, HISTORY_MAX, HealthCheckStatus, MAX_EVENTS, ServerStatus,
    TimelineEntry, ToolsSeen,
};
use super::verdict::{
    Evidence, Hysteresis, Judgement, Link, Reason, Reported, State, Thresholds, Transition, judge,
};
use super::window::{Outcome, Window};
use crate::config::ServerSpec;
#[cfg(test)]
use crate::config::Settings;
use crate::probe::{Answer, FailureReason, ProbeOutcome};
use crate::transport::tools::{ToolDiff, ToolSurface};
use crate::transport::{Era, ProcessSample, ServerInfo};

mod words;

/// Share of one core a process tree must use between two samples to count
/// as a sign of life.
const BUSY_CPU_SHARE: f64 = 0.2;

/// What each kind of evidence last said. The published detail is the text
/// of the published reason's own evidence, never whatever was said last
/// (a stopped process read "no liveness answer within 2s").
#[derive(Debug, Default)]
struct Problems {
    /// Why the last connection attempt failed or the session was lost.
    link: String,
    /// The latest liveness failure (late, or an error answer).
    liveness: String,
    /// The latest failed probe of any kind.
    failure: String,
    /// The latest health_check failure or unreadable report.
    health: String,
    /// The latest throttle.
    throttle: String,
}

/// Gathers evidence for one server.
pub struct Tracker {
    status: ServerStatus,
    thresholds: Thresholds,
    window: Window,
    hysteresis: Hysteresis,
    link: Link,
    last_answer: Instant,
    /// Last sign of life that was not an answer (progress, CPU advancing).
    last_activity: Option<Instant>,
    /// How recent such a sign must be to call a late server busy.
    busy_window: Duration,
    liveness_late: bool,
    stopped: bool,
    last_cpu: Option<(Duration, Instant)>,
    reported: Option<Reported>,
    health_check_failed: bool,
    /// The latest answer was a throttle and nothing was served since.
    throttled: bool,
    /// A session is open and has not answered a liveness probe yet: no
    /// verdict is taken from it until it does (or fails).
    awaiting_liveness: bool,
    /// What each kind of evidence last said (scrubbed).
    problems: Problems,
    /// From the config.
    expected_tools: Vec<String>,
    /// Each condition's latest outcome.
    conditions: super::conditions::Conditions,
    /// Each task probe's latest task.
    tasks: super::tasks::Tasks,
    /// This server's secrets.
    scrubber: Arc<crate::redact::Scrubber>,
}

impl Tracker {
    /// A tracker for a server not yet judged.
    pub fn new(spec: &ServerSpec, now: Instant) -> Tracker {
        let s = &spec.settings;
        Tracker {
            status: ServerStatus::new(spec),
            thresholds: Thresholds {
                healthy_max_error_ratio: s.healthy_max_error_ratio,
                healthy_max_latency: s.healthy_max_latency.0,
                degraded_max_error_ratio: s.degraded_max_error_ratio,
                degraded_max_latency: s.degraded_max_latency.0,
                stuck_after: s.stuck_after.0,
            },
            window: Window::new(s.window.0),
            hysteresis: Hysteresis::new(s.rise, s.fall, now),
            link: Link::Down(Reason::Starting),
            last_answer: now,
            last_activity: None,
            busy_window: s.ping_interval.0 + s.ping_timeout.0,
            liveness_late: false,
            stopped: false,
            last_cpu: None,
            reported: None,
            health_check_failed: false,
            throttled: false,
            awaiting_liveness: false,
            problems: Problems::default(),
            expected_tools: spec.expected_tools.clone(),
            conditions: Default::default(),
            tasks: Default::default(),
            scrubber: spec.scrubber.clone(),
        }
    }

    /// The status as published.
    pub fn status(&self) -> &ServerStatus {
        &self.status
    }

    /// A tool listing arrived (at session start, on `list_changed`, or on
    /// the `tools_interval`). Returns how it differs from the one before,
    /// recorded as a `tools_changed` event, when it does. Judged at the
    /// next evaluation.
    pub fn tools_listed(&mut self, surface: ToolSurface) -> Option<ToolDiff> {
        let diff = (self.status.tools.as_ref())
            .map(|before| &before.surface)
            .filter(|before| before.hash != surface.hash)
            .map(|before| surface.diff(before));
        if let Some(d) = &diff {
            let detail = format!("tools changed: {d}");
            self.push_event(EventKind::ToolsChanged, self.status.reason, detail);
        }
        self.status.tools = Some(Arc::new(ToolsSeen::new(surface, &self.expected_tools)));
        diff
    }

    /// A session opened: a clean window, and no verdict from it until its
    /// first liveness answer. The handshake's time is published as such.
    pub fn session_opened(
        &mut self,
        era: Era,
        info: ServerInfo,
        handshake: Duration,
        now: Instant,
    ) -> Option<Transition> {
        self.link = Link::Up;
        self.window.clear();
        self.last_answer = now;
        self.last_activity = None;
        self.liveness_late = false;
        self.stopped = false;
        self.last_cpu = None;
        self.reported = None;
        self.health_check_failed = false;
        self.throttled = false;
        self.status.era = Some(era);
        self.status.server_info = Some(Arc::new(info.clone()));
        self.status.session_started = Some(SystemTime::now());
        self.status.session_open = true;
        self.status.session_ended = None;
        self.status.sessions += 1;
        self.status.handshake_ms = Some(ms(handshake));
        self.status.response_time_ms = None;
        self.status.health_check = None;
        self.awaiting_liveness = true;
        let detail = format!(
            "{} {} speaking {} ({:?} era)",
            info.name, info.version, info.protocol_version, era
        );
        self.push_event(EventKind::SessionOpened, Reason::Ok, detail);
        self.evaluate(now)
    }

    /// Why the last connection attempt failed, while there is no session.
    pub fn down_reason(&self) -> Option<Reason> {
        match self.link {
            Link::Down(Reason::Starting) | Link::Up => None,
            Link::Down(r) => Some(r),
        }
    }

    /// Connecting failed, or the session was lost: definitive, except for
    /// a server's very first attempt failing its handshake when it is not
    /// `definitive` (the server did not say why, and another attempt will
    /// follow): that may be a slow start, and like any other failure it
    /// needs a second before it makes a verdict. The server stays
    /// `starting` meanwhile, its detail saying what failed.
    pub fn link_down(
        &mut self,
        reason: Reason,
        detail: &str,
        definitive: bool,
        now: Instant,
    ) -> Option<Transition> {
        let detail = self.scrub(detail);
        if !definitive && self.first_start_failed(reason) {
            self.status.consecutive_failures += 1;
            self.status.last_check = Some(SystemTime::now());
            self.push_event(EventKind::ConnectFailed, reason, detail.clone());
            self.problems.link = format!("the first attempt failed, trying again: {detail}");
            // No judgement yet: the server is still starting.
            self.status.detail = self.detail_for(Reason::Starting, now);
            return None;
        }
        let kind = if self.link == Link::Up {
            EventKind::SessionClosed
        } else {
            EventKind::ConnectFailed
        };
        if self.link == Link::Up {
            self.status.session_ended = Some(SystemTime::now());
        }
        self.link = Link::Down(reason);
        self.awaiting_liveness = false;
        self.status.session_open = false;
        self.status.consecutive_failures += 1;
        self.status.last_check = Some(SystemTime::now());
        self.push_event(kind, reason, detail.clone());
        self.problems.link = detail;
        self.evaluate(now)
    }

    /// Whether this is the first failed start of a server never judged,
    /// failing its handshake.
    fn first_start_failed(&self, reason: Reason) -> bool {
        matches!(reason, Reason::HandshakeFailed | Reason::Exited)
            && self.link == Link::Down(Reason::Starting)
            && self.status.sessions == 0
            && self.status.consecutive_failures == 0
    }

    /// The liveness probe in flight passed its timeout without an answer.
    /// It stays in flight: a late answer is still evidence.
    pub fn liveness_late(&mut self, timeout: Duration, now: Instant) -> Option<Transition> {
        self.status.last_check = Some(SystemTime::now());
        self.window.record(now, true, Outcome::Timeout);
        self.liveness_late = true;
        self.awaiting_liveness = false;
        // Unanswered since the throttle: that is no longer the news.
        self.throttled = false;
        self.status.consecutive_failures += 1;
        self.problems.liveness = format!("no liveness answer within {timeout:?}");
        self.problems.failure.clone_from(&self.problems.liveness);
        self.evaluate(now)
    }

    /// A probe ended. For a liveness probe, `was_late` says its timeout was
    /// already recorded by [`Tracker::liveness_late`].
    pub fn probe(&mut self, o: &ProbeOutcome, was_late: bool, now: Instant) -> Option<Transition> {
        self.status.last_check = Some(SystemTime::now());
        let timed_out = matches!(&o.result, Err(f) if f.reason == FailureReason::Timeout);
        if !timed_out {
            // Any answer, even an error, proves the server is there.
            self.last_answer = now;
        }
        if let Err(f) = &o.result
            && f.reason == FailureReason::Throttled
        {
            // Asked to call less: the server is there and chose not to serve
            // this probe. Not a failure in the window, not a sign it is down.
            self.throttled = true;
            self.problems.throttle = self.scrub(&f.detail);
            return self.evaluate(now);
        }
        self.throttled = false;
        self.conditions.record(&o.conditions);
        if o.kind == crate::probe::ProbeKind::Tool {
            let detail = o.result.as_ref().err().map(|f| self.scrub(&f.detail));
            self.tasks.ended(o, || detail.unwrap_or_default());
            self.status.tasks = self.tasks.latest();
        }
        if o.kind.is_liveness() {
            self.liveness(o, was_late, timed_out, now);
        } else {
            let outcome = match (&o.result, o.failure()) {
                (Err(_), _) if timed_out => Outcome::Timeout,
                // A task wanting input is its own reason, not an error.
                (_, Some(FailureReason::Unreadable | FailureReason::InputRequired))
                | (Ok(_), None) => Outcome::Ok(o.duration),
                _ => Outcome::Error,
            };
            // A synthetic probe's failure is told with what it probed.
            if let (Err(f), Some(target)) = (&o.result, &o.tool) {
                let detail = self.scrub(&f.detail);
                self.problems.failure = format!("{} {target}: {detail}", o.kind.as_str());
            }
            self.window.record(now, false, outcome);
        }
        match &o.result {
            Ok(Answer::Health(report)) => self.health_report(Some(report.status), report, false),
            Err(f) if o.kind == crate::probe::ProbeKind::HealthCheck => {
                self.problems.health = format!("health_check: {}", self.scrub(&f.detail));
                self.problems.failure.clone_from(&self.problems.health);
                // A timed-out health check says nothing about what the server thinks.
                self.health_report(None, &Default::default(), !timed_out);
            }
            _ => {}
        }
        self.evaluate(now)
    }

    fn liveness(&mut self, o: &ProbeOutcome, was_late: bool, timed_out: bool, now: Instant) {
        self.awaiting_liveness = false;
        match &o.result {
            Ok(_) => {
                if was_late {
                    // Its timeout is in the window already; the answer ends the episode.
                    self.window.recovered(now);
                    self.problems.liveness =
                        format!("liveness answered late, after {:?}", o.duration);
                } else {
                    self.window.record(now, true, Outcome::Ok(o.duration));
                }
                self.liveness_late = false;
                self.status.consecutive_failures = 0;
                self.status.response_time_ms = Some(ms(o.duration));
            }
            Err(f) => {
                if !was_late {
                    let outcome = if timed_out {
                        Outcome::Timeout
                    } else {
                        Outcome::Error
                    };
                    self.window.record(now, true, outcome);
                    self.status.consecutive_failures += 1;
                }
                self.liveness_late = timed_out;
                self.problems.liveness = self.scrub(&f.detail);
                self.problems.failure.clone_from(&self.problems.liveness);
            }
        }
    }

    fn health_report(
        &mut self,
        status: Option<Reported>,
        report: &crate::probe::health_check::HealthReport,
        failed: bool,
    ) {
        self.reported = status;
        self.health_check_failed = failed || report.is_error;
        if status == Some(Reported::Unreadable) {
            self.problems.health = "health_check: no status in any shape mcpmon reads".to_owned();
        }
        self.status.health_check = Some(HealthCheckStatus {
            status,
            fields: report.fields.clone(),
            failed: self.health_check_failed,
            at: SystemTime::now(),
        });
    }

    /// The tool list's conditions were evaluated.
    pub fn conditions_checked(
        &mut self,
        checked: &[crate::probe::conditions::Checked],
        now: Instant,
    ) -> Option<Transition> {
        self.conditions.record(checked);
        self.evaluate(now)
    }

    /// A task probe polled its task: published, and a sign of life while
    /// it advances.
    pub fn task(&mut self, seen: crate::probe::task::TaskSeen, now: Instant) {
        if seen.busy {
            self.activity(now);
        }
        self.tasks.polled(seen);
        self.status.tasks = self.tasks.latest();
    }

    /// A sign of life that is not an answer: a progress notification.
    pub fn activity(&mut self, now: Instant) {
        self.last_activity = Some(now);
    }

    /// A sample of the stdio process tree: stopped state, and CPU time
    /// advancing as a sign of life.
    pub fn process(&mut self, sample: &ProcessSample, now: Instant) -> Option<Transition> {
        use crate::transport::procstat::RunState;
        // Housekeeping and the tail of the last answer burn a little CPU even
        // in a silent process; busy means a real share of a core.
        if let Some((prev, at)) = self.last_cpu {
            let wall = now.saturating_duration_since(at);
            if !wall.is_zero()
                && sample.cpu.saturating_sub(prev).as_secs_f64()
                    >= BUSY_CPU_SHARE * wall.as_secs_f64()
            {
                self.last_activity = Some(now);
            }
        }
        self.last_cpu = Some((sample.cpu, now));
        let stopped = sample.state == RunState::Stopped;
        if stopped != self.stopped {
            self.stopped = stopped;
            return self.evaluate(now);
        }
        None
    }

    /// Re-judge with no new result (time passing can make a server stuck).
    pub fn tick(&mut self, now: Instant) -> Option<Transition> {
        self.evaluate(now)
    }

    /// True when the evidence says the live session is stuck and must be
    /// rebuilt. A stopped process is not stuck: SIGCONT brings it back.
    pub fn is_stuck(&self, now: Instant) -> bool {
        self.link == Link::Up
            && !self.stopped
            && self.silent_for(now) >= self.thresholds.stuck_after
    }

    /// Time since the last answer or other sign of life.
    fn silent_for(&self, now: Instant) -> Duration {
        let last = match self.last_activity {
            Some(a) if a > self.last_answer => a,
            _ => self.last_answer,
        };
        now.saturating_duration_since(last)
    }

    /// What the evidence says right now, before hysteresis (for one-shot checks).
    pub fn judgement(&self, now: Instant) -> Judgement {
        judge(&self.evidence(now), &self.thresholds)
    }

    fn evidence(&self, now: Instant) -> Evidence {
        Evidence {
            link: self.link,
            window: self.window.stats(now),
            liveness_late: self.liveness_late,
            busy: self
                .last_activity
                .is_some_and(|a| now.saturating_duration_since(a) <= self.busy_window),
            stopped: self.stopped,
            // A stopped process is judged `stopped` before silence counts.
            // Silence the server asked for (Retry-After) is not stuck.
            silent_for: match self.link {
                Link::Up if self.throttled => Duration::ZERO,
                Link::Up => self.silent_for(now),
                Link::Down(_) => Duration::ZERO,
            },
            reported: self.reported,
            health_check_failed: self.health_check_failed,
            throttled: self.throttled,
            tools_missing: (self.status.tools.as_ref()).is_some_and(|t| !t.missing.is_empty()),
            condition_failed: self.conditions.worst(),
            task: self.tasks.worst(),
        }
    }

    fn evaluate(&mut self, now: Instant) -> Option<Transition> {
        if self.awaiting_liveness && self.link == Link::Up {
            // No verdict from a session before its first liveness answer;
            // the published one stands, its detail saying why.
            self.status.detail = self.detail_for(self.status.reason, now);
            return None;
        }
        let judgement = self.judgement(now);
        let transition = self.hysteresis.observe(judgement, now);
        self.status.reason = self.hysteresis.reason();
        // The published reason's own text, so detail and reason always
        // come from the same judgement.
        self.status.detail = self.detail_for(self.status.reason, now);
        if let Some(t) = transition {
            if t.to == State::Healthy {
                // Back to good: the next problem starts a new story.
                self.problems = Problems::default();
            }
            self.status.status = t.to;
            self.status.since = SystemTime::now();
            self.status.last_transition = Some(Change {
                from: t.from,
                to: t.to,
                reason: t.reason,
                at: self.status.since,
            });
            let history = Arc::make_mut(&mut self.status.history);
            history.push_back((self.status.since, t.to));
            // Keep one entry older than the hour: it is the state the hour began in.
            while history.len() > HISTORY_MAX
                || history.get(1).is_some_and(|(at, _)| {
                    self.status.since.duration_since(*at).unwrap_or_default() > HISTORY
                })
            {
                history.pop_front();
            }
            let detail = self.status.detail.clone();
            self.push_event(
                EventKind::StateChanged,
                t.reason,
                format!(
                    "{} -> {}{}{}",
                    t.from.as_str(),
                    t.to.as_str(),
                    if detail.is_empty() { "" } else { ": " },
                    detail
                ),
            );
        }
        transition
    }

    fn push_event(&mut self, kind: EventKind, reason: Reason, detail: String) {
        let events = Arc::make_mut(&mut self.status.events);
        if events.len() == MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(TimelineEntry {
            at: SystemTime::now(),
            kind,
            reason,
            detail,
        });
    }

    /// Remove this server's secrets (and the operator's) from text that
    /// may be published, then bound and defuse it.
    pub fn scrub(&self, text: &str) -> String {
        // Scrub first: a cut through a secret would leave its prefix.
        let own = self.scrubber.scrub(text);
        crate::transport::truncate(&crate::redact::redact(&own), 500)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
#[path = "evidence_tests.rs"]
mod tests;
