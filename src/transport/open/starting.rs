//! Start-up from evidence: how long a stdio child may take to answer its
//! handshake. Busy is told from dead here as it is for a late ping: a
//! child that is alive and shows life (CPU time advancing, lines on
//! stderr) is starting, not failing, so only the time it spends showing
//! none counts against the handshake's budget (`connect_timeout`). A hard
//! cap bounds the whole handshake whatever the evidence, so a child that
//! spins forever is still judged.
//!
//! The same clock times era detection: a process that has said nothing
//! yet is no evidence of either era, so `server/discover`'s share runs
//! only while the child is idle too.
//!
//! [`Clock`] is the pure part (samples in, a deadline out); [`within`]
//! drives a future against it, sampling at [`SAMPLE_EVERY`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a starting child is sampled: the slowest answer to notice
/// that it went quiet, and one `/proc` read of its tree a time.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// The share of one core a child must use between two samples for that
/// time to count as life: a process waiting on nothing uses none, an
/// interpreter importing its modules a whole core.
pub const MIN_CPU_SHARE: f64 = 0.05;

/// The cap on a handshake that the evidence stretches, as a multiple of
/// its budget: at the default `connect_timeout` of 15 s, a minute.
pub const CAP_FACTOR: u32 = 4;

/// What a starting child shows of itself at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Life {
    /// CPU time of its process tree so far.
    pub cpu: Duration,
    /// Lines it has written to stderr so far.
    pub said: u64,
}

/// The handshake's deadline, moved by the evidence.
#[derive(Clone, Debug)]
pub struct Clock {
    /// Time the child may spend showing no life.
    budget: Duration,
    /// No evidence moves the deadline past this.
    cap: Instant,
    /// Time it has spent showing none so far.
    idle: Duration,
    /// The last sample, and when it was taken.
    last: (Instant, Life),
    /// Whether any interval so far showed life.
    stretched: bool,
}

impl Clock {
    /// A clock started at `now` on a child showing `life`: `budget` of
    /// silence, `cap` in all.
    pub fn new(budget: Duration, cap: Duration, now: Instant, life: Life) -> Clock {
        Clock {
            budget,
            cap: now + cap,
            idle: Duration::ZERO,
            last: (now, life),
            stretched: false,
        }
    }

    /// A clock with the stated cap: [`CAP_FACTOR`] times `budget`.
    pub fn capped(budget: Duration, now: Instant, life: Life) -> Clock {
        Clock::new(budget, budget * CAP_FACTOR, now, life)
    }

    /// Take the sample `life` at `now`: the time since the last sample
    /// counts against the budget unless the child used CPU or spoke in it.
    pub fn observe(&mut self, now: Instant, life: Life) {
        let (then, before) = self.last;
        let span = now.saturating_duration_since(then);
        let cpu = life.cpu.saturating_sub(before.cpu);
        let busy = !span.is_zero() && cpu.as_secs_f64() >= span.as_secs_f64() * MIN_CPU_SHARE;
        if busy || life.said > before.said {
            self.stretched = true;
        } else {
            self.idle += span;
        }
        self.last = (now, life);
    }

    /// When the handshake ends if the child shows no life from its last
    /// sample on.
    #[cfg(test)]
    pub fn deadline(&self) -> Instant {
        self.deadline_within(self.budget)
    }

    /// When a step allowed `limit` of the child's silence since the clock
    /// started (era detection's share) ends, if it shows none from now on.
    pub fn deadline_within(&self, limit: Duration) -> Instant {
        let left = limit.min(self.budget).saturating_sub(self.idle);
        (self.last.0 + left).min(self.cap)
    }

    /// Whether the evidence moved the deadline (the child was starting).
    pub fn stretched(&self) -> bool {
        self.stretched
    }

    /// The silence it was allowed, for the failure's words.
    pub fn budget(&self) -> Duration {
        self.budget
    }
}

/// Run `work` until it finishes, or until the child sampled by `life`
/// every [`SAMPLE_EVERY`] has been silent for `limit` in all on `clock`
/// (or the cap came); `None` when the deadline came first.
pub async fn within<T>(
    work: impl Future<Output = T>,
    clock: &mut Clock,
    limit: Duration,
    life: &mut (dyn FnMut() -> Life + Send),
) -> Option<T> {
    tokio::pin!(work);
    loop {
        let deadline = clock.deadline_within(limit);
        let next = (Instant::now() + SAMPLE_EVERY).min(deadline);
        tokio::select! {
            done = &mut work => return Some(done),
            () = tokio::time::sleep_until(next) => {}
        }
        let now = Instant::now();
        clock.observe(now, life());
        if now >= clock.deadline_within(limit) {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn only_time_without_life_counts_and_the_cap_holds() {
        let t0 = Instant::now();
        let mut c = Clock::new(10 * S, 40 * S, t0, Life::default());
        assert_eq!(c.deadline(), t0 + 10 * S);
        // Five seconds of a busy core: none of it counts.
        let busy = Life {
            cpu: 5 * S,
            said: 0,
        };
        c.observe(t0 + 5 * S, busy);
        assert_eq!(c.deadline(), t0 + 15 * S);
        assert!(c.stretched());
        // Two seconds idle count.
        c.observe(t0 + 7 * S, busy);
        assert_eq!(c.deadline(), t0 + 15 * S);
        // A line on stderr is life too.
        c.observe(
            t0 + 9 * S,
            Life {
                cpu: 5 * S,
                said: 1,
            },
        );
        assert_eq!(c.deadline(), t0 + 17 * S);
        // However busy, never past the cap.
        c.observe(
            t0 + 39 * S,
            Life {
                cpu: 35 * S,
                said: 1,
            },
        );
        assert_eq!(c.deadline(), t0 + 40 * S);
    }

    #[test]
    fn a_trickle_of_cpu_is_not_life() {
        let t0 = Instant::now();
        let mut c = Clock::new(10 * S, 40 * S, t0, Life::default());
        // 1 % of a core for 4 s: a process waiting on a timer.
        c.observe(
            t0 + 4 * S,
            Life {
                cpu: Duration::from_millis(40),
                said: 0,
            },
        );
        assert_eq!(c.deadline(), t0 + 10 * S);
        assert!(!c.stretched());
    }

    #[test]
    fn a_step_gets_its_share_of_the_silence_and_the_rest_is_left() {
        let t0 = Instant::now();
        let mut c = Clock::new(10 * S, 40 * S, t0, Life::default());
        assert_eq!(c.deadline_within(8 * S), t0 + 8 * S);
        c.observe(
            t0 + 3 * S,
            Life {
                cpu: 3 * S,
                said: 0,
            },
        );
        assert_eq!(c.deadline_within(8 * S), t0 + 11 * S);
        c.observe(
            t0 + 11 * S,
            Life {
                cpu: 3 * S,
                said: 0,
            },
        );
        assert_eq!(c.deadline_within(8 * S), t0 + 11 * S, "the share is spent");
        assert_eq!(c.deadline(), t0 + 13 * S, "2 s of silence are left");
    }

    /// A child's CPU, advancing while `busy` says so (paused time).
    fn cpu_while(busy: impl Fn(Duration) -> bool, t0: Instant) -> impl FnMut() -> Life {
        let used = Arc::new(AtomicU64::new(0));
        let mut last = t0;
        move || {
            let now = Instant::now();
            if busy(now - t0) {
                let span = (now - last).as_millis() as u64;
                used.fetch_add(span, Ordering::Relaxed);
            }
            last = now;
            Life {
                cpu: Duration::from_millis(used.load(Ordering::Relaxed)),
                said: 0,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_busy_for_40_s_gets_its_answer_in() {
        let t0 = Instant::now();
        let mut c = Clock::capped(15 * S, t0, Life::default());
        let answer = async {
            tokio::time::sleep(40 * S).await;
            "initialized"
        };
        let mut life = cpu_while(|at| at < 40 * S, t0);
        let limit = c.budget();
        assert_eq!(
            within(answer, &mut c, limit, &mut life).await,
            Some("initialized")
        );
        assert!(c.stretched());
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_that_stops_showing_life_fails_at_its_budget_of_silence() {
        let t0 = Instant::now();
        let mut c = Clock::capped(15 * S, t0, Life::default());
        let never = std::future::pending::<()>();
        // Busy for 10 s, then silent: 15 s of silence after that.
        let mut life = cpu_while(|at| at < 10 * S, t0);
        let limit = c.budget();
        assert_eq!(within(never, &mut c, limit, &mut life).await, None);
        // Silence is seen a sample at a time.
        let took = Instant::now() - t0;
        let (earliest, latest) = (25 * S - SAMPLE_EVERY, 25 * S + SAMPLE_EVERY);
        assert!(took >= earliest && took <= latest, "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_that_spins_forever_fails_at_the_cap() {
        let t0 = Instant::now();
        let mut c = Clock::capped(15 * S, t0, Life::default());
        let never = std::future::pending::<()>();
        let mut life = cpu_while(|_| true, t0);
        let limit = c.budget();
        assert_eq!(within(never, &mut c, limit, &mut life).await, None);
        assert_eq!(Instant::now() - t0, 60 * S);
    }
}
