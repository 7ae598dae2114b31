//! The legacy HTTP+SSE transport (2024-11-05) as an rmcp transport.
//!
//! A GET opens an event stream whose first event, `endpoint`, names the
//! URL messages are POSTed to; everything the server says comes back on
//! that stream as `message` events. rmcp no longer ships a client for it,
//! and many deployed servers, bridges and registry entries still speak it.
//!
//! The stream is read by one task, chunk by chunk: every byte passes the
//! session's [`Meter`], no event may grow past the budget's message size,
//! and messages wait for rmcp in a short channel, so a server that writes
//! faster than mcpmon reads is held back by TCP, not by memory (messages
//! themselves are counted where rmcp takes them, in [`super::budget::Metered`];
//! events mcpmon cannot use are counted here). The message endpoint must
//! be on the stream's own origin: a server cannot aim mcpmon's POSTs
//! elsewhere. The session ends when the stream does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::budget::Meter;
use super::error::{classify_transport, throttled};
use super::sse_events::SseBuffer;
use super::{LinkFailure, OpenError, RequestError, truncate};

/// Messages read ahead of rmcp: enough to keep the pipe moving, few
/// enough that a flood waits in the server's socket, not in mcpmon.
const READ_AHEAD: usize = 16;

/// Most bytes of the stream read before its `endpoint` event.
const BEFORE_ENDPOINT: usize = 64 << 10;

/// How a stream ended, for the session's `gone()`.
#[derive(Debug, Default)]
pub struct StreamEnd {
    ended: CancellationToken,
    why: Mutex<String>,
}

impl StreamEnd {
    fn end(&self, why: &str) {
        let mut w = self.why.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_empty() {
            *w = why.to_owned();
        }
        self.ended.cancel();
    }

    /// Resolves once the stream has ended, with why.
    pub async fn ended(&self) -> String {
        self.ended.cancelled().await;
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Where and how messages are POSTed.
struct Poster {
    http: reqwest::Client,
    endpoint: url::Url,
    headers: HeaderMap,
    timeout: Duration,
}

/// A POST that failed: the HTTP error keeps its place in the chain, so it
/// is classified like any other (401, refused, reset).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The request failed or was refused.
    #[error("POST to the message endpoint: {0}")]
    Http(#[source] reqwest::Error),
    /// The message could not be written as JSON.
    #[error("encoding the message: {0}")]
    Encode(#[source] serde_json::Error),
}

/// An open legacy HTTP+SSE session's transport.
pub struct SseTransport {
    rx: mpsc::Receiver<ServerJsonRpcMessage>,
    post: Arc<Poster>,
    end: Arc<StreamEnd>,
    _reader: AbortOnDropHandle<()>,
}

impl SseTransport {
    /// How the stream ends, shared with the session.
    pub fn end(&self) -> Arc<StreamEnd> {
        self.end.clone()
    }
}

/// Open the event stream at `url` and wait for its `endpoint` event. The
/// caller bounds the time; `headers` go on every request; each POST may
/// take `post_timeout`.
pub async fn connect(
    http: &reqwest::Client,
    url: &url::Url,
    mut headers: HeaderMap,
    meter: Arc<Meter>,
    post_timeout: Duration,
) -> Result<SseTransport, OpenError> {
    let failed = |failure, detail: String| OpenError::new(failure, "connect", detail);
    let mut response = http
        .get(url.as_str())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| request_failed(&e))?;
    refused(&response)?;
    let stream = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"));
    if !stream {
        let ct = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| "no content type".to_owned(), |ct| truncate(ct, 60));
        return Err(failed(
            LinkFailure::NotMcp,
            format!(
                "GET answered {ct}, not an event stream: not an HTTP+SSE endpoint (a Streamable HTTP server is `transport: http`)"
            ),
        ));
    }
    let (endpoint, buf) = read_endpoint(&mut response, &meter).await?;
    let endpoint = url
        .join(&endpoint)
        .ok()
        .filter(|e| e.origin() == url.origin())
        .ok_or_else(|| {
            failed(
                LinkFailure::ConnectFailed,
                format!(
                    "the stream named {:?} as its message endpoint: not a URL on {}, refused",
                    truncate(&endpoint, 120),
                    url.origin().ascii_serialization()
                ),
            )
        })?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let end = Arc::new(StreamEnd::default());
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let reader = tokio::spawn(read_stream(response, buf, tx, meter, end.clone()));
    Ok(SseTransport {
        rx,
        post: Arc::new(Poster {
            http: http.clone(),
            endpoint,
            headers,
            timeout: post_timeout,
        }),
        end,
        _reader: AbortOnDropHandle::new(reader),
    })
}

/// Read the stream up to its first event, which must be `endpoint`: its
/// data, and what was read past it.
async fn read_endpoint(
    response: &mut reqwest::Response,
    meter: &Meter,
) -> Result<(String, SseBuffer), OpenError> {
    let failed = |failure, detail: String| OpenError::new(failure, "connect", detail);
    let mut buf = SseBuffer::default();
    let mut read = 0;
    loop {
        if let Some((name, data)) = buf.next_named_event() {
            if !meter.message(Instant::now()) {
                return Err(failed(
                    LinkFailure::MessageFlood,
                    "more events than the budget before the `endpoint` event".to_owned(),
                ));
            }
            if name.is_empty() && data.is_empty() {
                continue; // a comment or keep-alive
            }
            if name != b"endpoint" {
                return Err(failed(
                    LinkFailure::NotMcp,
                    "the stream's first event is not `endpoint`: not an HTTP+SSE endpoint"
                        .to_owned(),
                ));
            }
            return Ok((String::from_utf8_lossy(&data).trim().to_owned(), buf));
        }
        let chunk = response
            .chunk()
            .await
            .map_err(|e| request_failed(&e))?
            .ok_or_else(|| {
                failed(
                    LinkFailure::HandshakeFailed,
                    "the stream ended before its `endpoint` event".to_owned(),
                )
            })?;
        read += chunk.len();
        if read > BEFORE_ENDPOINT || !meter.bytes(chunk.len(), Instant::now()) {
            return Err(failed(
                LinkFailure::NotMcp,
                format!("no `endpoint` event in the stream's first {read} bytes"),
            ));
        }
        buf.push(&chunk);
    }
}

/// Read the stream until it ends, a bound breaks or rmcp lets go.
async fn read_stream(
    mut response: reqwest::Response,
    mut buf: SseBuffer,
    tx: mpsc::Sender<ServerJsonRpcMessage>,
    meter: Arc<Meter>,
    end: Arc<StreamEnd>,
) {
    let max = meter.budget().message_bytes;
    let why = 'read: loop {
        while let Some((name, data)) = buf.next_named_event() {
            let message = (name.is_empty() || name == b"message") && !data.is_empty();
            let parsed = message
                .then(|| serde_json::from_slice::<ServerJsonRpcMessage>(&data).ok())
                .flatten();
            match parsed {
                Some(m) => {
                    if tx.send(m).await.is_err() {
                        break 'read "the session was closed";
                    }
                }
                // Anything mcpmon cannot use, keep-alives and empty events
                // among them, counts against the budget: a stream of
                // blank lines is a flood of events like any other.
                None => {
                    if !meter.message(Instant::now()) {
                        break 'read "the server sent more than its budget";
                    }
                }
            }
        }
        let chunk = tokio::select! {
            c = response.chunk() => c,
            () = tx.closed() => break 'read "the session was closed",
        };
        match chunk {
            Ok(Some(c)) => {
                if !meter.bytes(c.len(), Instant::now()) {
                    break 'read "the server sent more than its budget";
                }
                if buf.pending() + c.len() > max {
                    meter.oversized();
                    break 'read "the server sent more than its budget";
                }
                buf.push(&c);
            }
            Ok(None) => break 'read "the event stream ended",
            Err(_) => break 'read "the event stream broke off",
        }
    };
    end.end(why);
}

/// A GET that got no answer, as the opening's failure.
fn request_failed(e: &reqwest::Error) -> OpenError {
    let (failure, detail) = match classify_transport(e) {
        RequestError::Unreachable(d) => (LinkFailure::Unreachable, d),
        RequestError::Unauthenticated(d) => (LinkFailure::Unauthenticated, d),
        RequestError::Forbidden(d) => (LinkFailure::Forbidden, d),
        other => {
            let tls = super::error::tls_refused(e);
            let failure = if tls {
                LinkFailure::TlsFailed
            } else {
                LinkFailure::ConnectFailed
            };
            (failure, other.to_string())
        }
    };
    OpenError::new(failure, "connect", detail)
}

/// The verdict of a GET that was answered with a failure status.
fn refused(response: &reqwest::Response) -> Result<(), OpenError> {
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
    let challenge = header(WWW_AUTHENTICATE)
        .map(|c| format!(": {}", truncate(c, 200)))
        .unwrap_or_default();
    let (failure, detail) = match status.as_u16() {
        401 => (
            LinkFailure::Unauthenticated,
            format!("HTTP {status}{challenge}"),
        ),
        403 => (LinkFailure::Forbidden, format!("HTTP {status}{challenge}")),
        404 | 405 | 501 => (
            LinkFailure::NotMcp,
            format!("HTTP {status}: no HTTP+SSE endpoint at this URL"),
        ),
        code => match throttled(code, header(reqwest::header::RETRY_AFTER)) {
            Some(t) => (LinkFailure::Throttled, t.to_string()),
            None => (LinkFailure::ConnectFailed, format!("HTTP {status}")),
        },
    };
    Err(OpenError::new(failure, "connect", detail))
}

impl rmcp::transport::Transport<RoleClient> for SseTransport {
    type Error = SendError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SendError>> + Send + 'static {
        let post = self.post.clone();
        async move {
            let body = serde_json::to_vec(&item).map_err(SendError::Encode)?;
            post.http
                .post(post.endpoint.clone())
                .headers(post.headers.clone())
                .timeout(post.timeout)
                .body(body)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(SendError::Http)?;
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.rx.recv()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), SendError>> + Send {
        // Dropping the receiver stops the reader, which drops the stream:
        // the server's session ends with it.
        self.rx.close();
        self.end.end("the session was closed");
        std::future::ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_ends_once_with_its_first_reason() {
        let end = StreamEnd::default();
        end.end("the event stream ended");
        end.end("the session was closed");
        let why = futures::executor::block_on(end.ended());
        assert_eq!(why, "the event stream ended");
    }
}
