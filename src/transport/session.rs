//! One MCP client session: connect over stdio or Streamable HTTP, detect the
//! protocol era, and send the few requests a monitor needs, each under a
//! deadline. Errors are typed and classified so the verdict never has to read
//! error strings.
//!
//! rmcp is used with its traps disarmed (see the design notes): every request
//! gets a timeout, the response cache is off, death of an HTTP peer is read
//! from request failures because the service itself never closes.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use tokio::time::Instant;
use tokio_stream::wrappers::WatchStream;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, CustomRequest, DiscoverRequest, DiscoverRequestParams, Implementation,
    ListToolsRequest, PaginatedRequestParams, PingRequest, ProgressNotificationParam,
    ProtocolVersion, RequestMetaObject, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient};

use super::budget::{BUDGET, Meter};
use super::child::Child;
use super::error::classify;
use super::legacy_http::{Deadlines, LegacyLink};
use super::oauth2::TokenSource;
use super::progress::Activity;
use super::{
    BoxFuture, BoxStream, Connector, Era, Evidence, LinkFailure, OpenError, RequestError,
    ServerInfo, Session, SessionEvent, ToolCall, ToolCallError,
};
use crate::config::ServerSpec;

/// Largest single message accepted from a server.
pub(super) const MAX_LINE_BYTES: usize = BUDGET.message_bytes;
/// Most tools read from `tools/list` (pages are followed up to this).
pub const MAX_TOOLS: usize = 1024;
const MAX_TOOL_PAGES: usize = 16;

/// One page of a tool listing, its tools still as the server wrote them.
struct ToolsPage {
    tools: Vec<serde_json::Value>,
    next_cursor: Option<String>,
    ttl_ms: Option<u64>,
}

/// mcpmon's side of the session: identifies itself, answers the server's
/// pings (rmcp's default), and records progress notifications. (What else
/// a server sends is handled, or dropped, by the [`Meter`] before rmcp.)
#[derive(Clone)]
pub(super) struct Monitor {
    activity: Arc<Activity>,
    /// Offered in a legacy `initialize`.
    legacy_version: ProtocolVersion,
}

impl Monitor {
    /// mcpmon's side, recording progress into `activity`, offering
    /// `legacy_version` in an `initialize`.
    pub(super) fn new(activity: Arc<Activity>, legacy_version: ProtocolVersion) -> Self {
        Monitor {
            activity,
            legacy_version,
        }
    }
}

impl ClientHandler for Monitor {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcpmon", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(self.legacy_version.clone())
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.activity.note_progress(&params.progress_token);
        std::future::ready(())
    }
}

/// What carries a session's requests.
pub(super) enum Carrier {
    /// rmcp's service: stdio, and the modern era.
    Rmcp(RunningService<RoleClient, Monitor>),
    /// A legacy HTTP session rmcp opened and mcpmon holds itself.
    Legacy(Legacy),
}

/// A legacy link, and what initializing it again takes.
pub(super) struct Legacy {
    pub(super) link: Arc<LegacyLink>,
    pub(super) spec: Box<ServerSpec>,
    pub(super) http: super::Http,
    pub(super) version: ProtocolVersion,
}

/// An open session.
pub struct McpSession {
    pub(super) link: Carrier,
    /// What the server sends is metered here; tripped ends the session.
    pub(super) meter: Arc<Meter>,
    pub(super) child: Option<Child>,
    pub(super) era: Era,
    /// Whether the era was settled by the server's answer.
    pub(super) conclusive: bool,
    pub(super) info: ServerInfo,
    pub(super) activity: Arc<Activity>,
    /// OAuth tokens, when the server is configured with `oauth2`.
    pub(super) tokens: Option<Arc<TokenSource>>,
    /// The expiry of a static bearer token that is a JWT.
    pub(super) static_expiry: Option<std::time::SystemTime>,
    /// A legacy HTTP+SSE session's event stream: the session ends with it.
    pub(super) stream: Option<Arc<super::legacy_sse::StreamEnd>>,
}

/// Opens [`McpSession`]s to one configured server.
#[derive(Clone)]
pub struct McpConnector {
    /// The server.
    pub spec: ServerSpec,
    /// The HTTP clients: the shared ones, or for HTTPS their own.
    pub http: super::Http,
    /// What that client's TLS handshakes saw (HTTPS only).
    pub seen: Option<super::tls::Seen>,
}

impl McpConnector {
    /// A connector for `spec`: over the `shared` client, or for an HTTPS
    /// server a client of its own built from `base` (the shared client's
    /// settings), which records the certificates presented.
    pub fn new(
        spec: &ServerSpec,
        shared: &super::Http,
        base: impl FnOnce() -> reqwest::ClientBuilder,
    ) -> Result<McpConnector, super::tls::TlsError> {
        let (http, seen) = match &spec.transport {
            crate::config::TransportSpec::Http { url, tls, .. } if url.scheme() == "https" => {
                let default = crate::config::TlsSpec::default();
                let (http, seen) = super::tls::client(tls.as_deref().unwrap_or(&default), base())?;
                (http, Some(seen))
            }
            _ => (shared.clone(), None),
        };
        Ok(McpConnector {
            spec: spec.clone(),
            http,
            seen,
        })
    }
}

impl Connector for McpConnector {
    fn open(&self, hint: Option<Era>) -> BoxFuture<'_, Result<Box<dyn Session>, OpenError>> {
        Box::pin(async move {
            let s = McpSession::open(&self.spec, &self.http, hint).await?;
            Ok(Box::new(s) as Box<dyn Session>)
        })
    }

    fn certificate(&self) -> Option<super::tls::PeerCertificate> {
        self.seen.as_ref().and_then(super::tls::Seen::latest)
    }
}

impl McpSession {
    /// The stdio child, if this is a stdio session.
    pub fn child(&self) -> Option<&Child> {
        self.child.as_ref()
    }

    async fn liveness_request(&self, timeout: Duration) -> Result<Duration, RequestError> {
        let start = Instant::now();
        if let Some(answered) = self.legacy_ping(timeout).await {
            return answered;
        }
        let request = match self.era {
            Era::Legacy => ClientRequest::PingRequest(PingRequest::default()),
            Era::Modern => {
                ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {}))
            }
        };
        // A fallback shares the probe's one deadline. Its future is boxed so
        // that the lean ping's, boxed and moved on every probe, stays small.
        let left = timeout.saturating_sub(start.elapsed());
        match Box::pin(self.request(request, left)).await {
            Ok(_) => Ok(start.elapsed()),
            Err(RequestError::Timeout(_)) => Err(RequestError::Timeout(timeout)),
            Err(e) => Err(e),
        }
    }

    /// The tool surface. Each page is reduced to names and digests on a
    /// blocking thread as it arrives (a hostile page can hold megabytes of
    /// schema), and pages stop at the listing budget or [`MAX_TOOLS`].
    async fn tools(&self, timeout: Duration) -> Result<super::tools::ToolSurface, RequestError> {
        use super::tools::{Digested, ToolSurface};
        let budget = self.meter.budget();
        let (tool_bytes, listing_bytes) = (budget.tool_bytes, budget.listing_bytes);
        let mut kept: Vec<Digested> = Vec::new();
        let mut bytes = 0usize;
        let mut ttl = None;
        let mut cursor = None;
        let mut truncated = false;
        for _ in 0..MAX_TOOL_PAGES {
            let page = self.tools_page(cursor.take(), timeout).await?;
            // The listing is as fresh as its stalest page.
            if let Some(ms) = page.ttl_ms {
                let d = Duration::from_millis(ms);
                ttl = Some(ttl.map_or(d, |t: Duration| t.min(d)));
            }
            let tools = page.tools;
            let digested = tokio::task::spawn_blocking(move || {
                tools
                    .iter()
                    .map(|t| Digested::of(t, tool_bytes))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|_| RequestError::Unexpected)?;
            for d in digested {
                bytes = bytes.saturating_add(d.bytes);
                kept.push(d);
            }
            if kept.len() >= MAX_TOOLS || bytes > listing_bytes {
                kept.truncate(MAX_TOOLS);
                truncated = page.next_cursor.is_some();
                break;
            }
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => break,
            }
        }
        let mut surface = ToolSurface::from_digests(kept);
        // What rmcp dropped, a stdio line may have said (see `MeteredRead`).
        for t in &mut surface.tools {
            if let Some(support) = self.meter.task_support(&t.name) {
                t.task_support = support;
            }
        }
        surface.ttl = ttl;
        surface.truncated = truncated;
        Ok(surface)
    }

    /// One page of `tools/list`, over whichever link carries the session.
    async fn tools_page(
        &self,
        cursor: Option<String>,
        timeout: Duration,
    ) -> Result<ToolsPage, RequestError> {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let Carrier::Legacy(lean) = &self.link else {
            let request = ClientRequest::ListToolsRequest(ListToolsRequest {
                method: Default::default(),
                params,
                extensions: Default::default(),
            });
            let ServerResult::ListToolsResult(page) = self.request(request, timeout).await? else {
                return Err(RequestError::Unexpected);
            };
            return Ok(ToolsPage {
                ttl_ms: page.ttl_ms,
                next_cursor: page.next_cursor,
                tools: page
                    .tools
                    .into_iter()
                    .map(|t| serde_json::to_value(t).unwrap_or_default())
                    .collect(),
            });
        };
        let id = format!("mcpmon-{}", lean.link.next_number());
        let params = params.and_then(|p| serde_json::to_value(p).ok());
        let mut result = self
            .legacy_call(&id, "tools/list", params, None, Deadlines::within(timeout))
            .await
            .map_err(|e| e.into_request_error(timeout))?;
        let serde_json::Value::Array(tools) = result["tools"].take() else {
            return Err(RequestError::Unexpected);
        };
        Ok(ToolsPage {
            ttl_ms: result["ttlMs"].as_u64(),
            next_cursor: result["nextCursor"].as_str().map(str::to_owned),
            tools,
        })
    }

    async fn tool_call(&self, call: ToolCall) -> Result<CallToolResult, ToolCallError> {
        match &self.link {
            Carrier::Legacy(lean) => self.legacy_tool_call(lean, call).await,
            Carrier::Rmcp(service) => rmcp_tool_call(service, call).await,
        }
    }
}

/// A tool call through rmcp, which reports which deadline fired.
async fn rmcp_tool_call(
    service: &RunningService<RoleClient, Monitor>,
    call: ToolCall,
) -> Result<CallToolResult, ToolCallError> {
    let mut params = CallToolRequestParams::new(call.name);
    params.arguments = Some(call.arguments);
    if let Some(tp) = call.traceparent {
        let mut meta = serde_json::Map::new();
        meta.insert("traceparent".to_owned(), serde_json::Value::String(tp));
        params.meta = Some(meta.into());
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let (idle, max) = (call.timeout, call.max.max(call.timeout));
    let mut options = PeerRequestOptions::with_timeout(idle);
    if call.progress_resets {
        options = options
            .reset_timeout_on_progress()
            .with_max_total_timeout(max);
    }
    let peer = service.peer();
    let handle = tokio::time::timeout(max, peer.send_request_with_option(request, options))
        .await
        .map_err(|_| ToolCallError::MaxTimeout(max))?
        .map_err(|e| ToolCallError::Request(classify(e, idle)))?;
    match handle.await_response().await {
        Ok(ServerResult::CallToolResult(r)) => Ok(r),
        Ok(_) => Err(ToolCallError::Request(RequestError::Unexpected)),
        // rmcp reports which deadline fired by its length.
        Err(ServiceError::Timeout { timeout }) if timeout == max && idle != max => {
            Err(ToolCallError::MaxTimeout(max))
        }
        Err(ServiceError::Timeout { .. }) if !call.progress_resets => {
            Err(ToolCallError::Request(RequestError::Timeout(idle)))
        }
        Err(ServiceError::Timeout { .. }) => Err(ToolCallError::IdleTimeout(idle)),
        Err(e) => Err(ToolCallError::Request(classify(e, idle))),
    }
}

impl McpSession {
    /// A request rmcp does not type for both eras. rmcp reads every result
    /// into its own union and gives it back as JSON; what it drops of a
    /// shape it half knows (a 2025-11-25 `tasks/get`'s `pollInterval`), the
    /// caller takes from the answer that created the task.
    async fn json_request(
        &self,
        method: &'static str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, RequestError> {
        match &self.link {
            Carrier::Legacy(lean) => {
                let id = format!("mcpmon-{}", lean.link.next_number());
                self.legacy_call(&id, method, Some(params), None, Deadlines::within(timeout))
                    .await
                    .map_err(|e| e.into_request_error(timeout))
            }
            Carrier::Rmcp(_) => {
                // rmcp writes its own per-request envelope into `_meta`
                // (2026-07-28) over what the params carry; `_meta` given as
                // options goes on top of it, so an opt-in (the tasks
                // extension in `clientCapabilities`) survives.
                let mut params = params;
                let meta = match params.as_object_mut().and_then(|p| p.remove("_meta")) {
                    Some(serde_json::Value::Object(m)) => Some(RequestMetaObject(m.into())),
                    _ => None,
                };
                let request =
                    ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
                let result = self.request_with(request, timeout, meta).await?;
                serde_json::to_value(result).map_err(|_| RequestError::Unexpected)
            }
        }
    }

    async fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<ServerResult, RequestError> {
        self.request_with(request, timeout, None).await
    }

    /// A request through rmcp, with `meta` put into its `_meta` last.
    async fn request_with(
        &self,
        request: ClientRequest,
        timeout: Duration,
        meta: Option<RequestMetaObject>,
    ) -> Result<ServerResult, RequestError> {
        let Carrier::Rmcp(service) = &self.link else {
            return Err(RequestError::Unexpected);
        };
        let peer = service.peer();
        let mut options = PeerRequestOptions::with_timeout(timeout);
        options.meta = meta;
        // The send itself can block on a full channel; the deadline covers it too.
        let sent = tokio::time::timeout(timeout, peer.send_request_with_option(request, options))
            .await
            .map_err(|_| RequestError::Timeout(timeout))?
            .map_err(|e| classify(e, timeout))?;
        sent.await_response()
            .await
            .map_err(|e| classify(e, timeout))
    }
}

impl McpSession {
    /// Resolves when the link is gone for good, with the words of its end:
    /// the child's exit, the legacy stream's end, or the bound broken.
    /// (A Streamable HTTP link never ends by itself: its death is read
    /// from the requests that fail.)
    async fn end(&self) -> (LinkFailure, String) {
        let exited = async {
            match &self.child {
                Some(c) => format!("process {}", c.epitaph().await),
                None => std::future::pending().await,
            }
        };
        let stream_ended = async {
            match &self.stream {
                Some(s) => s.ended().await,
                None => std::future::pending().await,
            }
        };
        let words = tokio::select! {
            biased;
            exit = exited => exit,
            ended = stream_ended => ended,
            breach = self.meter.tripped() => breach.describe(self.meter.budget()),
        };
        // A stream cut for a broken bound is told by the bound.
        match self.meter.breach() {
            Some(b) => (b.failure(), b.describe(self.meter.budget())),
            None if self.child.is_some() => (LinkFailure::Exited, words),
            None => (LinkFailure::Unreachable, words),
        }
    }

    /// Each change of when the credentials expire, the first at once.
    fn credentials(&self) -> BoxStream<'_, SessionEvent> {
        let told = |expires, refreshable| {
            SessionEvent::Credentials(Some(super::Credentials {
                expires,
                refreshable,
            }))
        };
        match (&self.tokens, self.static_expiry) {
            (Some(t), _) => Box::pin(WatchStream::new(t.expiry()).map(move |e| match e {
                Some(e) => told(e, true),
                None => SessionEvent::Credentials(None),
            })),
            (None, Some(e)) => Box::pin(stream::once(async move { told(e, false) })),
            (None, None) => Box::pin(stream::empty()),
        }
    }
}

impl Session for McpSession {
    fn era(&self) -> Era {
        self.era
    }

    fn remembered_era(&self) -> Option<Era> {
        self.conclusive.then_some(self.era)
    }

    fn info(&self) -> &ServerInfo {
        &self.info
    }

    fn liveness(&self, timeout: Duration) -> BoxFuture<'_, Result<Duration, RequestError>> {
        Box::pin(self.liveness_request(timeout))
    }

    fn list_tools(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<super::tools::ToolSurface, RequestError>> {
        Box::pin(self.tools(timeout))
    }

    fn call_tool(&self, call: ToolCall) -> BoxFuture<'_, Result<CallToolResult, ToolCallError>> {
        Box::pin(self.tool_call(call))
    }

    fn request_json(
        &self,
        method: &'static str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<serde_json::Value, RequestError>> {
        Box::pin(self.json_request(method, params, timeout))
    }

    fn events(&self) -> BoxStream<'_, SessionEvent> {
        // Heard on any stream the server writes to (a legacy link has no
        // standalone one, only its answers' streams).
        let tools = stream::unfold((), |()| async {
            self.meter.tools_changed().await;
            Some((SessionEvent::ToolsChanged, ()))
        });
        let ended = stream::once(async {
            let (failure, words) = self.end().await;
            SessionEvent::Ended(failure, words)
        });
        Box::pin(stream::select(
            stream::select(tools, self.credentials()),
            ended,
        ))
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            process: (self.child.as_ref()).and_then(|c| super::procstat::sample(c.pid())),
            progress: self.activity.take(),
        }
    }

    /// Close politely: stop the service (closing stdin / ending the HTTP
    /// session), then the stdio shutdown sequence. Bounded by `grace * 4`.
    fn close(mut self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            match &mut self.link {
                Carrier::Rmcp(service) => {
                    let _ = service.close_with_timeout(grace).await;
                }
                Carrier::Legacy(lean) => lean.link.close(grace).await,
            }
            if let Some(child) = self.child.take() {
                child.shutdown(grace).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns for a session borrowed for `'a`.
    fn returned_size<'a, F: Future>(_: impl Fn(&'a McpSession, Duration) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A ping's future is boxed on every ping and written afresh, so its
    /// size is a cost of every ping. It held a second call's state beside
    /// the first (4 928 bytes in a release build) until a forgotten
    /// session's renewal moved into a future of its own (2 448).
    #[test]
    fn a_pings_future_holds_one_call() {
        let size = returned_size(McpSession::liveness_request);
        assert!(size <= 3 * 1024, "a ping's future is {size} bytes");
    }
}
