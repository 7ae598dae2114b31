//! The judgment: a pure function from evidence to state and reason, plus
//! rise/fall hysteresis. No I/O, no clocks: callers pass `now`.
//!
//! Evidence comes in three strengths. Transport death (process exited,
//! connection refused) is definitive and bypasses hysteresis. A live transport
//! that answers late is at worst *degraded* until `stuck_after` has passed
//! without any answer, then *unhealthy (stuck)*. Everything else is judged
//! from a rolling window of probe outcomes against the configured thresholds,
//! with the server's own `health_check` status folded in (worst wins).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

pub use super::reason::{Reason, State};
pub use crate::probe::health_check::Reported;

/// The state of the link to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// A session is open.
    Up,
    /// No session; the last attempt ended for this reason (definitive).
    Down(Reason),
}

/// How one probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered, in this long.
    Ok(Duration),
    /// No answer before the deadline.
    Timeout,
    /// Answered with an error, or failed in a way that is not a timeout.
    Error,
}

impl Outcome {
    fn failed(self) -> bool {
        !matches!(self, Outcome::Ok(_))
    }
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

#[derive(Clone, Copy, Debug)]
enum Entry {
    /// A probe ended; `liveness` marks ping/discover probes.
    Probe { liveness: bool, outcome: Outcome },
    /// A late liveness probe was answered after all: the failure episode it
    /// belonged to is over, though the probe still counts as timed out.
    Recovered,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    entry: Entry,
}

/// Most samples kept, whatever the window length: bounds memory per server.
const MAX_SAMPLES: usize = 512;

/// How many of the most recent answered liveness probes the latency
/// statistic looks at: the median of five needs three slow answers, so one
/// outlier never moves it.
pub const LATENCY_SAMPLES: usize = 5;

/// A rolling window of probe outcomes.
#[derive(Clone, Debug)]
pub struct Window {
    span: Duration,
    samples: VecDeque<Sample>,
}

/// What the window holds right now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowStats {
    /// Probes in the window.
    pub samples: u32,
    /// Of which answered with an error.
    pub errors: u32,
    /// Of which got no answer in time.
    pub timeouts: u32,
    /// Separate runs of failed probes (errors or timeouts) in the window.
    pub episodes: u32,
    /// Whether the most recent probe failed and nothing has answered since.
    pub failing: bool,
    /// Median latency of the last [`LATENCY_SAMPLES`] answered liveness probes.
    pub median_latency: Option<Duration>,
    /// Latency of the most recent answered liveness probe.
    pub latest_latency: Option<Duration>,
}

impl Window {
    /// An empty window spanning `span`.
    pub fn new(span: Duration) -> Self {
        Window {
            span,
            samples: VecDeque::new(),
        }
    }

    /// Record one probe outcome; `liveness` marks ping/discover probes, whose
    /// latency is what "slow" is judged on.
    pub fn record(&mut self, now: Instant, liveness: bool, outcome: Outcome) {
        self.push(now, Entry::Probe { liveness, outcome });
    }

    /// A late liveness probe was answered: its failure episode has ended.
    pub fn recovered(&mut self, now: Instant) {
        self.push(now, Entry::Recovered);
    }

    fn push(&mut self, now: Instant, entry: Entry) {
        if self.samples.len() == MAX_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample { at: now, entry });
        self.prune(now);
    }

    /// Forget everything (a new session starts with a clean slate).
    pub fn clear(&mut self) {
        self.samples.clear();
    }

    fn prune(&mut self, now: Instant) {
        while let Some(s) = self.samples.front() {
            if now.saturating_duration_since(s.at) > self.span {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    /// Summarise the samples no older than the span.
    pub fn stats(&self, now: Instant) -> WindowStats {
        let mut st = WindowStats::default();
        let mut recent: Vec<Duration> = Vec::with_capacity(LATENCY_SAMPLES);
        let mut in_episode = false;
        for s in &self.samples {
            if now.saturating_duration_since(s.at) > self.span {
                continue;
            }
            let (liveness, outcome) = match s.entry {
                Entry::Recovered => {
                    in_episode = false;
                    continue;
                }
                Entry::Probe { liveness, outcome } => (liveness, outcome),
            };
            st.samples += 1;
            match outcome {
                Outcome::Ok(d) if liveness => {
                    if recent.len() == LATENCY_SAMPLES {
                        recent.remove(0);
                    }
                    recent.push(d);
                }
                Outcome::Ok(_) => {}
                Outcome::Timeout => st.timeouts += 1,
                Outcome::Error => st.errors += 1,
            }
            if outcome.failed() && !in_episode {
                st.episodes += 1;
            }
            in_episode = outcome.failed();
        }
        st.failing = in_episode;
        st.latest_latency = recent.last().copied();
        recent.sort_unstable();
        st.median_latency = recent.get(recent.len() / 2).copied();
        st
    }
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
/// degrades it nor holds it degraded.
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
mod tests {
    use super::*;

    fn t() -> Thresholds {
        Thresholds {
            healthy_max_error_ratio: 0.01,
            healthy_max_latency: Duration::from_millis(500),
            degraded_max_error_ratio: 0.05,
            degraded_max_latency: Duration::from_millis(1000),
            stuck_after: Duration::from_secs(60),
        }
    }

    fn healthy_evidence() -> Evidence {
        Evidence {
            link: Link::Up,
            window: WindowStats {
                samples: 100,
                median_latency: Some(Duration::from_millis(1)),
                latest_latency: Some(Duration::from_millis(1)),
                ..WindowStats::default()
            },
            liveness_late: false,
            busy: false,
            stopped: false,
            silent_for: Duration::ZERO,
            reported: None,
            health_check_failed: false,
            throttled: false,
            tools_missing: false,
        }
    }

    fn judged(e: Evidence) -> (State, Reason, bool) {
        let j = judge(&e, &t());
        (j.state, j.reason, j.definitive)
    }

    #[test]
    fn a_throttle_is_degraded_never_unhealthy() {
        let mut e = healthy_evidence();
        e.throttled = true;
        assert_eq!(judged(e), (State::Degraded, Reason::Throttled, false));
        // A worse finding still wins.
        e.reported = Some(Reported::Unhealthy);
        assert_eq!(judged(e).0, State::Unhealthy);
        // A handshake refused by a throttle: there, and busy with others.
        let mut e = healthy_evidence();
        e.link = Link::Down(Reason::Throttled);
        assert_eq!(judged(e), (State::Degraded, Reason::Throttled, true));
    }

    #[test]
    fn a_missing_expected_tool_is_degraded() {
        let mut e = healthy_evidence();
        e.tools_missing = true;
        assert_eq!(judged(e), (State::Degraded, Reason::ToolsMissing, false));
    }

    #[test]
    fn clean_window_is_healthy() {
        assert_eq!(
            judged(healthy_evidence()),
            (State::Healthy, Reason::Ok, false)
        );
    }

    #[test]
    fn empty_window_on_live_link_is_healthy() {
        let mut e = healthy_evidence();
        e.window = WindowStats::default();
        assert_eq!(judged(e).0, State::Healthy);
    }

    #[test]
    fn transport_death_is_definitive_whatever_else() {
        for reason in [
            Reason::Exited,
            Reason::Unreachable,
            Reason::ConnectFailed,
            Reason::HandshakeFailed,
            Reason::Unauthenticated,
            Reason::Forbidden,
        ] {
            let mut e = healthy_evidence();
            e.link = Link::Down(reason);
            e.reported = Some(Reported::Healthy);
            assert_eq!(judged(e), (State::Unhealthy, reason, true));
        }
    }

    #[test]
    fn error_ratio_boundaries_follow_the_seed_thresholds() {
        // (errors per 100, expected state): healthy below 1 %, degraded below 5 %.
        for (errors, want) in [
            (0, State::Healthy),
            (1, State::Degraded),
            (4, State::Degraded),
            (5, State::Unhealthy),
            (50, State::Unhealthy),
        ] {
            let mut e = healthy_evidence();
            e.window.errors = errors;
            e.window.failing = errors > 0;
            e.window.episodes = u32::from(errors > 0);
            let (state, reason, definitive) = judged(e);
            assert_eq!(state, want, "errors={errors}");
            assert!(!definitive);
            if errors > 0 {
                assert_eq!(reason, Reason::Errors);
            }
        }
    }

    #[test]
    fn latency_boundaries_follow_the_seed_thresholds() {
        for (ms, want) in [
            (499, State::Healthy),
            (500, State::Degraded),
            (999, State::Degraded),
            (1000, State::Unhealthy),
        ] {
            let mut e = healthy_evidence();
            e.window.median_latency = Some(Duration::from_millis(ms));
            e.window.latest_latency = Some(Duration::from_millis(ms));
            let (state, reason, _) = judged(e);
            assert_eq!(state, want, "ms={ms}");
            if want != State::Healthy {
                assert_eq!(reason, Reason::Slow);
            }
        }
    }

    #[test]
    fn lateness_alone_never_makes_a_live_server_unhealthy() {
        let mut e = healthy_evidence();
        e.window.timeouts = 60;
        e.window.failing = true;
        e.window.episodes = 1;
        e.liveness_late = true;
        e.silent_for = Duration::from_secs(59);
        assert_eq!(judged(e), (State::Degraded, Reason::Unresponsive, false));
    }

    #[test]
    fn late_answers_with_signs_of_life_are_busy_never_unhealthy() {
        let mut e = healthy_evidence();
        e.liveness_late = true;
        e.busy = true;
        e.window.timeouts = 90;
        e.window.failing = true;
        e.window.episodes = 1;
        e.silent_for = Duration::from_secs(59);
        assert_eq!(judged(e), (State::Degraded, Reason::Busy, false));
    }

    #[test]
    fn a_stopped_process_is_unhealthy_at_once_even_if_it_looked_busy() {
        let mut e = healthy_evidence();
        e.stopped = true;
        e.busy = true;
        assert_eq!(judged(e), (State::Unhealthy, Reason::Stopped, true));
    }

    #[test]
    fn silence_past_stuck_after_is_stuck() {
        let mut e = healthy_evidence();
        e.liveness_late = true;
        e.silent_for = Duration::from_secs(60);
        assert_eq!(judged(e), (State::Unhealthy, Reason::Stuck, true));
    }

    #[test]
    fn one_late_ping_is_degraded_unresponsive() {
        let mut e = healthy_evidence();
        e.liveness_late = true;
        assert_eq!(judged(e), (State::Degraded, Reason::Unresponsive, false));
    }

    #[test]
    fn health_check_status_is_folded_in_worst_wins() {
        let cases = [
            (Some(Reported::Healthy), false, State::Healthy, Reason::Ok),
            (
                Some(Reported::Degraded),
                false,
                State::Degraded,
                Reason::HealthCheckDegraded,
            ),
            (
                Some(Reported::Unhealthy),
                false,
                State::Unhealthy,
                Reason::HealthCheckUnhealthy,
            ),
            (
                Some(Reported::Healthy),
                true,
                State::Unhealthy,
                Reason::HealthCheckFailed,
            ),
            (None, true, State::Unhealthy, Reason::HealthCheckFailed),
        ];
        for (reported, failed, state, reason) in cases {
            let mut e = healthy_evidence();
            e.reported = reported;
            e.health_check_failed = failed;
            assert_eq!(judged(e), (state, reason, false), "{reported:?} {failed}");
        }
        // A slow server that reports degraded stays at the worse of the two.
        let mut e = healthy_evidence();
        e.window.median_latency = Some(Duration::from_secs(2));
        e.window.latest_latency = Some(Duration::from_secs(2));
        e.reported = Some(Reported::Degraded);
        assert_eq!(judged(e), (State::Unhealthy, Reason::Slow, false));
    }

    #[test]
    fn the_servers_own_word_names_the_reason_on_equal_severity() {
        let mut e = healthy_evidence();
        e.window.errors = 20;
        e.window.failing = true;
        e.health_check_failed = true;
        assert_eq!(
            judged(e),
            (State::Unhealthy, Reason::HealthCheckFailed, false)
        );
        let mut e = healthy_evidence();
        e.window.errors = 2;
        e.window.episodes = 2;
        e.reported = Some(Reported::Degraded);
        assert_eq!(
            judged(e),
            (State::Degraded, Reason::HealthCheckDegraded, false)
        );
    }

    #[test]
    fn window_drops_old_samples_and_bounds_memory() {
        let start = Instant::now();
        let mut w = Window::new(Duration::from_secs(10));
        w.record(start, true, Outcome::Error);
        w.record(
            start + Duration::from_secs(5),
            true,
            Outcome::Ok(Duration::from_millis(4)),
        );
        let s = w.stats(start + Duration::from_secs(5));
        assert_eq!((s.samples, s.errors), (2, 1));
        let s = w.stats(start + Duration::from_secs(11));
        assert_eq!((s.samples, s.errors), (1, 0));
        assert_eq!(s.median_latency, Some(Duration::from_millis(4)));
        for i in 0..(MAX_SAMPLES as u64 * 2) {
            w.record(
                start + Duration::from_millis(i),
                false,
                Outcome::Ok(Duration::ZERO),
            );
        }
        assert!(w.samples.len() <= MAX_SAMPLES);
    }

    #[test]
    fn window_latency_counts_only_answered_liveness_probes() {
        let now = Instant::now();
        let mut w = Window::new(Duration::from_secs(60));
        w.record(now, true, Outcome::Ok(Duration::from_millis(10)));
        w.record(now, true, Outcome::Ok(Duration::from_millis(30)));
        w.record(now, false, Outcome::Ok(Duration::from_secs(5)));
        w.record(now, true, Outcome::Timeout);
        let s = w.stats(now);
        assert_eq!(s.median_latency, Some(Duration::from_millis(30)));
        assert_eq!(s.latest_latency, Some(Duration::from_millis(30)));
        assert_eq!((s.samples, s.timeouts, s.errors), (4, 1, 0));
        assert_eq!((s.episodes, s.failing), (1, true));
    }

    #[test]
    fn one_outlier_moves_neither_the_median_nor_the_verdict() {
        let now = Instant::now();
        let mut w = Window::new(Duration::from_secs(300));
        for ms in [2, 3, 2, 4000, 3] {
            w.record(now, true, Outcome::Ok(Duration::from_millis(ms)));
        }
        let s = w.stats(now);
        assert_eq!(s.median_latency, Some(Duration::from_millis(3)));
        let mut e = healthy_evidence();
        e.window = s;
        assert_eq!(judged(e).0, State::Healthy);
        // Only the last LATENCY_SAMPLES answers count: old slowness ages out.
        for _ in 0..LATENCY_SAMPLES {
            w.record(now, true, Outcome::Ok(Duration::from_millis(1)));
        }
        assert_eq!(w.stats(now).median_latency, Some(Duration::from_millis(1)));
    }

    #[test]
    fn a_slow_median_with_a_prompt_latest_answer_is_not_slow() {
        let mut e = healthy_evidence();
        e.window.median_latency = Some(Duration::from_millis(800));
        e.window.latest_latency = Some(Duration::from_millis(5));
        assert_eq!(judged(e).0, State::Healthy);
        e.window.latest_latency = Some(Duration::from_millis(2000));
        assert_eq!(judged(e), (State::Degraded, Reason::Slow, false));
    }

    #[test]
    fn an_ended_episode_no_longer_counts_but_recurring_ones_do() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let ok = Outcome::Ok(Duration::from_millis(2));
        let mut w = Window::new(Duration::from_secs(300));
        for i in 0..20 {
            w.record(at(i), true, ok);
        }
        // One episode of three timeouts, answered late, then prompt answers.
        for i in 20..23 {
            w.record(at(i), true, Outcome::Timeout);
        }
        let s = w.stats(at(23));
        assert_eq!((s.episodes, s.failing, s.timeouts), (1, true, 3));
        let mut e = healthy_evidence();
        e.window = s;
        assert_eq!(judged(e).0, State::Degraded);
        w.recovered(at(24));
        let s = w.stats(at(24));
        assert_eq!((s.episodes, s.failing), (1, false));
        e.window = s;
        assert_eq!(judged(e), (State::Healthy, Reason::Ok, false));
        // A second episode, even a single error, makes it recurring: the ratio judges.
        w.record(at(25), true, Outcome::Error);
        w.record(at(26), true, ok);
        let s = w.stats(at(26));
        assert_eq!((s.episodes, s.failing, s.errors), (2, false, 1));
        e.window = s;
        assert_eq!(judged(e), (State::Degraded, Reason::Timeouts, false));
    }

    #[test]
    fn the_window_forgets_what_is_older_than_its_span_and_keeps_the_boundary() {
        let t0 = Instant::now();
        let span = Duration::from_secs(10);
        let mut w = Window::new(span);
        w.record(t0, true, Outcome::Error);
        // Exactly one span old: still in.
        w.record(t0 + span, true, Outcome::Ok(Duration::from_millis(1)));
        assert_eq!(w.samples.len(), 2);
        assert_eq!(w.stats(t0 + span).errors, 1);
        // Older than the span: out, and out of memory too.
        w.record(
            t0 + span + Duration::from_millis(1),
            true,
            Outcome::Ok(Duration::ZERO),
        );
        assert_eq!(w.samples.len(), 2);
        assert_eq!(w.stats(t0 + span + Duration::from_millis(1)).errors, 0);
        w.clear();
        assert_eq!(w.stats(t0 + span).samples, 0);
    }

    #[test]
    fn an_empty_window_judges_no_ratio() {
        let mut e = healthy_evidence();
        e.window = WindowStats {
            failing: true,
            episodes: 2,
            ..WindowStats::default()
        };
        assert_eq!(judged(e), (State::Healthy, Reason::Ok, false));
    }

    #[test]
    fn the_reason_names_what_dominates_and_whether_it_is_going_on() {
        let mut e = healthy_evidence();
        e.window.timeouts = 10;
        e.window.episodes = 1;
        e.window.failing = true;
        // A timeout going on, though the late flag is not (yet) set.
        assert_eq!(judged(e).1, Reason::Unresponsive);
        e.window.failing = false;
        e.window.episodes = 2;
        assert_eq!(judged(e).1, Reason::Timeouts);
        e.liveness_late = true;
        assert_eq!(judged(e).1, Reason::Unresponsive);
        e.window.errors = 10;
        assert_eq!(judged(e).1, Reason::Errors);
    }

    #[test]
    fn unreadable_self_report_is_degraded_never_healthy() {
        let mut e = healthy_evidence();
        e.reported = Some(Reported::Unreadable);
        assert_eq!(
            judged(e),
            (State::Degraded, Reason::HealthCheckUnreadable, false)
        );
    }

    fn j(state: State, reason: Reason) -> Judgement {
        Judgement::new(state, reason)
    }

    #[test]
    fn first_judgement_is_adopted_at_once() {
        let now = Instant::now();
        let mut h = Hysteresis::new(2, 3, now);
        assert_eq!(h.state(), State::Unknown);
        let tr = h.observe(j(State::Healthy, Reason::Ok), now);
        assert_eq!(
            tr,
            Some(Transition {
                from: State::Unknown,
                to: State::Healthy,
                reason: Reason::Ok
            })
        );
    }

    #[test]
    fn falling_needs_fall_judgements_in_a_row() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(2, 3, t0);
        h.observe(j(State::Healthy, Reason::Ok), t0);
        let bad = j(State::Degraded, Reason::Slow);
        assert_eq!(h.observe(bad, t0), None);
        assert_eq!(h.observe(bad, t0), None);
        // A good judgement in between resets the streak.
        assert_eq!(h.observe(j(State::Healthy, Reason::Ok), t0), None);
        assert_eq!(h.observe(bad, t0), None);
        assert_eq!(h.observe(bad, t0), None);
        let later = t0 + Duration::from_secs(3);
        assert!(h.observe(bad, later).is_some());
        assert_eq!((h.state(), h.reason()), (State::Degraded, Reason::Slow));
        assert_eq!(h.since(), later);
        assert_eq!(h.transitions(), 2);
    }

    #[test]
    fn rising_needs_rise_judgements_in_a_row() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(2, 3, t0);
        h.observe(Judgement::definitive(State::Unhealthy, Reason::Exited), t0);
        assert_eq!(h.observe(j(State::Healthy, Reason::Ok), t0), None);
        assert!(h.observe(j(State::Healthy, Reason::Ok), t0).is_some());
        assert_eq!(h.state(), State::Healthy);
    }

    #[test]
    fn definitive_judgements_skip_the_fall_count() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(2, 3, t0);
        h.observe(j(State::Healthy, Reason::Ok), t0);
        let tr = h.observe(
            Judgement::definitive(State::Unhealthy, Reason::Unreachable),
            t0,
        );
        assert_eq!(tr.map(|t| t.to), Some(State::Unhealthy));
        assert_eq!(h.reason(), Reason::Unreachable);
    }

    #[test]
    fn same_state_new_reason_updates_the_reason_without_a_transition() {
        let t0 = Instant::now();
        let mut h = Hysteresis::new(2, 3, t0);
        h.observe(j(State::Degraded, Reason::Slow), t0);
        assert_eq!(
            h.observe(j(State::Degraded, Reason::HealthCheckDegraded), t0),
            None
        );
        assert_eq!(h.reason(), Reason::HealthCheckDegraded);
        assert_eq!(h.transitions(), 1);
    }

    #[test]
    fn every_pair_of_states_transitions_only_after_its_count() {
        let states = [State::Healthy, State::Degraded, State::Unhealthy];
        for &from in &states {
            for &to in &states {
                if from == to {
                    continue;
                }
                let t0 = Instant::now();
                let mut h = Hysteresis::new(2, 3, t0);
                h.observe(j(from, Reason::Ok), t0);
                let need = if to.severity() > from.severity() {
                    3
                } else {
                    2
                };
                for i in 1..need {
                    assert_eq!(
                        h.observe(j(to, Reason::Errors), t0),
                        None,
                        "{from:?}->{to:?} #{i}"
                    );
                }
                assert!(
                    h.observe(j(to, Reason::Errors), t0).is_some(),
                    "{from:?}->{to:?}"
                );
                assert_eq!(h.state(), to);
            }
        }
    }
}
