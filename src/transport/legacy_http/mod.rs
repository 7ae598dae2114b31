//! A held legacy-era Streamable HTTP session without rmcp's machinery.
//!
//! rmcp holds, per session, a service task, a transport worker and four
//! bounded channels whose first blocks alone are about 12 KiB each: some
//! 65 KiB resident for a session that sends a ping every few seconds. A
//! legacy session is only a session id and a few headers on the server's
//! side, so once rmcp has opened it (the handshake, with its error
//! classification and auth handling) mcpmon keeps just that: the route
//! (headers of the handshake's last POST), its origin's connections ([`Origin`]:
//! hyper without reqwest's per-request layers) and a request counter. Every later request is one POST whose answer is read
//! here, as JSON or as an SSE stream, bounded in size and time.
//!
//! Every byte and every event of an answer passes the session's
//! [`Meter`] as it is read. What the server sends besides the answer:
//! progress notifications for the request are counted (and push an idle
//! deadline back); `tools/list_changed` is noted; requests of its own are
//! dropped unanswered (mcpmon offers no capabilities) and counted against
//! the request bound; anything else is dropped. There is no standalone GET
//! stream, so a `list_changed` is heard only inside an answer's stream; the
//! tools are listed again at `tools_interval` all the same.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::budget::{BUDGET, Meter};
use super::oauth2::TokenSource;
use super::rmcp_http::{RmcpHttp, Route};
use super::sse_events::SseBuffer;
use super::wire::{AnswerBody, Body, Origin, Wire};
use super::{RequestError, truncate};

mod message;
mod outgoing;
mod resume;
mod route;

pub use message::{Seen, events, seen};
use outgoing::{Outgoing, content_length};
use resume::Resume;
use route::{bearer, posting};

/// Largest answer, or single SSE event, read from a server.
const MAX_MESSAGE_BYTES: usize = BUDGET.message_bytes;
/// How long a cancellation may take to be delivered.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// When a request gives up.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// Without an answer or (with `resets`) progress for this long.
    pub idle: Duration,
    /// Never later than this.
    pub max_at: Instant,
    /// Whether progress notifications push the idle deadline back.
    pub resets: bool,
}

impl Deadlines {
    /// One deadline, `timeout` from now.
    pub fn within(timeout: Duration) -> Self {
        Deadlines {
            idle: timeout,
            max_at: Instant::now() + timeout,
            resets: false,
        }
    }
}

/// Where a call stands against its deadlines: `idle` after the last sign
/// of life (progress, when it resets), never past `max_at`.
struct Window {
    idle_at: Instant,
    deadlines: Deadlines,
}

impl Window {
    fn new(deadlines: Deadlines) -> Self {
        Window {
            idle_at: Instant::now() + deadlines.idle,
            deadlines,
        }
    }

    /// When the call gives up unless something comes.
    fn next(&self) -> Instant {
        self.idle_at.min(self.deadlines.max_at)
    }

    /// Which deadline it was, once passed.
    fn expired(&self) -> CallError {
        if self.idle_at < self.deadlines.max_at {
            CallError::Idle
        } else {
            CallError::Max
        }
    }

    /// A progress notification came.
    fn progressed(&mut self) {
        if self.deadlines.resets {
            self.idle_at = Instant::now() + self.deadlines.idle;
        }
    }
}

/// The answer a call waits for: its id, its progress token, and what to do
/// with each of its progress notifications.
struct Wanted<'a> {
    id: &'a str,
    progress: Option<u64>,
    on_progress: &'a (dyn Fn() + Sync),
}

/// An answer whose body is still to be read.
type Answer = http::Response<AnswerBody>;

/// Whether an answer comes as an event stream (`true`) or one JSON message;
/// anything else is no answer.
fn is_stream(response: &Answer) -> Result<bool, CallError> {
    let kind = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    match kind {
        Some(t) if t.starts_with("application/json") => Ok(false),
        Some(t) if t.starts_with("text/event-stream") => Ok(true),
        other => Err(RequestError::Transport(format!(
            "HTTP {} with content type {:?}, not an answer",
            response.status(),
            other.unwrap_or("none")
        ))
        .into()),
    }
}

/// Why a legacy request ended without a result.
#[derive(Debug)]
pub enum CallError {
    /// The server no longer knows the session (HTTP 404): initialize again.
    Expired,
    /// The idle deadline passed.
    Idle,
    /// The hard deadline passed.
    Max,
    /// Anything else, classified as rmcp's path would be.
    Request(RequestError),
}

impl CallError {
    /// The request error rmcp's path would have given for this failure.
    pub(super) fn into_request_error(self, timeout: Duration) -> RequestError {
        match self {
            CallError::Idle | CallError::Max => RequestError::Timeout(timeout),
            CallError::Expired => RequestError::Closed,
            CallError::Request(e) => e,
        }
    }
}

impl From<RequestError> for CallError {
    fn from(e: RequestError) -> Self {
        CallError::Request(e)
    }
}

/// A legacy session mcpmon holds itself.
pub struct LegacyLink {
    wire: Origin,
    uri: Uri,
    tokens: Option<Arc<TokenSource>>,
    route: Mutex<Route>,
    next_id: AtomicU64,
    meter: Arc<Meter>,
}

impl LegacyLink {
    /// Take over the session `client` saw rmcp open; `None` before any
    /// POST was recorded.
    pub fn take_over(
        wire: Wire,
        url: &url::Url,
        client: &RmcpHttp,
        meter: Arc<Meter>,
    ) -> Option<Self> {
        let uri = Uri::try_from(url.as_str()).ok()?;
        let wire = wire.origin(&uri).ok()?;
        let route = posting(client.route()?, &uri);
        client.detach();
        Some(LegacyLink {
            wire,
            uri,
            tokens: client.tokens().cloned(),
            route: Mutex::new(route),
            next_id: AtomicU64::new(1),
            meter,
        })
    }

    /// Continue on a session initialized again (after `Expired`).
    pub fn renew(&self, other: &LegacyLink) {
        let route = other.route();
        *self.route.lock().unwrap_or_else(|p| p.into_inner()) = route;
    }

    fn route(&self) -> Route {
        self.route.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A number for a request id or progress token, unique in this session.
    pub fn next_number(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Put the current OAuth token on `route`, when the session has one;
    /// the token sent.
    async fn authorize(&self, route: &mut Route) -> Result<Option<String>, CallError> {
        let Some(tokens) = &self.tokens else {
            return Ok(None);
        };
        let token = tokens
            .token()
            .await
            .map_err(|e| RequestError::Unauthenticated(truncate(&e.to_string(), 300)))?;
        bearer(route, &token);
        Ok(Some(token.to_string()))
    }

    /// POST `body`, with the current token; one retry with a fresh token
    /// when OAuth credentials are refused, and (when `again` allows) one on
    /// a fresh connection when a kept-alive one was closed under it. `name`
    /// goes in `Mcp-Name` (a task's id, for a balancer to route its polls).
    async fn post(
        &self,
        body: Bytes,
        until: Instant,
        again: bool,
        name: Option<&str>,
    ) -> Result<Answer, CallError> {
        let mut route = self.route();
        if let Some(v) = name.and_then(|n| HeaderValue::from_str(n).ok()) {
            Arc::make_mut(&mut route).insert("mcp-name", v);
        }
        let sent = self.authorize(&mut route).await?;
        let response = self.send(&route, body.clone(), until, again).await?;
        let (Some(tokens), Some(sent), StatusCode::UNAUTHORIZED) =
            (&self.tokens, sent, response.status())
        else {
            return Ok(response);
        };
        let fresh = tokens
            .refresh(&sent)
            .await
            .map_err(|e| RequestError::Unauthenticated(truncate(&e.to_string(), 300)))?;
        bearer(&mut route, &fresh);
        self.send(&route, body, until, again).await
    }

    async fn send(
        &self,
        route: &Route,
        body: Bytes,
        until: Instant,
        again: bool,
    ) -> Result<Answer, CallError> {
        let request = || self.request(Method::POST, route, Body::new(body.clone()));
        let first = match tokio::time::timeout_at(until, self.wire.send(request(), false)).await {
            Err(_) => return Err(CallError::Idle),
            Ok(Ok(r)) => return Ok(r),
            Ok(Err(e)) => e,
        };
        if !again || !super::reset::stale_connection(&first) {
            return Err(super::error::classify_transport(&first).into());
        }
        tracing::debug!(
            "a kept-alive connection was closed under the request; once more on a fresh one"
        );
        match tokio::time::timeout_at(until, self.wire.send(request(), true)).await {
            Err(_) => Err(CallError::Idle),
            Ok(Err(e)) => Err(super::error::classify_transport(&e).into()),
            Ok(Ok(r)) => Ok(r),
        }
    }

    /// A request to the session's endpoint with its route's headers (a
    /// POST's: a request of another method removes what it does not send)
    /// and its body's length.
    fn request(&self, method: Method, route: &Route, body: Body) -> Request<Body> {
        let mut headers = (**route).clone();
        if method == Method::POST {
            let length = hyper::body::Body::size_hint(&body).exact().unwrap_or(0);
            headers.insert(CONTENT_LENGTH, content_length(length));
        } else {
            headers.remove(CONTENT_LENGTH);
        }
        let mut request = Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = headers;
        request
    }

    /// Send a request and read its answer: the `result`, or why not.
    /// `progress` is the request's progress token; `on_progress` runs for
    /// each of its notifications.
    pub async fn call(
        &self,
        id: &str,
        method: &str,
        params: Option<Value>,
        progress: Option<u64>,
        on_progress: &(dyn Fn() + Sync),
        deadlines: Deadlines,
    ) -> Result<Value, CallError> {
        let body = Outgoing {
            jsonrpc: "2.0",
            id,
            method,
            params: params.as_ref(),
        }
        .to_bytes();
        let window = Window::new(deadlines);
        let again = super::reset::idempotent(method);
        let task = params
            .as_ref()
            .and_then(|p| p["taskId"].as_str())
            .filter(|_| method.starts_with("tasks/"));
        let response = match self.post(body, window.next(), again, task).await {
            Err(CallError::Idle) => return Err(window.expired()),
            r => r?,
        };
        refusal(&response)?;
        let sse = is_stream(&response)?;
        let wanted = Wanted {
            id,
            progress,
            on_progress,
        };
        self.read_answer(response, sse, &wanted, window).await
    }

    /// Read an answer body, a JSON message or an event stream, chunk by
    /// chunk within the budget, until the answer to `wanted` comes.
    async fn read_answer(
        &self,
        mut response: Answer,
        sse: bool,
        wanted: &Wanted<'_>,
        mut window: Window,
    ) -> Result<Value, CallError> {
        // A flood ends the request as a closed transport; the session's
        // death names the budget it broke.
        let flooded = || CallError::Request(RequestError::Closed);
        let mut body: Vec<u8> = Vec::new();
        let mut stream = SseBuffer::default();
        let mut resume = Resume::default();
        loop {
            let frame = tokio::time::timeout_at(window.next(), response.body_mut().frame());
            let chunk = match frame.await {
                Err(_) => return Err(window.expired()),
                Ok(Some(Err(e))) => return Err(super::error::classify_transport(&e).into()),
                // Trailers carry nothing of the answer.
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => Some(data),
                    Err(_) => continue,
                },
                Ok(None) => None,
            };
            let Some(chunk) = chunk else {
                if sse {
                    // A server may end a stream on purpose after naming an
                    // event (2025-11-25): the answer comes on a GET that
                    // resumes after it, once the server's retry delay passed.
                    let last = resume.next()?;
                    // Boxed: rare, and a large future to carry in every call's.
                    response = Box::pin(self.resumed(&last, resume.after, &window)).await?;
                    stream = SseBuffer::default();
                    continue;
                }
                if !self.meter.message(Instant::now()) {
                    return Err(flooded());
                }
                return match seen(&body, wanted.id, wanted.progress) {
                    Seen::Answer(a) => a.map_err(CallError::Request),
                    _ => Err(RequestError::Unexpected.into()),
                };
            };
            if !self.meter.bytes(chunk.len(), Instant::now()) {
                return Err(flooded());
            }
            let held = if sse { stream.pending() } else { body.len() };
            if held + chunk.len() > MAX_MESSAGE_BYTES {
                let over = format!("a message over {} MiB", MAX_MESSAGE_BYTES >> 20);
                return Err(RequestError::Transport(over).into());
            }
            if !sse {
                body.extend_from_slice(&chunk);
                continue;
            }
            stream.push(&chunk);
            while let Some(event) = stream.next_full_event() {
                let now = Instant::now();
                if !self.meter.message(now) {
                    return Err(flooded());
                }
                resume.saw(&event);
                let data = event.data;
                if data.is_empty() {
                    continue;
                }
                match seen(&data, wanted.id, wanted.progress) {
                    Seen::Answer(a) => return a.map_err(CallError::Request),
                    Seen::Progress => {
                        (wanted.on_progress)();
                        window.progressed();
                    }
                    Seen::ToolsChanged => self.meter.note_tools_changed(),
                    Seen::Request if !self.meter.dropped_request(now) => return Err(flooded()),
                    Seen::Request | Seen::Other => {}
                }
            }
        }
    }

    /// Tell the server a request was given up, in the background and
    /// bounded: the probe that gave up does not wait for it.
    pub fn cancel(self: &Arc<Self>, id: &str, reason: &str) {
        let body = Bytes::from(
            json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": reason},
            })
            .to_string(),
        );
        let link = self.clone();
        tokio::spawn(async move {
            let until = Instant::now() + CANCEL_TIMEOUT;
            let _ = link.post(body, until, false, None).await;
        });
    }

    /// End the session on the server (DELETE), within `grace`.
    pub async fn close(&self, grace: Duration) {
        let mut route = self.route();
        if let Some(tokens) = &self.tokens
            && let Ok(token) = tokens.token().await
        {
            bearer(&mut route, &token);
        }
        let mut request = self.request(Method::DELETE, &route, Body::default());
        request.headers_mut().remove(CONTENT_TYPE);
        let _ = tokio::time::timeout(grace, self.wire.send(request, false)).await;
    }
}

/// The error a non-success status means, as the rmcp path reports it.
fn refusal(response: &Answer) -> Result<(), CallError> {
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(t) = super::throttled(status.as_u16(), header(http::header::RETRY_AFTER)) {
        return Err(t.into());
    }
    let text = match header(WWW_AUTHENTICATE) {
        Some(challenge) => truncate(&format!("HTTP {status}: {challenge}"), 300),
        None => format!("HTTP {status}"),
    };
    Err(match status.as_u16() {
        404 => CallError::Expired,
        401 => RequestError::Unauthenticated(text).into(),
        403 => RequestError::Forbidden(text).into(),
        _ => RequestError::Transport(text).into(),
    })
}
