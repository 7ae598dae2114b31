//! The rolling window of probe outcomes a verdict is judged from.
//!
//! Judged on every probe, so the window keeps its counts as samples enter
//! and leave, and a judgment reads only its ends. Bounded by its span and
//! by a cap on samples held, whatever the probe rate. No I/O, no clocks: callers
//! pass `now`.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

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

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
