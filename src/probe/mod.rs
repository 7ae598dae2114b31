//! The probe layer: one module per probe kind, each one async function of the
//! same shape, `(session, spec, deadline) -> ProbeOutcome`, the way
//! blackbox_exporter lays out its probers. A probe only probes: the caller
//! (the supervisor, or `mcpmon probe`) schedules it and hands the outcome to
//! the state owner, which records sent, failed and duration in one place.
//!
//! Failure reasons are a bounded enum ([`FailureReason`]); error text stays
//! in [`Failure::detail`] and never becomes a label.
//!
//! This layer imports only [`crate::transport`] and [`crate::config`].

pub mod conditions;
pub mod health_check;
pub mod liveness;
pub mod task;
pub mod tool;
pub mod trace;

use std::sync::Arc;
use std::time::Duration;

use crate::transport::{RequestError, ToolCallError};

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
}

impl ProbeKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        self.into()
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
    /// For tool probes, the tool (a configured name, safe as a label).
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
        assert_eq!(names(&kinds), "ping,discover,health_check,tool");
        let reasons: Vec<&str> = FailureReason::VARIANTS.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names(&reasons),
            "timeout,closed,unreachable,unauthenticated,forbidden,throttled,transport,\
             rpc_error,invalid_result,tool_error,unreadable,task_failed,task_stuck,input_required"
        );
        let deadlines: Vec<&str> = Deadline::VARIANTS.iter().map(|d| d.as_str()).collect();
        assert_eq!(names(&deadlines), "request_timeout,max_request_timeout");
    }
}
