//! One task per server: open a session through its [`Connector`], schedule
//! the probes on their intervals, and report every observation to the state
//! owner as a typed [`Observation`]. It rebuilds the session with exponential
//! backoff when the transport dies, or when the owner judges it stuck.
//!
//! It never judges and never writes metrics: the owner does both, from
//! these events. A lost session is reported as the [`Loss`] it saw, never
//! as a verdict's reason. At most one probe of each kind is in flight; a tick that
//! finds the previous probe still running is reported as skipped, never
//! stacked. Every request carries a deadline.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug};

use super::reconnect::Reconnect;
use super::schedule::{Schedule, relist_after};
use crate::config::{ServerSpec, TransportSpec};
use crate::probe::{self, FailureReason, Probe, ProbeOutcome};
use crate::state::{Loss, Msg, Observation};
use crate::transport::tools::ToolSurface;
use crate::transport::{
    BoxFuture, BoxStream, Connector, Evidence, LinkFailure, RequestError, Session, SessionEvent,
};

/// How long each step of closing a session may take.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What reaches a session's probing besides its probes and listings.
enum Heard {
    /// The session told something.
    Told(SessionEvent),
    /// Its probing ends from outside: shutdown, or judged stuck.
    End(End),
}

/// The session's events and its end, polled only when woken.
type Outside<'a> = futures::stream::SelectAll<BoxStream<'a, Heard>>;

/// Why a probe loop ended.
enum End {
    Shutdown,
    Lost(Loss, String),
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
    /// The server's probes, built once from its spec.
    pub probes: Arc<[Box<dyn Probe>]>,
}

/// `spec`'s probes, their task polls told straight to the owner, without
/// waiting (each poll carries the whole task, so one lost to a full
/// channel is made good by the next).
pub fn probes_of(spec: &Arc<ServerSpec>, state: &mpsc::Sender<Msg>) -> Arc<[Box<dyn Probe>]> {
    let (state, id) = (state.clone(), Arc::<str>::from(spec.id.as_str()));
    let tasks: probe::TaskSink = Arc::new(move |seen| {
        let _ = state.try_send(Msg::Server(id.clone(), Observation::Task(Box::new(seen))));
    });
    probe::plan(spec, tasks).into()
}

impl Supervisor {
    /// Run until cancelled; closes its session before returning.
    pub async fn run(self) {
        let span = tracing::info_span!("server", server = %self.spec.id);
        self.run_inner().instrument(span).await;
    }

    async fn run_inner(self) {
        let mut link = Reconnect::new(&self.spec.settings);
        loop {
            self.send(Observation::Connecting { after: link.after })
                .await;
            let (started, opened) = tokio::select! {
                _ = self.cancel.cancelled() => break,
                r = async {
                    // Waiting for a turn is not part of connect_timeout,
                    // nor of the handshake's time.
                    let _turn = self.admission.acquire().await;
                    (Instant::now(), self.connector.open(link.era_hint).await)
                } => r,
            };
            // Even a refused certificate's date is news.
            if let Some(c) = link.certificate(self.connector.certificate()) {
                self.send(Observation::Certificate(c)).await;
            }
            let (loss, opened_at) = match opened {
                Err(e) => {
                    let loss = Loss::Link(e.failure);
                    let detail = e.to_string();
                    self.send(Observation::Down {
                        loss,
                        detail,
                        was_open: false,
                        said_why: e.said_why,
                    })
                    .await;
                    (loss, None)
                }
                Ok(session) => {
                    let number = link.opened(session.remembered_era());
                    match self.session(session, started, number).await {
                        Some((loss, opened_at)) => (loss, Some(opened_at)),
                        None => break,
                    }
                }
            };
            let delay = link.ended(loss, opened_at);
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

    /// Probe session `number`, opened at `started`, until it ends, and
    /// close it: why it was lost and when it had opened, or `None` at
    /// shutdown.
    async fn session(
        &self,
        session: Box<dyn Session>,
        started: Instant,
        number: u64,
    ) -> Option<(Loss, Instant)> {
        let (ttl, runs) = self.opened(session.as_ref(), started).await;
        let opened_at = Instant::now();
        let relist = relist_after(ttl, &self.spec.settings);
        let end = self
            .probe_loop(session.as_ref(), runs, relist, number)
            .await;
        session.close(CLOSE_GRACE).await;
        match end {
            End::Shutdown => {
                self.send(Observation::Closed).await;
                None
            }
            End::Lost(loss, detail) => {
                self.send(Observation::Down {
                    loss,
                    detail,
                    was_open: true,
                    said_why: false,
                })
                .await;
                Some((loss, opened_at))
            }
        }
    }

    /// List the tools of a new session, tell the probes, and report it
    /// open; how long the listing stays fresh, and which probes it lets
    /// run (`None` when it failed).
    async fn opened(
        &self,
        session: &dyn Session,
        started: Instant,
    ) -> (Option<Duration>, Option<Vec<bool>>) {
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
        let runs = (tools.as_ref()).map(|t| self.probes.iter().map(|p| p.listed(t)).collect());
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
        (ttl, runs)
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

    /// Run the probes of session `number` on their schedule, list its
    /// tools when due or asked, and relay what the session tells, until
    /// it ends. Five things wake it, however many probe kinds there are.
    async fn probe_loop(
        &self,
        session: &dyn Session,
        runs: Option<Vec<bool>>,
        relist: Duration,
        number: u64,
    ) -> End {
        let (spec, probes) = (self.spec.clone(), self.probes.clone());
        let s = &spec.settings;
        let mut schedule = Schedule::new(&probes, (session.era(), &spec.id), s, runs, relist);
        let mut listing = Listing::new(s.request_timeout.0);
        // The session's events and the end from outside (shutdown, or
        // judged stuck) in one set that polls only what was woken: every
        // answer and every tick passes this select, and polling them all
        // each time (five waiters) was 4 % of a ping's instructions.
        let mut outside: Outside<'_> = futures::stream::select_all([
            session.events().map(Heard::Told).boxed(),
            futures::stream::once(self.ends(number))
                .map(Heard::End)
                .boxed(),
        ]);
        // Reused across wake-ups: what came due is told through it.
        let mut news = Vec::new();
        loop {
            schedule.arm(listing.running.is_some());
            // Biased: in the order written, with no random draw on each
            // poll.
            let end = tokio::select! {
                biased;
                () = &mut schedule.timer => self.due(session, &mut schedule, &mut listing, &mut news).await,
                Some((i, outcome)) = schedule.running.next(), if !schedule.running.is_empty() => {
                    self.answered(session, &mut outside, &mut schedule, i, outcome).await
                }
                // An async block: select! builds a disabled branch's future too.
                listed = async { listing.running.as_mut().expect("guarded").await }, if listing.running.is_some() => {
                    self.listed(listed, &mut schedule).await;
                    listing.finished(session, &mut schedule);
                    None
                }
                Some(heard) = outside.next() => match heard {
                    Heard::Told(event) => self.told(session, event, &mut schedule, &mut listing).await,
                    Heard::End(end) => Some(end),
                },
            };
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// What ends a session's probing from outside it: shutdown, or the
    /// owner judging session `number` stuck.
    async fn ends(&self, number: u64) -> End {
        let stuck = stuck_signal(self.stuck.clone(), number);
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => End::Shutdown,
            judged = stuck => stuck_end(judged, &self.spec.settings),
        }
    }

    /// The schedule woke: start what came due, read the evidence it asked
    /// for (a late run's first), tell what it found, and start a listing
    /// when one is due.
    async fn due<'s>(
        &self,
        session: &'s dyn Session,
        schedule: &mut Schedule<'s>,
        listing: &mut Listing<'s>,
        news: &mut Vec<Observation>,
    ) -> Option<End> {
        let wake = schedule.wake(session, news);
        if wake.watch || wake.late {
            self.evidence(session).await;
        }
        for event in news.drain(..) {
            self.send(event).await;
        }
        if wake.list {
            listing.start(session, schedule, true);
        }
        None
    }

    /// Relay what the session told: a listing for a changed tool list,
    /// its credentials, or its end.
    async fn told<'s>(
        &self,
        session: &'s dyn Session,
        event: SessionEvent,
        schedule: &mut Schedule<'s>,
        listing: &mut Listing<'s>,
    ) -> Option<End> {
        match event {
            SessionEvent::ToolsChanged => listing.start(session, schedule, false),
            SessionEvent::Credentials(c) => self.send(Observation::Credentials(c)).await,
            SessionEvent::Ended(link, why) => return Some(End::Lost(Loss::Link(link), why)),
        }
        None
    }

    /// Probe `i` answered: hold off when it asked to, report it, and end
    /// the session when the answer says the link is lost. The probe is
    /// named in the detail and the log line (the liveness probe goes
    /// unnamed; a child's CPU and memory are read at its pace).
    async fn answered(
        &self,
        session: &dyn Session,
        outside: &mut Outside<'_>,
        schedule: &mut Schedule<'_>,
        i: usize,
        outcome: ProbeOutcome,
    ) -> Option<End> {
        let was_late = schedule.answered(i, &outcome);
        let what = schedule.name(i);
        if outcome.kind.is_liveness() && matches!(self.spec.transport, TransportSpec::Stdio { .. })
        {
            self.evidence(session).await;
        }
        let lost = (outcome.result.as_ref().err())
            .filter(|f| f.link_lost)
            .map(|f| f.reason);
        let detail = match (&outcome.result, what) {
            (Ok(_), _) => String::new(),
            (Err(f), None) => f.detail.clone(),
            (Err(f), Some(what)) => {
                let took_ms = outcome.duration.as_millis() as u64;
                let error = self.spec.scrubber.scrub(&f.detail);
                tracing::info!(probe = what, took_ms, error = %error, "probe failed");
                format!("{what}: {}", f.detail)
            }
        };
        self.send(Observation::Probe { outcome, was_late }).await;
        let stdio = matches!(self.spec.transport, TransportSpec::Stdio { .. });
        Some(link_lost(outside, stdio, lost?, detail).await)
    }

    /// A listing finished: report the tools, tell the probes, and
    /// schedule the next listing. A failed listing is only not news
    /// (liveness judges the session).
    async fn listed(&self, listed: Result<ToolSurface, RequestError>, schedule: &mut Schedule<'_>) {
        let s = &self.spec.settings;
        match listed {
            Ok(tools) => {
                schedule.listed(&tools, relist_after(tools.ttl, s));
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
            }
            Err(e) => {
                schedule.relist(s.tools_interval.0);
                debug!(error = %e, "tools/list failed");
            }
        }
    }

    /// Report the process tree and progress, the evidence that is not an answer.
    async fn evidence(&self, session: &dyn Session) {
        let Evidence { process, progress } = session.evidence();
        if let Some(sample) = process {
            self.send(Observation::Process(sample)).await;
        }
        self.send(Observation::Progress(progress)).await;
    }

    async fn send(&self, event: Observation) {
        // The owner outlives every supervisor; a closed channel means shutdown.
        let _ = self.state.send(Msg::Server(self.id.clone(), event)).await;
    }
}

/// How the loop ends when the stuck signal resolves: `judged` the session
/// stuck, or (the owner gone) shutdown.
fn stuck_end(judged: bool, s: &crate::config::Settings) -> End {
    if !judged {
        return End::Shutdown;
    }
    let detail = format!("no answer or sign of life for {:?}", s.stuck_after.0);
    End::Lost(Loss::Stuck, detail)
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

/// A probe's `failure` ended the link: in the words of the process's exit
/// when it exited (waiting a moment for it, on stdio), else the probe's
/// failure and the transport's account of the link (an end already told,
/// or what a dead link of its kind is), both as they are.
async fn link_lost(
    outside: &mut Outside<'_>,
    stdio: bool,
    failure: FailureReason,
    detail: String,
) -> End {
    let told = async {
        while let Some(heard) = outside.next().await {
            if let Heard::Told(SessionEvent::Ended(link, words)) = heard {
                return Some((link, words));
            }
        }
        None
    };
    let grace = if stdio { EXIT_GRACE } else { Duration::ZERO };
    let link = match tokio::time::timeout(grace, told).await {
        Ok(Some((LinkFailure::Exited, words))) => {
            return End::Lost(Loss::Link(LinkFailure::Exited), words);
        }
        Ok(Some((link, _))) => link,
        _ if stdio => LinkFailure::Exited,
        _ => LinkFailure::Unreachable,
    };
    End::Lost(Loss::Probe { failure, link }, detail)
}

/// The tool listing in flight, and whether the server announced a change
/// while it ran (one more listing follows it).
struct Listing<'s> {
    running: Option<BoxFuture<'s, Result<ToolSurface, RequestError>>>,
    asked: bool,
    timeout: Duration,
}

impl<'s> Listing<'s> {
    fn new(timeout: Duration) -> Self {
        Listing {
            running: None,
            asked: false,
            timeout,
        }
    }

    /// The listing in flight finished: the one asked for meanwhile starts.
    fn finished(&mut self, session: &'s dyn Session, schedule: &mut Schedule<'s>) {
        self.running = None;
        if std::mem::take(&mut self.asked) {
            self.start(session, schedule, false);
        }
    }

    /// Start a listing: one the schedule made due (`due`), or one the
    /// server asked for, which waits for a running one and honours the
    /// schedule's floor between listings.
    fn start(&mut self, session: &'s dyn Session, schedule: &mut Schedule<'s>, due: bool) {
        if self.running.is_some() {
            self.asked |= !due;
        } else if due || schedule.may_relist() {
            self.running = Some(schedule.list(session, self.timeout));
        }
    }
}
