//! The judgment: a pure function from evidence to state and reason, plus
//! rise/fall hysteresis. No I/O, no clocks: callers pass `now`.
//!
//! Evidence comes in three strengths. Transport death (process exited,
//! connection refused) is definitive and bypasses hysteresis. A live transport
//! that answers late is at worst *degraded* until `stuck_after` has passed
//! without any answer, then *unhealthy (stuck)*. Everything else is judged
//! from a rolling window of probe outcomes against the configured thresholds,
//! with the server's own `health_check` status folded in (worst wins).

use std::time::Duration;

use tokio::time::Instant;

pub use super::reason::{Reason, State};
use super::window::WindowStats;
#[cfg(doc)]
use super::window::{LATENCY_MIN_ANSWERS, LATENCY_SAMPLES};
pub use crate::probe::health_check::Reported;

/// The state of the link to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// A session is open.
    Up,
    /// No session; the last attempt ended for this reason (definitive).
    Down(Reason),
}

/// Thresholds the window is judged against.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Healthy needs an error ratio below this.
    pub healthy_max_error_ratio: f64,
    /// Healthy needs a liveness latency below this.
    pub healthy_max_latency: Duration,
    /// Degraded needs an error ratio below this.
    pub degraded_max_error_ratio: f64,
    /// Degraded needs a liveness latency below this.
    pub degraded_max_latency: Duration,
    /// How long without any answer on a live link is "stuck".
    pub stuck_after: Duration,
}

/// Everything the judgment looks at, gathered by the evidence tracker.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evidence {
    /// Whether a session is open.
    pub link: Link,
    /// The rolling window.
    pub window: WindowStats,
    /// Whether the most recent liveness probe is late (unanswered past its timeout).
    pub liveness_late: bool,
    /// Signs of life other than answers were seen recently (progress, CPU).
    pub busy: bool,
    /// The stdio process is stopped.
    pub stopped: bool,
    /// Time since the last answer or sign of life, while the link is up.
    pub silent_for: Duration,
    /// The latest status the server's health_check reported, if any.
    pub reported: Option<Reported>,
    /// Whether the latest health_check call failed (error answer).
    pub health_check_failed: bool,
    /// The latest answer was a throttle (429), and nothing has been served since.
    pub throttled: bool,
    /// A tool in `expected_tools` is missing from the latest listing.
    pub tools_missing: bool,
    /// The worst state a failing condition asks for, if one fails.
    pub condition_failed: Option<State>,
    /// What a tool probe's task last said of the server: `task_stuck` or
    /// `input_required`.
    pub task: Option<Reason>,
}

/// A proposed state and why; `definitive` skips hysteresis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// The state the evidence points to.
    pub state: State,
    /// Why.
    pub reason: Reason,
    /// True for transport death and stuck sessions: applied at once.
    pub definitive: bool,
}

impl Judgement {
    fn new(state: State, reason: Reason) -> Self {
        Judgement {
            state,
            reason,
            definitive: false,
        }
    }
    fn definitive(state: State, reason: Reason) -> Self {
        Judgement {
            state,
            reason,
            definitive: true,
        }
    }
    fn worst(self, other: Judgement) -> Judgement {
        if other.state.severity() > self.state.severity() {
            other
        } else {
            self
        }
    }
}

fn latency_state(d: Duration, t: &Thresholds) -> State {
    if d < t.healthy_max_latency {
        State::Healthy
    } else if d < t.degraded_max_latency {
        State::Degraded
    } else {
        State::Unhealthy
    }
}

/// Judge the evidence. Pure and total.
///
/// The window speaks for the *current* condition: a failure episode (one
/// timeout, a busy spell) that has ended no longer counts once the server
/// answers again, so recovery takes `rise` judgements, not the window's
/// length. Failures still count after they end when the window holds two or
/// more separate episodes: that is a recurring problem, judged by its ratio.
/// Latency is the median of the last [`LATENCY_SAMPLES`] answers, and a
/// server is only as slow as its latest answer too, so one outlier neither
/// degrades it nor holds it degraded. Latency is not judged before
/// [`LATENCY_MIN_ANSWERS`] answers, so a first verdict never rests on one.
pub fn judge(e: &Evidence, t: &Thresholds) -> Judgement {
    if let Link::Down(reason) = e.link {
        // A server that throttles the handshake is there; it is serving
        // others, not down.
        let state = if reason == Reason::Throttled {
            State::Degraded
        } else {
            State::Unhealthy
        };
        return Judgement::definitive(state, reason);
    }
    if e.stopped {
        return Judgement::definitive(State::Unhealthy, Reason::Stopped);
    }
    if e.silent_for >= t.stuck_after {
        return Judgement::definitive(State::Unhealthy, Reason::Stuck);
    }
    // Most specific evidence first: on equal severity the earlier reason
    // stays, so "the server said so" beats "the window says so".
    let mut j = Judgement::new(State::Healthy, Reason::Ok);
    if e.health_check_failed {
        j = j.worst(Judgement::new(State::Unhealthy, Reason::HealthCheckFailed));
    } else {
        match e.reported {
            Some(Reported::Degraded) => {
                j = j.worst(Judgement::new(State::Degraded, Reason::HealthCheckDegraded));
            }
            Some(Reported::Unhealthy) => {
                j = j.worst(Judgement::new(
                    State::Unhealthy,
                    Reason::HealthCheckUnhealthy,
                ));
            }
            Some(Reported::Unreadable) => {
                j = j.worst(Judgement::new(
                    State::Degraded,
                    Reason::HealthCheckUnreadable,
                ));
            }
            Some(Reported::Healthy) | None => {}
        }
    }
    if e.liveness_late {
        j = j.worst(Judgement::new(State::Degraded, late_reason(e)));
    }
    if e.throttled {
        j = j.worst(Judgement::new(State::Degraded, Reason::Throttled));
    }
    if e.tools_missing {
        j = j.worst(Judgement::new(State::Degraded, Reason::ToolsMissing));
    }
    if let Some(state) = e.condition_failed {
        j = j.worst(Judgement::new(state, Reason::ConditionFailed));
    }
    match e.task {
        Some(Reason::TaskStuck) => j = j.worst(Judgement::new(State::Unhealthy, Reason::TaskStuck)),
        Some(r) => j = j.worst(Judgement::new(State::Degraded, r)),
        None => {}
    }
    let w = &e.window;
    if let (Some(median), Some(latest)) = (w.median_latency, w.latest_latency) {
        let state = latency_state(median, t).min(latency_state(latest, t));
        j = j.worst(Judgement::new(state, Reason::Slow));
    }
    if w.samples > 0 && (w.failing || w.episodes >= 2) {
        let ratio = |n: u32| f64::from(n) / f64::from(w.samples);
        let all = ratio(w.errors + w.timeouts);
        let state = if all < t.healthy_max_error_ratio {
            State::Healthy
        } else if all < t.degraded_max_error_ratio {
            State::Degraded
        } else if ratio(w.errors) >= t.degraded_max_error_ratio {
            State::Unhealthy
        } else {
            // Only lateness pushes it this far: a live link that answers late is
            // busy, not dead, until `stuck_after` says otherwise.
            State::Degraded
        };
        let reason = if w.errors >= w.timeouts {
            Reason::Errors
        } else if w.failing || e.liveness_late {
            late_reason(e)
        } else {
            Reason::Timeouts
        };
        j = j.worst(Judgement::new(state, reason));
    }
    j
}

fn late_reason(e: &Evidence) -> Reason {
    if e.busy {
        Reason::Busy
    } else {
        Reason::Unresponsive
    }
}

/// A change of published state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// Why.
    pub reason: Reason,
}

/// Rise/fall hysteresis over successive judgements.
#[derive(Clone, Debug)]
pub struct Hysteresis {
    rise: u32,
    fall: u32,
    state: State,
    reason: Reason,
    since: Instant,
    streak: u32,
    transitions: u64,
}

impl Hysteresis {
    /// Starts `Unknown`, needing `rise` better or `fall` worse judgements in a row.
    pub fn new(rise: u32, fall: u32, now: Instant) -> Self {
        Hysteresis {
            rise: rise.max(1),
            fall: fall.max(1),
            state: State::Unknown,
            reason: Reason::Starting,
            since: now,
            streak: 0,
            transitions: 0,
        }
    }

    /// The published state.
    pub fn state(&self) -> State {
        self.state
    }
    /// Why it is in that state.
    pub fn reason(&self) -> Reason {
        self.reason
    }
    /// When it entered that state.
    pub fn since(&self) -> Instant {
        self.since
    }
    /// How many transitions so far.
    pub fn transitions(&self) -> u64 {
        self.transitions
    }

    /// Feed one judgement; returns the transition if the state changed.
    pub fn observe(&mut self, j: Judgement, now: Instant) -> Option<Transition> {
        if j.state == self.state {
            self.streak = 0;
            self.reason = j.reason;
            return None;
        }
        let worse = j.state.severity() > self.state.severity();
        let adopt = if self.state == State::Unknown || j.definitive {
            true
        } else {
            self.streak += 1;
            self.streak >= if worse { self.fall } else { self.rise }
        };
        if !adopt {
            return None;
        }
        let t = Transition {
            from: self.state,
            to: j.state,
            reason: j.reason,
        };
        self.state = j.state;
        self.reason = j.reason;
        self.since = now;
        self.streak = 0;
        self.transitions += 1;
        Some(t)
    }
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
