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
    /// A failed probe that followed no failure among the samples held when
    /// it came: it started an episode (unless what it followed has gone).
    starts: bool,
}

impl Sample {
    /// What this sample adds to the window's counts.
    fn counts(&self) -> Counts {
        let Entry::Probe { outcome, .. } = self.entry else {
            return Counts::default();
        };
        Counts {
            samples: 1,
            errors: u32::from(outcome == Outcome::Error),
            timeouts: u32::from(outcome == Outcome::Timeout),
            episodes: u32::from(self.starts),
        }
    }

    /// Whether a failure episode is open once this sample is in.
    fn failing(&self) -> bool {
        matches!(self.entry, Entry::Probe { outcome, .. } if outcome.failed())
    }
}

/// Counts over a run of samples, kept as samples enter and leave.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counts {
    samples: u32,
    errors: u32,
    timeouts: u32,
    episodes: u32,
}

impl Counts {
    fn add(&mut self, c: Counts) {
        self.samples += c.samples;
        self.errors += c.errors;
        self.timeouts += c.timeouts;
        self.episodes += c.episodes;
    }

    fn sub(&mut self, c: Counts) {
        self.samples -= c.samples;
        self.errors -= c.errors;
        self.timeouts -= c.timeouts;
        self.episodes -= c.episodes;
    }
}

/// Most samples kept, whatever the window length: bounds memory per server.
const MAX_SAMPLES: usize = 512;

/// How many of the most recent answered liveness probes the latency
/// statistic looks at: the median of five needs three slow answers, so one
/// outlier never moves it.
pub const LATENCY_SAMPLES: usize = 5;

/// Answers needed before latency is judged at all: the median of one or two
/// answers is an outlier's value, and the first answers after a (re)start
/// are the ones a loaded host or a cold runtime makes slow.
pub const LATENCY_MIN_ANSWERS: usize = LATENCY_SAMPLES / 2 + 1;

/// A rolling window of probe outcomes.
///
/// Judged on every probe, so its counts are kept as samples enter and
/// leave rather than counted by a scan of the window each time.
#[derive(Clone, Debug)]
pub struct Window {
    span: Duration,
    samples: VecDeque<Sample>,
    /// The counts over every sample in `samples`.
    held: Counts,
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
    /// Median latency of the last [`LATENCY_SAMPLES`] answered liveness
    /// probes; `None` until there are [`LATENCY_MIN_ANSWERS`].
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
            held: Counts::default(),
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
            self.pop_front();
        }
        let follows_failure = self.samples.back().is_some_and(Sample::failing);
        let mut sample = Sample {
            at: now,
            entry,
            starts: false,
        };
        sample.starts = sample.failing() && !follows_failure;
        self.held.add(sample.counts());
        self.samples.push_back(sample);
        self.prune(now);
    }

    fn pop_front(&mut self) {
        if let Some(s) = self.samples.pop_front() {
            self.held.sub(s.counts());
        }
    }

    /// Forget everything (a new session starts with a clean slate).
    pub fn clear(&mut self) {
        self.samples.clear();
        self.held = Counts::default();
    }

    fn prune(&mut self, now: Instant) {
        let cutoff = self.cutoff(now);
        while self.samples.front().is_some_and(|s| too_old(s, cutoff)) {
            self.pop_front();
        }
    }

    /// The oldest instant still in the span at `now`; `None` when the span
    /// reaches back before the clock's start, so nothing is too old.
    fn cutoff(&self, now: Instant) -> Option<Instant> {
        now.checked_sub(self.span)
    }

    /// Summarise the samples no older than the span.
    ///
    /// The held counts, less those of samples that fell out of the span
    /// since the last probe pruned them (usually none); only the ends of
    /// the window are looked at.
    pub fn stats(&self, now: Instant) -> WindowStats {
        let cutoff = self.cutoff(now);
        let gone = self
            .samples
            .iter()
            .take_while(|s| too_old(s, cutoff))
            .count();
        let mut counts = self.held;
        for s in self.samples.range(..gone) {
            counts.sub(s.counts());
        }
        let window = self.samples.range(gone..);
        // The window's first probe starts an episode if it failed, whatever
        // it followed among the samples now gone.
        let first = window
            .clone()
            .find(|s| matches!(s.entry, Entry::Probe { .. }));
        if first.is_some_and(|s| s.failing() && !s.starts) {
            counts.episodes += 1;
        }
        let recent = Recent::newest_first(window.clone().rev().filter_map(|s| match s.entry {
            Entry::Probe {
                liveness: true,
                outcome: Outcome::Ok(d),
            } => Some(d),
            _ => None,
        }));
        WindowStats {
            samples: counts.samples,
            errors: counts.errors,
            timeouts: counts.timeouts,
            episodes: counts.episodes,
            failing: window.last().is_some_and(Sample::failing),
            median_latency: recent.median(),
            latest_latency: recent.latest(),
        }
    }
}

/// The last [`LATENCY_SAMPLES`] answered latencies, newest first, in an
/// array on the stack: read on every judgment.
#[derive(Default)]
struct Recent {
    newest_first: [Duration; LATENCY_SAMPLES],
    held: usize,
}

impl Recent {
    /// The first [`LATENCY_SAMPLES`] of `latencies`, which come newest first.
    fn newest_first(latencies: impl Iterator<Item = Duration>) -> Self {
        let mut r = Recent::default();
        for d in latencies.take(LATENCY_SAMPLES) {
            r.newest_first[r.held] = d;
            r.held += 1;
        }
        r
    }

    fn latest(&self) -> Option<Duration> {
        (self.held > 0).then(|| self.newest_first[0])
    }

    /// The median once there are [`LATENCY_MIN_ANSWERS`]; order does not
    /// matter to it.
    fn median(&self) -> Option<Duration> {
        if self.held < LATENCY_MIN_ANSWERS {
            return None;
        }
        let mut sorted = self.newest_first;
        let sorted = &mut sorted[..self.held];
        sorted.sort_unstable();
        Some(sorted[self.held / 2])
    }
}

/// Whether `s` fell out of the span: `now - at > span`, spelled
/// `at < now - span` so the cutoff is worked out once per prune or
/// judgment, not once per sample.
fn too_old(s: &Sample, cutoff: Option<Instant>) -> bool {
    cutoff.is_some_and(|c| s.at < c)
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
