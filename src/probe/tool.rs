//! The synthetic tool probe: call a configured tool the way a real client
//! would. Its deadline is pushed back by each progress notification, never
//! past `max_request_timeout`; on expiry the call is cancelled and the
//! session stays open.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::conditions::{self, Vars};
use super::{Answer, Failure, ProbeKind, ProbeOutcome};
use crate::config::ToolProbe;
use crate::config::condition::Subject;
use crate::transport::{Session, ToolCall};

/// Call `spec.tool`. `deadline` is the request (idle) timeout; the cap is
/// the spec's `max_request_timeout`.
pub async fn run(session: &dyn Session, spec: &ToolProbe, deadline: Duration) -> ProbeOutcome {
    let start = Instant::now();
    let trace = super::trace::new();
    let call = ToolCall {
        name: spec.tool.clone(),
        arguments: spec.arguments.clone(),
        timeout: deadline,
        max: spec.max_request_timeout,
        progress_resets: true,
        traceparent: Some(trace.traceparent.clone()),
    };
    let mut conditions = Vec::new();
    let result = match session.call_tool(call).await {
        Ok(r) if r.is_error == Some(true) => Err(Failure::tool_error().traced(&trace.trace_id)),
        Ok(r) => {
            let vars = Vars {
                json: vec![("result", conditions::tool_result(&r))],
                duration: Some(start.elapsed()),
            };
            conditions = conditions::check(&spec.conditions, Subject::ToolResult, vars).await;
            Ok(Answer::Alive)
        }
        Err(e) => Err(Failure::from_tool_call(&e).traced(&trace.trace_id)),
    };
    ProbeOutcome {
        kind: ProbeKind::Tool,
        tool: Some(Arc::from(spec.tool.as_str())),
        duration: start.elapsed(),
        result,
        trace: Some(Box::new(trace)),
        conditions,
    }
}
