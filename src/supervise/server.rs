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
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug};

use super::schedule::{Clocks, InFlight, Running, ToolProbes, relist_after};
use crate::config::{ServerSpec, TransportSpec};
use crate::probe::health_check::HealthCheckSpec;
use crate::probe::{self, FailureReason, ProbeKind, ProbeOutcome};
use crate::state::verdict::Reason;
use crate::state::{Msg, Observation};
use crate::transport::tools::ToolSurface;
use crate::transport::{
    BoxFuture, Connector, Credentials, Era, LinkFailure, RequestError, Session,
};

/// How long each step of closing a session may take.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

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
        let mut last_certificate = None;
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
            // Even a refused certificate's date is news.
            if let Some(c) = self.connector.certificate()
                && last_certificate != Some(c)
            {
                last_certificate = Some(c);
                self.send(Observation::Certificate(c)).await;
            }
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
                    let (has_health, ttl, probed) = self.opened(session.as_ref(), started).await;
                    let opened_at = Instant::now();
                    let relist = relist_after(ttl, &self.spec.settings);
                    let end = self
                        .probe_loop(session.as_ref(), (has_health, &probed), relist, sessions)
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
    /// the health tool is listed, how long the listing stays fresh, and the
    /// listed tools that tool probes call.
    async fn opened(
        &self,
        session: &dyn Session,
        started: Instant,
    ) -> (bool, Option<Duration>, ToolSurface) {
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
        let probed = ToolSurface {
            tools: (tools.iter().flat_map(|t| &t.tools))
                .filter(|t| self.spec.tool_probes.iter().any(|p| p.tool == t.name))
                .cloned()
                .collect(),
            ..Default::default()
        };
        let checked = match &tools {
            Some(t) => self.tools_conditions(t).await,
            None => Vec::new(),
        };
        self.send(Observation::Opened {
            era: session.era(),
            info: session.info().clone(),
            tools,
            handshake,
            health_check: has_health,
        })
        .await;
        if !checked.is_empty() {
            self.send(Observation::Checked(checked)).await;
        }
        (has_health, ttl, probed)
    }

    /// The tool list's conditions on `tools` (none unless configured).
    async fn tools_conditions(&self, tools: &ToolSurface) -> Vec<probe::conditions::Checked> {
        use crate::config::condition::Subject;
        let conditions = &self.spec.conditions;
        if !conditions.iter().any(|c| c.subject == Subject::Tools) {
            return Vec::new();
        }
        let vars = probe::conditions::Vars {
            json: vec![("tools", probe::conditions::tools(tools))],
            duration: None,
        };
        probe::conditions::check(conditions, Subject::Tools, vars).await
    }

    async fn probe_loop(
        &mut self,
        session: &dyn Session,
        (mut has_health, probed): (bool, &ToolSurface),
        relist: Duration,
        number: u64,
    ) -> End {
        let spec = self.spec.clone();
        let s = &spec.settings;
        let live_kind = probe::liveness::kind(session.era());
        let mut clock = Clocks::new(s, relist);
        let hc_spec = HealthCheckSpec::of(s).with_conditions(&spec.conditions);
        let mut ping: Option<InFlight<'_>> = None;
        let mut hc: Option<Running<'_>> = None;
        let mut listing: Option<BoxFuture<'_, _>> = None;
        let mut tools = ToolProbes::new(&spec.tool_probes, probed, self.task_report());
        let mut gone = session.gone();
        let mut credentials = None;
        // The futures that outlive a turn of the loop are made once, like
        // the clocks.
        let cancel = self.cancel.clone();
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let stuck = stuck_signal(self.stuck.clone(), number);
        tokio::pin!(stuck);
        let mut tools_changed = session.tools_changed();
        loop {
            self.credentials(session, &mut credentials).await;
            let held = clock.held();
            let late_at = ping.as_ref().filter(|p| !p.late).map(|p| p.late_at);
            let tool_due = tools.next_due();
            let watching = watching(ping.as_ref(), hc.is_some(), &tools);
            tokio::select! {
                _ = &mut cancelled => return End::Shutdown,
                exit = &mut gone => return End::Lost(Reason::from(session.death()), exit),
                judged = &mut stuck => return stuck_end(judged, s),
                _ = clock.evidence.tick(), if watching => {
                    if let Some(end) = self.watch(session).await {
                        return end;
                    }
                }
                _ = &mut clock.ping_due => {
                    clock.next_ping(s.ping_interval.0, &spec.id);
                    // Never pile pings up: the one in flight is still
                    // evidence, and one more interval without its answer
                    // is one more judgement.
                    if self.may_send(live_kind, ping.is_some() || held).await {
                        ping = Some(InFlight::start(session, s));
                    }
                }
                _ = async { tokio::time::sleep_until(late_at.expect("guarded")).await }, if late_at.is_some() => {
                    if let Some(p) = ping.as_mut() {
                        p.late = true;
                    }
                    self.late(session, live_kind).await;
                }
                outcome = async { (&mut ping.as_mut().expect("guarded").fut).await }, if ping.is_some() => {
                    let was_late = ping.take().is_some_and(|p| p.late);
                    if let Some(end) = self.ping_answered(session, outcome, was_late, &mut clock).await {
                        return end;
                    }
                }
                _ = &mut clock.tools_due, if listing.is_none() => {
                    listing = Some(clock.list(session, s.request_timeout.0));
                }
                _ = &mut tools_changed, if listing.is_none() => {
                    tools_changed = session.tools_changed();
                    if clock.may_relist() {
                        listing = Some(clock.list(session, s.request_timeout.0));
                    }
                }
                listed = async { listing.as_mut().expect("guarded").await }, if listing.is_some() => {
                    listing = None;
                    has_health = self.listed(listed, &mut clock, &mut tools).await.unwrap_or(has_health);
                }
                _ = clock.health_check.tick(), if has_health => {
                    if self.may_send(ProbeKind::HealthCheck, hc.is_some() || held).await {
                        hc = Some(Box::pin(probe::health_check::run(session, &hc_spec, s.health_check_timeout.0)));
                    }
                }
                outcome = async { hc.as_mut().expect("guarded").await }, if hc.is_some() => {
                    hc = None;
                    if let Some(end) = self.answered(session, outcome, false, Some("health_check"), &mut clock).await {
                        return end;
                    }
                }
                _ = async { tokio::time::sleep_until(tool_due.expect("guarded")).await }, if tool_due.is_some() => {
                    for started in tools.start_due(session, &spec.tool_probes, held) {
                        self.send(started).await;
                    }
                }
                Some((i, outcome)) = tools.calls.next(), if !tools.calls.is_empty() => {
                    tools.answered(i);
                    if let Some(end) = self.tool_answered(session, i, outcome, &mut clock).await {
                        return end;
                    }
                }
            }
        }
    }

    /// A probe answered: hold off when it asked to, report it, and end the
    /// session when the answer says the link is lost. `what` names the
    /// probe in the detail (the liveness probe goes unnamed).
    async fn answered(
        &mut self,
        session: &dyn Session,
        outcome: ProbeOutcome,
        was_late: bool,
        what: Option<&str>,
        clock: &mut Clocks,
    ) -> Option<End> {
        let lost = outcome.link_lost().then(|| refusal(&outcome));
        clock.hold(&outcome);
        let detail = match (&outcome.result, what) {
            (Ok(_), _) => String::new(),
            (Err(f), None) => f.detail.clone(),
            (Err(f), Some(what)) => format!("{what}: {}", f.detail),
        };
        self.send(Observation::Probe { outcome, was_late }).await;
        let refused = lost?;
        Some(link_lost(session, detail, refused).await)
    }

    /// Report a credentials change (an OAuth token refreshed or lost).
    async fn credentials(&self, session: &dyn Session, last: &mut Option<Credentials>) {
        let now = session.credentials();
        if now != *last {
            *last = now;
            self.send(Observation::Credentials(now)).await;
        }
    }

    /// A probe of `kind` is due: report it skipped when `busy` (its last
    /// one still running, or the server asked to wait), else sent; whether
    /// to send it.
    async fn may_send(&self, kind: ProbeKind, busy: bool) -> bool {
        let event = if busy {
            Observation::Skipped(kind)
        } else {
            Observation::Sent(kind)
        };
        self.send(event).await;
        !busy
    }

    /// The liveness probe is late. Fresh evidence first: is the server
    /// working or gone quiet?
    async fn late(&self, session: &dyn Session, kind: ProbeKind) {
        self.evidence(session).await;
        let timeout = self.spec.settings.ping_timeout.0;
        self.send(Observation::Late(kind, timeout)).await;
    }

    /// A listing finished: report the tools, tell the tool probes which
    /// run as tasks, and schedule the next listing.
    /// Whether the health-check tool is among them, or `None` when the
    /// listing failed (liveness judges the session; a failed listing is
    /// only not news).
    async fn listed(
        &self,
        listed: Result<ToolSurface, RequestError>,
        clock: &mut Clocks,
        probes: &mut ToolProbes<'_>,
    ) -> Option<bool> {
        let s = &self.spec.settings;
        match listed {
            Ok(tools) => {
                probes.listed(&self.spec.tool_probes, &tools);
                clock.relist(relist_after(tools.ttl, s), &self.spec.id);
                let health_check = tools.names().any(|n| n == s.health_check_tool);
                let checked = self.tools_conditions(&tools).await;
                self.send(Observation::Tools {
                    tools,
                    health_check,
                })
                .await;
                if !checked.is_empty() {
                    self.send(Observation::Checked(checked)).await;
                }
                Some(health_check)
            }
            Err(e) => {
                clock.relist(s.tools_interval.0, &self.spec.id);
                debug!(error = %e, "tools/list failed");
                None
            }
        }
    }

    /// The liveness probe answered. A child's CPU and memory are read at
    /// the ping's pace.
    async fn ping_answered(
        &mut self,
        session: &dyn Session,
        outcome: ProbeOutcome,
        was_late: bool,
        clock: &mut Clocks,
    ) -> Option<End> {
        if matches!(self.spec.transport, TransportSpec::Stdio { .. }) {
            self.evidence(session).await;
        }
        self.answered(session, outcome, was_late, None, clock).await
    }

    /// Tool probe `i` answered; a failure is logged with the tool's name.
    async fn tool_answered(
        &mut self,
        session: &dyn Session,
        i: usize,
        outcome: ProbeOutcome,
        clock: &mut Clocks,
    ) -> Option<End> {
        let spec = self.spec.clone();
        let tool = &spec.tool_probes[i].tool;
        if let Err(f) = &outcome.result {
            let took_ms = outcome.duration.as_millis() as u64;
            let error = spec.scrubber.scrub(&f.detail);
            tracing::info!(tool = %tool, took_ms, error = %error, "tool probe failed");
        }
        let what = format!("tool {tool}");
        self.answered(session, outcome, false, Some(&what), clock)
            .await
    }

    /// While a probe is outstanding: end the session if the server broke
    /// its limits, else read the evidence that is not an answer.
    async fn watch(&self, session: &dyn Session) -> Option<End> {
        if let Some(v) = session.violation() {
            let detail = "the server broke the session's limits".to_owned();
            return Some(End::Lost(Reason::from(v), detail));
        }
        self.evidence(session).await;
        None
    }

    /// Report the process tree and progress, the evidence that is not an answer.
    async fn evidence(&self, session: &dyn Session) {
        if let Some(sample) = session.process() {
            self.send(Observation::Process(sample)).await;
        }
        self.send(Observation::Progress(session.progress())).await;
    }

    /// Where a task probe tells each poll: straight to the owner, without
    /// waiting (each poll carries the whole task, so one lost to a full
    /// channel is made good by the next).
    fn task_report(&self) -> super::schedule::TaskReport {
        let (state, id) = (self.state.clone(), self.id.clone());
        Arc::new(move |seen| {
            let _ = state.try_send(Msg::Server(id.clone(), Observation::Task(Box::new(seen))));
        })
    }

    async fn send(&self, event: Observation) {
        // The owner outlives every supervisor; a closed channel means shutdown.
        let _ = self.state.send(Msg::Server(self.id.clone(), event)).await;
    }
}

/// Whether evidence is read between probes. Progress, silence and a
/// child's CPU only matter while a request is outstanding: an idle server,
/// stdio or HTTP, costs no wake-ups between probes. (A late ping samples on
/// the spot; a child's gauges are refreshed with every answer.)
fn watching(ping: Option<&InFlight<'_>>, health_check: bool, tools: &ToolProbes<'_>) -> bool {
    ping.is_some_and(|p| p.late) || health_check || tools.busy()
}

/// How the loop ends when the stuck signal resolves: `judged` the session
/// stuck, or (the owner gone) shutdown.
fn stuck_end(judged: bool, s: &crate::config::Settings) -> End {
    if !judged {
        return End::Shutdown;
    }
    let detail = format!("no answer or sign of life for {:?}", s.stuck_after.0);
    End::Lost(Reason::Stuck, detail)
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

/// The verdict reason of a probe refused for its credentials: the session
/// ends on it, and the refusal (not the transport) is why.
fn refusal(o: &ProbeOutcome) -> Option<Reason> {
    match o.result.as_ref().err()?.reason {
        FailureReason::Unauthenticated => Some(Reason::Unauthenticated),
        FailureReason::Forbidden => Some(Reason::Forbidden),
        _ => None,
    }
}

/// A probe saw the link die: why, in the words of the process's exit
/// when it exited (waiting a moment for it), else of the transport.
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
