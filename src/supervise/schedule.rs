//! When each probe of one session runs: one slot per probe (when it is
//! next due, whether its last run is in flight, when that run turns late)
//! on one timer and one set of futures, whatever the number of probes; the
//! tool listing's clock; the evidence read while a probe is outstanding;
//! and the jitter and holds that keep a fleet from moving in step.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use tokio::time::{Instant, Sleep};

use crate::config::Settings;
use crate::probe::{Cadence, FailureReason, Probe, ProbeOutcome};
use crate::state::Observation;
use crate::transport::budget::BUDGET;
use crate::transport::tools::ToolSurface;
use crate::transport::{BoxFuture, Era, RequestError, Session};

/// One probe's place in the schedule.
struct Slot {
    cadence: Cadence,
    /// When it is next due.
    due: Instant,
    /// Runs due so far: each one's jitter differs.
    turns: u64,
    /// Whether the latest listing lets it run.
    active: bool,
    /// When its run in flight turns late (`None` when none is, or the
    /// kind has no such moment).
    late_at: Option<Instant>,
    running: bool,
    late: bool,
}

/// A probe's run in flight, named by its slot. A future of its own, not
/// an `async` block around the probe's: that block was a second boxed
/// future on every probe run.
pub(super) struct Run<'a> {
    slot: usize,
    run: BoxFuture<'a, ProbeOutcome>,
}

impl Future for Run<'_> {
    type Output = (usize, ProbeOutcome);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let slot = self.slot;
        self.run.as_mut().poll(cx).map(|outcome| (slot, outcome))
    }
}

/// What came due when the timer fired.
#[derive(Clone, Copy, Default)]
pub(super) struct Wake {
    /// A listing is due.
    pub(super) list: bool,
    /// Evidence is due while a probe is outstanding.
    pub(super) watch: bool,
    /// A run turned late: evidence before the news.
    pub(super) late: bool,
}

/// The probes of one session and their clocks. Made once per session.
pub(super) struct Schedule<'a> {
    probes: &'a [Box<dyn Probe>],
    slots: Vec<Slot>,
    era: Era,
    id: &'a str,
    /// Runs in flight, by slot.
    pub(super) running: FuturesUnordered<Run<'a>>,
    /// The one timer, set to the soonest moment anything is due; made once:
    /// a timer made afresh each turn registers and unregisters a waiter,
    /// twice a ping.
    pub(super) timer: Pin<Box<Sleep>>,
    /// Until when the server asked not to be called (Retry-After).
    hold_until: Option<Instant>,
    /// The next listing, and when the last began.
    list_due: Instant,
    listed_at: Instant,
    /// /proc and progress are read at least once a second while they
    /// matter: "stopped", "busy" and "stuck" must not wait for a ping.
    evidence_due: Instant,
    evidence_every: Duration,
}

impl<'a> Schedule<'a> {
    /// Every probe due at once: the session's first verdict waits for
    /// liveness (the handshake is no liveness answer). The opening's
    /// listing said which probes run (`runs`, `None` when it failed), and
    /// the next listing is due `relist` from now.
    pub(super) fn new(
        probes: &'a [Box<dyn Probe>],
        (era, id): (Era, &'a str),
        s: &Settings,
        runs: Option<Vec<bool>>,
        relist: Duration,
    ) -> Self {
        let now = Instant::now();
        let slots = probes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let cadence = p.cadence();
                Slot {
                    cadence,
                    due: now,
                    turns: 0,
                    active: runs.as_ref().map_or(!cadence.needs_listing, |r| r[i]),
                    late_at: None,
                    running: false,
                    late: false,
                }
            })
            .collect();
        Schedule {
            probes,
            slots,
            era,
            id,
            running: FuturesUnordered::new(),
            timer: Box::pin(tokio::time::sleep_until(now)),
            hold_until: None,
            list_due: now + relist,
            listed_at: now,
            evidence_due: now,
            evidence_every: s.ping_interval.0.min(Duration::from_secs(1)),
        }
    }

    /// Set the timer to the soonest moment anything is due. `listing`: one
    /// is in flight, so none is due.
    pub(super) fn arm(&mut self, listing: bool) {
        let mut soonest = (!listing).then_some(self.list_due);
        let mut sooner = |at: Instant| soonest = Some(soonest.map_or(at, |s| s.min(at)));
        for slot in &self.slots {
            if slot.active {
                sooner(slot.due);
            }
            if let Some(at) = slot.late_at {
                sooner(at);
            }
        }
        if self.watching() {
            sooner(self.evidence_due);
        }
        // Nothing due ever (no probe runs, a listing in flight): the
        // listing's answer re-arms it.
        let at = soonest.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        if self.timer.deadline() != at {
            self.timer.as_mut().reset(at);
        }
    }

    /// The timer fired: start the probes due (each skipped, when its last
    /// run is still in flight or the server asked to wait, reported into
    /// `out`; a run started is told by its lateness or its answer), mark
    /// the late ones (their news into `out`), and say what else came due.
    pub(super) fn wake(&mut self, session: &'a dyn Session, out: &mut Vec<Observation>) -> Wake {
        let now = Instant::now();
        let held = self.hold_until.is_some_and(|h| now < h);
        let mut wake = Wake {
            list: self.list_due <= now,
            watch: self.watching() && self.evidence_due <= now,
            late: false,
        };
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let kind = self.probes[i].kind(self.era);
            if slot.late_at.is_some_and(|at| at <= now) {
                slot.late_at = None;
                slot.late = true;
                wake.late = true;
                let after = slot.cadence.late_after.unwrap_or_default();
                out.push(Observation::Late(kind, after));
            }
            if !slot.active || slot.due > now {
                continue;
            }
            slot.turns += 1;
            slot.due = now + next_run(slot.cadence.every, self.id, slot.turns);
            if slot.running || held {
                out.push(Observation::Skipped(kind));
                continue;
            }
            slot.running = true;
            slot.late_at = slot.cadence.late_after.map(|after| now + after);
            let (probe, deadline) = (&self.probes[i], slot.cadence.deadline);
            self.running.push(Run {
                slot: i,
                run: probe.run(session, deadline),
            });
        }
        if wake.watch {
            self.evidence_due = now + self.evidence_every;
        }
        wake
    }

    /// Whether evidence is read between probes. Progress, silence and a
    /// child's CPU only matter while a request is outstanding: an idle
    /// server costs no wake-ups between probes. A run with a moment to
    /// turn late is watched from that moment (it samples on the spot); a
    /// child's gauges are refreshed with every liveness answer.
    fn watching(&self) -> bool {
        (self.slots.iter()).any(|s| s.running && (s.late || s.cadence.late_after.is_none()))
    }

    /// The run of slot `i` answered: whether it had turned late. Hold off
    /// when it asked to (a throttled probe).
    pub(super) fn answered(&mut self, i: usize, outcome: &ProbeOutcome) -> bool {
        if let Some(wait) = hold_for(outcome) {
            self.hold_until = Some(Instant::now() + wait);
        }
        let slot = &mut self.slots[i];
        slot.running = false;
        slot.late_at = None;
        std::mem::take(&mut slot.late)
    }

    /// The name slot `i`'s probe goes by in details.
    pub(super) fn name(&self, i: usize) -> Option<&str> {
        self.probes[i].name()
    }

    /// Start a listing now.
    pub(super) fn list(
        &mut self,
        session: &'a dyn Session,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<ToolSurface, RequestError>> {
        self.listed_at = Instant::now();
        session.list_tools(timeout)
    }

    /// A listing came: which probes run now, and the next listing `after`
    /// from now (jittered).
    pub(super) fn listed(&mut self, tools: &ToolSurface, after: Duration) {
        for (slot, probe) in self.slots.iter_mut().zip(self.probes) {
            slot.active = probe.listed(tools);
        }
        self.relist(after);
    }

    /// The next listing, `after` from now (jittered).
    pub(super) fn relist(&mut self, after: Duration) {
        let turn = self.slots.first().map_or(0, |s| s.turns);
        self.list_due = Instant::now() + jittered(after, self.id, turn);
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
        self.list_due = self.list_due.min(soonest);
        false
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

/// When a probe's run `n` (from 1, the run as its session opens) is
/// followed by the next. After the first, `period` and a half of it either
/// way by server: a fleet whose sessions opened within a second or two
/// would otherwise run every probe in that same second or two of each
/// period, and a tenth of jitter a turn takes minutes to spread it (at
/// 10 000 servers the first minute of pings came in bursts of 10 000).
/// After that, [`jittered`].
pub(super) fn next_run(period: Duration, id: &str, n: u64) -> Duration {
    if n == 1 {
        period.mul_f64(0.5 + fraction(id, 0))
    } else {
        jittered(period, id, n)
    }
}

/// `period`, give or take a tenth, different for each server and each
/// turn `n` (and the same for the same ones, so runs repeat). The 2026-07-28
/// caching rules ask a client that polls for jitter; without it a fleet
/// opened together, or reconnected together after an outage, stays in step
/// and pings in the same millisecond ever after.
pub(super) fn jittered(period: Duration, id: &str, n: u64) -> Duration {
    period.mul_f64(0.9 + 0.2 * fraction(id, n))
}

/// A fraction in [0, 1), the same for the same server and turn.
fn fraction(id: &str, n: u64) -> f64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (id, n).hash(&mut h);
    // The hash's top 24 bits.
    (h.finish() >> 40) as f64 / f64::from(1u32 << 24)
}
