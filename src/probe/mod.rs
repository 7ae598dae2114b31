//! The probe layer: one module per probe kind, each a value of the same
//! shape, [`Probe::run`]`(session, deadline) -> ProbeOutcome`, the way
//! blackbox_exporter lays out its probers. A server's probes are built once
//! from its spec ([`plan`]); the caller (the supervisor's scheduler, or
//! `mcpmon probe` running the list once) times them and hands each outcome
//! to the state owner, which records sent, failed and duration in one place.
//!
//! Failure reasons are a bounded enum ([`FailureReason`]); error text stays
//! in [`Failure::detail`] and never becomes a label.
//!
//! This layer imports only [`crate::transport`] and [`crate::config`].

pub mod conditions;
pub mod health_check;
pub mod liveness;
pub mod prompt;
mod request;
pub mod resource;
pub mod task;
pub mod tool;
pub mod trace;

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Protocol, ServerSpec};
use crate::transport::tools::ToolSurface;
use crate::transport::{BoxFuture, Era, RequestError, Session, ToolCallError};

/// One probe of one server, as a value. Each kind is one module
/// implementing this; the scheduler and `mcpmon probe` know no kind.
pub trait Probe: Send + Sync {
    /// What it probes in a session of `era`: the `probe` label.
    fn kind(&self, era: Era) -> ProbeKind;
    /// How often it runs and under which deadlines.
    fn cadence(&self) -> Cadence;
    /// A tool listing came: whether the probe runs on a server listing
    /// `tools` (a kind may also read from it how to run).
    fn listed(&self, tools: &ToolSurface) -> bool {
        let _ = tools;
        true
    }
    /// Its name in a failure's detail and log line (`health_check`, `tool
    /// x`); the liveness probe goes unnamed.
    fn name(&self) -> Option<&str> {
        None
    }
    /// Probe once, under `deadline`.
    fn run<'a>(
        &'a self,
        session: &'a dyn Session,
        deadline: Duration,
    ) -> BoxFuture<'a, ProbeOutcome>;
}

/// When a probe runs and how long it may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    /// Between runs (jittered per server); a run due while the last one is
    /// still in flight is skipped, never stacked.
    pub every: Duration,
    /// The deadline each run gets.
    pub deadline: Duration,
    /// When a run still in flight is reported late (and kept: its answer,
    /// whenever it comes, is still evidence). Without one, the run is
    /// watched for evidence from its start.
    pub late_after: Option<Duration>,
    /// Whether the probe waits for a listing to say it runs
    /// ([`Probe::listed`]); otherwise it runs from the session's start.
    pub needs_listing: bool,
}

impl Cadence {
    /// A configured probe's: every `every`, each run under `deadline`,
    /// watched from its start, from the session's start.
    pub fn synthetic(every: Duration, deadline: Duration) -> Self {
        Cadence {
            every,
            deadline,
            late_after: None,
            needs_listing: false,
        }
    }
}

/// Where a task probe tells each poll.
pub type TaskSink = Arc<dyn Fn(task::TaskSeen) + Send + Sync>;

/// A server's probes, built once from its spec: liveness first, then its
/// health check, then each configured synthetic probe.
pub fn plan(spec: &Arc<ServerSpec>, tasks: TaskSink) -> Vec<Box<dyn Probe>> {
    let mut probes: Vec<Box<dyn Probe>> = vec![
        Box::new(liveness::Liveness::of(&spec.settings)),
        Box::new(health_check::HealthCheck::of(spec.clone())),
    ];
    for i in 0..spec.probes.tools.len() {
        probes.push(Box::new(tool::ToolProbeRun::of(
            spec.clone(),
            i,
            tasks.clone(),
        )));
    }
    probes.extend(request::Scheduled::<resource::ResourceRead>::all(spec));
    probes.extend(request::Scheduled::<prompt::PromptGet>::all(spec));
    probes
}

/// The kinds a server's series carry from the start: liveness as its
/// protocol allows, the health check, and each configured kind.
pub fn kinds(spec: &ServerSpec) -> Vec<ProbeKind> {
    let mut kinds = match &spec.protocol {
        Protocol::Pinned(v) if crate::config::is_modern(v) => vec![ProbeKind::Discover],
        Protocol::Pinned(_) => vec![ProbeKind::Ping],
        Protocol::Auto => vec![ProbeKind::Ping, ProbeKind::Discover],
    };
    kinds.push(ProbeKind::HealthCheck);
    if !spec.probes.tools.is_empty() {
        kinds.push(ProbeKind::Tool);
    }
    if !spec.probes.resources.is_empty() {
        kinds.push(ProbeKind::Resource);
    }
    if !spec.probes.prompts.is_empty() {
        kinds.push(ProbeKind::Prompt);
    }
    kinds
}

/// What was probed; the `probe` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ProbeKind {
    /// Legacy liveness: `ping`.
    Ping,
    /// Modern liveness: `server/discover`.
    Discover,
    /// The server's own health tool.
    HealthCheck,
    /// A configured synthetic tool call.
    Tool,
    /// A configured `resources/read`.
    Resource,
    /// A configured `prompts/get`.
    Prompt,
}

impl ProbeKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The MCP method it sends (the conventions' `mcp.method.name`).
    pub fn method(self) -> &'static str {
        match self {
            ProbeKind::Ping => "ping",
            ProbeKind::Discover => "server/discover",
            ProbeKind::HealthCheck | ProbeKind::Tool => "tools/call",
            ProbeKind::Resource => "resources/read",
            ProbeKind::Prompt => "prompts/get",
        }
    }

    /// Whether this is a liveness probe (its latency is what "slow" means).
    pub fn is_liveness(self) -> bool {
        matches!(self, ProbeKind::Ping | ProbeKind::Discover)
    }
}

/// Why a probe failed: bounded, safe as a label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum FailureReason {
    /// No answer before the deadline.
    Timeout,
    /// The transport closed.
    Closed,
    /// Connection refused or reset, or the name does not resolve.
    Unreachable,
    /// HTTP 401: credentials missing or refused.
    Unauthenticated,
    /// HTTP 403: credentials lack a permission.
    Forbidden,
    /// HTTP 429 (or 503 with `Retry-After`): asked to call less.
    Throttled,
    /// Another transport failure (HTTP status, TLS, protocol violation).
    Transport,
    /// A JSON-RPC error answer.
    RpcError,
    /// An answer that is not the expected result.
    InvalidResult,
    /// A tool answered `isError: true`.
    ToolError,
    /// The health tool answered in no readable shape.
    Unreadable,
    /// A tool probe's task ended `failed`, or was cancelled by the server.
    TaskFailed,
    /// A tool probe's task stopped advancing for its whole `ttl`.
    TaskStuck,
    /// A tool probe's task asked for input (elicitation), which a monitor
    /// cannot give.
    InputRequired,
    /// A resource probe's URI is one the server does not have.
    ResourceNotFound,
    /// A prompt probe's prompt, as configured, is refused: the server has
    /// none of that name, or it takes other arguments.
    PromptRejected,
}

impl FailureReason {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Which deadline cancelled a synthetic tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Deadline {
    /// No answer and no progress for the request timeout.
    RequestTimeout,
    /// The maximum request timeout, whatever the progress.
    MaxRequestTimeout,
}

impl Deadline {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a probe that answered said.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A liveness probe or tool call answered.
    Alive,
    /// The health tool answered; what it said.
    Health(health_check::HealthReport),
}

/// How a probe failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// Bounded reason.
    pub reason: FailureReason,
    /// What happened, for logs and JSON (not yet scrubbed of secrets).
    pub detail: String,
    /// The failure means the transport itself is gone.
    pub link_lost: bool,
    /// For tool calls: the deadline that cancelled it.
    pub cancelled: Option<Deadline>,
    /// For throttled probes: how long the server asked to wait.
    pub retry_after: Option<Duration>,
    /// For JSON-RPC error answers: the code (the conventions' `error.type`).
    pub code: Option<i32>,
}

impl Failure {
    /// A failed request, classified.
    pub fn from_request(e: &RequestError) -> Failure {
        let reason = match e {
            RequestError::Timeout(_) => FailureReason::Timeout,
            RequestError::Closed => FailureReason::Closed,
            RequestError::Unreachable(_) => FailureReason::Unreachable,
            RequestError::Unauthenticated(_) => FailureReason::Unauthenticated,
            RequestError::Forbidden(_) => FailureReason::Forbidden,
            RequestError::Throttled { .. } => FailureReason::Throttled,
            RequestError::Transport(_) => FailureReason::Transport,
            RequestError::Rpc { .. } => FailureReason::RpcError,
            RequestError::Unexpected => FailureReason::InvalidResult,
        };
        Failure {
            reason,
            detail: e.to_string(),
            link_lost: e.is_transport_death(),
            cancelled: None,
            retry_after: match e {
                RequestError::Throttled { retry_after, .. } => *retry_after,
                _ => None,
            },
            code: match e {
                RequestError::Rpc { code, .. } => Some(*code),
                _ => None,
            },
        }
    }

    /// A tool that answered `isError: true`.
    pub fn tool_error() -> Failure {
        Failure {
            reason: FailureReason::ToolError,
            detail: "the tool answered isError: true".to_owned(),
            link_lost: false,
            cancelled: None,
            retry_after: None,
            code: None,
        }
    }

    /// The failure with the probe's trace id in its detail, so the log line
    /// and the event it ends up in lead to the server's trace.
    pub fn traced(mut self, trace_id: &str) -> Failure {
        self.detail = format!("{} (trace {trace_id})", self.detail);
        self
    }

    /// A failed tool call, classified.
    pub fn from_tool_call(e: &ToolCallError) -> Failure {
        match e {
            ToolCallError::Request(e) => Failure::from_request(e),
            ToolCallError::IdleTimeout(_) | ToolCallError::MaxTimeout(_) => Failure {
                reason: FailureReason::Timeout,
                detail: e.to_string(),
                link_lost: false,
                cancelled: Some(match e {
                    ToolCallError::MaxTimeout(_) => Deadline::MaxRequestTimeout,
                    _ => Deadline::RequestTimeout,
                }),
                retry_after: None,
                code: None,
            },
        }
    }
}

/// The result of one probe, as every kind reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeOutcome {
    /// What was probed.
    pub kind: ProbeKind,
    /// For synthetic probes, what they probed: the tool called, the
    /// resource read, the prompt got (a configured name, safe as a label).
    pub tool: Option<Arc<str>>,
    /// From send to answer or failure.
    pub duration: Duration,
    /// What it said, or how it failed.
    pub result: Result<Answer, Failure>,
    /// The trace it was sent under (its span's ids), if it had one.
    pub trace: Option<Box<trace::Trace>>,
    /// Its conditions' outcomes (none unless configured and answered).
    pub conditions: Vec<conditions::Checked>,
}

impl ProbeOutcome {
    /// The bounded failure reason this outcome counts under, if it failed.
    /// An answered health check that reports an error or cannot be read
    /// counts as a failed probe too.
    pub fn failure(&self) -> Option<FailureReason> {
        match &self.result {
            Err(f) => Some(f.reason),
            Ok(Answer::Health(r)) if r.is_error => Some(FailureReason::ToolError),
            Ok(Answer::Health(r)) if r.status == health_check::Reported::Unreadable => {
                Some(FailureReason::Unreadable)
            }
            Ok(_) => None,
        }
    }

    /// Whether the transport is gone.
    pub fn link_lost(&self) -> bool {
        matches!(&self.result, Err(f) if f.link_lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    /// Label values are a contract with dashboards and alerts: derived
    /// names must stay what they were.
    #[test]
    fn label_values_are_the_documented_ones() {
        let names = |all: &[&'static str]| all.join(",");
        let kinds: Vec<&str> = ProbeKind::VARIANTS.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names(&kinds),
            "ping,discover,health_check,tool,resource,prompt"
        );
        let reasons: Vec<&str> = FailureReason::VARIANTS.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names(&reasons),
            "timeout,closed,unreachable,unauthenticated,forbidden,throttled,transport,\
             rpc_error,invalid_result,tool_error,unreadable,task_failed,task_stuck,input_required,\
             resource_not_found,prompt_rejected"
        );
        let deadlines: Vec<&str> = Deadline::VARIANTS.iter().map(|d| d.as_str()).collect();
        assert_eq!(names(&deadlines), "request_timeout,max_request_timeout");
    }
}
