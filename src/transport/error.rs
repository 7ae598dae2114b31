//! How requests and sessions fail, classified once where the failure is
//! seen, so nothing above reads error strings: the request errors, the
//! link failures, and the classification of rmcp's, reqwest's and the
//! kernel's errors into them.

use std::time::Duration;

use rmcp::service::ServiceError;

use super::truncate;

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
    /// The server wants credentials, or refused the ones sent (HTTP 401).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The credentials lack a permission the request needs (HTTP 403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The server asked to be called less (HTTP 429, or 503 with
    /// `Retry-After`): it is there and deliberately not serving this one.
    #[error("throttled: HTTP {status}{}", retry_after.map(|d| format!(", retry after {d:?}")).unwrap_or_default())]
    Throttled {
        /// 429 or 503.
        status: u16,
        /// How long the server asked to wait, if it said.
        retry_after: Option<Duration>,
    },
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
    /// True when the failure means the link itself is gone.
    pub fn is_transport_death(&self) -> bool {
        // An auth refusal ends the session too: a new one is opened, and
        // that attempt reports the refusal as its own verdict.
        matches!(
            self,
            RequestError::Closed
                | RequestError::Unreachable(_)
                | RequestError::Unauthenticated(_)
                | RequestError::Forbidden(_)
        )
    }
}

/// The throttling an HTTP answer signals: 429 always, 503 only with a
/// `Retry-After` (without one it is an outage, not a request to slow down).
pub fn throttled(status: u16, retry_after: Option<&str>) -> Option<RequestError> {
    let retry_after = retry_after.and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
    match status {
        429 => Some(RequestError::Throttled {
            status,
            retry_after,
        }),
        503 if retry_after.is_some() => Some(RequestError::Throttled {
            status,
            retry_after,
        }),
        _ => None,
    }
}

/// A `Retry-After` value (RFC 9110): delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
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

/// How a link was lost or could not be made: definitive transport evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::VariantArray)]
pub enum LinkFailure {
    /// The stdio child exited.
    Exited,
    /// Connection refused, reset, or the name does not resolve.
    Unreachable,
    /// Could not spawn or connect (an HTTP error, a protocol violation).
    ConnectFailed,
    /// The TLS handshake refused the server: its certificate is expired,
    /// for another name, or from an unknown authority.
    TlsFailed,
    /// The URL answers HTTP, but not as an MCP endpoint.
    NotMcp,
    /// The URL speaks the legacy HTTP+SSE transport (2024-11-05).
    WrongTransport,
    /// Connected, but the handshake failed or timed out.
    HandshakeFailed,
    /// The server wants credentials, or refused the ones sent (HTTP 401).
    Unauthenticated,
    /// The credentials lack a permission (HTTP 403).
    Forbidden,
    /// The server asked to be called less (HTTP 429, or 503 with `Retry-After`).
    Throttled,
    /// The server sent more requests than a client can be asked to serve.
    RequestFlood,
    /// The server sent more messages or bytes than its budget allows.
    MessageFlood,
}

impl LinkFailure {
    /// Whether a session over stdio (`stdio`) or HTTP can end, or fail to
    /// open, for this: the reasons its reconnect counter is declared for
    /// from zero. (A flood is counted when it happens.)
    pub fn applies_to(self, stdio: bool) -> bool {
        match self {
            LinkFailure::Exited => stdio,
            LinkFailure::Unreachable
            | LinkFailure::Unauthenticated
            | LinkFailure::Forbidden
            | LinkFailure::Throttled
            | LinkFailure::TlsFailed
            | LinkFailure::NotMcp
            | LinkFailure::WrongTransport => !stdio,
            LinkFailure::ConnectFailed | LinkFailure::HandshakeFailed => true,
            LinkFailure::RequestFlood | LinkFailure::MessageFlood => false,
        }
    }
}

/// Why opening a session failed.
#[derive(Debug, thiserror::Error)]
#[error("{phase}: {detail}")]
pub struct OpenError {
    /// What kind of failure this is.
    pub failure: LinkFailure,
    /// Which phase failed: `spawn`, `connect` or `handshake`.
    pub phase: &'static str,
    /// What happened.
    pub detail: String,
    /// The server said why in its own words: a child that exited leaving
    /// lines on stderr. A failure without them may be a slow start's, and
    /// the state layer waits for a second before it judges.
    pub said_why: bool,
}

impl OpenError {
    /// A failure to open, in `phase`, that the server gave no words for
    /// (most are: only a child that exits leaving stderr lines says why).
    pub fn new(failure: LinkFailure, phase: &'static str, detail: String) -> OpenError {
        OpenError {
            failure,
            phase,
            detail,
            said_why: false,
        }
    }
}

/// An rmcp request failure as a [`RequestError`]; `timeout` is the deadline
/// the request had.
pub(super) fn classify(e: ServiceError, timeout: Duration) -> RequestError {
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

/// An HTTP 401 or 403 somewhere in an error, as rmcp and reqwest report
/// them: a challenge rmcp parsed, a status rmcp quoted, or reqwest's own.
fn auth_refusal(err: &(dyn std::error::Error + 'static)) -> Option<reqwest::StatusCode> {
    use reqwest::StatusCode;
    use rmcp::transport::streamable_http_client::StreamableHttpError as H;
    if let Some(h) = err.downcast_ref::<H<reqwest::Error>>() {
        return match h {
            H::AuthRequired(_) => Some(StatusCode::UNAUTHORIZED),
            H::InsufficientScope(_) => Some(StatusCode::FORBIDDEN),
            H::UnexpectedServerResponse(text) if text.starts_with("HTTP 401") => {
                Some(StatusCode::UNAUTHORIZED)
            }
            H::UnexpectedServerResponse(text) if text.starts_with("HTTP 403") => {
                Some(StatusCode::FORBIDDEN)
            }
            _ => None,
        };
    }
    err.downcast_ref::<reqwest::Error>()
        .and_then(reqwest::Error::status)
        .filter(|s| matches!(*s, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN))
}

/// Walk an error's chain for an auth refusal, or an I/O kind or resolver
/// failure that means "nobody there"; anything else is a transport error.
pub(super) fn classify_transport(e: &(dyn std::error::Error + 'static)) -> RequestError {
    let text = truncate(&error_chain(e), 300);
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(rmcp::transport::streamable_http_client::StreamableHttpError::HttpStatus(s)) =
            err.downcast_ref::<rmcp::transport::streamable_http_client::StreamableHttpError<
                reqwest::Error,
            >>()
            && let Some(t) = super::throttled(s.status, s.retry_after.as_deref())
        {
            return t;
        }
        match auth_refusal(err) {
            Some(reqwest::StatusCode::UNAUTHORIZED) => return RequestError::Unauthenticated(text),
            Some(_) => return RequestError::Forbidden(text),
            None => {}
        }
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

pub(super) fn classify_open(e: &rmcp::service::ClientInitializeError) -> OpenError {
    use rmcp::service::ClientInitializeError as E;
    // `TransportError` keeps its cause in a field that is not a `source()`.
    let (class, detail, tls, not_mcp) = match e {
        E::TransportError { error, context } => {
            // The transport's own text is its Rust type name; skip to the cause.
            let inner: &(dyn std::error::Error + 'static) = error.error.as_ref();
            let class = classify_transport(inner);
            let not_mcp = not_mcp(inner).map(|what| format!("{context}: {what}"));
            let detail = format!("{context}: {}", error_chain(inner));
            (Some(class), detail, tls_refused(inner), not_mcp)
        }
        _ => (None, error_chain(e), false, None),
    };
    let detail = truncate(&not_mcp.clone().unwrap_or(detail), 300);
    let (reason, phase) = match class {
        Some(_) if tls => (LinkFailure::TlsFailed, "connect"),
        Some(RequestError::Transport(_)) if not_mcp.is_some() => (LinkFailure::NotMcp, "connect"),
        Some(RequestError::Unreachable(_)) => (LinkFailure::Unreachable, "connect"),
        Some(RequestError::Unauthenticated(_)) => (LinkFailure::Unauthenticated, "connect"),
        Some(RequestError::Forbidden(_)) => (LinkFailure::Forbidden, "connect"),
        Some(RequestError::Throttled { .. }) => (LinkFailure::Throttled, "connect"),
        Some(_) => (LinkFailure::ConnectFailed, "connect"),
        None => (LinkFailure::HandshakeFailed, "handshake"),
    };
    OpenError::new(reason, phase, detail)
}

/// Statuses an HTTP server gives a POST to a URL that is no MCP endpoint
/// (nothing there, no POST there, no POST at all), when the body is not a
/// JSON-RPC error. An outage (5xx but 501) or a refusal is something else.
const NOT_AN_ENDPOINT: [&str; 3] = ["HTTP 404", "HTTP 405", "HTTP 501"];

/// What in `e`'s causes shows the URL answers HTTP but not MCP: a status
/// that means no endpoint, a content type neither JSON nor an event
/// stream, or JSON that is not JSON-RPC. Short, with an HTML body read as
/// its text.
fn not_mcp(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rmcp::transport::streamable_http_client::StreamableHttpError as H;
    let mut source = Some(e);
    while let Some(err) = source {
        match err.downcast_ref::<H<reqwest::Error>>() {
            Some(H::UnexpectedContentType(Some(ct))) => {
                return Some(format!(
                    "answered {}, not JSON or an event stream: not an MCP endpoint",
                    truncate(ct, 60)
                ));
            }
            Some(H::HttpStatus(s)) if s.status == 501 => {
                return Some("HTTP 501 Not Implemented: not an MCP endpoint".to_owned());
            }
            Some(H::UnexpectedContentType(None)) => {
                return Some("answered without a content type: not an MCP endpoint".to_owned());
            }
            Some(H::UnexpectedServerResponse(text))
                if NOT_AN_ENDPOINT.iter().any(|s| text.starts_with(s)) =>
            {
                // rmcp writes "HTTP {status}: {body}".
                let (status, body) = text.split_once(": ").unwrap_or((text, ""));
                let body = body_text(body, 120);
                return Some(if body.is_empty() {
                    format!("{status}: not an MCP endpoint")
                } else {
                    format!("{status}: not an MCP endpoint: {body}")
                });
            }
            Some(H::UnexpectedServerResponse(text))
                if text.starts_with("could not parse JSON response") =>
            {
                return Some("answered JSON that is not JSON-RPC: not an MCP endpoint".to_owned());
            }
            _ => {}
        }
        source = next_source(err);
    }
    None
}

/// The words of a body that may be HTML, at most `max` bytes: tags (when
/// the body starts with one) and runs of whitespace become single spaces,
/// control characters are defused.
pub(super) fn body_text(body: &str, max: usize) -> String {
    let html = body.trim_start().starts_with('<');
    let mut text = String::with_capacity(body.len().min(max * 2));
    let mut in_tag = false;
    for c in body.chars() {
        match c {
            '<' if html => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            _ if in_tag => {}
            c => text.push(c),
        }
        if text.len() > max * 4 {
            break;
        }
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    truncate(&words.join(" "), max)
}

/// Whether rustls refused the handshake somewhere in `e`'s causes. It
/// travels inside an `io::Error` (at times inside two), whose `source()`
/// skips what it wraps.
pub(super) fn tls_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        let mut wrapped = Some(err);
        while let Some(w) = wrapped {
            if w.downcast_ref::<rustls::Error>().is_some() {
                return true;
            }
            let inner = w
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref());
            wrapped = inner.map(|i| i as &(dyn std::error::Error + 'static));
        }
        source = next_source(err);
    }
    false
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

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::streamable_http_client::{
        AuthRequiredError, InsufficientScopeError, StreamableHttpError as H,
    };

    #[test]
    fn throttles_and_their_waits() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        // RFC 9110's example date, 60 s after `now`.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:29:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert!(matches!(
            throttled(429, None),
            Some(RequestError::Throttled {
                status: 429,
                retry_after: None
            })
        ));
        assert!(matches!(
            throttled(503, Some("3")),
            Some(RequestError::Throttled {
                status: 503,
                retry_after: Some(_)
            })
        ));
        assert!(throttled(503, None).is_none(), "a plain 503 is an outage");
        assert!(throttled(500, Some("3")).is_none());
    }

    fn class(e: H<reqwest::Error>) -> RequestError {
        classify_transport(&e)
    }

    #[test]
    fn refusals_are_told_from_other_http_failures() {
        let challenge = "Bearer resource_metadata=\"https://a.example/.well-known/x\"";
        assert!(matches!(
            class(H::AuthRequired(AuthRequiredError::new(challenge.into()))),
            RequestError::Unauthenticated(d) if d.contains("resource_metadata")
        ));
        assert!(matches!(
            class(H::InsufficientScope(InsufficientScopeError::new(
                "Bearer error=\"insufficient_scope\"".into(),
                None
            ))),
            RequestError::Forbidden(_)
        ));
        // Without a challenge rmcp only quotes the status.
        assert!(matches!(
            class(H::UnexpectedServerResponse(
                "HTTP 401 Unauthorized: no".into()
            )),
            RequestError::Unauthenticated(_)
        ));
        assert!(matches!(
            class(H::UnexpectedServerResponse("HTTP 403 Forbidden: no".into())),
            RequestError::Forbidden(_)
        ));
        assert!(matches!(
            class(H::UnexpectedServerResponse("HTTP 404 Not Found: x".into())),
            RequestError::Transport(_)
        ));
    }

    #[test]
    fn an_answer_that_is_not_mcp_is_named_in_few_words() {
        let html = "HTTP 404 Not Found: <!DOCTYPE html>\n<html><head><title>Error</title></head>\n<body><pre>Cannot POST /sse</pre></body></html>";
        assert_eq!(
            not_mcp(&H::<reqwest::Error>::UnexpectedServerResponse(html.into())).as_deref(),
            Some("HTTP 404 Not Found: not an MCP endpoint: Error Cannot POST /sse")
        );
        assert_eq!(
            not_mcp(&H::<reqwest::Error>::UnexpectedServerResponse(
                "HTTP 405 Method Not Allowed: ".into()
            ))
            .as_deref(),
            Some("HTTP 405 Method Not Allowed: not an MCP endpoint")
        );
        assert!(
            not_mcp(&H::<reqwest::Error>::UnexpectedContentType(Some(
                "text/html; charset=utf-8".into()
            )))
            .is_some_and(|d| d.contains("text/html"))
        );
        assert!(not_mcp(&H::<reqwest::Error>::UnexpectedContentType(None)).is_some());
        // A static web server's answer to any POST.
        let not_implemented = H::<reqwest::Error>::HttpStatus(
            rmcp::transport::streamable_http_client::HttpStatusError::new(501, None),
        );
        assert!(not_mcp(&not_implemented).is_some_and(|d| d.starts_with("HTTP 501")));
        let outage = H::<reqwest::Error>::HttpStatus(
            rmcp::transport::streamable_http_client::HttpStatusError::new(502, None),
        );
        assert_eq!(not_mcp(&outage), None);
        assert!(
            not_mcp(&H::<reqwest::Error>::UnexpectedServerResponse(
                "could not parse JSON response as ServerJsonRpcMessage: x".into()
            ))
            .is_some()
        );
        // An outage, a bad request or a refusal is not "not MCP".
        for text in [
            "HTTP 500 Internal Server Error: <html>",
            "HTTP 400 Bad Request: no",
            "HTTP 401 Unauthorized: no",
        ] {
            assert_eq!(
                not_mcp(&H::<reqwest::Error>::UnexpectedServerResponse(text.into())),
                None,
                "{text}"
            );
        }
    }

    #[test]
    fn a_body_reads_as_its_words() {
        assert_eq!(body_text("<p>a\n\n  b</p><script>", 50), "a b");
        assert_eq!(body_text("a < b", 50), "a < b");
        assert_eq!(body_text("plain \x1b[31mred", 50), "plain \u{fffd}[31mred");
        assert_eq!(body_text(&"word ".repeat(100), 12), "word word wo…");
    }
}
