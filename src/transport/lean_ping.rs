//! Liveness pings for legacy-era Streamable HTTP sessions, sent straight
//! through the shared HTTP client instead of through rmcp.
//!
//! rmcp carries every request through two tasks and three channels per
//! session (peer, service loop, transport worker) before it reaches the
//! HTTP client, and parses every answer into its full message enum. For the
//! one request a monitor sends all the time that is most of its cost. rmcp
//! still opens the session, runs tool calls, recovers expired sessions and
//! closes it; [`Recorder`] sits between rmcp and reqwest and remembers the
//! session id and headers rmcp sent last, so a ping can go out the same way.
//!
//! A ping takes the lean path only when the answer is plain: a 2xx carrying
//! the matching JSON-RPC response, as JSON or in an SSE stream. Anything
//! else (an HTTP error, a 404 for an expired session, a redirect, a body
//! that is not the answer) is [`Lean::Fallback`]: the caller asks rmcp,
//! which classifies, recovers or fails exactly as it always did.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde::Deserialize;

use super::oauth2::TokenSource;
use super::{RequestError, truncate};

/// Largest ping answer read, JSON or SSE; a ping's answer is tens of bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Headers of the session's last POST: everything a ping must carry.
type Route = Arc<HeaderMap>;

/// A reqwest client for rmcp that records the session id and headers of
/// each POST it sends. Everything else passes through untouched.
/// With OAuth, it also puts the current token on every request and, when a
/// POST is refused with 401, fetches a new token and sends it once more.
#[derive(Clone)]
pub struct Recorder {
    inner: reqwest::Client,
    route: Arc<Mutex<Option<Route>>>,
    tokens: Option<Arc<TokenSource>>,
}

type HttpError = StreamableHttpError<reqwest::Error>;

impl Recorder {
    /// Wrap the shared client.
    pub fn new(inner: reqwest::Client) -> Self {
        Recorder {
            inner,
            route: Arc::new(Mutex::new(None)),
            tokens: None,
        }
    }

    /// Authenticate every request with tokens from `tokens`.
    pub fn with_tokens(mut self, tokens: Arc<TokenSource>) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// The token to send: the current OAuth one, or what rmcp was given.
    async fn auth(&self, given: Option<String>) -> Result<Option<String>, HttpError> {
        match &self.tokens {
            None => Ok(given),
            Some(t) => t.token().await.map(|t| Some(t.to_string())).map_err(|e| {
                StreamableHttpError::AuthRequired(AuthRequiredError::new(e.to_string()))
            }),
        }
    }

    fn record(
        &self,
        session_id: Option<&str>,
        auth: Option<&str>,
        custom: &HashMap<HeaderName, HeaderValue>,
    ) {
        let mut headers = HeaderMap::with_capacity(custom.len() + 2);
        for (k, v) in custom {
            headers.insert(k.clone(), v.clone());
        }
        if let Some(id) = session_id.and_then(|s| HeaderValue::from_str(s).ok()) {
            headers.insert(HeaderName::from_static("mcp-session-id"), id);
        }
        if let Some(mut v) = auth.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
            v.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        *self.route.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(headers));
    }

    /// Headers of the last POST, once the handshake has sent one.
    fn route(&self) -> Option<Route> {
        self.route.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl StreamableHttpClient for Recorder {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let auth_header = self.auth(auth_header).await?;
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    // rmcp's transport sends every POST through this method (the others are
    // for clients that do not enforce limits), so it is the one that records.
    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let auth_header = self.auth(auth_header).await?;
        self.record(
            session_id.as_deref(),
            auth_header.as_deref(),
            &custom_headers,
        );
        let retry = self
            .tokens
            .as_ref()
            .zip(auth_header.clone())
            .map(|(t, sent)| (t.clone(), sent, message.clone(), custom_headers.clone()));
        let first = self
            .inner
            .post_message_with_response_limits(
                uri.clone(),
                message,
                session_id.clone(),
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        // A token refused mid-session (revoked, expired early) gets one more
        // try with a fresh one before anything is judged.
        let Some((tokens, sent, message, custom_headers)) = retry else {
            return first;
        };
        if !refused(&first) {
            return first;
        }
        let fresh = tokens.refresh(&sent).await.map_err(|e| {
            StreamableHttpError::AuthRequired(AuthRequiredError::new(e.to_string()))
        })?;
        let auth_header = Some(fresh.to_string());
        self.record(
            session_id.as_deref(),
            auth_header.as_deref(),
            &custom_headers,
        );
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        // A closed session must not be pinged.
        *self.route.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let auth_header = self.auth(auth_header).await?;
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        let auth_header = self.auth(auth_header).await?;
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        let auth_header = self.auth(auth_header).await?;
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// How a lean ping ended.
#[derive(Debug, PartialEq)]
pub enum Lean {
    /// The server answered the ping: with a result, or a JSON-RPC error.
    Answered(Result<(), RequestError>),
    /// Not a plain answer; ask rmcp.
    Fallback,
}

/// Whether a POST's result is a refusal of the credentials (401).
fn refused(r: &Result<StreamableHttpPostResponse, HttpError>) -> bool {
    match r {
        Err(StreamableHttpError::AuthRequired(_)) => true,
        Err(StreamableHttpError::UnexpectedServerResponse(t)) => t.starts_with("HTTP 401"),
        _ => false,
    }
}

/// What a session needs to ping without rmcp.
pub struct LeanPinger {
    http: reqwest::Client,
    url: reqwest::Url,
    recorder: Recorder,
    next_id: AtomicU64,
}

impl LeanPinger {
    /// A pinger for the session rmcp opens through `recorder`.
    pub fn new(http: reqwest::Client, url: reqwest::Url, recorder: Recorder) -> Self {
        LeanPinger {
            http,
            url,
            recorder,
            next_id: AtomicU64::new(1),
        }
    }

    /// Send one ping. The caller bounds it with its deadline.
    pub async fn ping(&self) -> Lean {
        let Some(mut route) = self.recorder.route() else {
            return Lean::Fallback;
        };
        if let Some(tokens) = &self.recorder.tokens {
            // The token may have been refreshed since rmcp's last POST.
            let Ok(token) = tokens.token().await else {
                return Lean::Fallback;
            };
            if let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {token}")) {
                v.set_sensitive(true);
                Arc::make_mut(&mut route).insert(reqwest::header::AUTHORIZATION, v);
            }
        }
        // String ids never collide with rmcp's numeric ones on this session.
        let id = format!(
            "mcpmon-ping-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let body = format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"ping"}}"#);
        let sent = self
            .http
            .post(self.url.clone())
            .headers((*route).clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        let Ok(mut response) = sent else {
            return Lean::Fallback;
        };
        if response.status() != reqwest::StatusCode::OK {
            // Asking rmcp again would send a second request to a server
            // that just asked for fewer.
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok());
            return match super::throttled(response.status().as_u16(), retry_after) {
                Some(t) => Lean::Answered(Err(t)),
                None => Lean::Fallback,
            };
        }
        let sse = match response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
        {
            Some(t) if t.starts_with("application/json") => false,
            Some(t) if t.starts_with("text/event-stream") => true,
            _ => return Lean::Fallback,
        };
        let mut buf: Vec<u8> = Vec::new();
        let mut scanned = 0;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > MAX_ANSWER_BYTES {
                        return Lean::Fallback;
                    }
                    buf.extend_from_slice(&chunk);
                    if sse {
                        let (found, consumed) = scan_sse(&buf[scanned..], &id);
                        scanned += consumed;
                        if let Some(answer) = found {
                            return Lean::Answered(answer);
                        }
                    }
                }
                Ok(None) if !sse => {
                    return answer_to(&buf, &id).map_or(Lean::Fallback, Lean::Answered);
                }
                Ok(None) | Err(_) => return Lean::Fallback,
            }
        }
    }
}

/// One JSON-RPC message, as far as a ping's answer needs reading.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<Id<'a>>,
    result: Option<serde::de::IgnoredAny>,
    error: Option<RpcError>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Id<'a> {
    Str(&'a str),
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct RpcError {
    code: i32,
    #[serde(default)]
    message: String,
}

/// The ping's answer in one JSON message, if that is what `json` is.
pub(crate) fn answer_to(json: &[u8], id: &str) -> Option<Result<(), RequestError>> {
    let msg: Message<'_> = serde_json::from_slice(json).ok()?;
    if !matches!(msg.id, Some(Id::Str(s)) if s == id) {
        return None;
    }
    match (msg.result, msg.error) {
        (Some(_), None) => Some(Ok(())),
        (None, Some(e)) => Some(Err(RequestError::Rpc {
            code: e.code,
            message: truncate(&e.message, 200),
        })),
        _ => None,
    }
}

/// Look through the complete SSE events in `buf` for the ping's answer.
/// Returns it, if found, and how many bytes of whole events were read.
pub(crate) fn scan_sse(buf: &[u8], id: &str) -> (Option<Result<(), RequestError>>, usize) {
    let mut consumed = 0;
    while let Some(end) = event_end(&buf[consumed..]) {
        let event = &buf[consumed..consumed + end.0];
        consumed += end.1;
        let mut data = Vec::new();
        for line in event.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(rest) = line.strip_prefix(b"data:") {
                if !data.is_empty() {
                    data.push(b'\n');
                }
                data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
            }
        }
        if let Some(answer) = answer_to(&data, id) {
            return (Some(answer), consumed);
        }
    }
    (None, consumed)
}

/// The length of the first event in `buf` and of the event plus its blank
/// line, if a whole event is there.
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            let rest = &buf[i + 1..];
            if rest.first() == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if rest.starts_with(b"\r\n") {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_answer_is_read_by_its_id() {
        let ok = br#"{"jsonrpc":"2.0","id":"mcpmon-ping-3","result":{}}"#;
        assert_eq!(answer_to(ok, "mcpmon-ping-3"), Some(Ok(())));
        assert_eq!(answer_to(ok, "mcpmon-ping-4"), None);
        let numeric = br#"{"jsonrpc":"2.0","id":3,"result":{}}"#;
        assert_eq!(answer_to(numeric, "3"), None);
        let err = br#"{"jsonrpc":"2.0","id":"p","error":{"code":-32601,"message":"no ping"}}"#;
        assert_eq!(
            answer_to(err, "p"),
            Some(Err(RequestError::Rpc {
                code: -32601,
                message: "no ping".into()
            }))
        );
        assert_eq!(answer_to(b"not json", "p"), None);
        assert_eq!(answer_to(br#"{"jsonrpc":"2.0","id":"p"}"#, "p"), None);
    }

    #[test]
    fn sse_answers_are_found_across_events_and_line_endings() {
        let stream = b": comment\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n\
id: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"p\",\r\ndata: \"result\":{}}\r\n\r\n";
        assert_eq!(scan_sse(stream, "p").0, Some(Ok(())));
        assert_eq!(scan_sse(stream, "q"), (None, stream.len()));
        // An event cut in the middle is left for the next chunk.
        let (found, used) = scan_sse(&stream[..40], "p");
        assert_eq!((found, used), (None, 11));
    }
}
