//! The HTTP client rmcp opens Streamable HTTP sessions through: the shared
//! reqwest client, plus what mcpmon needs around it.
//!
//! [`RmcpHttp`] remembers the session id and headers of the last POST rmcp
//! sent, so [`super::legacy_http`] can take a legacy session over once rmcp
//! has opened it. With OAuth it puts the current token on every request
//! and, when a POST is refused with 401, fetches a new token and sends it
//! once more. Once detached, rmcp's closing no longer ends the session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use super::budget::Meter;
use super::oauth2::TokenSource;

/// Headers of the session's last POST: everything a request must carry.
pub(super) type Route = Arc<HeaderMap>;

/// A reqwest client for rmcp that records the session id and headers of
/// each POST it sends. Everything else passes through untouched.
/// With OAuth, it also puts the current token on every request and, when a
/// POST is refused with 401, fetches a new token and sends it once more.
#[derive(Clone)]
pub struct RmcpHttp {
    inner: reqwest::Client,
    route: Arc<Mutex<Option<Route>>>,
    tokens: Option<Arc<TokenSource>>,
    /// Set when a legacy link takes the session over: rmcp's closing must
    /// not end it on the server.
    detached: Arc<std::sync::atomic::AtomicBool>,
    /// The session's inbound budget: every SSE event rmcp reads passes it.
    meter: Option<Arc<Meter>>,
}

type HttpError = StreamableHttpError<reqwest::Error>;

impl RmcpHttp {
    /// Wrap the shared client.
    pub fn new(inner: reqwest::Client) -> Self {
        RmcpHttp {
            inner,
            route: Arc::new(Mutex::new(None)),
            tokens: None,
            detached: Arc::default(),
            meter: None,
        }
    }

    /// Meter the bytes of every stream rmcp reads with `meter`.
    pub fn with_meter(mut self, meter: Arc<Meter>) -> Self {
        self.meter = Some(meter);
        self
    }

    /// `stream`, with each event's bytes counted; it ends once the meter
    /// trips. (Events with data are counted as messages by
    /// [`super::budget::Metered`]; those without, here.)
    fn metered(
        &self,
        stream: BoxStream<'static, Result<sse_stream::Sse, SseError>>,
    ) -> BoxStream<'static, Result<sse_stream::Sse, SseError>> {
        use futures::StreamExt;
        let Some(meter) = self.meter.clone() else {
            return stream;
        };
        Box::pin(stream.take_while(move |item| {
            let now = tokio::time::Instant::now();
            let ok = match item {
                Ok(e) => {
                    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
                    let bytes = len(&e.data) + len(&e.event) + len(&e.id);
                    meter.bytes(bytes, now) && (e.data.is_some() || meter.message(now))
                }
                Err(_) => true,
            };
            std::future::ready(ok)
        }))
    }

    fn metered_post(
        &self,
        r: Result<StreamableHttpPostResponse, HttpError>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        match r {
            Ok(StreamableHttpPostResponse::Sse(stream, id)) => {
                Ok(StreamableHttpPostResponse::Sse(self.metered(stream), id))
            }
            other => other,
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
    pub(super) fn route(&self) -> Option<Route> {
        self.route.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The OAuth tokens, when the server has them.
    pub(super) fn tokens(&self) -> Option<&Arc<TokenSource>> {
        self.tokens.as_ref()
    }

    /// Hand the session over: from now on rmcp's DELETE is not sent.
    pub(super) fn detach(&self) {
        self.detached
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl StreamableHttpClient for RmcpHttp {
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
        // Safe to send twice (not a tool call): kept for a connection that
        // turns out to have been closed under it (see `reset`).
        let again = (!calls_a_tool(&message)).then(|| {
            (
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
            )
        });
        let first = self.metered_post(
            self.inner
                .post_message_with_response_limits(
                    uri.clone(),
                    message,
                    session_id.clone(),
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
        );
        let first = match (first, again, super::reset::fresh_client()) {
            (Err(StreamableHttpError::Client(e)), Some((m, s, a, h)), Some(fresh))
                if super::reset::stale_connection(&e) =>
            {
                tracing::debug!(
                    "a kept-alive connection was closed under the request; once more on a fresh one"
                );
                self.metered_post(
                    fresh
                        .post_message_with_response_limits(uri.clone(), m, s, a, h, limits)
                        .await,
                )
            }
            (first, ..) => first,
        };
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
        self.metered_post(
            self.inner
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        if self.detached.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
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
            .map(|s| self.metered(s))
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
            .map(|s| self.metered(s))
    }
}

/// Whether a message asks for a tool call, which is never sent twice.
fn calls_a_tool(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        message,
        rmcp::model::JsonRpcMessage::Request(r)
            if matches!(r.request, rmcp::model::ClientRequest::CallToolRequest(_))
    )
}

/// Whether a POST's result is a refusal of the credentials (401).
fn refused(r: &Result<StreamableHttpPostResponse, HttpError>) -> bool {
    match r {
        Err(StreamableHttpError::AuthRequired(_)) => true,
        Err(StreamableHttpError::UnexpectedServerResponse(t)) => t.starts_with("HTTP 401"),
        _ => false,
    }
}
