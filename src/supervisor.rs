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
use std::time::{Duration, Instant, SystemTime};

use backon::BackoffBuilder;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::ServerSpec;
use crate::fleet::FleetMsg;
use crate::health_check::HealthReport;
use crate::metrics::Metrics;
use crate::session::{Era, RequestError, Session};
use crate::tracker::Tracker;
use crate::verdict::{Reason, Transition};

/// How long each step of closing a session may take.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

type Probe<'a, T> = Pin<Box<dyn Future<Output = Result<T, RequestError>> + Send + 'a>>;

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
    /// Shared metrics.
    pub metrics: Arc<Metrics>,
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
        self.metrics.add_server(&id);
        self.publish(&tracker).await;
        let mut last_failure: Option<Reason> = None;
        let mut era_hint: Option<Era> = None;
        loop {
            if let Some(reason) = last_failure {
                self.metrics
                    .reconnects
                    .with_label_values(&[&id, reason.as_str()])
                    .inc();
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
        let session = Session::open(&self.spec, &self.http, hint)
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
        self.metrics.set_info(
            &self.spec.id,
            self.spec.transport.kind(),
            &info.protocol_version,
            &info.name,
            &info.version,
        );
        self.metrics
            .session_start
            .with_label_values(&[&self.spec.id])
            .set(unix_now());
        if let Some(t) = &tools {
            self.metrics
                .tools
                .with_label_values(&[&self.spec.id])
                .set(t.len() as i64);
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
        let mut ping_tick = tokio::time::interval(s.ping_interval.0);
        ping_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut hc_tick = tokio::time::interval(s.health_check_interval.0);
        hc_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut ping: Option<Probe<'_, Duration>> = None;
        let mut hc: Option<Probe<'_, (Duration, HealthReport)>> = None;
        let child_exit = async {
            match session.child() {
                Some(c) => c.exited().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(child_exit);
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return End::Shutdown,
                exit = &mut child_exit => {
                    return End::Lost(Reason::Exited, format!("process {exit}"));
                }
                _ = ping_tick.tick() => {
                    if ping.is_some() {
                        self.metrics.probe_failures.with_label_values(&[id, live_kind, "skipped"]).inc();
                    } else {
                        self.metrics.probes.with_label_values(&[id, live_kind]).inc();
                        ping = Some(Box::pin(session.liveness(s.ping_timeout.0)));
                    }
                    if tracker.is_stuck(Instant::now()) {
                        return End::Lost(Reason::Stuck, format!("no answer for {:?}", s.stuck_after.0));
                    }
                }
                r = async { ping.as_mut().expect("guarded").await }, if ping.is_some() => {
                    ping = None;
                    match &r {
                        Ok(rtt) => self.metrics.ping_duration.with_label_values(&[id]).observe(rtt.as_secs_f64()),
                        Err(e) => {
                            self.metrics.probe_failures.with_label_values(&[id, live_kind, e.label()]).inc();
                            debug!(server = %id, error = %tracker.scrub(&e.to_string()), "liveness probe failed");
                        }
                    }
                    self.record(tracker, |t, now| t.liveness(r.as_ref().copied(), now)).await;
                    if let Err(e) = &r {
                        if e.is_transport_death() {
                            let reason = match session.child() {
                                Some(_) => Reason::Exited,
                                None => Reason::Unreachable,
                            };
                            return End::Lost(reason, e.to_string());
                        }
                        if tracker.is_stuck(Instant::now()) {
                            return End::Lost(Reason::Stuck, e.to_string());
                        }
                    }
                }
                _ = hc_tick.tick(), if session.has_health_check => {
                    if hc.is_some() {
                        self.metrics.probe_failures.with_label_values(&[id, "health_check", "skipped"]).inc();
                    } else {
                        self.metrics.probes.with_label_values(&[id, "health_check"]).inc();
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
                            self.metrics.health_check_duration.with_label_values(&[id]).observe(took.as_secs_f64());
                            self.metrics.set_health_fields(id, &report.fields);
                            if report.is_error {
                                self.metrics.probe_failures.with_label_values(&[id, "health_check", "tool_error"]).inc();
                            }
                        }
                        Err(e) => {
                            self.metrics.probe_failures.with_label_values(&[id, "health_check", e.label()]).inc();
                        }
                    }
                    let is_death = matches!(&r, Err(e) if e.is_transport_death());
                    self.record(tracker, |t, now| t.health_check(r.as_ref().map(|(d, h)| (*d, h.clone())), now)).await;
                    if is_death {
                        let reason = if session.child().is_some() { Reason::Exited } else { Reason::Unreachable };
                        return End::Lost(reason, "health_check: transport closed".to_owned());
                    }
                }
            }
        }
    }

    /// Apply an observation to the tracker, then publish state and status.
    async fn record(
        &self,
        tracker: &mut Tracker,
        f: impl FnOnce(&mut Tracker, Instant) -> Option<Transition>,
    ) {
        if let Some(t) = f(tracker, Instant::now()) {
            let st = tracker.status();
            self.metrics.set_state(&self.spec.id, t.to);
            self.metrics
                .state_changes
                .with_label_values(&[&self.spec.id])
                .inc();
            info!(
                server = %self.spec.id,
                from = t.from.as_str(),
                to = t.to.as_str(),
                reason = t.reason.as_str(),
                detail = %st.detail,
                "state changed"
            );
        }
        self.metrics
            .last_check
            .with_label_values(&[&self.spec.id])
            .set(unix_now());
        self.publish(tracker).await;
    }

    async fn publish(&self, tracker: &Tracker) {
        // The fleet owner only stops at shutdown; a closed channel is harmless then.
        let _ = self
            .fleet
            .send(FleetMsg::Update(Box::new(tracker.status().clone())))
            .await;
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
