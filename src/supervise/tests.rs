//! The supervisor and the state owner together, against scripted fake
//! sessions, under paused time: what docs/verdict.md promises about busy, stuck
//! and dead servers, proven in milliseconds of real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::server::Supervisor;
use crate::config::{Dur, FleetPolicy, ServerSpec};
use crate::state::testing::spec;
use crate::state::verdict::{Reason, State};
use crate::state::{Msg, owner};
use crate::transport::fake::{FakeConnector, Open, Reply, Script};
use crate::transport::{Connector, LinkFailure};

const PING_INTERVAL: Duration = Duration::from_secs(2);
const PING_TIMEOUT: Duration = Duration::from_secs(1);
const STUCK_AFTER: Duration = Duration::from_secs(10);
/// When scripted faults begin; the server is healthy before.
const FAULT_AT: Duration = Duration::from_secs(10);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn server_spec() -> ServerSpec {
    let mut s = spec("s");
    let t = &mut s.settings;
    t.ping_interval = Dur(PING_INTERVAL);
    t.ping_timeout = Dur(PING_TIMEOUT);
    t.stuck_after = Dur(STUCK_AFTER);
    t.backoff_initial = Dur(secs(1));
    t.backoff_max = Dur(secs(2));
    s
}

/// One server under a supervisor, its owner, and a clock to read them by.
struct Harness {
    snaps: crate::state::Reader,
    start: Instant,
    attempts: Arc<AtomicU64>,
    cancel: CancellationToken,
}

impl Harness {
    fn start(spec: ServerSpec, script: Script) -> Harness {
        let start = Instant::now();
        let (tx, rx) = mpsc::channel(1024);
        let (snap_tx, snaps) = crate::state::reader::channel(None);
        let cancel = CancellationToken::new();
        tokio::spawn(owner::run(
            rx,
            snap_tx,
            FleetPolicy::default(),
            1,
            secs(60),
            None,
            cancel.child_token(),
        ));
        let connector = FakeConnector::new(script);
        let attempts = connector.attempts();
        let spec = Arc::new(spec);
        let (stuck_tx, stuck_rx) = watch::channel(0);
        // Sent before the supervisor exists, so the owner knows the server first.
        tx.try_send(Msg::Add {
            spec: spec.clone(),
            stuck: stuck_tx,
        })
        .expect("room for the first message");
        let sup = Supervisor {
            id: Arc::from(spec.id.as_str()),
            probes: super::server::probes_of(&spec, &tx),
            spec,
            connector: Arc::new(connector) as Arc<dyn Connector>,
            state: tx,
            stuck: stuck_rx,
            cancel: cancel.child_token(),
            admission: Arc::new(tokio::sync::Semaphore::new(4)),
        };
        tokio::spawn(sup.run());
        Harness {
            snaps,
            start,
            attempts,
            cancel,
        }
    }

    /// The published state and reason at `t` since the start.
    async fn at(&self, t: Duration) -> (State, Reason) {
        tokio::time::sleep_until(self.start + t).await;
        let snap = self.snaps.current().await;
        snap.servers
            .get("s")
            .map_or((State::Unknown, Reason::Starting), |r| {
                (r.status.status, r.status.reason)
            })
    }

    /// Every published (state, reason) from `from` to `to`, sampled each 100 ms.
    async fn timeline(&self, from: Duration, to: Duration) -> Vec<(Duration, State, Reason)> {
        let mut out = Vec::new();
        let mut t = from;
        while t <= to {
            let (s, r) = self.at(t).await;
            out.push((t, s, r));
            t += Duration::from_millis(100);
        }
        out
    }

    fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[tokio::test(start_paused = true)]
async fn a_prompt_server_is_healthy_and_stays_so() {
    let h = Harness::start(server_spec(), Script::healthy());
    let line = h.timeline(Duration::from_millis(500), secs(60)).await;
    assert!(
        line.iter()
            .all(|(_, s, r)| (*s, *r) == (State::Healthy, Reason::Ok)),
        "{line:?}"
    );
    assert_eq!(h.attempts(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_idle_stdio_server_is_sampled_at_the_pings_pace_not_every_second() {
    let mut spec = server_spec();
    spec.settings.ping_interval = Dur(secs(10));
    spec.settings.ping_timeout = Dur(secs(5));
    spec.settings.stuck_after = Dur(secs(60));
    let samples = Arc::new(AtomicU64::new(0));
    let counted = samples.clone();
    let mut script = Script::healthy();
    script.cpu = Arc::new(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        Duration::ZERO
    });
    let h = Harness::start(spec, script);
    assert_eq!(h.at(secs(5)).await, (State::Healthy, Reason::Ok));
    let before = samples.load(Ordering::SeqCst);
    h.at(secs(65)).await;
    let during = samples.load(Ordering::SeqCst) - before;
    // One per answered ping (6 in 60 s), and one around each health check
    // (every 30 s); a once-a-second tick would be 60.
    assert!(
        (5..=12).contains(&during),
        "{during} /proc samples in 60 s of idle"
    );
    assert_eq!(h.at(secs(66)).await, (State::Healthy, Reason::Ok));
}

#[tokio::test(start_paused = true)]
async fn blocked_for_six_seconds_reads_healthy_within_rise_pings_of_the_block_ending() {
    // Another client's CPU-bound call blocks the server's event loop from
    // 10 s to 16 s: pings sent meanwhile are answered when it ends.
    let (from, to) = (secs(10), secs(16));
    let mut script = Script::healthy();
    script.liveness = Arc::new(move |t| {
        if t >= from && t < to {
            Reply::At(to)
        } else {
            Reply::After(Duration::from_millis(1))
        }
    });
    let spec = server_spec();
    let rise = spec.settings.rise;
    let h = Harness::start(spec, script);
    let during = h.timeline(from, to).await;
    assert!(
        during.iter().any(|(_, s, _)| *s == State::Degraded),
        "the block is visible while it lasts: {during:?}"
    );
    let bound = to + PING_INTERVAL * rise + secs(1);
    let after = h.timeline(to, bound).await;
    let (t, s, r) = *after.last().expect("samples");
    assert_eq!((s, r), (State::Healthy, Reason::Ok), "at {t:?}: {after:?}");
    // And it stays healthy: the episode is over, the window does not hold it.
    let later = h.timeline(bound, bound + secs(120)).await;
    assert!(
        later.iter().all(|(_, s, _)| *s == State::Healthy),
        "{later:?}"
    );
    assert_eq!(h.attempts(), 1, "never reconnected");
}

#[tokio::test(start_paused = true)]
async fn one_timeout_never_holds_a_server_degraded() {
    let mut script = Script::healthy();
    // One ping, sent between 10 s and 12 s, is answered after 3 s: late.
    script.liveness = Arc::new(|t| {
        if t >= secs(10) && t < secs(12) {
            Reply::After(secs(3))
        } else {
            Reply::After(Duration::from_millis(1))
        }
    });
    let h = Harness::start(server_spec(), script);
    let during = h.timeline(secs(10), secs(16)).await;
    assert!(
        during.iter().any(|(_, _, r)| *r == Reason::Unresponsive),
        "the late ping is visible while it lasts: {during:?}"
    );
    // From then on prompt answers, and the state must be healthy long
    // before the 5 min window ends.
    let line = h.timeline(secs(30), secs(90)).await;
    assert!(
        line.iter()
            .all(|(_, s, r)| (*s, *r) == (State::Healthy, Reason::Ok)),
        "{line:?}"
    );
    assert_eq!(h.attempts(), 1);
}

/// How the scripted server answers once the fault begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answers {
    Prompt,
    /// After 4 s: later than the ping timeout, sooner than stuck_after.
    Late,
    Never,
    Errors,
}

/// Signs of life while it does not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    None,
    Cpu,
    Progress,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    answers: Answers,
    life: Life,
    stopped: bool,
    crash: bool,
}

const CRASH_AT: Duration = Duration::from_secs(25);

fn script(c: Case) -> Script {
    let mut s = Script::healthy();
    let faulty = move |t: Duration| t >= FAULT_AT;
    let stopped = c.stopped;
    s.stopped = Arc::new(move |t| stopped && faulty(t));
    s.liveness = Arc::new(move |t| {
        if !faulty(t) {
            return Reply::After(Duration::from_millis(1));
        }
        if stopped {
            return Reply::Never;
        }
        match c.answers {
            Answers::Prompt => Reply::After(Duration::from_millis(1)),
            Answers::Late => Reply::After(secs(4)),
            Answers::Never => Reply::Never,
            Answers::Errors => Reply::ErrorAfter(Duration::from_millis(1)),
        }
    });
    let busy = move |t: Duration| !stopped && faulty(t);
    match c.life {
        Life::None => {}
        Life::Cpu => {
            s.cpu = Arc::new(move |t| {
                if busy(t) {
                    t - FAULT_AT
                } else {
                    Duration::ZERO
                }
            });
        }
        Life::Progress => {
            s.progress = Arc::new(move |t| {
                if busy(t) {
                    (t - FAULT_AT).as_secs() + 1
                } else {
                    0
                }
            });
        }
    }
    if c.crash {
        s.crash_at = Some(CRASH_AT);
    }
    s
}

/// What docs/verdict.md promises for a case, checked on its timeline.
fn check(c: Case, line: &[(Duration, State, Reason)], attempts: u64) {
    let after = |t: Duration| line.iter().filter(move |(at, _, _)| *at >= t);
    let before = |t: Duration| line.iter().filter(move |(at, _, _)| *at < t);
    let never_unhealthy =
        |w: &[(Duration, State, Reason)]| w.iter().all(|(_, s, _)| *s != State::Unhealthy);
    // Before the fault, every case is a healthy server.
    assert!(
        before(FAULT_AT).all(|(_, s, _)| *s == State::Healthy),
        "{c:?}: {line:?}"
    );
    let crash_seen = CRASH_AT + Duration::from_millis(300);
    if c.crash {
        // Transport death is definitive, whatever else the evidence says.
        let (_, s, r) = *after(crash_seen).next().expect("sample");
        assert_eq!(
            (s, r),
            (State::Unhealthy, Reason::Exited),
            "{c:?}: {line:?}"
        );
    }
    // What the fault leads to before any crash.
    let window: Vec<_> = line
        .iter()
        .filter(|(t, _, _)| *t >= FAULT_AT && (!c.crash || *t < CRASH_AT))
        .copied()
        .collect();
    let last = window.last().copied().expect("samples");
    if c.stopped {
        assert!(
            window
                .iter()
                .any(|(_, s, r)| (*s, *r) == (State::Unhealthy, Reason::Stopped)),
            "{c:?}: {window:?}"
        );
        if !c.crash {
            assert_eq!(attempts, 1, "{c:?}: a stopped process is not restarted");
        }
        return;
    }
    match (c.answers, c.life) {
        (Answers::Prompt, _) => {
            assert!(
                window.iter().all(|(_, s, _)| *s == State::Healthy),
                "{c:?}: {window:?}"
            );
        }
        (Answers::Errors, _) => {
            assert_eq!(
                (last.1, last.2),
                (State::Unhealthy, Reason::Errors),
                "{c:?}: {window:?}"
            );
        }
        (Answers::Late, life) => {
            // Lateness alone never makes a live server unhealthy.
            assert!(never_unhealthy(&window), "{c:?}: {window:?}");
            assert_eq!(last.1, State::Degraded, "{c:?}: {window:?}");
            if life != Life::None {
                assert!(
                    window.iter().any(|(_, _, r)| *r == Reason::Busy),
                    "{c:?}: {window:?}"
                );
            }
        }
        (Answers::Never, Life::Cpu | Life::Progress) => {
            assert!(never_unhealthy(&window), "{c:?}: {window:?}");
            assert_eq!(
                (last.1, last.2),
                (State::Degraded, Reason::Busy),
                "{c:?}: {window:?}"
            );
            if !c.crash {
                assert_eq!(attempts, 1, "{c:?}: a busy server is never rebuilt");
            }
        }
        (Answers::Never, Life::None) => {
            // Silent past stuck_after: stuck, definitive, and rebuilt.
            let stuck_by = FAULT_AT + STUCK_AFTER + PING_INTERVAL + secs(1);
            assert!(
                window.iter().any(
                    |(t, s, r)| *t <= stuck_by && (*s, *r) == (State::Unhealthy, Reason::Stuck)
                ),
                "{c:?}: {window:?}"
            );
            assert!(attempts >= 2, "{c:?}: a stuck session is rebuilt");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_busy_stuck_dead_matrix() {
    let mut cases = Vec::new();
    for answers in [
        Answers::Prompt,
        Answers::Late,
        Answers::Never,
        Answers::Errors,
    ] {
        for life in [Life::None, Life::Cpu, Life::Progress] {
            for stopped in [false, true] {
                for crash in [false, true] {
                    cases.push(Case {
                        answers,
                        life,
                        stopped,
                        crash,
                    });
                }
            }
        }
    }
    assert_eq!(cases.len(), 48);
    for c in cases {
        let h = Harness::start(server_spec(), script(c));
        let line = h.timeline(Duration::from_millis(500), secs(40)).await;
        check(c, &line, h.attempts());
    }
}

#[test]
fn tools_are_listed_again_when_the_server_says_they_go_stale() {
    use super::schedule::relist_after;
    let mut s = crate::config::Settings::default();
    s.ping_interval.0 = Duration::from_secs(10);
    assert_eq!(relist_after(None, &s), s.tools_interval.0);
    assert_eq!(
        relist_after(Some(Duration::from_secs(90)), &s),
        Duration::from_secs(90)
    );
    // Never more often than pings, never less often than hourly.
    assert_eq!(
        relist_after(Some(Duration::ZERO), &s),
        Duration::from_secs(10)
    );
    assert_eq!(
        relist_after(Some(Duration::from_secs(86_400)), &s),
        Duration::from_secs(3600)
    );
}

/// A connector on a crowded machine: a handshake that takes `base` alone
/// takes `base` times the handshakes running beside it over two cores, and
/// fails at `timeout` if it has not finished (as `connect_timeout` does).
struct Crowded {
    inner: FakeConnector,
    base: Duration,
    timeout: Duration,
    running: Arc<std::sync::atomic::AtomicUsize>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
}

impl Connector for Crowded {
    fn open(
        &self,
        hint: Option<crate::transport::Era>,
    ) -> crate::transport::BoxFuture<
        '_,
        Result<Box<dyn crate::transport::Session>, crate::transport::OpenError>,
    > {
        Box::pin(async move {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            let takes = self.base.mul_f64((now as f64 / 2.0).max(1.0));
            tokio::time::sleep(takes.min(self.timeout)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            if takes > self.timeout {
                return Err(crate::transport::OpenError::new(
                    crate::transport::LinkFailure::HandshakeFailed,
                    "handshake",
                    format!("no handshake within {:?}", self.timeout),
                ));
            }
            self.inner.open(hint).await
        })
    }
}

/// 40 servers whose handshakes take 2 s each on a crowded machine, opened
/// together with `concurrency` handshakes at a time: how many ever read
/// `handshake_failed`, how many are healthy after `settle`, and the most
/// handshakes that ran at once.
async fn herd(concurrency: usize, settle: Duration) -> (usize, usize, usize) {
    let yaml: String = (0..40)
        .map(|i| format!("  - {{ id: s{i}, transport: stdio, command: x }}\n"))
        .collect();
    let config = crate::config::parse(
        std::path::Path::new("/f.yaml"),
        &format!("global: {{ connect_timeout: 15s, ping_interval: 2s, ping_timeout: 1s }}\nservers:\n{yaml}"),
        &|_| None,
    )
    .expect("valid");
    let (tx, rx) = mpsc::channel(4096);
    let (snap_tx, snaps) = crate::state::reader::channel(None);
    let cancel = CancellationToken::new();
    tokio::spawn(owner::run(
        rx,
        snap_tx,
        FleetPolicy::default(),
        40,
        secs(60),
        None,
        cancel.child_token(),
    ));
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let make: super::reconcile::MakeConnector = {
        let (running, peak) = (running.clone(), peak.clone());
        Arc::new(move |_spec: &ServerSpec| {
            Arc::new(Crowded {
                inner: FakeConnector::new(Script::healthy()),
                base: secs(2),
                timeout: secs(15),
                running: running.clone(),
                peak: peak.clone(),
            }) as Arc<dyn Connector>
        })
    };
    let mut sups = super::Supervisors::with_connector(make, tx, cancel.child_token())
        .with_handshakes(concurrency);
    sups.apply(&config, secs(5)).await;
    tokio::time::sleep(settle).await;
    let snap = snaps.current().await;
    let failed = snap
        .servers
        .values()
        .filter(|r| {
            r.status
                .events
                .iter()
                .any(|e| e.reason == Reason::HandshakeFailed)
        })
        .count();
    let healthy = snap
        .servers
        .values()
        .filter(|r| r.status.status == State::Healthy)
        .count();
    cancel.cancel();
    (failed, healthy, peak.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn forty_slow_handshakes_four_at_a_time_all_open_within_their_timeout() {
    // Four at a time, each takes 4 s: ten turns, all within 15 s of their own.
    let (failed, healthy, peak) = herd(4, secs(60)).await;
    assert_eq!((failed, healthy), (0, 40));
    assert_eq!(peak, 4);
    // All at once, each would take 40 s: the herd the admission prevents.
    let (failed, _, peak) = herd(40, secs(30)).await;
    assert_eq!(peak, 40);
    assert!(failed > 0, "the crowded connector must be able to fail");
}

#[tokio::test(start_paused = true)]
async fn a_three_second_handshake_never_reads_slow() {
    let slow_start = Crowded {
        inner: FakeConnector::new(Script::healthy()),
        base: secs(3),
        timeout: secs(15),
        running: Default::default(),
        peak: Default::default(),
    };
    let start = Instant::now();
    let (tx, rx) = mpsc::channel(1024);
    let (snap_tx, snaps) = crate::state::reader::channel(None);
    let cancel = CancellationToken::new();
    tokio::spawn(owner::run(
        rx,
        snap_tx,
        FleetPolicy::default(),
        1,
        secs(60),
        None,
        cancel.child_token(),
    ));
    let spec = Arc::new(server_spec());
    let (stuck_tx, stuck_rx) = watch::channel(0);
    tx.try_send(Msg::Add {
        spec: spec.clone(),
        stuck: stuck_tx,
    })
    .expect("room");
    tokio::spawn(
        Supervisor {
            id: Arc::from("s"),
            probes: super::server::probes_of(&spec, &tx),
            spec,
            connector: Arc::new(slow_start),
            state: tx,
            stuck: stuck_rx,
            cancel: cancel.child_token(),
            admission: Arc::new(tokio::sync::Semaphore::new(4)),
        }
        .run(),
    );
    let mut seen = Vec::new();
    while start.elapsed() < secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let snap = snaps.current().await;
        if let Some(r) = snap.servers.get("s") {
            let now = (r.status.status, r.status.reason);
            if seen.last() != Some(&now) {
                seen.push(now);
            }
        }
    }
    assert_eq!(
        seen,
        [
            (State::Unknown, Reason::Starting),
            (State::Healthy, Reason::Ok)
        ],
        "nothing between unknown and the first healthy"
    );
    cancel.cancel();
}

/// A server's first handshake fails without its saying why (a slow start
/// on a crowded machine), the second works: `starting` throughout, then
/// healthy, never unhealthy on the way.
#[tokio::test(start_paused = true)]
async fn a_first_failed_handshake_then_a_working_one_never_reads_unhealthy() {
    let script = Script {
        opens: vec![Open::Fail(LinkFailure::HandshakeFailed), Open::Ok],
        ..Script::healthy()
    };
    let h = Harness::start(server_spec(), script);
    let line = h.timeline(Duration::ZERO, secs(6)).await;
    assert!(
        line.iter().all(|(_, s, _)| *s != State::Unhealthy),
        "{line:?}"
    );
    let (t, ..) = line
        .iter()
        .find(|(_, s, _)| *s == State::Healthy)
        .unwrap_or_else(|| panic!("never healthy: {line:?}"));
    assert!(
        line.iter()
            .filter(|(at, ..)| at < t)
            .all(|(_, s, r)| *s == State::Unknown && *r == Reason::Starting),
        "{line:?}"
    );
    assert_eq!(h.attempts(), 2);
}

/// Every handshake fails without words: the first is no verdict, the
/// second is.
#[tokio::test(start_paused = true)]
async fn handshakes_that_keep_failing_read_unhealthy_at_the_second() {
    let script = Script {
        opens: vec![Open::Fail(LinkFailure::HandshakeFailed)],
        ..Script::healthy()
    };
    let h = Harness::start(server_spec(), script);
    assert_eq!(
        h.at(Duration::from_millis(500)).await,
        (State::Unknown, Reason::Starting)
    );
    assert_eq!(h.attempts(), 1);
    assert_eq!(
        h.at(secs(3)).await,
        (State::Unhealthy, Reason::HandshakeFailed)
    );
    assert!(h.attempts() >= 2);
}

/// A fleet whose sessions opened together is spread over a whole period
/// by the run after the first: each tenth of [0.5, 1.5) periods holds
/// about a tenth of 10 000 servers. Later runs stay a tenth either way
/// of the period.
#[test]
fn the_run_after_the_first_spreads_a_fleet_over_the_period() {
    use super::schedule::next_run;
    let period = Duration::from_secs(10);
    let mut tenths = [0u32; 10];
    for i in 0..10_000 {
        let id = format!("server-{i}");
        let second = next_run(period, &id, 1).as_secs_f64() / period.as_secs_f64();
        assert!((0.5..1.5).contains(&second), "{id}: {second}");
        tenths[((second - 0.5) * 10.0) as usize] += 1;
        for n in 2..5 {
            let later = next_run(period, &id, n).as_secs_f64() / period.as_secs_f64();
            assert!((0.9..1.1).contains(&later), "{id} run {n}: {later}");
        }
    }
    assert!(
        tenths.iter().all(|&c| (800..1200).contains(&c)),
        "{tenths:?}"
    );
}
