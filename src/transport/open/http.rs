//! Opening a Streamable HTTP session (see [`super`] for the plan and
//! the deadline it shares): the transport with its headers, bearer or
//! OAuth token and inbound budget, then the handshake, and on a
//! non-modern answer to `server/discover` a fresh connection for
//! `initialize`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use tokio::time::Instant;

use super::{
    HttpParts, Opened, Plan, Started, discover_mode, discover_share, finish, flooded, shown,
};
use crate::config::{ServerSpec, TransportSpec};
use crate::transport::budget::{Meter, Metered};
use crate::transport::error::classify_open;
use crate::transport::oauth2::TokenSource;
use crate::transport::progress::Activity;
use crate::transport::rmcp_http::RmcpHttp;
use crate::transport::session::{MAX_LINE_BYTES, McpSession, Monitor};
use crate::transport::{LinkFailure, OpenError, truncate};

async fn http_transport(
    spec: &ServerSpec,
    http: &reqwest::Client,
    meter: &Arc<Meter>,
) -> Result<(StreamableHttpClientTransport<RmcpHttp>, HttpParts), OpenError> {
    let TransportSpec::Http {
        url,
        headers,
        bearer_token,
        oauth2,
        ..
    } = &spec.transport
    else {
        return Err(OpenError::new(
            LinkFailure::ConnectFailed,
            "connect",
            "not an HTTP server".to_owned(),
        ));
    };
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    config.max_json_response_size = MAX_LINE_BYTES;
    config.max_sse_event_size = MAX_LINE_BYTES;
    let mut static_expiry = None;
    let mut tokens = None;
    if let Some(token) = bearer_token {
        config = config.auth_header(token.expose().to_owned());
        static_expiry = crate::transport::oauth2::jwt_expiry(token.expose());
    }
    if let Some(o) = oauth2 {
        let source = Arc::new(TokenSource::new(
            (**o).clone(),
            http.clone(),
            spec.scrubber.clone(),
        ));
        // No token, no session: the refusal is the verdict.
        let token = source
            .token()
            .await
            .map_err(|e| OpenError::new(LinkFailure::Unauthenticated, "connect", e.to_string()))?;
        config = config.auth_header(token.to_string());
        tokens = Some(source);
    }
    config = config.custom_headers(super::header_pairs(headers).collect());
    let client = RmcpHttp::new(http.clone()).with_meter(meter.clone());
    let client = match &tokens {
        Some(t) => client.with_tokens(t.clone()),
        None => client,
    };
    let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
    Ok((
        transport,
        HttpParts {
            client,
            tokens,
            static_expiry,
        },
    ))
}

/// Open a Streamable HTTP session following `plan` until `until`.
pub(in crate::transport) async fn open_http(
    spec: &ServerSpec,
    http: &crate::transport::Http,
    plan: &Plan,
    until: Instant,
) -> Result<McpSession, OpenError> {
    let to = Remote {
        spec,
        http,
        plan,
        within: until.saturating_duration_since(Instant::now()),
    };
    let (mode, request, first_by) = match plan {
        Plan::Initialize(_) => (ClientLifecycleMode::Initialize, "initialize", until),
        Plan::Discover => (discover_mode(), "server/discover", until),
        Plan::Detect => (
            discover_mode(),
            "server/discover",
            Instant::now() + discover_share(to.within),
        ),
    };
    let (served, parts, started) = to.attempt(mode, first_by).await?;
    let (tried, conclusive) = match served {
        Ok(service) => return Ok(to.finish(service, true, parts, started).await),
        Err(Some(e)) => {
            let refused = to.refusal(e, until).await;
            // A refusal of the credentials, or nobody there, is the verdict
            // whatever the era; so is any failure when no detection runs.
            if *plan != Plan::Detect || refused.failure != LinkFailure::HandshakeFailed {
                return Err(refused);
            }
            (refused.detail, true)
        }
        Err(None) if *plan != Plan::Detect => return Err(to.no_answer(request, None)),
        Err(None) => ("no answer in time".to_owned(), false),
    };
    // Detection found no modern answer: a fresh connection speaks legacy.
    let (served, parts, started) = to.attempt(ClientLifecycleMode::Initialize, until).await?;
    match served {
        Ok(service) => Ok(to.finish(service, conclusive, parts, started).await),
        Err(Some(e)) => {
            let mut refused = to.refusal(e, until).await;
            if matches!(
                refused.failure,
                LinkFailure::NotMcp | LinkFailure::WrongTransport
            ) {
                // What discover was told is the same page again.
                return Err(refused);
            }
            refused.detail = truncate(
                &format!(
                    "initialize: {} (server/discover was tried first: {tried})",
                    refused.detail
                ),
                900,
            );
            Err(refused)
        }
        Err(None) => Err(to.no_answer("initialize", Some(tried))),
    }
}

/// One remote server being opened.
struct Remote<'a> {
    spec: &'a ServerSpec,
    http: &'a crate::transport::Http,
    plan: &'a Plan,
    /// The time the whole handshake had.
    within: Duration,
}

/// A service, or why not (`None`: no answer in time).
type Served = Result<RunningService<RoleClient, Monitor>, Option<ClientInitializeError>>;

impl Remote<'_> {
    /// One connection, one handshake in `mode` until `by`.
    async fn attempt(
        &self,
        mode: ClientLifecycleMode,
        by: Instant,
    ) -> Result<(Served, HttpParts, (Arc<Meter>, Arc<Activity>)), OpenError> {
        let activity = Arc::new(Activity::default());
        let handler = Monitor::new(activity.clone(), self.plan.legacy_version());
        let meter = Arc::new(Meter::default());
        let (transport, parts) = http_transport(self.spec, &self.http.client, &meter).await?;
        let served = tokio::time::timeout_at(
            by,
            handler.serve_with_lifecycle(Metered::new(transport, meter.clone()), mode),
        )
        .await;
        if let Some(e) = flooded(&meter) {
            return Err(e);
        }
        let served = match served {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(e)) => Err(Some(e)),
            Err(_) => Err(None),
        };
        Ok((served, parts, (meter, activity)))
    }

    /// The verdict of a failed handshake, with the authorization servers a
    /// 401's metadata names, and a URL that is no MCP endpoint asked once
    /// whether it speaks the legacy HTTP+SSE transport.
    async fn refusal(&self, e: ClientInitializeError, until: Instant) -> OpenError {
        let mut refused = classify_open(&e);
        if refused.failure == LinkFailure::NotMcp && self.speaks_legacy_sse(until).await {
            refused.failure = LinkFailure::WrongTransport;
            refused.detail = format!(
                "{}; a GET there opens a legacy HTTP+SSE stream (2024-11-05): use `transport: sse`",
                refused.detail
            );
        }
        if refused.failure == LinkFailure::Unauthenticated
            && let TransportSpec::Http { url, .. } = &self.spec.transport
            && let Some(found) = crate::transport::oauth2::protected_resource(
                &self.http.client,
                url,
                &refused.detail,
            )
            .await
        {
            refused.detail = truncate(&format!("{}; {found}", refused.detail), 600);
        }
        refused
    }

    /// Whether the URL answers a GET the way a legacy HTTP+SSE server does,
    /// as the specification's backwards-compatibility check asks: an event
    /// stream whose first event is `endpoint`. Bounded: [`SNIFF_TIME`] (or
    /// what is left of the handshake's time) and [`SNIFF_BYTES`].
    async fn speaks_legacy_sse(&self, until: Instant) -> bool {
        let TransportSpec::Http {
            url,
            headers,
            bearer_token,
            ..
        } = &self.spec.transport
        else {
            return false;
        };
        let by = until.min(Instant::now() + SNIFF_TIME);
        let mut request = self
            .http
            .client
            .get(url.as_str())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        for (k, v) in headers {
            request = request.header(k.as_str(), v.expose());
        }
        if let Some(token) = bearer_token {
            request = request.bearer_auth(token.expose());
        }
        let sniff = async {
            let mut response = request.send().await.ok()?;
            let stream = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"));
            if !response.status().is_success() || !stream {
                return Some(false);
            }
            let mut seen = Vec::with_capacity(SNIFF_BYTES);
            while seen.len() < SNIFF_BYTES {
                let chunk = response.chunk().await.ok()??;
                seen.extend_from_slice(&chunk[..chunk.len().min(SNIFF_BYTES - seen.len())]);
                if first_event_is_endpoint(&seen) {
                    return Some(true);
                }
            }
            Some(false)
        };
        // Dropping the response closes the stream and the server's session.
        matches!(tokio::time::timeout_at(by, sniff).await, Ok(Some(true)))
    }

    fn no_answer(&self, request: &str, tried: Option<String>) -> OpenError {
        let within = shown(self.within);
        OpenError::new(
            LinkFailure::HandshakeFailed,
            "handshake",
            match tried {
                Some(t) => format!(
                    "no answer to {request} within {within} (server/discover was tried first: {t})"
                ),
                None => format!("no answer to {request} within {within}"),
            },
        )
    }

    async fn finish(
        &self,
        service: RunningService<RoleClient, Monitor>,
        conclusive: bool,
        parts: HttpParts,
        (meter, activity): (Arc<Meter>, Arc<Activity>),
    ) -> McpSession {
        let started = Started {
            opened: Opened {
                service,
                conclusive,
            },
            child: None,
            stream: None,
            meter,
            activity,
        };
        finish(self.spec, Some(self.http), started, Some(parts), self.plan).await
    }
}

/// Longest the legacy-transport check may take.
const SNIFF_TIME: Duration = Duration::from_secs(2);
/// Most of the stream the legacy-transport check reads.
const SNIFF_BYTES: usize = 4096;

/// Whether an event stream's first event, read so far, is `endpoint`
/// (comment lines such as keep-alives before it are allowed).
fn first_event_is_endpoint(seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        return line.strip_prefix("event:").map(str::trim) == Some("endpoint");
    }
    false
}

#[cfg(test)]
mod sniff_tests {
    use super::first_event_is_endpoint;

    #[test]
    fn the_legacy_streams_first_event_is_endpoint() {
        assert!(first_event_is_endpoint(
            b"event: endpoint\ndata: /messages?sessionId=1\n\n"
        ));
        assert!(first_event_is_endpoint(
            b": ping\r\n\r\nevent:endpoint\r\ndata: /m\r\n"
        ));
        assert!(!first_event_is_endpoint(b"event: message\ndata: {}\n"));
        assert!(!first_event_is_endpoint(b"data: endpoint\n"));
        assert!(!first_event_is_endpoint(b": only a comment\n"));
        assert!(!first_event_is_endpoint(b""));
    }
}
