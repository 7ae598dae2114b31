//! The synthetic tool probe: call a configured tool the way a real client
//! would. Its deadline is pushed back by each progress notification, never
//! past `max_request_timeout`; on expiry the call is cancelled and the
//! session stays open. A tool that supports tasks is called as one
//! ([`super::task`]), polled to its end within the same cap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::conditions::{self, Vars};
use super::task::{self, Limits, Report};
use super::{Answer, Cadence, Failure, Probe, ProbeKind, ProbeOutcome, TaskSink};
use crate::config::ServerSpec;
use crate::config::condition::Subject;
use crate::config::probes::ToolProbe;
use crate::transport::tools::ToolSurface;
use crate::transport::{BoxFuture, CallToolResult, Era, Session, ToolCall};

/// One configured tool probe of a server.
pub struct ToolProbeRun {
    spec: Arc<ServerSpec>,
    index: usize,
    /// `tool <name>`, for details and logs.
    name: String,
    /// Whether the latest listing says to call it as a task.
    as_task: AtomicBool,
    tasks: TaskSink,
}

impl ToolProbeRun {
    /// Tool probe `index` of `spec`, its tasks' polls told to `tasks`.
    pub fn of(spec: Arc<ServerSpec>, index: usize, tasks: TaskSink) -> Self {
        let name = format!("tool {}", spec.probes.tools[index].tool);
        ToolProbeRun {
            spec,
            index,
            name,
            as_task: AtomicBool::new(false),
            tasks,
        }
    }

    fn probe(&self) -> &ToolProbe {
        &self.spec.probes.tools[self.index]
    }
}

impl Probe for ToolProbeRun {
    fn kind(&self, _: Era) -> ProbeKind {
        ProbeKind::Tool
    }

    fn cadence(&self) -> Cadence {
        let p = self.probe();
        Cadence::synthetic(p.interval, p.request_timeout)
    }

    /// Runs whatever the listing says (a tool missing from it is a failed
    /// call, which is news); reads whether to call it as a task.
    fn listed(&self, tools: &ToolSurface) -> bool {
        let p = self.probe();
        let support = (tools.tools.iter().find(|t| t.name == p.tool))
            .map(|t| t.task_support)
            .unwrap_or_default();
        let as_task = task::wanted(p.task, support);
        self.as_task.store(as_task, Ordering::Relaxed);
        true
    }

    fn name(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn run<'a>(
        &'a self,
        session: &'a dyn Session,
        deadline: Duration,
    ) -> BoxFuture<'a, ProbeOutcome> {
        let as_task = self.as_task.load(Ordering::Relaxed);
        Box::pin(async move {
            let report = &*self.tasks;
            call(session, self.probe(), deadline, as_task, report)
                .await
                .0
        })
    }
}

/// Call `spec.tool`, as a task when `as_task` (each poll told to
/// `report`). `deadline` is the request (idle) timeout; the cap is the
/// spec's `max_request_timeout`. The outcome, and the tool's result when
/// it answered.
pub async fn call(
    session: &dyn Session,
    spec: &ToolProbe,
    deadline: Duration,
    as_task: bool,
    report: Report<'_>,
) -> (ProbeOutcome, Option<CallToolResult>) {
    let start = Instant::now();
    let trace = super::trace::new();
    let tool: Arc<str> = Arc::from(spec.tool.as_str());
    let called: Result<CallToolResult, Failure> = if as_task {
        let params = task::create_params(
            session.era(),
            &spec.tool,
            &spec.arguments,
            &trace.traceparent(),
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
            traceparent: Some(trace.traceparent()),
        };
        session
            .call_tool(call)
            .await
            .map_err(|e| Failure::from_tool_call(&e))
    };
    let mut conditions = Vec::new();
    let (result, answer) = match called {
        Ok(r) if r.is_error == Some(true) => (
            Err(Failure::tool_error().traced(&trace.trace_hex())),
            Some(r),
        ),
        Ok(r) => {
            let vars = Vars {
                json: vec![("result", conditions::tool_result(&r))],
                duration: Some(start.elapsed()),
            };
            conditions = conditions::check(&spec.conditions, Subject::ToolResult, vars).await;
            (Ok(Answer::Alive), Some(r))
        }
        Err(f) => (Err(f.traced(&trace.trace_hex())), None),
    };
    let outcome = ProbeOutcome {
        kind: ProbeKind::Tool,
        tool: Some(tool),
        duration: start.elapsed(),
        result,
        trace: Some(Box::new(trace)),
        conditions,
    };
    (outcome, answer)
}
