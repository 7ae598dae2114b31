//! The transport layer: how mcpmon reaches one MCP server and what it can ask
//! of it. Everything here is about one session; nothing here judges.
//!
//! - [`Session`] is what the probe layer and the supervisor talk to; the
//!   real one is [`session::McpSession`] (stdio child or Streamable HTTP,
//!   through rmcp), and tests script fakes behind the same trait.
//! - [`Connector`] opens sessions for one server.
//! - [`child`] spawns and shuts down stdio servers; [`procstat`] reads their
//!   process tree from `/proc`; [`legacy_http`] holds legacy HTTP sessions
//!   without rmcp once rmcp has opened them (through [`rmcp_http`]).
//!
//! This layer imports only [`crate::config`] and [`crate::redact`].

pub mod budget;
pub mod child;
pub mod error;
#[cfg(test)]
pub mod fake;
pub mod legacy_http;
mod legacy_session;
pub mod legacy_sse;
pub mod oauth2;
pub mod open;
pub mod procstat;
mod progress;
pub mod reset;
pub mod rmcp_http;
pub mod session;
pub mod sse_events;
pub mod tls;
pub mod tools;
pub mod wire;

use std::time::Duration;

pub use rmcp::model::CallToolResult;
use serde::Serialize;

/// A boxed future, as the object-safe [`Session`] trait returns them.
pub use futures::future::BoxFuture;
/// A boxed stream, as [`Session::events`] returns it.
pub use futures::stream::BoxStream;

/// The protocol era a session speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Era {
    /// `initialize` handshake, liveness by `ping`.
    Legacy,
    /// No handshake, liveness by `server/discover`.
    Modern,
}

impl Era {
    /// The era's name in labels and pages: `legacy` or `modern`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
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

/// When the credentials a session sends stop working.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Credentials {
    /// The token's expiry.
    pub expires: std::time::SystemTime,
    /// Whether mcpmon fetches a new one itself (OAuth), or someone must
    /// replace it (a static bearer token).
    pub refreshable: bool,
}

pub use error::{
    LinkFailure, OpenError, RequestError, ToolCallError, parse_retry_after, throttled,
};

/// A sample of a stdio server's process tree.
pub use procstat::Sample as ProcessSample;

/// News a session tells of itself: see [`Session::events`].
#[derive(Clone, Debug, PartialEq)]
pub enum SessionEvent {
    /// The server announced its tool list changed
    /// (`notifications/tools/list_changed`); several announcements before
    /// the event is read are one.
    ToolsChanged,
    /// When the credentials the session sends now expire (`None`: unknown).
    Credentials(Option<Credentials>),
    /// The link is gone for good (a child exited, a stream ended, the
    /// server broke the session's limits): how, and in the words of its end.
    /// Nothing follows it.
    Ended(LinkFailure, String),
}

/// Evidence of a session that is not an answer; see [`Session::evidence`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evidence {
    /// The stdio process tree's state, CPU and memory; `None` for HTTP.
    pub process: Option<ProcessSample>,
    /// Progress notifications received so far, and the intervals between
    /// consecutive ones of a request since the last read.
    pub progress: Progress,
}

/// One open MCP session, as the probe layer and the supervisor see it.
/// Every request takes its own deadline; nothing here waits unbounded.
pub trait Session: Send + Sync {
    /// The era this session speaks.
    fn era(&self) -> Era;
    /// The era to try first next time: the one spoken, when the server's
    /// answer settled it (not when a silent `server/discover` only made
    /// way for `initialize`).
    fn remembered_era(&self) -> Option<Era> {
        Some(self.era())
    }
    /// Who the server said it is.
    fn info(&self) -> &ServerInfo;
    /// The era's liveness request (`ping` or `server/discover`).
    fn liveness(&self, timeout: Duration) -> BoxFuture<'_, Result<Duration, RequestError>>;
    /// The tool surface, following pagination, bounded.
    fn list_tools(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<tools::ToolSurface, RequestError>>;
    /// Call a tool. With `progress_resets`, each progress notification of
    /// the call pushes `timeout` back, never past `max`; on expiry the call
    /// is cancelled the way the era requires and the session stays open.
    fn call_tool(&self, call: ToolCall) -> BoxFuture<'_, Result<CallToolResult, ToolCallError>>;
    /// Send one request whose result is read as JSON: the tasks methods,
    /// whose shapes differ between the eras. Over HTTP a request about a
    /// task carries its id in `Mcp-Name`.
    fn request_json(
        &self,
        method: &'static str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<serde_json::Value, RequestError>> {
        let _ = (method, params, timeout);
        Box::pin(std::future::ready(Err(RequestError::Unexpected)))
    }
    /// What the session tells without being asked, for as long as it
    /// lasts: tool list changes, each change of its credentials (the
    /// first at once), and last its end. The supervisor reads it once per
    /// session; nothing in it is polled.
    fn events(&self) -> BoxStream<'_, SessionEvent> {
        Box::pin(futures::stream::pending())
    }
    /// The evidence that is not an answer, read when the supervisor asks
    /// (at the pace of its schedule, never more often): the stdio process
    /// tree, and the progress notifications since the last read.
    fn evidence(&self) -> Evidence {
        Evidence::default()
    }
    /// Close politely within a bounded time.
    fn close(self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()>;
}

/// One tool call's parameters.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Deadline (idle deadline when `progress_resets`).
    pub timeout: Duration,
    /// Hard cap.
    pub max: Duration,
    /// Whether progress notifications push `timeout` back.
    pub progress_resets: bool,
    /// W3C `traceparent` sent in `params._meta`.
    pub traceparent: Option<String>,
}

/// Signs of progress a session collected.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// Progress notifications so far in this session.
    pub count: u64,
    /// Seconds between consecutive notifications of one request, since the
    /// last call (bounded).
    pub intervals: Vec<f64>,
}

/// Opens sessions to one server.
pub trait Connector: Send + Sync {
    /// Spawn or connect and shake hands, within the server's connect
    /// timeout. `hint` is the era the server spoke last time.
    fn open(&self, hint: Option<Era>) -> BoxFuture<'_, Result<Box<dyn Session>, OpenError>>;
    /// The certificate chain the server last presented, for HTTPS.
    fn certificate(&self) -> Option<tls::PeerCertificate> {
        None
    }
}

/// Idle keep-alive connections kept per host: enough for the pings of
/// thousands of servers behind one gateway (a ping holds its connection for
/// well under a millisecond).
const IDLE_CONNECTIONS_PER_HOST: usize = 32;

/// How long a kept-alive connection may sit idle before it is closed.
const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(90);

/// The settings of every HTTP client that reaches servers: keep-alive
/// pool, rustls, bounded connect, no redirects.
pub fn http_client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
        // Servers that share a host (a gateway's paths) share connections:
        // a burst of handshakes would otherwise leave one idle connection,
        // and its buffers, per server.
        .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
        .tcp_keepalive(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
}

/// The clients that reach a server: reqwest for what runs once per session
/// (rmcp's handshake, OAuth, the legacy SSE transport), the wire for the
/// requests of a held session, which run every few seconds.
#[derive(Clone)]
pub struct Http {
    /// The handshake's client.
    pub client: reqwest::Client,
    /// The held session's client.
    pub wire: wire::Wire,
}

/// Why the shared HTTP clients could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    /// reqwest refused its settings.
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The system's TLS roots or settings.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

impl Http {
    /// The clients plain-HTTP servers share (and HTTPS ones without TLS
    /// settings of their own): the system roots, no client certificate.
    pub fn shared() -> Result<Http, HttpSetupError> {
        let config = tls::client_config(&crate::config::TlsSpec::default(), tls::Seen::default())?;
        Ok(Http {
            client: http_client_builder().build()?,
            wire: wire::Wire::new(&config),
        })
    }
}

/// A connector whose every attempt fails the same way: a server whose TLS
/// files went missing after the config was checked.
pub struct Refusing(pub OpenError);

impl Connector for Refusing {
    fn open(&self, _hint: Option<Era>) -> BoxFuture<'_, Result<Box<dyn Session>, OpenError>> {
        let e = OpenError::new(self.0.failure, self.0.phase, self.0.detail.clone());
        Box::pin(async move { Err(e) })
    }
}

/// Text a server sent, bounded and defused (see [`crate::config::defuse`]).
pub use crate::config::defuse as truncate;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_bounds_and_defuses_text() {
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("é", 1), "…");
        assert_eq!(truncate("a\nb\x1b[31m", 10), "a\u{fffd}b\u{fffd}[31m");
    }
}
