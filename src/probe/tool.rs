//! The synthetic tool probe: call a configured tool the way a real client
//! would. Its deadline is pushed back by each progress notification, never
//! past `max_request_timeout`; on expiry the call is cancelled and the
//! session stays open. A tool that supports tasks is called as one
//! ([`super::task`]), polled to its end within the same cap.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::conditions::{self, Vars};
use super::task::{self, Limits, Report};
use super::{Answer, Failure, ProbeKind, ProbeOutcome};
use crate::config::ToolProbe;
use crate::config::condition::Subject;
use crate::transport::{CallToolResult, Session, ToolCall};

/// Call `spec.tool`, as a task when `as_task` (each poll told to
/// `report`). `deadline` is the request (idle) timeout; the cap is the
/// spec's `max_request_timeout`.
pub async fn run(
    session: &dyn Session,
    spec: &ToolProbe,
    deadline: Duration,
    as_task: bool,
    report: Report<'_>,
) -> ProbeOutcome {
    let start = Instant::now();
    let trace = super::trace::new();
    let tool: Arc<str> = Arc::from(spec.tool.as_str());
    let called: Result<CallToolResult, Failure> = if as_task {
        let params = task::create_params(
            session.era(),
            &spec.tool,
            &spec.arguments,
            &trace.traceparent,
            spec.max_request_timeout,
        );
        let limits = Limits {
            request: deadline,
            max: spec.max_request_timeout.max(deadline),
        };
        task::call(session, &tool, params, limits, report).await
    } else {
        let call = ToolCall {
            name: spec.tool.clone(),
            arguments: spec.arguments.clone(),
            timeout: deadline,
            max: spec.max_request_timeout,
            progress_resets: true,
            traceparent: Some(trace.traceparent.clone()),
        };
        session
            .call_tool(call)
            .await
            .map_err(|e| Failure::from_tool_call(&e))
    };
    let mut conditions = Vec::new();
    let result = match called {
        Ok(r) if r.is_error == Some(true) => Err(Failure::tool_error().traced(&trace.trace_id)),
        Ok(r) => {
            let vars = Vars {
                json: vec![("result", conditions::tool_result(&r))],
                duration: Some(start.elapsed()),
            };
            conditions = conditions::check(&spec.conditions, Subject::ToolResult, vars).await;
            Ok(Answer::Alive)
        }
        Err(f) => Err(f.traced(&trace.trace_id)),
    };
    ProbeOutcome {
        kind: ProbeKind::Tool,
        tool: Some(tool),
        duration: start.elapsed(),
        result,
        trace: Some(Box::new(trace)),
        conditions,
    }
}
