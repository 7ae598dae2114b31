//! One task per server: open a session through its [`Connector`], schedule
//! the probes on their intervals, and report every observation to the state
//! owner as a typed [`Observation`]. It rebuilds the session with exponential
//! backoff when the transport dies, or when the owner judges it stuck.
//!
//! It never judges and never writes metrics: the owner does both, from
//! these events. At most one probe of each kind is in flight; a tick that
//! finds the previous probe still running is reported as skipped, never
//! stacked. Every request carries a deadline.

use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug};

use crate::config::ServerSpec;
use crate::probe::health_check::HealthCheckSpec;
use crate::probe::{self, FailureReason, ProbeKind, ProbeOutcome};
use crate::state::verdict::Reason;
use crate::state::{Msg, Observation};
use crate::transport::budget::BUDGET;
use crate::transport::{BoxFuture, Connector, Era, LinkFailure, Session};

/// How long each step of closing a session may take.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

type Running<'a> = BoxFuture<'a, ProbeOutcome>;

/// The liveness probe in flight. Past `late_at` it is reported late, but
/// kept: its answer, whenever it comes, is still evidence.
struct InFlight<'a> {
    fut: Running<'a>,
    late_at: Instant,
    late: bool,
}

/// Schedules of the synthetic tool probes, one call in flight per probe.
struct ToolProbes<'a> {
    due: Vec<Instant>,
    interval: Vec<Duration>,
    in_flight: Vec<bool>,
    calls: FuturesUnordered<BoxFuture<'a, (usize, ProbeOutcome)>>,
}

impl ToolProbes<'_> {
    fn new(probes: &[crate::config::ToolProbe]) -> Self {
        let now = Instant::now();
        ToolProbes {
            due: vec![now; probes.len()],
            interval: probes.iter().map(|p| p.interval).collect(),
            in_flight: vec![false; probes.len()],
            calls: FuturesUnordered::new(),
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.iter().min().copied()
    }

    /// Probes due at `now`, each rescheduled one interval later.
    fn due(&mut self, now: Instant) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, due) in self.due.iter_mut().enumerate() {
            if *due <= now {
                out.push(i);
                *due = now + self.interval[i];
            }
        }
        out
    }
}

/// Why a probe loop ended.
enum End {
    Shutdown,
    Lost(Reason, String),
}

/// One server's supervisor.
pub struct Supervisor {
    /// The server's id, shared by every event it sends.
    pub id: Arc<str>,
    /// The server.
    pub spec: Arc<ServerSpec>,
    /// Opens its sessions.
    pub connector: Arc<dyn Connector>,
    /// Where observations go.
    pub state: mpsc::Sender<Msg>,
    /// The owner's rebuild requests, by session number.
    pub stuck: watch::Receiver<u64>,
    /// Fires on shutdown or when this server is removed.
    pub cancel: CancellationToken,
    /// Turns to open a session, shared by every supervisor.
    pub admission: Arc<tokio::sync::Semaphore>,
}

impl Supervisor {
    /// Run until cancelled; closes its session before returning.
    pub async fn run(self) {
        let span = tracing::info_span!("server", server = %self.spec.id);
        self.run_inner().instrument(span).await;
    }

    async fn run_inner(mut self) {
        let spec = self.spec.clone();
        let s = &spec.settings;
        let backoff = backon::ExponentialBuilder::default()
            .with_min_delay(s.backoff_initial.0)
            .with_max_delay(s.backoff_max.0)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        let mut delays = backoff.build();
        let mut after: Option<Reason> = None;
        let mut era_hint: Option<Era> = None;
        let mut sessions: u64 = 0;
        loop {
            self.send(Observation::Connecting { after }).await;
            let (started, opened) = tokio::select! {
                _ = self.cancel.cancelled() => break,
                r = async {
                    // Waiting for a turn is not part of connect_timeout,
                    // nor of the handshake's time.
                    let _turn = self.admission.acquire().await;
                    (Instant::now(), self.connector.open(era_hint).await)
                } => r,
            };
            let reason = match opened {
                Err(e) => {
                    let reason = Reason::from(e.failure);
                    self.send(Observation::Down {
                        reason,
                        detail: e.to_string(),
                        was_open: false,
                    })
                    .await;
                    reason
                }
                Ok(session) => {
                    sessions += 1;
                    era_hint = session.remembered_era();
                    let (has_health, ttl) = self.opened(session.as_ref(), started).await;
                    let opened_at = Instant::now();
                    let relist = relist_after(ttl, &self.spec.settings);
                    let end = self
                        .probe_loop(session.as_ref(), has_health, relist, sessions)
                        .await;
                    session.close(CLOSE_GRACE).await;
                    match end {
                        End::Shutdown => {
                            self.send(Observation::Closed).await;
                            break;
                        }
                        End::Lost(reason, detail) => {
                            self.send(Observation::Down {
                                reason,
                                detail,
                                was_open: true,
                            })
                            .await;
                            if opened_at.elapsed() >= s.backoff_reset_after.0 {
                                delays = backoff.build();
                            }
                            reason
                        }
                    }
                }
            };
            after = Some(reason);
            let delay = delays
                .next()
                .unwrap_or(s.backoff_max.0)
                .min(s.backoff_max.0);
            debug!(
                delay_ms = delay.as_millis() as u64,
                "reconnecting after backoff"
            );
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        debug!("supervisor stopped");
    }

    /// List the tools of a new session and report it open; returns whether
    /// the health tool is listed, and how long the listing stays fresh.
    async fn opened(&self, session: &dyn Session, started: Instant) -> (bool, Option<Duration>) {
        let handshake = started.elapsed();
        let tools = match session
            .list_tools(self.spec.settings.request_timeout.0)
            .await
        {
            Ok(names) => Some(names),
            Err(e) => {
                // Not fatal: a server without tools is still monitored by liveness.
                debug!(error = %e, "tools/list failed");
                None
            }
        };
        let tool = &self.spec.settings.health_check_tool;
        let has_health = tools.as_ref().is_some_and(|t| t.names().any(|n| n == tool));
        let ttl = tools.as_ref().and_then(|t| t.ttl);
        self.send(Observation::Opened {
            era: session.era(),
            info: session.info().clone(),
            tools,
            handshake,
            health_check: has_health,
        })
        .await;
        (has_health, ttl)
    }

    async fn probe_loop(
        &mut self,
        session: &dyn Session,
        mut has_health: bool,
        relist: Duration,
        number: u64,
    ) -> End {
        let spec = self.spec.clone();
        let s = &spec.settings;
        let live_kind = probe::liveness::kind(session.era());
        // The first liveness probe goes at once: the session's first verdict
        // waits for it (the handshake is no liveness answer). Later ones
        // come every ping_interval, jittered (see `jittered`).
        let ping_due = tokio::time::sleep_until(Instant::now());
        tokio::pin!(ping_due);
        let mut pings: u64 = 0;
        let mut hc_tick = tokio::time::interval(s.health_check_interval.0);
        hc_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The session's opening listed the tools; list again when that
        // listing goes stale.
        let tools_due = tokio::time::sleep(relist);
        tokio::pin!(tools_due);
        let mut listing: Option<BoxFuture<'_, _>> = None;
        // A server's `list_changed` asks for a listing, but no sooner than
        // the budget allows after the last one: a storm of them is one
        // listing now and then, not a listing each.
        let mut listed_at = Instant::now();
        // /proc and progress are read at least once a second while they
        // matter: "stopped", "busy" and "stuck" must not wait for a ping.
        let mut evidence_tick =
            tokio::time::interval(s.ping_interval.0.min(Duration::from_secs(1)));
        evidence_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let hc_spec = HealthCheckSpec {
            tool: &s.health_check_tool,
            arguments: &s.health_check_arguments,
            max_fields: s.health_check_max_fields,
        };
        let mut ping: Option<InFlight<'_>> = None;
        let mut hc: Option<Running<'_>> = None;
        let mut tools = ToolProbes::new(&spec.tool_probes);
        let mut gone = session.gone();
        let stdio = session.process().is_some();
        // Until when the server asked not to be called (Retry-After).
        let mut hold_until: Option<Instant> = None;
        let mut credentials = None;
        // The futures that outlive a turn of the loop are made once: each
        // one made afresh registers and unregisters a waiter, twice a ping.
        let cancel = self.cancel.clone();
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let stuck = stuck_signal(self.stuck.clone(), number);
        tokio::pin!(stuck);
        let mut tools_changed = session.tools_changed();
        loop {
            let now_credentials = session.credentials();
            if now_credentials != credentials {
                credentials = now_credentials;
                self.send(Observation::Credentials(credentials)).await;
            }
            let held = hold_until.is_some_and(|h| Instant::now() < h);
            let late_at = ping.as_ref().filter(|p| !p.late).map(|p| p.late_at);
            let tool_due = tools.next_due();
            // Progress, silence and a child's CPU only matter while a
            // request is outstanding: an idle server, stdio or HTTP, costs
            // no wake-ups between probes. (A late ping samples on the spot;
            // a child's gauges are refreshed with every answer.)
            let watching =
                ping.as_ref().is_some_and(|p| p.late) || hc.is_some() || !tools.calls.is_empty();
            tokio::select! {
                _ = &mut cancelled => return End::Shutdown,
                exit = &mut gone => return End::Lost(Reason::from(session.death()), exit),
                judged = &mut stuck => {
                    // The owner outlives every supervisor; gone means shutdown.
                    if !judged {
                        return End::Shutdown;
                    }
                    return End::Lost(Reason::Stuck, format!("no answer or sign of life for {:?}", s.stuck_after.0));
                }
                _ = evidence_tick.tick(), if watching => {
                    if let Some(v) = session.violation() {
                        return End::Lost(Reason::from(v), "the server broke the session's limits".to_owned());
                    }
                    self.evidence(session).await;
                }
                _ = &mut ping_due => {
                    pings += 1;
                    ping_due
                        .as_mut()
                        .reset(Instant::now() + jittered(s.ping_interval.0, &spec.id, pings));
                    if ping.is_some() || held {
                        // Never pile pings up: the one in flight is still
                        // evidence, and one more interval without its answer
                        // is one more judgement.
                        self.send(Observation::Skipped(live_kind)).await;
                    } else {
                        self.send(Observation::Sent(live_kind)).await;
                        // The request may stay in flight past `stuck_after`:
                        // the owner judges stuck from silence, and the answer
                        // must never race that judgement.
                        ping = Some(InFlight {
                            fut: Box::pin(probe::liveness::run(session, s.stuck_after.0 * 2)),
                            late_at: Instant::now() + s.ping_timeout.0,
                            late: false,
                        });
                    }
                }
                _ = async { tokio::time::sleep_until(late_at.expect("guarded")).await }, if late_at.is_some() => {
                    if let Some(p) = ping.as_mut() {
                        p.late = true;
                    }
                    // Fresh evidence first: is it working or gone quiet?
                    self.evidence(session).await;
                    self.send(Observation::Late(live_kind, s.ping_timeout.0)).await;
                }
                outcome = async { (&mut ping.as_mut().expect("guarded").fut).await }, if ping.is_some() => {
                    let was_late = ping.take().is_some_and(|p| p.late);
                    if stdio {
                        // The child's CPU and memory, at the ping's pace.
                        self.evidence(session).await;
                    }
                    let lost = outcome.link_lost().then(|| refusal(&outcome));
                    if let Some(wait) = hold_for(&outcome) {
                        hold_until = Some(Instant::now() + wait);
                    }
                    let detail = failure_detail(&outcome);
                    self.send(Observation::Probe { outcome, was_late }).await;
                    if let Some(refused) = lost {
                        return link_lost(session, detail, refused).await;
                    }
                }
                _ = &mut tools_due, if listing.is_none() => {
                    listed_at = Instant::now();
                    listing = Some(session.list_tools(s.request_timeout.0));
                }
                _ = &mut tools_changed, if listing.is_none() => {
                    tools_changed = session.tools_changed();
                    let soonest = listed_at + BUDGET.relist_every;
                    if Instant::now() >= soonest {
                        listed_at = Instant::now();
                        listing = Some(session.list_tools(s.request_timeout.0));
                    } else if tools_due.deadline() > soonest {
                        tools_due.as_mut().reset(soonest);
                    }
                }
                listed = async { listing.as_mut().expect("guarded").await }, if listing.is_some() => {
                    listing = None;
                    match listed {
                        Ok(tools) => {
                            let relist = jittered(relist_after(tools.ttl, s), &spec.id, pings);
                            tools_due.as_mut().reset(Instant::now() + relist);
                            has_health = tools.names().any(|n| n == s.health_check_tool);
                            self.send(Observation::Tools { tools, health_check: has_health }).await;
                        }
                        // Liveness judges the session; a failed listing is only not news.
                        Err(e) => {
                            tools_due.as_mut().reset(Instant::now() + s.tools_interval.0);
                            debug!(error = %e, "tools/list failed");
                        }
                    }
                }
                _ = hc_tick.tick(), if has_health => {
                    if hc.is_some() || held {
                        self.send(Observation::Skipped(ProbeKind::HealthCheck)).await;
                    } else {
                        self.send(Observation::Sent(ProbeKind::HealthCheck)).await;
                        hc = Some(Box::pin(probe::health_check::run(session, &hc_spec, s.health_check_timeout.0)));
                    }
                }
                outcome = async { hc.as_mut().expect("guarded").await }, if hc.is_some() => {
                    hc = None;
                    let lost = outcome.link_lost().then(|| refusal(&outcome));
                    if let Some(wait) = hold_for(&outcome) {
                        hold_until = Some(Instant::now() + wait);
                    }
                    let detail = failure_detail(&outcome);
                    self.send(Observation::Probe { outcome, was_late: false }).await;
                    if let Some(refused) = lost {
                        return link_lost(session, format!("health_check: {detail}"), refused).await;
                    }
                }
                _ = async { tokio::time::sleep_until(tool_due.expect("guarded")).await }, if tool_due.is_some() => {
                    for i in tools.due(Instant::now()) {
                        if tools.in_flight[i] || held {
                            self.send(Observation::Skipped(ProbeKind::Tool)).await;
                            continue;
                        }
                        self.send(Observation::Sent(ProbeKind::Tool)).await;
                        tools.in_flight[i] = true;
                        let p = &spec.tool_probes[i];
                        tools.calls.push(Box::pin(async move {
                            (i, probe::tool::run(session, p, p.request_timeout).await)
                        }));
                    }
                }
                Some((i, outcome)) = tools.calls.next(), if !tools.calls.is_empty() => {
                    tools.in_flight[i] = false;
                    let lost = outcome.link_lost().then(|| refusal(&outcome));
                    if let Some(wait) = hold_for(&outcome) {
                        hold_until = Some(Instant::now() + wait);
                    }
                    let detail = failure_detail(&outcome);
                    if outcome.result.is_err() {
                        tracing::info!(tool = %spec.tool_probes[i].tool, took_ms = outcome.duration.as_millis() as u64, error = %spec.scrubber.scrub(&detail), "tool probe failed");
                    }
                    self.send(Observation::Probe { outcome, was_late: false }).await;
                    if let Some(refused) = lost {
                        return link_lost(session, format!("tool {}: {detail}", spec.tool_probes[i].tool), refused).await;
                    }
                }
            }
        }
    }

    /// Report the process tree and progress, the evidence that is not an answer.
    async fn evidence(&self, session: &dyn Session) {
        if let Some(sample) = session.process() {
            self.send(Observation::Process(sample)).await;
        }
        self.send(Observation::Progress(session.progress())).await;
    }

    async fn send(&self, event: Observation) {
        // The owner outlives every supervisor; a closed channel means shutdown.
        let _ = self.state.send(Msg::Server(self.id.clone(), event)).await;
    }
}

/// Resolves `true` when the owner judges session `number` stuck, `false`
/// when the owner is gone (shutdown).
async fn stuck_signal(mut rx: tokio::sync::watch::Receiver<u64>, number: u64) -> bool {
    loop {
        if rx.changed().await.is_err() {
            return false;
        }
        if *rx.borrow_and_update() == number {
            return true;
        }
    }
}

/// How long a probe that saw a stdio pipe close waits for the process's
/// exit and its last words, so the detail names them ("exited with code 1;
/// stderr: «…»").
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// A probe saw the link die.
/// When to list the tools again: when the server says the listing goes
/// stale (`ttlMs`, 2026-07-28), no sooner than a ping interval (at least a
/// second) and no later than an hour; without one, every `tools_interval`.
pub(super) fn relist_after(ttl: Option<Duration>, s: &crate::config::Settings) -> Duration {
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
fn hold_for(o: &ProbeOutcome) -> Option<Duration> {
    let f = o.result.as_ref().err()?;
    if f.reason != FailureReason::Throttled {
        return None;
    }
    Some(f.retry_after?.min(MAX_HOLD))
}

/// The verdict reason of a probe refused for its credentials: the session
/// ends on it, and the refusal (not the transport) is why.
fn refusal(o: &ProbeOutcome) -> Option<Reason> {
    match o.result.as_ref().err()?.reason {
        FailureReason::Unauthenticated => Some(Reason::Unauthenticated),
        FailureReason::Forbidden => Some(Reason::Forbidden),
        _ => None,
    }
}

async fn link_lost(session: &dyn Session, detail: String, refused: Option<Reason>) -> End {
    if let Some(reason) = refused {
        return End::Lost(reason, detail);
    }
    let death = session.death();
    if death == LinkFailure::Exited
        && let Ok(exit) = tokio::time::timeout(EXIT_GRACE, session.gone()).await
    {
        return End::Lost(Reason::Exited, exit);
    }
    End::Lost(Reason::from(death), detail)
}

fn failure_detail(o: &ProbeOutcome) -> String {
    match &o.result {
        Err(f) => f.detail.clone(),
        Ok(_) => String::new(),
    }
}

/// `period`, give or take a tenth, different for each server and each
/// turn `n` (and the same for the same ones, so runs repeat). The 2026-07-28
/// caching rules ask a client that polls for jitter; without it a fleet
/// opened together, or reconnected together after an outage, stays in step
/// and pings in the same millisecond ever after.
pub(super) fn jittered(period: Duration, id: &str, n: u64) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (id, n).hash(&mut h);
    // A fraction in [0, 1) from the hash's top 24 bits.
    let fraction = (h.finish() >> 40) as f64 / f64::from(1u32 << 24);
    period.mul_f64(0.9 + 0.2 * fraction)
}
