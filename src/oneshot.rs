//! `mcpmon probe`: one session, the server's probes run once each (a few
//! liveness probes, the health_check tool if listed, its tool probes), an
//! optional tool call: the service's probe list run once, and the same
//! evidence and judgment.

use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;

use crate::config::ServerSpec;
use crate::config::probes::{TaskMode, ToolProbe};
use crate::probe::health_check::HealthReport;
use crate::probe::{self, Answer};
use crate::state::evidence::Tracker;
use crate::state::verdict::{Reason, State};
use crate::transport::session::McpSession;
use crate::transport::tools::ToolSurface;
use crate::transport::{Era, ServerInfo, Session};

/// What to do beyond the handshake.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Liveness probes to send.
    pub pings: u32,
    /// A tool to call, with its arguments.
    pub call: Option<(String, serde_json::Map<String, serde_json::Value>)>,
}

/// What one probe found.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeReport {
    /// Server id (the target as given).
    pub server: String,
    /// Era spoken, if connected.
    pub era: Option<Era>,
    /// Server identity, if connected.
    pub server_info: Option<ServerInfo>,
    /// Handshake time (spawn/connect included).
    pub handshake_ms: Option<f64>,
    /// Round trip of each answered liveness probe.
    pub ping_ms: Vec<f64>,
    /// Errors of liveness probes that failed.
    pub ping_errors: Vec<String>,
    /// Tool names listed.
    pub tools: Vec<String>,
    /// Hash of the tool surface (names, schemas, annotations).
    pub tools_hash: Option<String>,
    /// Listed tools that break the spec's rules, and why.
    pub tools_invalid: Vec<(String, String)>,
    /// What the health_check tool said, if listed.
    pub health_check: Option<HealthReport>,
    /// The requested tool call's outcome: text of the result or the error.
    pub call: Option<Result<String, String>>,
    /// The verdict.
    pub state: State,
    /// Why.
    pub reason: Reason,
    /// Detail for humans.
    pub detail: String,
}

impl ProbeReport {
    /// Nothing found yet about server `id`.
    fn new(id: &str) -> Self {
        ProbeReport {
            server: id.to_owned(),
            era: None,
            server_info: None,
            handshake_ms: None,
            ping_ms: Vec::new(),
            ping_errors: Vec::new(),
            tools: Vec::new(),
            tools_hash: None,
            tools_invalid: Vec::new(),
            health_check: None,
            call: None,
            state: State::Unknown,
            reason: Reason::Starting,
            detail: String::new(),
        }
    }
}

/// Run one probe against `spec`: open, list, then the server's probes
/// once each (liveness `opts.pings` times), then the requested call, and
/// judge it all as the service would.
pub async fn probe(
    spec: &ServerSpec,
    http: &crate::transport::Http,
    opts: &ProbeOptions,
) -> ProbeReport {
    let s = &spec.settings;
    let mut tracker = Tracker::new(spec, Instant::now());
    let mut report = ProbeReport::new(&spec.id);
    let started = Instant::now();
    let session = match McpSession::open(spec, http, None).await {
        Ok(session) => session,
        Err(e) => {
            let reason = Reason::from(e.failure);
            // One attempt is all a one-shot probe makes: its failure is
            // the verdict.
            tracker.link_down(reason, &e.to_string(), true, Instant::now());
            report.state = State::Unhealthy;
            report.reason = reason;
            report.detail = tracker.scrub(&e.to_string());
            return report;
        }
    };
    let boxed: Box<dyn Session> = Box::new(session);
    let session: &dyn Session = boxed.as_ref();
    let handshake = started.elapsed();
    report.handshake_ms = Some(ms(handshake));
    report.era = Some(session.era());
    report.server_info = Some(session.info().clone());
    let listed = list(session, s.request_timeout.0, &mut tracker, &mut report).await;
    let (era, info) = (session.era(), session.info().clone());
    tracker.session_opened(era, info, handshake, Instant::now());
    run_plan(
        session,
        spec,
        listed.as_ref(),
        opts.pings,
        &mut tracker,
        &mut report,
    )
    .await;
    if let Some((tool, args)) = &opts.call {
        let (said, outcome) = call(session, tool, args, s.request_timeout.0, &tracker).await;
        report.call = Some(said);
        tracker.probe(&outcome, false, Instant::now());
    }
    let j = tracker.judgement(Instant::now());
    report.state = j.state;
    report.reason = j.reason;
    if j.reason != Reason::Ok && report.detail.is_empty() {
        report.detail = tracker.problem(Instant::now());
    }
    boxed.close(Duration::from_secs(2)).await;
    report
}

/// The server's probes, the very list the service schedules, each run
/// once (liveness `pings` times) when the listing lets it, in order. A
/// run counts as answered in time within its lateness (a ping's
/// timeout), else its deadline.
async fn run_plan(
    session: &dyn Session,
    spec: &ServerSpec,
    listed: Option<&ToolSurface>,
    pings: u32,
    tracker: &mut Tracker,
    report: &mut ProbeReport,
) {
    let spec = std::sync::Arc::new(spec.clone());
    let probes = probe::plan(&spec, std::sync::Arc::new(|_| {}));
    for p in &probes {
        let cadence = p.cadence();
        let runs = match listed {
            Some(t) if p.listed(t) => 1,
            None if !cadence.needs_listing => 1,
            _ => 0,
        };
        let kind = p.kind(session.era());
        let runs = if kind.is_liveness() { pings } else { runs };
        for _ in 0..runs {
            let o = p
                .run(session, cadence.late_after.unwrap_or(cadence.deadline))
                .await;
            match (&o.result, kind.is_liveness()) {
                (Ok(_), true) => report.ping_ms.push(ms(o.duration)),
                (Err(f), true) => report.ping_errors.push(tracker.scrub(&f.detail)),
                (Ok(Answer::Health(h)), false) => report.health_check = Some(h.clone()),
                _ => {}
            }
            tracker.probe(&o, false, Instant::now());
        }
    }
}

/// List the tools into the report and the tracker; the listing, when it
/// answered.
async fn list(
    session: &dyn Session,
    timeout: Duration,
    tracker: &mut Tracker,
    report: &mut ProbeReport,
) -> Option<ToolSurface> {
    match session.list_tools(timeout).await {
        Ok(surface) => {
            report.tools = surface.names().map(str::to_owned).collect();
            report.tools_hash = Some(surface.hash.clone());
            report.tools_invalid = surface
                .tools
                .iter()
                .filter_map(|t| Some((t.name.clone(), t.problem.clone()?)))
                .collect();
            tracker.tools_listed(surface.clone());
            Some(surface)
        }
        Err(e) => {
            report.detail = tracker.scrub(&format!("tools/list: {e}"));
            None
        }
    }
}

/// Call `tool` once as a tool probe would: what it said (its text, or the
/// error), and the outcome.
async fn call(
    session: &dyn Session,
    tool: &str,
    args: &serde_json::Map<String, serde_json::Value>,
    timeout: Duration,
    tracker: &Tracker,
) -> (Result<String, String>, probe::ProbeOutcome) {
    let asked = ToolProbe {
        tool: tool.to_owned(),
        arguments: args.clone(),
        interval: timeout,
        request_timeout: timeout,
        max_request_timeout: timeout,
        conditions: Vec::new(),
        task: TaskMode::Never,
    };
    let (outcome, answer) = probe::tool::call(session, &asked, timeout, false, &|_| {}).await;
    let said = match (&answer, &outcome.result) {
        (Some(res), _) => {
            let text: Vec<String> = (res.content.iter())
                .filter_map(|c| c.as_text().map(|t| tracker.scrub(&t.text)))
                .collect();
            if res.is_error == Some(true) {
                Err(text.join("\n"))
            } else {
                Ok(text.join("\n"))
            }
        }
        (None, Err(f)) => Err(tracker.scrub(&f.detail)),
        (None, Ok(_)) => Ok(String::new()),
    };
    (said, outcome)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
