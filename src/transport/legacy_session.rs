//! The requests of a legacy HTTP session mcpmon holds itself (see
//! [`super::legacy_http`]): ping, listing and tool calls, each one POST with
//! rmcp's deadline semantics, and a session the server forgot (404)
//! initialized again and the request sent once more, within the same
//! deadlines.

use std::time::Duration;

use rmcp::model::CallToolResult;
use tokio::time::Instant;

use super::legacy_http::{CallError, Deadlines};
use super::session::{Carrier, Legacy, McpSession};
use super::{RequestError, ToolCall, ToolCallError};

impl McpSession {
    /// A legacy HTTP ping over the legacy link (see [`super::legacy_http`]);
    /// `None` when this session is carried by rmcp.
    pub async fn legacy_ping(&self, timeout: Duration) -> Option<Result<Duration, RequestError>> {
        let Carrier::Legacy(lean) = &self.link else {
            return None;
        };
        let start = Instant::now();
        let id = format!("mcpmon-ping-{}", lean.link.next_number());
        Some(
            self.legacy_call(&id, "ping", None, None, Deadlines::within(timeout))
                .await
                .map(|_| start.elapsed())
                .map_err(|e| e.into_request_error(timeout)),
        )
    }

    /// A request over the legacy link; a session the server forgot (404) is
    /// initialized again and the request sent once more, within the same
    /// deadlines.
    pub(super) async fn legacy_call(
        &self,
        id: &str,
        method: &str,
        params: Option<serde_json::Value>,
        progress: Option<u64>,
        deadlines: Deadlines,
    ) -> Result<serde_json::Value, CallError> {
        let Carrier::Legacy(lean) = &self.link else {
            return Err(RequestError::Unexpected.into());
        };
        let on_progress = || {
            if let Some(p) = progress {
                self.activity.note_number(p);
            }
        };
        // One call in the loop, so every ping's future holds one call's.
        let mut renewed = false;
        loop {
            match lean
                .link
                .call(
                    id,
                    method,
                    params.clone(),
                    progress,
                    &on_progress,
                    deadlines,
                )
                .await
            {
                Err(CallError::Expired) if !renewed => {
                    // Boxed: a handshake's future is kilobytes, and inline
                    // it would be part of (and written with) every ping's
                    // future, where it is rare.
                    Box::pin(self.legacy_renew(lean, deadlines)).await?;
                    renewed = true;
                }
                Err(CallError::Expired) => {
                    return Err(RequestError::Transport(
                        "HTTP 404 Not Found: the server forgot the session again".to_owned(),
                    )
                    .into());
                }
                other => return other,
            }
        }
    }

    /// Initialize a session the server forgot again, within `deadlines`.
    async fn legacy_renew(&self, lean: &Legacy, deadlines: Deadlines) -> Result<(), CallError> {
        let again = tokio::time::timeout_at(
            deadlines.max_at,
            super::open::open_http(
                &lean.spec,
                &lean.http,
                &super::open::Plan::Initialize(lean.version.clone()),
                deadlines.max_at,
            ),
        )
        .await;
        match again {
            Err(_) => Err(CallError::Max),
            Ok(Err(e)) => Err(RequestError::Transport(format!(
                "the session expired and initializing again failed: {e}"
            ))
            .into()),
            Ok(Ok(fresh)) => match fresh.link {
                Carrier::Legacy(new) => {
                    lean.link.renew(&new.link);
                    tracing::info!("session expired on the server; initialized again");
                    Ok(())
                }
                Carrier::Rmcp(service) => {
                    let _ = service.cancel().await;
                    Err(RequestError::Unexpected.into())
                }
            },
        }
    }

    /// A tool call over the legacy link, with rmcp's deadline semantics:
    /// cancelled (`notifications/cancelled`) when a deadline fires.
    pub(super) async fn legacy_tool_call(
        &self,
        lean: &Legacy,
        call: ToolCall,
    ) -> Result<CallToolResult, ToolCallError> {
        let (idle, max) = (call.timeout, call.max.max(call.timeout));
        let n = lean.link.next_number();
        let id = format!("mcpmon-{n}");
        let mut meta = serde_json::Map::new();
        meta.insert("progressToken".to_owned(), n.into());
        if let Some(tp) = call.traceparent {
            meta.insert("traceparent".to_owned(), serde_json::Value::String(tp));
        }
        let params = serde_json::json!({
            "name": call.name,
            "arguments": call.arguments,
            "_meta": meta,
        });
        let deadlines = Deadlines {
            idle,
            max_at: Instant::now() + max,
            resets: call.progress_resets,
        };
        let result = self
            .legacy_call(&id, "tools/call", Some(params), Some(n), deadlines)
            .await;
        let err = match result {
            Ok(v) => {
                return serde_json::from_value::<CallToolResult>(v)
                    .map_err(|_| ToolCallError::Request(RequestError::Unexpected));
            }
            Err(e) => e,
        };
        let gave_up = match err {
            CallError::Max if idle != max => ToolCallError::MaxTimeout(max),
            CallError::Idle | CallError::Max if !call.progress_resets => {
                ToolCallError::Request(RequestError::Timeout(idle))
            }
            CallError::Idle | CallError::Max => ToolCallError::IdleTimeout(idle),
            CallError::Expired => ToolCallError::Request(RequestError::Closed),
            CallError::Request(e) => return Err(ToolCallError::Request(e)),
        };
        lean.link.cancel(&id, &gave_up.to_string());
        Err(gave_up)
    }
}
