//! One MCP client session: connect over stdio or Streamable HTTP, detect the
//! protocol era, and send the few requests a monitor needs, each under a
//! deadline. Errors are typed and classified so the verdict never has to read
//! error strings.
//!
//! rmcp is used with its traps disarmed (see the design notes): every request
//! gets a timeout, the response cache is off, death of an HTTP peer is read
//! from request failures because the service itself never closes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, DiscoverRequest, DiscoverRequestParams, Implementation, ListToolsRequest,
    PaginatedRequestParams, PingRequest, ProgressNotificationParam, ProtocolVersion, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;

use crate::lean_ping::{Lean, LeanPinger, Recorder};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientCacheConfig, ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde::Serialize;

use crate::child::{self, Child};
use crate::config::{MODERN_VERSION, Protocol, ServerSpec, TransportSpec};
use crate::health_check::HealthReport;
use crate::verdict::Reason;

/// Largest single stdio message accepted from a server.
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Most tools read from `tools/list` (pages are followed up to this).
pub const MAX_TOOLS: usize = 1024;
const MAX_TOOL_PAGES: usize = 16;

/// The protocol era a session speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// `initialize` handshake, liveness by `ping`.
    Legacy,
    /// No handshake, liveness by `server/discover`.
    Modern,
}

/// Who the server says it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    /// Negotiated protocol revision.
    pub protocol_version: String,
    /// Implementation name.
    pub name: String,
    /// Implementation version.
    pub version: String,
}

/// Why a request failed, classified.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No answer before the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The transport is gone (stdio pipe closed).
    #[error("transport closed")]
    Closed,
    /// Connection refused or reset, or the name does not resolve.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// Any other transport failure (HTTP status, TLS, protocol violation).
    #[error("transport error: {0}")]
    Transport(String),
    /// The server answered with a JSON-RPC error.
    #[error("server error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i32,
        /// Its message, truncated.
        message: String,
    },
    /// The server answered with something that is not the expected result.
    #[error("unexpected answer")]
    Unexpected,
}

impl RequestError {
    /// Every value [`RequestError::label`] can return.
    pub const LABELS: [&'static str; 6] = [
        "timeout",
        "closed",
        "unreachable",
        "transport",
        "rpc_error",
        "invalid_result",
    ];

    /// True when the failure means the link itself is gone.
    pub fn is_transport_death(&self) -> bool {
        matches!(self, RequestError::Closed | RequestError::Unreachable(_))
    }

    /// The bounded label value for `mcpmon_probe_failures_total{reason}`.
    pub fn label(&self) -> &'static str {
        match self {
            RequestError::Timeout(_) => "timeout",
            RequestError::Closed => "closed",
            RequestError::Unreachable(_) => "unreachable",
            RequestError::Transport(_) => "transport",
            RequestError::Rpc { .. } => "rpc_error",
            RequestError::Unexpected => "invalid_result",
        }
    }

    fn classify(e: ServiceError, timeout: Duration) -> RequestError {
        match e {
            ServiceError::Timeout { .. } => RequestError::Timeout(timeout),
            ServiceError::TransportClosed => RequestError::Closed,
            ServiceError::McpError(e) => RequestError::Rpc {
                code: e.code.0,
                message: truncate(&e.message, 200),
            },
            ServiceError::TransportSend(e) => classify_transport(e.error.as_ref()),
            ServiceError::Cancelled { .. } => RequestError::Closed,
            _ => RequestError::Unexpected,
        }
    }
}

/// Why a synthetic tool call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolCallError {
    /// No answer and no progress for the request timeout: cancelled.
    #[error("no progress within {0:?}; cancelled")]
    IdleTimeout(Duration),
    /// The maximum request timeout passed, progress or not: cancelled.
    #[error("still running at the {0:?} cap; cancelled")]
    MaxTimeout(Duration),
    /// Anything else.
    #[error(transparent)]
    Request(#[from] RequestError),
}

/// Why opening a session failed.
#[derive(Debug, thiserror::Error)]
#[error("{phase}: {detail}")]
pub struct OpenError {
    /// The verdict reason this failure maps to.
    pub reason: Reason,
    /// Which phase failed: `spawn`, `connect` or `handshake`.
    pub phase: &'static str,
    /// What happened.
    pub detail: String,
}

/// Signs of life the server gives outside of our requests.
#[derive(Debug, Default)]
pub struct Activity {
    progress: AtomicU64,
    last_by_token: std::sync::Mutex<Vec<(String, Instant)>>,
    /// Where intervals between progress notifications are recorded. The
    /// series appears with the first interval, so servers that never send
    /// progress cost no series.
    pub series: Option<Arc<crate::metrics::ServerSeries>>,
}

/// Requests whose last progress time is remembered for interval measurement.
const PROGRESS_TOKENS_KEPT: usize = 16;

impl Activity {
    /// Activity that records progress intervals into a server's series.
    pub fn with_series(series: Arc<crate::metrics::ServerSeries>) -> Self {
        Activity {
            series: Some(series),
            ..Activity::default()
        }
    }

    /// Progress notifications received so far.
    pub fn progress_count(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    fn note_progress(&self, token: String) {
        self.progress.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self.last_by_token.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = last.iter_mut().find(|(t, _)| *t == token) {
            if let Some(series) = &self.series {
                series.observe_progress_interval(now.duration_since(entry.1).as_secs_f64());
            }
            entry.1 = now;
        } else {
            if last.len() == PROGRESS_TOKENS_KEPT {
                last.remove(0);
            }
            last.push((token, now));
        }
    }
}

/// mcpmon's side of the session: identifies itself, answers the server's
/// pings (rmcp's default), and records progress notifications.
#[derive(Clone)]
struct Monitor {
    activity: Arc<Activity>,
    /// Offered in a legacy `initialize`.
    legacy_version: ProtocolVersion,
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
        self.activity
            .note_progress(format!("{:?}", params.progress_token));
        std::future::ready(())
    }
}

/// An open session.
pub struct Session {
    service: RunningService<RoleClient, Monitor>,
    child: Option<Child>,
    /// Era spoken.
    pub era: Era,
    /// Who the server says it is.
    pub info: ServerInfo,
    /// When the session opened.
    pub opened: Instant,
    /// Signs of life.
    pub activity: Arc<Activity>,
    /// Whether the server lists the configured health tool (set by the supervisor).
    pub has_health_check: bool,
    /// Pings without rmcp (Streamable HTTP sessions).
    lean: Option<LeanPinger>,
}

impl Session {
    /// Open a session: spawn or connect, then the handshake the era needs,
    /// all within the server's `connect_timeout`. `hint` is the era this
    /// server spoke last time, which skips detection under `protocol: auto`.
    pub async fn open(
        spec: &ServerSpec,
        http: &reqwest::Client,
        hint: Option<Era>,
        activity: Arc<Activity>,
    ) -> Result<Session, OpenError> {
        let (lifecycle, legacy_version) = lifecycle(&spec.protocol, hint);
        let detecting = matches!(lifecycle, ClientLifecycleMode::Auto { .. });
        match Self::open_with(
            spec,
            http,
            lifecycle,
            legacy_version.clone(),
            activity.clone(),
        )
        .await
        {
            // Detection failed in a way a legacy server can cause: it exited
            // on `server/discover`, or answered it with something that is not
            // a discover result. The exchange cannot continue on that
            // transport, so start afresh and speak legacy from the start.
            Err(first)
                if detecting
                    && matches!(first.reason, Reason::Exited | Reason::HandshakeFailed) =>
            {
                tracing::debug!(server = %spec.id, error = %first, "server/discover failed; retrying with initialize");
                Self::open_with(
                    spec,
                    http,
                    ClientLifecycleMode::Initialize,
                    legacy_version,
                    activity,
                )
                .await
                .map_err(|second| OpenError {
                    detail: truncate(
                        &format!(
                            "{} (after server/discover failed: {})",
                            second.detail, first.detail
                        ),
                        600,
                    ),
                    ..second
                })
            }
            r => r,
        }
    }

    async fn open_with(
        spec: &ServerSpec,
        http: &reqwest::Client,
        lifecycle: ClientLifecycleMode,
        legacy_version: ProtocolVersion,
        activity: Arc<Activity>,
    ) -> Result<Session, OpenError> {
        let deadline = spec.settings.connect_timeout.0;
        let handler = Monitor {
            activity: activity.clone(),
            legacy_version,
        };
        let mut lean = None;
        let (service, child) = match &spec.transport {
            TransportSpec::Stdio { .. } => {
                let spawned = child::spawn(&spec.id, &spec.transport).map_err(|e| OpenError {
                    reason: Reason::ConnectFailed,
                    phase: "spawn",
                    detail: e.to_string(),
                })?;
                let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(
                    spawned.stdout,
                    spawned.stdin,
                )
                .with_max_line_length(MAX_LINE_BYTES);
                let child = spawned.child;
                let started = tokio::time::timeout(
                    deadline,
                    handler.serve_with_lifecycle(transport, lifecycle),
                )
                .await;
                match started {
                    Ok(Ok(service)) => (service, Some(child)),
                    Ok(Err(e)) => {
                        // Give a dying child a moment to be reaped so the reason is right.
                        let exit = tokio::time::timeout(Duration::from_millis(200), child.exited())
                            .await
                            .ok();
                        child.shutdown(Duration::from_millis(500)).await;
                        return Err(match exit {
                            Some(exit) => OpenError {
                                reason: Reason::Exited,
                                phase: "handshake",
                                detail: format!("process {exit} during the handshake"),
                            },
                            None => OpenError {
                                reason: Reason::HandshakeFailed,
                                phase: "handshake",
                                detail: truncate(&e.to_string(), 300),
                            },
                        });
                    }
                    Err(_) => {
                        child.shutdown(Duration::from_millis(500)).await;
                        return Err(OpenError {
                            reason: Reason::HandshakeFailed,
                            phase: "handshake",
                            detail: format!("no handshake within {deadline:?}"),
                        });
                    }
                }
            }
            TransportSpec::Http {
                url,
                headers,
                bearer_token,
            } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.max_json_response_size = MAX_LINE_BYTES;
                config.max_sse_event_size = MAX_LINE_BYTES;
                if let Some(token) = bearer_token {
                    config = config.auth_header(token.expose().to_owned());
                }
                let mut custom = std::collections::HashMap::new();
                for (k, v) in headers {
                    if let (Ok(name), Ok(value)) = (
                        reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                        reqwest::header::HeaderValue::from_str(v.expose()),
                    ) {
                        custom.insert(name, value);
                    }
                }
                config = config.custom_headers(custom);
                let recorder = Recorder::new(http.clone());
                lean = Some(LeanPinger::new(http.clone(), url.clone(), recorder.clone()));
                let transport = StreamableHttpClientTransport::with_client(recorder, config);
                match tokio::time::timeout(
                    deadline,
                    handler.serve_with_lifecycle(transport, lifecycle),
                )
                .await
                {
                    Ok(Ok(service)) => (service, None),
                    Ok(Err(e)) => return Err(classify_open(&e)),
                    Err(_) => {
                        return Err(OpenError {
                            reason: Reason::HandshakeFailed,
                            phase: "handshake",
                            detail: format!("no handshake within {deadline:?}"),
                        });
                    }
                }
            }
        };
        // A monitor must never be answered from a cache.
        service
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let peer_info = service.peer().peer_info();
        let info = peer_info
            .as_ref()
            .map(|p| {
                let (name, version) = p
                    .server_info
                    .as_ref()
                    .map(|i| (i.name.clone(), i.version.clone()))
                    .unwrap_or_default();
                ServerInfo {
                    protocol_version: p.protocol_version.to_string(),
                    name: truncate(&name, 128),
                    version: truncate(&version, 64),
                }
            })
            .unwrap_or_default();
        let era = if info.protocol_version.as_str() >= MODERN_VERSION {
            Era::Modern
        } else {
            Era::Legacy
        };
        Ok(Session {
            service,
            child,
            era,
            info,
            opened: Instant::now(),
            activity,
            has_health_check: false,
            lean,
        })
    }

    /// The stdio child, if this is a stdio session.
    pub fn child(&self) -> Option<&Child> {
        self.child.as_ref()
    }

    /// The liveness probe of the era: `ping` (legacy) or `server/discover` (modern).
    pub async fn liveness(&self, timeout: Duration) -> Result<Duration, RequestError> {
        let start = Instant::now();
        if let Some(answered) = self.lean_ping(timeout).await {
            return answered;
        }
        let request = match self.era {
            Era::Legacy => ClientRequest::PingRequest(PingRequest::default()),
            Era::Modern => {
                ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {}))
            }
        };
        // A fallback shares the probe's one deadline.
        let left = timeout.saturating_sub(start.elapsed());
        match self.request(request, left).await {
            Ok(_) => Ok(start.elapsed()),
            Err(RequestError::Timeout(_)) => Err(RequestError::Timeout(timeout)),
            Err(e) => Err(e),
        }
    }

    /// A legacy HTTP ping sent without rmcp (see [`crate::lean_ping`]).
    /// `None` when this session cannot take that path or the answer was not
    /// plain; the caller then asks rmcp within what is left of `timeout`.
    pub async fn lean_ping(&self, timeout: Duration) -> Option<Result<Duration, RequestError>> {
        let (Era::Legacy, Some(lean)) = (self.era, &self.lean) else {
            return None;
        };
        let start = Instant::now();
        match tokio::time::timeout(timeout, lean.ping()).await {
            Err(_) => Some(Err(RequestError::Timeout(timeout))),
            Ok(Lean::Answered(r)) => Some(r.map(|()| start.elapsed())),
            Ok(Lean::Fallback) => None,
        }
    }

    /// Tool names, following pagination, at most [`MAX_TOOLS`].
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<String>, RequestError> {
        let mut names = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = cursor
                .take()
                .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
            let request = ClientRequest::ListToolsRequest(ListToolsRequest {
                method: Default::default(),
                params,
                extensions: Default::default(),
            });
            let ServerResult::ListToolsResult(page) = self.request(request, timeout).await? else {
                return Err(RequestError::Unexpected);
            };
            names.extend(page.tools.into_iter().map(|t| t.name.into_owned()));
            if names.len() >= MAX_TOOLS {
                names.truncate(MAX_TOOLS);
                break;
            }
            match page.next_cursor {
                Some(c) if !c.is_empty() => cursor = Some(c),
                _ => break,
            }
        }
        Ok(names)
    }

    /// Call a tool under a deadline (rmcp cancels it on expiry).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, RequestError> {
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        match self.request(request, timeout).await? {
            ServerResult::CallToolResult(r) => Ok(r),
            _ => Err(RequestError::Unexpected),
        }
    }

    /// A synthetic tool call: its deadline is pushed back by each progress
    /// notification, but never past `max`; on expiry rmcp cancels the call the
    /// way the era requires and the session stays open.
    pub async fn call_tool_with_progress(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        idle: Duration,
        max: Duration,
    ) -> Result<CallToolResult, ToolCallError> {
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(idle)
            .reset_timeout_on_progress()
            .with_max_total_timeout(max);
        let peer = self.service.peer();
        let handle = tokio::time::timeout(max, peer.send_request_with_option(request, options))
            .await
            .map_err(|_| ToolCallError::MaxTimeout(max))?
            .map_err(|e| ToolCallError::Request(RequestError::classify(e, idle)))?;
        match handle.await_response().await {
            Ok(ServerResult::CallToolResult(r)) => Ok(r),
            Ok(_) => Err(ToolCallError::Request(RequestError::Unexpected)),
            // rmcp reports which deadline fired by its length.
            Err(ServiceError::Timeout { timeout }) if timeout == max && idle != max => {
                Err(ToolCallError::MaxTimeout(max))
            }
            Err(ServiceError::Timeout { .. }) => Err(ToolCallError::IdleTimeout(idle)),
            Err(e) => Err(ToolCallError::Request(RequestError::classify(e, idle))),
        }
    }

    /// Call the health tool and read its answer.
    pub async fn health_check(
        &self,
        tool: &str,
        arguments: &std::collections::BTreeMap<String, serde_json::Value>,
        timeout: Duration,
        max_fields: usize,
    ) -> Result<(Duration, HealthReport), RequestError> {
        let start = Instant::now();
        let args = arguments.clone().into_iter().collect();
        let result = self.call_tool(tool, args, timeout).await?;
        let took = start.elapsed();
        let texts: Vec<&str> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        let report = crate::health_check::interpret(
            result.structured_content.as_ref(),
            &texts,
            result.is_error.unwrap_or(false),
            max_fields,
        );
        Ok((took, report))
    }

    async fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<ServerResult, RequestError> {
        let peer = self.service.peer();
        // The send itself can block on a full channel; the deadline covers it too.
        let sent = tokio::time::timeout(
            timeout,
            peer.send_request_with_option(request, PeerRequestOptions::with_timeout(timeout)),
        )
        .await
        .map_err(|_| RequestError::Timeout(timeout))?
        .map_err(|e| RequestError::classify(e, timeout))?;
        sent.await_response()
            .await
            .map_err(|e| RequestError::classify(e, timeout))
    }

    /// Whether rmcp has seen the transport close (reliable for stdio only).
    pub fn transport_closed(&self) -> bool {
        self.service.peer().is_transport_closed()
    }

    /// Close politely: stop the service (closing stdin / ending the HTTP
    /// session), then the stdio shutdown sequence. Bounded by `grace * 4`.
    pub async fn close(mut self, grace: Duration) {
        let _ = self.service.close_with_timeout(grace).await;
        if let Some(child) = self.child.take() {
            child.shutdown(grace).await;
        }
    }
}

/// The lifecycle to use and the version to offer in a legacy `initialize`.
fn lifecycle(protocol: &Protocol, hint: Option<Era>) -> (ClientLifecycleMode, ProtocolVersion) {
    let latest_legacy = ProtocolVersion::V_2025_11_25;
    let modern = || ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    match (protocol, hint) {
        (Protocol::Auto, None) => (
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(latest_legacy.clone()),
            },
            latest_legacy,
        ),
        (Protocol::Auto, Some(Era::Modern)) => (modern(), latest_legacy),
        (Protocol::Auto, Some(Era::Legacy)) => (ClientLifecycleMode::Initialize, latest_legacy),
        (Protocol::Pinned(v), _) if v.as_str() >= MODERN_VERSION => (modern(), latest_legacy),
        (Protocol::Pinned(v), _) => {
            // Config validation only admits known revisions, so this parses.
            let version = serde_json::from_value(serde_json::Value::String(v.clone()))
                .unwrap_or(latest_legacy);
            (ClientLifecycleMode::Initialize, version)
        }
    }
}

/// The next error in a chain. rmcp keeps the reqwest error of a failed POST in
/// a variant that is not marked as a source, so step into it by hand.
fn next_source<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(StreamableHttpError::Client(inner)) =
        err.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return Some(inner);
    }
    err.source()
}

/// Walk an error's chain for an I/O kind or resolver failure that means
/// "nobody there"; anything else is a transport error.
fn classify_transport(e: &(dyn std::error::Error + 'static)) -> RequestError {
    let text = truncate(&error_chain(e), 300);
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | NotConnected
                    | BrokenPipe
                    | HostUnreachable
                    | NetworkUnreachable
            ) {
                return RequestError::Unreachable(text);
            }
        }
        source = next_source(err);
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("dns error") || lower.contains("failed to lookup address") {
        return RequestError::Unreachable(text);
    }
    RequestError::Transport(text)
}

fn classify_open(e: &rmcp::service::ClientInitializeError) -> OpenError {
    use rmcp::service::ClientInitializeError as E;
    // `TransportError` keeps its cause in a field that is not a `source()`.
    let (class, detail) = match e {
        E::TransportError { error, context } => {
            // The transport's own text is its Rust type name; skip to the cause.
            let inner: &(dyn std::error::Error + 'static) = error.error.as_ref();
            let class = classify_transport(inner);
            (Some(class), format!("{context}: {}", error_chain(inner)))
        }
        _ => (None, error_chain(e)),
    };
    let detail = truncate(&detail, 300);
    let (reason, phase) = match class {
        Some(RequestError::Unreachable(_)) => (Reason::Unreachable, "connect"),
        Some(_) => (Reason::ConnectFailed, "connect"),
        None => (Reason::HandshakeFailed, "handshake"),
    };
    OpenError {
        reason,
        phase,
        detail,
    }
}

/// `error: cause: cause`, as one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = next_source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = next_source(s);
    }
    out
}

/// At most `max` bytes, cut on a char boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
