//! One task per server: open a session, probe it on its schedule, feed the
//! results to its [`Tracker`], publish to the fleet, and rebuild the session
//! with exponential backoff when the transport dies or the session is stuck.
//!
//! At most one probe of each kind is in flight; a tick that finds the previous
//! probe still running is skipped, never stacked. Every request carries a
//! deadline. The supervisor never touches HTTP handlers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use backon::BackoffBuilder;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::ServerSpec;
use crate::fleet::FleetMsg;
use crate::health_check::HealthReport;
use crate::metrics::ServerSeries;
use crate::session::{Activity, Era, RequestError, Session, ToolCallError};
use crate::tracker::Tracker;
use crate::verdict::{Outcome, Reason, Transition};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rmcp::model::CallToolResult;

/// How long each step of closing a session may take.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

type Probe<'a, T> = Pin<Box<dyn Future<Output = Result<T, RequestError>> + Send + 'a>>;
type ToolCall<'a> = Pin<
    Box<dyn Future<Output = (usize, Duration, Result<CallToolResult, ToolCallError>)> + Send + 'a>,
>;

/// The liveness probe in flight. Past `late_at` it is judged late, but kept:
/// its answer, whenever it comes, is still evidence.
struct InFlight<'a> {
    fut: Probe<'a, Duration>,
    late_at: tokio::time::Instant,
    late: bool,
}

/// Schedules of the synthetic tool probes, one call in flight per probe.
struct ToolProbes<'a> {
    due: Vec<tokio::time::Instant>,
    interval: Vec<Duration>,
    in_flight: Vec<bool>,
    calls: FuturesUnordered<ToolCall<'a>>,
}

impl<'a> ToolProbes<'a> {
    fn new(probes: &[crate::config::ToolProbe]) -> Self {
        let now = tokio::time::Instant::now();
        ToolProbes {
            due: vec![now; probes.len()],
            interval: probes.iter().map(|p| p.interval).collect(),
            in_flight: vec![false; probes.len()],
            calls: FuturesUnordered::new(),
        }
    }

    fn next_due(&self) -> Option<tokio::time::Instant> {
        self.due.iter().min().copied()
    }

    /// Probes due at `now`, each rescheduled one interval later.
    fn due(&mut self, now: tokio::time::Instant) -> Vec<usize> {
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

/// Everything a supervisor needs; cheap to clone per server.
pub struct Supervisor {
    /// The server.
    pub spec: ServerSpec,
    /// Shared HTTP client (keep-alive pool).
    pub http: reqwest::Client,
    /// This server's series.
    pub series: Arc<ServerSeries>,
    /// Where statuses go.
    pub fleet: mpsc::Sender<FleetMsg>,
    /// Fires on shutdown or when this server is removed.
    pub cancel: CancellationToken,
}

impl Supervisor {
    /// Run until cancelled; closes its session before returning.
    pub async fn run(self) {
        let id = self.spec.id.clone();
        let s = &self.spec.settings;
        let backoff = backon::ExponentialBuilder::default()
            .with_min_delay(s.backoff_initial.0)
            .with_max_delay(s.backoff_max.0)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        let mut delays = backoff.build();
        let mut tracker = Tracker::new(&self.spec, Instant::now());
        self.publish(&tracker).await;
        let mut last_failure: Option<Reason> = None;
        let mut era_hint: Option<Era> = None;
        loop {
            if let Some(reason) = last_failure {
                self.series.reconnected(reason.as_str());
            }
            let opened = tokio::select! {
                _ = self.cancel.cancelled() => break,
                r = self.open(&mut tracker, era_hint) => r,
            };
            let failure = match opened {
                Err((reason, detail)) => {
                    warn!(server = %id, reason = reason.as_str(), error = %tracker.scrub(&detail), "cannot open session");
                    self.record(&mut tracker, |t, now| t.link_down(reason, &detail, now))
                        .await;
                    reason
                }
                Ok(session) => {
                    era_hint = Some(session.era);
                    let opened_at = session.opened;
                    let end = self.probe_loop(&session, &mut tracker).await;
                    session.close(CLOSE_GRACE).await;
                    let close_reason = match &end {
                        End::Shutdown => "shutdown",
                        End::Lost(reason, _) => reason.as_str(),
                    };
                    self.series.session_closed(close_reason);
                    match end {
                        End::Shutdown => break,
                        End::Lost(reason, detail) => {
                            warn!(server = %id, reason = reason.as_str(), detail = %tracker.scrub(&detail), "session lost");
                            self.record(&mut tracker, |t, now| t.link_down(reason, &detail, now))
                                .await;
                            if opened_at.elapsed() >= s.backoff_reset_after.0 {
                                delays = backoff.build();
                            }
                            reason
                        }
                    }
                }
            };
            last_failure = Some(failure);
            let delay = delays
                .next()
                .unwrap_or(s.backoff_max.0)
                .min(s.backoff_max.0);
            debug!(server = %id, delay_ms = delay.as_millis() as u64, "reconnecting after backoff");
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        debug!(server = %id, "supervisor stopped");
    }

    /// Open a session and list its tools; publishes the outcome.
    async fn open(
        &self,
        tracker: &mut Tracker,
        hint: Option<Era>,
    ) -> Result<Session, (Reason, String)> {
        let started = Instant::now();
        let activity = Arc::new(Activity::with_series(self.series.clone()));
        let session = Session::open(&self.spec, &self.http, hint, activity)
            .await
            .map_err(|e| (e.reason, e.to_string()))?;
        let handshake = started.elapsed();
        let tools = match session
            .list_tools(self.spec.settings.request_timeout.0)
            .await
        {
            Ok(names) => Some(names),
            Err(e) => {
                // Not fatal: a server without tools is still monitored by liveness.
                debug!(server = %self.spec.id, error = %tracker.scrub(&e.to_string()), "tools/list failed");
                None
            }
        };
        let info = session.info.clone();
        self.series.set_info(
            self.spec.transport.kind(),
            &info.protocol_version,
            &info.name,
            &info.version,
        );
        self.series.set_session_start(unix_now());
        if let Some(t) = &tools {
            self.series.set_tools(t.len());
        }
        info!(
            server = %self.spec.id,
            era = ?session.era,
            protocol = %info.protocol_version,
            server_name = %info.name,
            server_version = %info.version,
            tools = tools.as_ref().map_or(0, Vec::len),
            handshake_ms = handshake.as_millis() as u64,
            "session opened"
        );
        let has_health = tools
            .as_ref()
            .is_some_and(|t| t.iter().any(|n| n == &self.spec.settings.health_check_tool));
        let count = tools.as_ref().map(Vec::len);
        self.record(tracker, |t, now| {
            t.session_opened(session.era, info, count, handshake, now)
        })
        .await;
        self.series.set_health_check_present(has_health);
        let mut session = session;
        session.has_health_check = has_health;
        Ok(session)
    }

    async fn probe_loop(&self, session: &Session, tracker: &mut Tracker) -> End {
        let s = &self.spec.settings;
        let id = self.spec.id.as_str();
        let live_kind = match session.era {
            Era::Legacy => "ping",
            Era::Modern => "discover",
        };
        // The handshake was the first liveness answer; the first ping waits a
        // per-server share of the interval, so a large fleet opened at once
        // is not pinged in the same millisecond ever after.
        let mut ping_tick = tokio::time::interval_at(
            tokio::time::Instant::now() + stagger(&self.spec.id, s.ping_interval.0),
            s.ping_interval.0,
        );
        ping_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut hc_tick = tokio::time::interval(s.health_check_interval.0);
        hc_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // /proc and progress are read at least once a second: "stopped" and
        // "busy" must not wait for the next ping.
        let mut evidence_tick =
            tokio::time::interval(s.ping_interval.0.min(Duration::from_secs(1)));
        evidence_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut ping: Option<InFlight<'_>> = None;
        let mut hc: Option<Probe<'_, (Duration, HealthReport)>> = None;
        let mut tools = ToolProbes::new(&self.spec.tool_probes);
        let mut progress_seen = session.activity.progress_count();
        let child_exit = async {
            match session.child() {
                Some(c) => c.exited().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(child_exit);
        loop {
            let late_at = ping.as_ref().filter(|p| !p.late).map(|p| p.late_at);
            let tool_due = tools.next_due();
            // A remote server has no /proc to read, and progress or silence
            // only matter while a request is outstanding: an idle HTTP
            // server costs no wake-ups between pings.
            let watching = session.child().is_some()
                || ping.as_ref().is_some_and(|p| p.late)
                || hc.is_some()
                || !tools.calls.is_empty();
            tokio::select! {
                _ = self.cancel.cancelled() => return End::Shutdown,
                exit = &mut child_exit => {
                    return End::Lost(Reason::Exited, format!("process {exit}"));
                }
                _ = evidence_tick.tick(), if watching => {
                    let seen = session.activity.progress_count();
                    if seen != progress_seen {
                        progress_seen = seen;
                        tracker.activity(Instant::now());
                    }
                    if let Some(t) = self.sample_process(session, tracker) {
                        self.transitioned(tracker, t);
                        self.series.set_reason(tracker.status().reason.as_str());
                        self.publish(tracker).await;
                    }
                    if tracker.is_stuck(Instant::now()) {
                        return End::Lost(Reason::Stuck, format!("no answer or sign of life for {:?}", s.stuck_after.0));
                    }
                }
                _ = ping_tick.tick() => {
                    if ping.as_ref().is_some_and(|p| p.late) {
                        // Never pile pings up: the one in flight is still
                        // evidence, and one more interval without its answer
                        // is one more judgement.
                        self.series.probe_skipped(live_kind);
                        self.record(tracker, |t, now| t.tick(now)).await;
                    } else if ping.is_some() {
                        self.series.probe_skipped(live_kind);
                    } else {
                        self.series.probe_sent(live_kind);
                        ping = Some(InFlight {
                            // The request itself may wait until the session would be judged stuck.
                            fut: Box::pin(session.liveness(s.stuck_after.0)),
                            late_at: tokio::time::Instant::now() + s.ping_timeout.0,
                            late: false,
                        });
                    }
                }
                _ = async { tokio::time::sleep_until(late_at.expect("guarded")).await }, if late_at.is_some() => {
                    if let Some(p) = ping.as_mut() {
                        p.late = true;
                    }
                    self.series.probe_failed(live_kind, "timeout");
                    // Fresh evidence first: is it working or gone quiet?
                    let _ = self.sample_process(session, tracker);
                    let seen = session.activity.progress_count();
                    if seen != progress_seen {
                        progress_seen = seen;
                        tracker.activity(Instant::now());
                    }
                    self.record(tracker, |t, now| t.liveness_late(s.ping_timeout.0, now)).await;
                }
                r = async { (&mut ping.as_mut().expect("guarded").fut).await }, if ping.is_some() => {
                    let was_late = ping.take().is_some_and(|p| p.late);
                    match &r {
                        Ok(rtt) => self.series.observe_ping(rtt.as_secs_f64()),
                        Err(RequestError::Timeout(_)) if was_late => {}
                        Err(e) => {
                            self.series.probe_failed(live_kind, e.label());
                            debug!(server = %id, error = %tracker.scrub(&e.to_string()), "liveness probe failed");
                        }
                    }
                    self.record(tracker, |t, now| t.liveness(r.as_ref().copied(), was_late, now)).await;
                    if let Err(e) = &r {
                        if e.is_transport_death() {
                            return End::Lost(self.death_reason(session), e.to_string());
                        }
                        if tracker.is_stuck(Instant::now()) {
                            return End::Lost(Reason::Stuck, e.to_string());
                        }
                    }
                }
                _ = hc_tick.tick(), if session.has_health_check => {
                    if hc.is_some() {
                        self.series.probe_skipped("health_check");
                    } else {
                        self.series.probe_sent("health_check");
                        hc = Some(Box::pin(session.health_check(
                            &s.health_check_tool,
                            &s.health_check_arguments,
                            s.health_check_timeout.0,
                            s.health_check_max_fields,
                        )));
                    }
                }
                r = async { hc.as_mut().expect("guarded").await }, if hc.is_some() => {
                    hc = None;
                    match &r {
                        Ok((took, report)) => {
                            self.series.observe_health_check(took.as_secs_f64());
                            self.series.set_health_fields(&report.fields);
                            if report.is_error {
                                self.series.probe_failed("health_check", "tool_error");
                            } else if report.status == Some(crate::verdict::Reported::Unreadable) {
                                self.series.probe_failed("health_check", "unreadable");
                            }
                        }
                        Err(e) => {
                            self.series.probe_failed("health_check", e.label());
                        }
                    }
                    let is_death = matches!(&r, Err(e) if e.is_transport_death());
                    self.record(tracker, |t, now| t.health_check(r.as_ref().map(|(d, h)| (*d, h.clone())), now)).await;
                    if is_death {
                        return End::Lost(self.death_reason(session), "health_check: transport closed".to_owned());
                    }
                }
                _ = async { tokio::time::sleep_until(tool_due.expect("guarded")).await }, if tool_due.is_some() => {
                    for i in tools.due(tokio::time::Instant::now()) {
                        let probe = &self.spec.tool_probes[i];
                        if tools.in_flight[i] {
                            self.series.probe_skipped("tool");
                            continue;
                        }
                        self.series.probe_sent("tool");
                        tools.in_flight[i] = true;
                        tools.calls.push(Box::pin(async move {
                            let start = Instant::now();
                            let r = session
                                .call_tool_with_progress(&probe.tool, probe.arguments.clone(), probe.request_timeout, probe.max_request_timeout)
                                .await;
                            (i, start.elapsed(), r)
                        }));
                    }
                }
                Some((i, took, r)) = tools.calls.next(), if !tools.calls.is_empty() => {
                    tools.in_flight[i] = false;
                    let tool = self.spec.tool_probes[i].tool.as_str();
                    self.series.observe_tool_call(tool, took.as_secs_f64());
                    let outcome = match &r {
                        Ok(res) if res.is_error == Some(true) => {
                            self.series.probe_failed("tool", "tool_error");
                            Outcome::Error
                        }
                        Ok(_) => Outcome::Ok(took),
                        Err(ToolCallError::IdleTimeout(_)) => {
                            self.series.tool_call_cancelled(tool, "request_timeout");
                            self.series.probe_failed("tool", "timeout");
                            Outcome::Timeout
                        }
                        Err(ToolCallError::MaxTimeout(_)) => {
                            self.series.tool_call_cancelled(tool, "max_request_timeout");
                            self.series.probe_failed("tool", "timeout");
                            Outcome::Timeout
                        }
                        Err(ToolCallError::Request(e)) => {
                            self.series.probe_failed("tool", e.label());
                            Outcome::Error
                        }
                    };
                    if let Err(e) = &r {
                        info!(server = %id, tool, took_ms = took.as_millis() as u64, error = %tracker.scrub(&e.to_string()), "tool probe failed");
                    }
                    self.record(tracker, |t, now| t.tool_call(outcome, now)).await;
                    if let Err(ToolCallError::Request(e)) = &r
                        && e.is_transport_death()
                    {
                        return End::Lost(self.death_reason(session), format!("tool {tool}: {e}"));
                    }
                }
            }
        }
    }

    /// The reason a dead transport gets: the process for stdio, the network for HTTP.
    fn death_reason(&self, session: &Session) -> Reason {
        match session.child() {
            Some(_) => Reason::Exited,
            None => Reason::Unreachable,
        }
    }

    /// Read the stdio process tree: run state, CPU and memory.
    fn sample_process(&self, session: &Session, tracker: &mut Tracker) -> Option<Transition> {
        let child = session.child()?;
        let sample = crate::procstat::sample(child.pid())?;
        let cpu = sample.cpu.as_secs_f64();
        // A new process starts from zero; the counter only moves forward.
        let seen = tracker.cpu_exported();
        self.series.child_cpu_add(cpu - seen);
        if cpu > seen {
            tracker.set_cpu_exported(cpu);
        }
        self.series.set_child_rss(sample.rss_bytes);
        tracker.process(&sample, Instant::now())
    }

    /// Apply an observation to the tracker, then publish state and status.
    async fn record(
        &self,
        tracker: &mut Tracker,
        f: impl FnOnce(&mut Tracker, Instant) -> Option<Transition>,
    ) {
        if let Some(t) = f(tracker, Instant::now()) {
            self.transitioned(tracker, t);
        }
        self.series.set_reason(tracker.status().reason.as_str());
        self.series.set_last_check(unix_now());
        self.publish(tracker).await;
    }

    fn transitioned(&self, tracker: &Tracker, t: Transition) {
        self.series.set_state(t.to);
        self.series.state_changed();
        info!(
            server = %self.spec.id,
            from = t.from.as_str(),
            to = t.to.as_str(),
            reason = t.reason.as_str(),
            detail = %tracker.status().detail,
            "state changed"
        );
    }

    async fn publish(&self, tracker: &Tracker) {
        // The fleet owner only stops at shutdown; a closed channel is harmless then.
        let _ = self
            .fleet
            .send(FleetMsg::Update(Box::new(tracker.status().clone())))
            .await;
    }
}

/// A stable offset in `[0, period)` derived from the server id.
fn stagger(id: &str, period: Duration) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    let nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(h.finish() % nanos)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
