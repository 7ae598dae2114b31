//! What one observation changes for its server: [`Entry::apply`] is the
//! one place an [`Observation`] is told apart. It counts it in the
//! server's series, hands it to the evidence tracker (logging what is
//! news), keeps the session's bookkeeping (its number for rebuild
//! requests, its start for the operations sink), and says what changed
//! ([`Applied`]): the owner copies the status only when the judgment may
//! have moved, and tells the operations sink after.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::evidence::Tracker;
use super::operations::{Operation, Operations, Peer, SessionEnd};
use super::series::Series;
use super::snapshot::ServerStatus;
use super::verdict::{Reason, Transition};
use super::{Loss, Observation};
use crate::config::ServerSpec;
use crate::probe::FailureReason;

/// What the owner keeps per server beside the published record.
pub(super) struct Entry {
    /// The server's id, for the logs.
    id: Arc<str>,
    /// The server's evidence and verdict.
    pub(super) tracker: Tracker,
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
    /// The entry of `spec`'s server, judged by `tracker`; `stuck` carries
    /// its rebuild requests.
    pub(super) fn new(
        spec: &ServerSpec,
        tracker: Tracker,
        stuck: tokio::sync::watch::Sender<u64>,
    ) -> Entry {
        Entry {
            id: tracker.status().id.clone(),
            tracker,
            stuck,
            sessions: 0,
            stuck_sent: 0,
            progress_seen: 0,
            peer: Peer::of(spec),
            opened_at: None,
            health_tool: Arc::from(spec.settings.health_check_tool.as_str()),
        }
    }

    /// Take one observation: the one place it is told apart. Counts it in
    /// `series`, hands it to the tracker (logging what is news), and says
    /// what changed.
    pub(super) fn apply(&mut self, series: &mut Series, obs: Observation, now: Instant) -> Applied {
        let (id, t) = (&*self.id, &mut self.tracker);
        let transition = match obs {
            Observation::Connecting { after } => {
                series.connecting(after);
                return Applied::COUNTED;
            }
            Observation::Certificate(c) => {
                series.certificate(&c);
                return Applied::COUNTED;
            }
            Observation::Credentials(c) => {
                series.credentials(c);
                return Applied::COUNTED;
            }
            Observation::Closed => {
                series.closed(None);
                return self.closed(now);
            }
            Observation::Opened {
                era,
                info,
                tools,
                handshake,
                health_check,
            } => {
                series.opened(health_check);
                self.new_session(now);
                let count = tools.as_ref().map_or(0, |t| t.tools.len());
                let (id, t) = (&*self.id, &mut self.tracker);
                log_opened(id, era, &info, count, handshake);
                if let Some(surface) = tools {
                    record_tools(id, t, series, surface);
                }
                t.session_opened(era, info, handshake, now)
            }
            Observation::Tools {
                tools,
                health_check,
            } => {
                series.listed(health_check);
                record_tools(id, t, series, tools);
                t.tick(now)
            }
            Observation::Down {
                loss,
                detail,
                was_open,
                said_why,
            } => {
                if was_open {
                    series.closed(Some(loss));
                }
                return self.down(loss, &detail, was_open, said_why, now);
            }
            Observation::Skipped(kind) => {
                series.skipped(kind);
                t.tick(now)
            }
            Observation::Tick => t.tick(now),
            Observation::Late(kind, timeout) => {
                series.late(kind);
                t.liveness_late(timeout, now)
            }
            Observation::Probe { outcome, was_late } => {
                series.probed(&outcome, was_late);
                log_probe_failed(id, t, &outcome);
                let transition = t.probe(&outcome, was_late, now);
                return Applied::judged(transition, Some(Told::Probe(outcome)));
            }
            Observation::Process(sample) => {
                series.process(&sample);
                t.process(&sample, now)
            }
            Observation::Task(seen) => {
                series.task_polled(&seen);
                t.task(*seen, now);
                t.tick(now)
            }
            Observation::Checked(checked) => {
                series.conditions(&checked);
                t.conditions_checked(&checked, now)
            }
            Observation::Progress(p) => {
                series.progress(&p);
                if p.count != self.progress_seen {
                    self.progress_seen = p.count;
                    t.activity(now);
                }
                t.tick(now)
            }
        };
        Applied::judged(transition, None)
    }

    /// A session opened: the count a rebuild request names, and the clock
    /// of its duration and progress.
    fn new_session(&mut self, now: Instant) {
        self.sessions += 1;
        self.progress_seen = 0;
        self.opened_at = Some(now);
    }

    /// The link went down (a session lost, `was_open`, or an attempt
    /// refused) for `loss`, the server saying why or not: judged, logged
    /// once per change, and the end of the session it had.
    fn down(
        &mut self,
        loss: Loss,
        detail: &str,
        was_open: bool,
        said_why: bool,
        now: Instant,
    ) -> Applied {
        let (id, t) = (&*self.id, &mut self.tracker);
        let reason = Reason::from(loss);
        let detail = t.scrub(detail);
        log_down(id, reason, &detail, was_open, t.down_reason());
        let transition = t.link_down(reason, &detail, said_why, now);
        let told = self.session_ended(Some(reason.as_str()), now);
        Applied::judged(transition, told)
    }

    /// mcpmon closed the session (shutdown, or the server removed): no
    /// verdict, only its end for the operations sink.
    fn closed(&mut self, now: Instant) -> Applied {
        let told = self.session_ended(None, now);
        Applied {
            told,
            ..Applied::COUNTED
        }
    }

    /// The open session ended (`error`: why it was lost): its duration,
    /// for the operations sink; nothing when none was open.
    fn session_ended(&mut self, error: Option<&'static str>, now: Instant) -> Option<Told> {
        let opened = self.opened_at.take()?;
        Some(Told::SessionEnd(
            now.saturating_duration_since(opened),
            error,
        ))
    }

    /// Ask the supervisor to rebuild the session once it is judged stuck
    /// (once per session).
    pub(super) fn rebuild_if_stuck(&mut self, now: Instant) {
        if self.tracker.is_stuck(now) && self.stuck_sent != self.sessions {
            self.stuck_sent = self.sessions;
            self.stuck.send_replace(self.sessions);
        }
    }
}

/// What one observation changed.
pub(super) struct Applied {
    /// The published state it moved, if it did.
    pub(super) transition: Option<Transition>,
    /// Whether the judgment may have changed, so the status is copied
    /// again.
    pub(super) judged: bool,
    /// What the operations sink hears of it, once the status is judged.
    pub(super) told: Option<Told>,
}

impl Applied {
    /// It only moved counters.
    const COUNTED: Applied = Applied {
        transition: None,
        judged: false,
        told: None,
    };

    fn judged(transition: Option<Transition>, told: Option<Told>) -> Applied {
        Applied {
            transition,
            judged: true,
            told,
        }
    }
}

/// What an observation tells the operations sink, taken before the
/// tracker consumes it and told once the status is judged.
pub(super) enum Told {
    Probe(crate::probe::ProbeOutcome),
    SessionEnd(Duration, Option<&'static str>),
}

impl Told {
    pub(super) fn tell(self, ops: &dyn Operations, status: &ServerStatus, entry: &Entry) {
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

/// A failed probe, at debug (a throttled one is the server asking to wait,
/// not a failure): the verdict and the series say the rest.
fn log_probe_failed(id: &str, t: &Tracker, outcome: &crate::probe::ProbeOutcome) {
    if let Err(f) = &outcome.result
        && outcome.failure() != Some(FailureReason::Throttled)
    {
        tracing::debug!(server = %id, probe = outcome.kind.as_str(), error = %t.scrub(&f.detail), "probe failed");
    }
}

/// A session opened: logged once, with what it is.
fn log_opened(
    id: &str,
    era: crate::transport::Era,
    info: &crate::transport::ServerInfo,
    tools: usize,
    handshake: Duration,
) {
    tracing::info!(
        server = %id,
        era = ?era,
        protocol = %info.protocol_version,
        server_name = %info.name,
        server_version = %info.version,
        tools,
        handshake_ms = handshake.as_millis() as u64,
        "session opened"
    );
}

/// A session lost or refused, logged once per change: a lost session, or
/// a new kind of failure (`before`: the reason it was already down for).
/// Retries failing the same way are expected; they log at debug.
fn log_down(id: &str, reason: Reason, detail: &str, was_open: bool, before: Option<Reason>) {
    if news(was_open, reason, before) {
        let what = if was_open {
            "session lost"
        } else {
            "cannot open session"
        };
        tracing::warn!(server = %id, reason = reason.as_str(), detail = %detail, "{what}");
    } else {
        tracing::debug!(server = %id, reason = reason.as_str(), detail = %detail, "cannot open session, again");
    }
}

/// Whether a lost or refused session is news worth a warning: a session
/// that was open, or a failure other than the one it was already down for.
fn news(was_open: bool, reason: Reason, before: Option<Reason>) -> bool {
    was_open || before != Some(reason)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_session_or_a_new_failure_is_news_and_the_same_refusal_is_not() {
        let (exited, refused) = (Reason::Exited, Reason::ConnectFailed);
        assert!(news(true, exited, Some(exited)), "a session lost");
        assert!(news(false, refused, None), "the first refusal");
        assert!(news(false, refused, Some(exited)), "a new kind of failure");
        assert!(
            !news(false, refused, Some(refused)),
            "the same refusal again"
        );
    }
}
