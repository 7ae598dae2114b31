//! The owner on its messages: publishing, readiness, removal, and the
//! series it keeps.

use super::*;
use crate::probe::{FailureReason, ProbeKind};
use crate::state::Loss;
use crate::state::Reader;
use crate::state::testing::{add, answered, event, opened, spec};
use crate::transport::LinkFailure;
use State::*;
use tokio::sync::watch;

fn snap(states: &[State], policy: FleetPolicy) -> Snapshot {
    let mut servers = crate::state::servers::Servers::default();
    for (i, st) in states.iter().enumerate() {
        let t = Tracker::new(&spec(&format!("s{i}")), Instant::now());
        let mut status = t.status().clone();
        status.status = *st;
        let record = ServerRecord {
            status: Arc::new(status),
            series: Series::default(),
        };
        servers.insert(Arc::from(format!("s{i}").as_str()), Arc::new(record));
    }
    Snapshot {
        servers,
        policy,
        ready: true,
        generation: 1,
        discovery: Default::default(),
        counts: Default::default(),
    }
    .counted()
}

fn walked(o: &Owner) -> (usize, usize, usize, usize, usize) {
    let w = o.snap.clone().counted().counts;
    (w.total, w.healthy, w.degraded, w.unhealthy, w.unknown)
}

fn counted(o: &Owner) -> (usize, usize, usize, usize, usize) {
    let c = o.counts();
    (c.total, c.healthy, c.degraded, c.unhealthy, c.unknown)
}

#[test]
fn running_counts_match_a_full_walk_through_events_and_removals() {
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 4);
    let down = || Observation::Down {
        loss: Loss::Link(LinkFailure::Exited),
        detail: "gone".into(),
        was_open: true,
        said_why: false,
    };
    type Step<'a> = Box<dyn Fn(&mut Owner) + 'a>;
    let steps: Vec<Step<'_>> = vec![
        Box::new(|o| add(o, &spec("s0"), now)),
        Box::new(|o| add(o, &spec("s1"), now)),
        Box::new(|o| event(o, "s0", opened(), now)),
        Box::new(|o| add(o, &spec("s2"), now)),
        Box::new(|o| event(o, "s2", down(), now)),
        Box::new(|o| event(o, "s1", opened(), now)),
        Box::new(|o| event(o, "s0", down(), now)),
        Box::new(|o| {
            o.apply(Msg::Remove(Arc::from("s2")), now);
        }),
        Box::new(|o| {
            o.apply(Msg::Remove(Arc::from("absent")), now);
        }),
        Box::new(|o| event(o, "absent", opened(), now)),
        // Added again: a fresh record replaces the old one.
        Box::new(|o| add(o, &spec("s1"), now)),
        Box::new(|o| add(o, &spec("s3"), now)),
    ];
    for step in steps {
        step(&mut o);
        assert_eq!(counted(&o), walked(&o));
    }
    assert_eq!(counted(&o), (3, 0, 0, 1, 2));
}

#[test]
fn every_publish_has_a_new_generation() {
    let mut o = Owner::new(FleetPolicy::default(), 1);
    let a = o.publish();
    add(&mut o, &spec("a"), Instant::now());
    let b = o.publish();
    assert!(b.generation > a.generation);
    assert_eq!(b.servers.len(), 1);
    assert_eq!(a.servers.len(), 0, "a published snapshot never changes");
}

#[test]
fn counters_start_at_zero_and_count_once() {
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 1);
    add(&mut o, &spec("a"), now);
    let s = o.publish();
    let series = &s.servers["a"].series;
    assert!(series.probes.iter().all(|(_, n)| *n == 0));
    assert!(series.probes.iter().any(|(k, _)| *k == ProbeKind::Ping));
    assert!(
        series
            .reconnects
            .iter()
            .any(|(r, n)| *r == Reason::Exited && *n == 0)
    );
    event(&mut o, "a", opened(), now);
    event(
        &mut o,
        "a",
        Observation::Late(ProbeKind::Ping, Duration::from_secs(5)),
        now,
    );
    let late = crate::state::testing::failed(ProbeKind::Ping, FailureReason::Timeout);
    event(
        &mut o,
        "a",
        Observation::Probe {
            outcome: late,
            was_late: true,
        },
        now,
    );
    event(
        &mut o,
        "a",
        Observation::Probe {
            outcome: answered(ProbeKind::Ping, 3),
            was_late: false,
        },
        now,
    );
    let s = o.publish();
    let series = &s.servers["a"].series;
    let failures: u64 = series.probe_failures.iter().map(|(_, n)| n).sum();
    assert_eq!(failures, 1, "a late probe's timeout is counted once");
    let runs: u64 = series.probes.iter().map(|(_, n)| n).sum();
    assert_eq!(
        runs, 2,
        "a late run is counted when it turns late, not again"
    );
    assert_eq!(series.ping_duration.as_ref().map(|h| h.count), Some(1));
}

#[test]
fn a_published_snapshot_keeps_its_figures_while_the_owner_counts_on() {
    // The owner writes records the last snapshot still shares: every
    // write must copy, never reach into what was published.
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 1);
    add(&mut o, &spec("a"), now);
    event(&mut o, "a", opened(), now);
    let before = o.publish();
    event(
        &mut o,
        "a",
        Observation::Probe {
            outcome: answered(ProbeKind::Ping, 3),
            was_late: false,
        },
        now,
    );
    let after = o.publish();
    let pings = |s: &Snapshot| {
        let series = &s.servers["a"].series;
        let sent = series.probes.iter().find(|(k, _)| *k == ProbeKind::Ping);
        (
            sent.map(|(_, n)| *n),
            series.ping_duration.as_ref().map(|h| h.count),
        )
    };
    assert_eq!(pings(&before), (Some(0), None));
    assert_eq!(pings(&after), (Some(1), Some(1)));
    assert_eq!(before.servers["a"].status.response_time_ms, None);
    assert!(after.servers["a"].status.response_time_ms.is_some());
    assert_eq!(before.servers["a"].status.id, after.servers["a"].status.id);
}

#[test]
fn each_changed_tool_surface_is_counted_once_and_an_unchanged_one_not() {
    use crate::transport::tools::ToolSurface;
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 1);
    add(&mut o, &spec("a"), now);
    event(&mut o, "a", opened(), now);
    let listed = |names: &[&str]| Observation::Tools {
        tools: ToolSurface::from_json(
            (names.iter())
                .map(|n| serde_json::json!({"name": n, "inputSchema": {"type": "object"}})),
        ),
        health_check: false,
    };
    let changes = |o: &mut Owner| o.publish().servers["a"].series.tools_changes;
    event(&mut o, "a", listed(&["x"]), now);
    assert_eq!(changes(&mut o), 1, "none listed, then x");
    event(&mut o, "a", listed(&["x"]), now);
    assert_eq!(changes(&mut o), 1, "the same surface again");
    event(&mut o, "a", listed(&["x", "y"]), now);
    event(&mut o, "a", listed(&["y"]), now);
    assert_eq!(changes(&mut o), 3);
}

#[test]
fn a_stuck_session_is_handed_back_to_its_supervisor_once() {
    let t0 = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 1);
    let (tx, rx) = tokio::sync::watch::channel(0);
    o.apply(
        Msg::Add {
            spec: Arc::new(spec("a")),
            stuck: tx,
        },
        t0,
    );
    event(&mut o, "a", opened(), t0);
    event(
        &mut o,
        "a",
        Observation::Late(ProbeKind::Ping, Duration::from_secs(5)),
        t0 + Duration::from_secs(5),
    );
    assert_eq!(*rx.borrow(), 0);
    let later = t0 + Settings::default().stuck_after.0;
    event(&mut o, "a", Observation::Tick, later);
    assert_eq!(*rx.borrow(), 1, "session 1 must be rebuilt");
    let s = o.publish();
    assert_eq!(s.servers["a"].status.reason, Reason::Stuck);
}

#[test]
fn summary_counts_and_percentage() {
    let s = snap(
        &[Healthy, Healthy, Degraded, Unhealthy],
        FleetPolicy::default(),
    )
    .summary();
    assert_eq!(
        (s.total, s.healthy, s.degraded, s.unhealthy, s.unknown),
        (4, 2, 1, 1, 0)
    );
    assert_eq!(s.health_percentage, 50.0);
    let s = snap(&[Healthy, Healthy, Unhealthy], FleetPolicy::default()).summary();
    assert_eq!(s.health_percentage, 66.67);
}

#[test]
fn policy_decides_the_fleet_verdict() {
    let strict = FleetPolicy::default();
    assert_eq!(
        snap(&[Healthy, Healthy], strict.clone()).verdict(),
        (Healthy, true)
    );
    assert_eq!(
        snap(&[Healthy, Degraded], strict.clone()).verdict(),
        (Degraded, true)
    );
    assert_eq!(
        snap(&[Healthy, Unhealthy], strict.clone()).verdict(),
        (Unhealthy, false)
    );
    assert_eq!(
        snap(&[Unknown, Unknown], strict.clone()).verdict(),
        (Unknown, false)
    );
    assert_eq!(snap(&[], strict).verdict(), (Healthy, true));
    let half = FleetPolicy {
        min_available_percentage: 50.0,
        degraded_is_available: false,
    };
    assert_eq!(
        snap(&[Healthy, Unhealthy], half.clone()).verdict(),
        (Degraded, true)
    );
    assert_eq!(
        snap(&[Degraded, Degraded, Healthy], half).verdict(),
        (Unhealthy, false)
    );
}

/// The owner running on one opened server, past its readiness publish,
/// with a count of its wake-ups: the messages it is told and the
/// snapshots it publishes, and a reader that asks.
struct Counted {
    say: mpsc::Sender<Msg>,
    snaps: watch::Receiver<Arc<Snapshot>>,
    reader: Reader,
    polls: Arc<std::sync::atomic::AtomicUsize>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// How far behind a reader that cannot ask may be, as OTLP's export
/// interval sets it.
const EXPORT: Duration = Duration::from_secs(30);

/// The server's ping answered.
fn ping() -> Observation {
    Observation::Probe {
        outcome: answered(ProbeKind::Ping, 3),
        was_late: false,
    }
}

impl Counted {
    /// Started with `unasked` as [`Publisher::unasked`].
    async fn start(unasked: Option<Duration>) -> Counted {
        let (say, rx) = mpsc::channel(16);
        let (publisher, reader) = crate::state::reader::channel(unasked);
        let snaps = publisher.published.subscribe();
        let cancel = CancellationToken::new();
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut owner = Box::pin(run(
            rx,
            publisher,
            FleetPolicy::default(),
            1,
            Duration::from_millis(100),
            None,
            cancel.clone(),
        ));
        let counted = polls.clone();
        let task = tokio::spawn(std::future::poll_fn(move |cx| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            owner.as_mut().poll(cx)
        }));
        let (stuck, _) = watch::channel(0);
        let spec = Arc::new(spec("a"));
        let mut counted = Counted {
            say,
            snaps,
            reader,
            polls,
            cancel,
            task,
        };
        counted.tell(Msg::Add { spec, stuck }).await;
        counted.tell(Msg::Server("a".into(), opened())).await;
        // Past the readiness grace and its publish: nothing is due.
        tokio::time::sleep(Duration::from_secs(2)).await;
        counted.snaps.mark_unchanged();
        counted
    }

    /// The first ping answered: the first verdict, news, published.
    async fn judged(&mut self) {
        self.tell(Msg::Server("a".into(), ping())).await;
        tokio::time::timeout(PUBLISH_EVERY, self.snaps.changed())
            .await
            .expect("the first verdict published within the publish period")
            .expect("owner runs");
        self.snaps.mark_unchanged();
    }

    /// Whether nothing is published for the next `long`.
    async fn unpublished_for(&mut self, long: Duration) -> bool {
        tokio::time::timeout(long, self.snaps.changed())
            .await
            .is_err()
    }

    async fn tell(&mut self, msg: Msg) {
        self.say.send(msg).await.expect("owner runs");
    }

    fn polls(&self) -> usize {
        self.polls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Pings the published snapshot has counted as run and skipped.
    fn pings(&self) -> (u64, u64) {
        pings_in(&self.snaps.borrow())
    }

    /// The published reason of the one server.
    fn reason(&self) -> Option<Reason> {
        let snap = self.snaps.borrow();
        snap.servers.get("a").map(|r| r.status.reason)
    }

    /// Whether the owner stays asleep for the next `long`.
    async fn sleeps_through(&self, long: Duration) -> bool {
        let settled = self.polls();
        tokio::time::sleep(long).await;
        self.polls() == settled
    }

    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.expect("owner ends");
    }
}

/// Pings `snap` counts as run and skipped for the one server.
fn pings_in(snap: &Snapshot) -> (u64, u64) {
    let series = &snap.servers.get("a").expect("published").series;
    let ping = |c: &crate::state::series::Counters<ProbeKind>| {
        (c.iter())
            .find(|(k, _)| *k == ProbeKind::Ping)
            .map_or(0, |(_, n)| *n)
    };
    (ping(&series.probes), ping(&series.probes_skipped))
}

/// A probe is one message, its result, and it is not news: unasked it
/// waits (its record is not copied out of the owner's hands per probe),
/// and a reader's ask gets it at once. Nothing is left behind to wake the
/// owner after, the deadline for readers that cannot ask included. (A
/// probe's start was a message of its own once, and arming a timer for it
/// woke an idle runtime's parked driver about one probe in four.)
#[tokio::test(start_paused = true)]
async fn a_probe_is_published_when_read_and_leaves_no_wake_up_behind() {
    let mut owner = Counted::start(Some(EXPORT)).await;
    owner.judged().await;
    owner.tell(Msg::Server("a".into(), ping())).await;
    assert!(
        owner.unpublished_for(Duration::from_secs(1)).await,
        "a probe that changes no verdict was published unasked"
    );
    let read = owner.reader.current().await;
    assert_eq!(pings_in(&read), (2, 0), "the ask gets the probe");
    assert!(
        owner.snaps.has_changed().expect("owner runs"),
        "and publishes it"
    );
    assert_eq!(owner.pings(), (2, 0));
    assert!(
        owner.sleeps_through(EXPORT * 2).await,
        "the owner woke with nothing to do"
    );
    owner.stop().await;
}

/// News is published within [`PUBLISH_EVERY`] with nobody asking: a
/// session lost changes the server's reason (and its verdict, in time).
#[tokio::test(start_paused = true)]
async fn news_is_published_within_the_publish_period_unasked() {
    let mut owner = Counted::start(None).await;
    let down = Observation::Down {
        loss: Loss::Link(LinkFailure::Exited),
        detail: "gone".into(),
        was_open: true,
        said_why: false,
    };
    let before = owner.reason();
    owner.tell(Msg::Server("a".into(), down)).await;
    tokio::time::timeout(PUBLISH_EVERY, owner.snaps.changed())
        .await
        .expect("published within the publish period")
        .expect("owner runs");
    assert_ne!(owner.reason(), before);
    owner.stop().await;
}

/// With a reader that cannot ask, a probe's count unread is published
/// within the lag that reader allows.
#[tokio::test(start_paused = true)]
async fn an_unread_probe_is_published_within_the_lag_a_passive_reader_allows() {
    let mut owner = Counted::start(Some(EXPORT)).await;
    owner.judged().await;
    owner.tell(Msg::Server("a".into(), ping())).await;
    assert!(owner.unpublished_for(Duration::from_secs(1)).await);
    tokio::time::timeout(EXPORT, owner.snaps.changed())
        .await
        .expect("published within the lag")
        .expect("owner runs");
    assert_eq!(owner.pings(), (2, 0));
    owner.stop().await;
}

/// When every reader asks, a probe's count is published only when read:
/// the owner sleeps, and the record stays its own.
#[tokio::test(start_paused = true)]
async fn with_every_reader_asking_an_unread_probe_is_never_published() {
    let mut owner = Counted::start(None).await;
    owner.judged().await;
    owner.tell(Msg::Server("a".into(), ping())).await;
    assert!(owner.unpublished_for(Duration::from_secs(3600)).await);
    assert!(owner.sleeps_through(Duration::from_secs(3600)).await);
    let read = owner.reader.current().await;
    assert_eq!(pings_in(&read), (2, 0));
    owner.stop().await;
}

/// A skipped tick is not news either: with a reader that cannot ask, it
/// is published within that reader's lag, and the owner sleeps after.
#[tokio::test(start_paused = true)]
async fn a_skipped_tick_is_published_within_the_lag_a_passive_reader_allows() {
    let mut owner = Counted::start(Some(EXPORT)).await;
    owner
        .tell(Msg::Server(
            "a".into(),
            Observation::Skipped(ProbeKind::Ping),
        ))
        .await;
    tokio::time::timeout(EXPORT + Duration::from_millis(1), owner.snaps.changed())
        .await
        .expect("published within the lag")
        .expect("owner runs");
    assert_eq!(owner.pings(), (0, 1));
    assert!(owner.sleeps_through(Duration::from_secs(5)).await);
    owner.stop().await;
}
