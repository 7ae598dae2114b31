//! `mcpmon probe`: one session, a few liveness probes, the health_check tool
//! if listed, an optional tool call: the service's probe layer run once, and
//! the same evidence and judgment.

use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;

use crate::config::ServerSpec;
use crate::probe::health_check::{HealthCheckSpec, HealthReport};
use crate::probe::{self, Answer};
use crate::state::evidence::Tracker;
use crate::state::verdict::{Reason, State};
use crate::transport::session::McpSession;
use crate::transport::{Era, ServerInfo, Session, ToolCall};

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

/// Run one probe against `spec`: open, list, ping, check health, call,
/// and judge it all as the service would.
pub async fn probe(spec: &ServerSpec, http: &reqwest::Client, opts: &ProbeOptions) -> ProbeReport {
    let s = &spec.settings;
    let mut tracker = Tracker::new(spec, Instant::now());
    let mut report = ProbeReport::new(&spec.id);
    let started = Instant::now();
    let session = match McpSession::open(spec, http, None).await {
        Ok(session) => session,
        Err(e) => {
            let reason = Reason::from(e.failure);
            tracker.link_down(reason, &e.to_string(), Instant::now());
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
    list(session, s.request_timeout.0, &mut tracker, &mut report).await;
    let (era, info) = (session.era(), session.info().clone());
    tracker.session_opened(era, info, handshake, Instant::now());
    for _ in 0..opts.pings {
        let o = probe::liveness::run(session, s.ping_timeout.0).await;
        match &o.result {
            Ok(_) => report.ping_ms.push(ms(o.duration)),
            Err(f) => report.ping_errors.push(tracker.scrub(&f.detail)),
        }
        tracker.probe(&o, false, Instant::now());
    }
    if report.tools.iter().any(|t| t == &s.health_check_tool) {
        let hc = HealthCheckSpec::of(s);
        let o = probe::health_check::run(session, &hc, s.health_check_timeout.0).await;
        if let Ok(Answer::Health(h)) = &o.result {
            report.health_check = Some(h.clone());
        }
        tracker.probe(&o, false, Instant::now());
    }
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

/// List the tools into the report and the tracker.
async fn list(
    session: &dyn Session,
    timeout: Duration,
    tracker: &mut Tracker,
    report: &mut ProbeReport,
) {
    match session.list_tools(timeout).await {
        Ok(surface) => {
            report.tools = surface.names().map(str::to_owned).collect();
            report.tools_hash = Some(surface.hash.clone());
            report.tools_invalid = surface
                .tools
                .iter()
                .filter_map(|t| Some((t.name.clone(), t.problem.clone()?)))
                .collect();
            tracker.tools_listed(surface);
        }
        Err(e) => report.detail = tracker.scrub(&format!("tools/list: {e}")),
    }
}

/// Call `tool` once: what it said (its text, or the error), and the
/// outcome as a tool probe's.
async fn call(
    session: &dyn Session,
    tool: &str,
    args: &serde_json::Map<String, serde_json::Value>,
    timeout: Duration,
    tracker: &Tracker,
) -> (Result<String, String>, probe::ProbeOutcome) {
    let start = Instant::now();
    let r = session
        .call_tool(ToolCall {
            name: tool.to_owned(),
            arguments: args.clone(),
            timeout,
            max: timeout,
            progress_resets: false,
            traceparent: Some(probe::trace::new().traceparent),
        })
        .await;
    let took = start.elapsed();
    let said = match &r {
        Ok(res) => {
            let text: Vec<String> = res
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| tracker.scrub(&t.text)))
                .collect();
            if res.is_error == Some(true) {
                Err(text.join("\n"))
            } else {
                Ok(text.join("\n"))
            }
        }
        Err(e) => Err(tracker.scrub(&e.to_string())),
    };
    let result = match r {
        Ok(res) if res.is_error == Some(true) => Err(probe::Failure::tool_error()),
        Ok(_) => Ok(Answer::Alive),
        Err(e) => Err(probe::Failure::from_tool_call(&e)),
    };
    let outcome = probe::ProbeOutcome {
        kind: probe::ProbeKind::Tool,
        tool: None,
        duration: took,
        result,
        trace: None,
        conditions: Vec::new(),
    };
    (said, outcome)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
