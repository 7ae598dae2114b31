//! Opening a session: spawn or connect, then the handshake the era needs,
//! all inside one `connect_timeout` counted from when this server's turn
//! came.
//!
//! Under `protocol: auto` the era is detected the way the spec says:
//! `server/discover` first, and anything but a modern answer (an error, or
//! no answer in time) means legacy, so `initialize` follows. rmcp's own
//! detection waits a fixed 10 s for `server/discover`, whatever the
//! deadline, so a modern server that took 11 s to start was taken for
//! legacy for the life of the process. Here detection gets four fifths of
//! the deadline and `initialize` the rest, on the same process (stdio) or a
//! fresh connection (HTTP). Only a conclusive answer is remembered as the
//! server's era: a legacy answer after a silent `server/discover` is
//! detected again next time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, RoleClient};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::budget::{Breach, Meter, Metered, MeteredRead};
use super::child::{self, Child};
use super::lean_link::LeanLink;
use super::oauth2::TokenSource;
use super::recorder::Recorder;
use super::error::classify_open;
use super::session::{Activity, Lean, Link, MAX_LINE_BYTES, Monitor, RmcpSession};
use super::{Era, LinkFailure, OpenError, ServerInfo, truncate};
use crate::config::{KNOWN_VERSIONS, Protocol, ServerSpec, TransportSpec, is_modern};

/// How the handshake goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// `server/discover`, then `initialize` if that was not a modern answer.
    Detect,
    /// `initialize`, offering this revision.
    Initialize(ProtocolVersion),
    /// `server/discover` only.
    Discover,
}

impl Plan {
    /// The plan for a server pinned to `protocol` that spoke `hint` last.
    pub fn new(protocol: &Protocol, hint: Option<Era>) -> Plan {
        match (protocol, hint) {
            (Protocol::Auto, None) => Plan::Detect,
            (Protocol::Auto, Some(Era::Modern)) => Plan::Discover,
            (Protocol::Auto, Some(Era::Legacy)) => Plan::Initialize(latest_legacy()),
            (Protocol::Pinned(v), _) if is_modern(v) => Plan::Discover,
            (Protocol::Pinned(v), _) => {
                // Config validation only admits known revisions, so this parses.
                let version = serde_json::from_value(serde_json::Value::String(v.clone()))
                    .unwrap_or_else(|_| latest_legacy());
                Plan::Initialize(version)
            }
        }
    }

    /// The revision a legacy `initialize` offers.
    fn legacy_version(&self) -> ProtocolVersion {
        match self {
            Plan::Initialize(v) => v.clone(),
            _ => latest_legacy(),
        }
    }
}

fn latest_legacy() -> ProtocolVersion {
    ProtocolVersion::V_2025_11_25
}

fn discover_mode() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// The part of the time left that detection may spend on `server/discover`:
/// four fifths, leaving the rest (at least a second, when there is one)
/// for `initialize`.
pub fn discover_share(left: Duration) -> Duration {
    let reserve = (left / 5).max(Duration::from_secs(1).min(left / 2));
    left.saturating_sub(reserve)
}

/// A duration as people read it, to the millisecond: `1s 499ms`.
fn shown(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// How a handshake ended, when it did not.
#[derive(Debug)]
pub(super) struct Failed {
    /// What the last attempt said; `None` when it ran out of time.
    pub error: Option<ClientInitializeError>,
    /// Which request failed: `server/discover` or `initialize`.
    pub request: &'static str,
    /// What detection tried before, when the failure is `initialize`'s.
    pub tried: Option<String>,
    /// The time the whole handshake had.
    pub within: Duration,
}

impl Failed {
    /// One line: what failed and, when detection came first, what it found.
    pub fn describe(&self) -> String {
        let what = match &self.error {
            Some(e) => format!("{}: {}", self.request, super::error::error_chain(e)),
            None => format!("no answer to {} within {}", self.request, shown(self.within)),
        };
        match &self.tried {
            Some(t) => format!("{what} (server/discover was tried first: {t})"),
            None => what,
        }
    }

    /// Whether the peer closed the transport (a stdio server that exited).
    fn closed(&self) -> bool {
        matches!(
            self.error,
            Some(ClientInitializeError::ConnectionClosed(_))
                | Some(ClientInitializeError::TransportError { .. })
        )
    }
}

/// What detection concluded, with the running service.
pub(super) struct Opened {
    /// rmcp's service.
    pub service: RunningService<RoleClient, Monitor>,
    /// Whether the era it speaks was settled by an answer (a legacy server
    /// that let `server/discover` time out is not: it may have been slow).
    pub conclusive: bool,
}

/// The handshake over one pair of pipes, `plan` followed until `until`.
pub(super) async fn handshake<R, W>(
    handler: &Monitor,
    read: R,
    write: W,
    meter: &Arc<Meter>,
    plan: &Plan,
    until: Instant,
) -> Result<Opened, Failed>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let within = until.saturating_duration_since(Instant::now());
    let transport = AsyncRwTransport::new_client(MeteredRead::new(read, meter.clone()), write)
        .with_max_line_length(MAX_LINE_BYTES);
    let serve = |t, mode, request, tried| {
        let handler = handler.clone();
        let meter = meter.clone();
        async move {
            match tokio::time::timeout_at(
                until,
                handler.serve_with_lifecycle(Metered::new(t, meter), mode),
            )
            .await
            {
                Ok(Ok(service)) => Ok(service),
                Ok(Err(e)) => Err(Failed {
                    error: Some(e),
                    request,
                    tried,
                    within,
                }),
                Err(_) => Err(Failed {
                    error: None,
                    request,
                    tried,
                    within,
                }),
            }
        }
    };
    match plan {
        Plan::Initialize(_) => serve(
            transport,
            ClientLifecycleMode::Initialize,
            "initialize",
            None,
        )
        .await
        .map(|service| Opened {
            service,
            conclusive: true,
        }),
        Plan::Discover => serve(transport, discover_mode(), "server/discover", None)
            .await
            .map(|service| Opened {
                service,
                conclusive: true,
            }),
        Plan::Detect => {
            let discover_until = Instant::now() + discover_share(within);
            let slot = Arc::new(Mutex::new(None));
            let first = tokio::time::timeout_at(
                discover_until,
                handler.clone().serve_with_lifecycle(
                    Metered::returning(transport, meter.clone(), slot.clone()),
                    discover_mode(),
                ),
            )
            .await;
            let (tried, conclusive) = match first {
                Ok(Ok(service)) => {
                    return Ok(Opened {
                        service,
                        conclusive: true,
                    });
                }
                Ok(Err(e)) => {
                    let text = truncate(&super::error::error_chain(&e), 300);
                    let failed = Failed {
                        error: Some(e),
                        request: "server/discover",
                        tried: None,
                        within,
                    };
                    if failed.closed() {
                        return Err(failed);
                    }
                    (text, true)
                }
                Err(_) => (
                    format!("no answer within {}", shown(discover_share(within))),
                    false,
                ),
            };
            let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            let Some(transport) = taken else {
                return Err(Failed {
                    error: None,
                    request: "server/discover",
                    tried: None,
                    within,
                });
            };
            tracing::debug!(tried = %tried, "server/discover was not answered as modern; initialize follows");
            serve(
                transport,
                ClientLifecycleMode::Initialize,
                "initialize",
                Some(tried),
            )
            .await
            .map(|service| Opened {
                service,
                conclusive,
            })
        }
    }
}

/// Why a session could not be opened, when a bound of the inbound budget
/// ended it.
fn flooded(meter: &Meter) -> Option<OpenError> {
    let breach: Breach = meter.breach()?;
    Some(OpenError {
        failure: breach.failure(),
        phase: "handshake",
        detail: breach.describe(meter.budget()),
    })
}

impl RmcpSession {
    /// Open a session: spawn or connect, then the handshake the era needs,
    /// all within the server's `connect_timeout`. `hint` is the era this
    /// server spoke last time, which skips detection under `protocol: auto`.
    pub async fn open(
        spec: &ServerSpec,
        http: &reqwest::Client,
        hint: Option<Era>,
    ) -> Result<RmcpSession, OpenError> {
        let until = Instant::now() + spec.settings.connect_timeout.0;
        let plan = Plan::new(&spec.protocol, hint);
        match &spec.transport {
            TransportSpec::Stdio { .. } => open_stdio(spec, &plan, until).await,
            TransportSpec::Http { .. } => open_http(spec, http, &plan, until).await,
        }
    }
}

async fn open_stdio(
    spec: &ServerSpec,
    plan: &Plan,
    until: Instant,
) -> Result<RmcpSession, OpenError> {
    let attempt = |plan: Plan| async move {
        let spawned = child::spawn(spec).map_err(|e| OpenError {
            failure: LinkFailure::ConnectFailed,
            phase: "spawn",
            detail: e.to_string(),
        })?;
        let activity = Arc::new(Activity::default());
        let handler = Monitor::new(activity.clone(), plan.legacy_version());
        let meter = Arc::new(Meter::default());
        let child = spawned.child;
        match handshake(
            &handler,
            spawned.stdout,
            spawned.stdin,
            &meter,
            &plan,
            until,
        )
        .await
        {
            Ok(opened) => Ok(Ok((opened, child, meter, activity))),
            Err(failed) => {
                if let Some(e) = flooded(&meter) {
                    child.shutdown(Duration::from_millis(500)).await;
                    return Err(e);
                }
                // A handshake that failed (not one that ran out of time,
                // whose closing pipes may kill the child) may be a child
                // that died: give it a moment to be reaped so the reason
                // is right.
                let exited = match failed.error {
                    None => false,
                    Some(_) => tokio::time::timeout(Duration::from_millis(200), child.exited())
                        .await
                        .is_ok(),
                };
                if !exited {
                    child.shutdown(Duration::from_millis(500)).await;
                }
                Ok(Err((failed, exited.then_some(child))))
            }
        }
    };
    let (failed, exited) = match attempt(plan.clone()).await? {
        Ok((opened, child, meter, activity)) => {
            return Ok(finish(spec, None, opened, Some(child), meter, activity, None, plan).await);
        }
        Err(f) => f,
    };
    // A legacy server may exit on a method it does not know: the exchange
    // cannot go on with that process, so a fresh one speaks legacy from the
    // start, inside what is left of the same deadline.
    let (failed, exited) = match (&exited, plan, failed.request) {
        (Some(child), Plan::Detect, "server/discover") => {
            let first = child.epitaph().await;
            tracing::debug!(server = %spec.id, exit = %first, "the server exited on server/discover; starting it again for initialize");
            match attempt(Plan::Initialize(latest_legacy())).await? {
                Ok((opened, child, meter, activity)) => {
                    let mut opened = opened;
                    opened.conclusive = true;
                    return Ok(finish(
                        spec,
                        None,
                        opened,
                        Some(child),
                        meter,
                        activity,
                        None,
                        plan,
                    )
                    .await);
                }
                Err((mut again, exited)) => {
                    again.tried = Some(format!("the process {first}"));
                    (again, exited)
                }
            }
        }
        _ => (failed, exited),
    };
    Err(match exited {
        Some(child) => {
            let epitaph = child.epitaph().await;
            let tried = match &failed.tried {
                // A server that dies at start dies the same way twice.
                Some(t) if *t == format!("the process {epitaph}") => {
                    " (and the same when started again for initialize)".to_owned()
                }
                Some(t) => format!(" (server/discover was tried first: {t})"),
                None => String::new(),
            };
            OpenError {
                failure: LinkFailure::Exited,
                phase: "handshake",
                detail: truncate(
                    &format!("process {epitaph} during the handshake{tried}"),
                    900,
                ),
            }
        }
        None => OpenError {
            failure: LinkFailure::HandshakeFailed,
            phase: "handshake",
            detail: truncate(&failed.describe(), 900),
        },
    })
}

/// What a Streamable HTTP session is built from, besides the transport.
struct HttpParts {
    recorder: Recorder,
    tokens: Option<Arc<TokenSource>>,
    static_expiry: Option<std::time::SystemTime>,
}

async fn http_transport(
    spec: &ServerSpec,
    http: &reqwest::Client,
    meter: &Arc<Meter>,
) -> Result<(StreamableHttpClientTransport<Recorder>, HttpParts), OpenError> {
    let TransportSpec::Http {
        url,
        headers,
        bearer_token,
        oauth2,
    } = &spec.transport
    else {
        return Err(OpenError {
            failure: LinkFailure::ConnectFailed,
            phase: "connect",
            detail: "not an HTTP server".to_owned(),
        });
    };
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    config.max_json_response_size = MAX_LINE_BYTES;
    config.max_sse_event_size = MAX_LINE_BYTES;
    let mut static_expiry = None;
    let mut tokens = None;
    if let Some(token) = bearer_token {
        config = config.auth_header(token.expose().to_owned());
        static_expiry = super::oauth2::jwt_expiry(token.expose());
    }
    if let Some(o) = oauth2 {
        let source = Arc::new(TokenSource::new(
            o.clone(),
            http.clone(),
            spec.scrubber.clone(),
        ));
        // No token, no session: the refusal is the verdict.
        let token = source.token().await.map_err(|e| OpenError {
            failure: LinkFailure::Unauthenticated,
            phase: "connect",
            detail: e.to_string(),
        })?;
        config = config.auth_header(token.to_string());
        tokens = Some(source);
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
    let recorder = Recorder::new(http.clone()).with_meter(meter.clone());
    let recorder = match &tokens {
        Some(t) => recorder.with_tokens(t.clone()),
        None => recorder,
    };
    let transport = StreamableHttpClientTransport::with_client(recorder.clone(), config);
    Ok((
        transport,
        HttpParts {
            recorder,
            tokens,
            static_expiry,
        },
    ))
}

/// Open a Streamable HTTP session following `plan` until `until`.
pub(super) async fn open_http(
    spec: &ServerSpec,
    http: &reqwest::Client,
    plan: &Plan,
    until: Instant,
) -> Result<RmcpSession, OpenError> {
    let within = until.saturating_duration_since(Instant::now());
    let attempt = |mode: ClientLifecycleMode, by: Instant| async move {
        let activity = Arc::new(Activity::default());
        let handler = Monitor::new(activity.clone(), plan.legacy_version());
        let meter = Arc::new(Meter::default());
        let (transport, parts) = http_transport(spec, http, &meter).await?;
        let served = tokio::time::timeout_at(
            by,
            handler.serve_with_lifecycle(Metered::new(transport, meter.clone()), mode),
        )
        .await;
        if let Some(e) = flooded(&meter) {
            return Err(e);
        }
        Ok((served, parts, meter, activity))
    };
    let refusal = |e: ClientInitializeError| async move {
        let mut refused = classify_open(&e);
        if refused.failure == LinkFailure::Unauthenticated
            && let TransportSpec::Http { url, .. } = &spec.transport
            && let Some(found) = super::oauth2::protected_resource(http, url, &refused.detail).await
        {
            refused.detail = truncate(&format!("{}; {found}", refused.detail), 600);
        }
        refused
    };
    let no_answer = |request: &str, tried: Option<String>| OpenError {
        failure: LinkFailure::HandshakeFailed,
        phase: "handshake",
        detail: match tried {
            Some(t) => format!(
                "no answer to {request} within {} (server/discover was tried first: {t})",
                shown(within)
            ),
            None => format!("no answer to {request} within {}", shown(within)),
        },
    };
    let (mode, request) = match plan {
        Plan::Initialize(_) => (ClientLifecycleMode::Initialize, "initialize"),
        Plan::Discover | Plan::Detect => (discover_mode(), "server/discover"),
    };
    let first_by = match plan {
        Plan::Detect => Instant::now() + discover_share(within),
        _ => until,
    };
    let (served, parts, meter, activity) = attempt(mode, first_by).await?;
    let (tried, conclusive) = match served {
        Ok(Ok(service)) => {
            let opened = Opened {
                service,
                conclusive: true,
            };
            return Ok(finish(
                spec,
                Some(http),
                opened,
                None,
                meter,
                activity,
                Some(parts),
                plan,
            )
            .await);
        }
        Ok(Err(e)) => {
            let refused = refusal(e).await;
            // A refusal of the credentials, or nobody there, is the verdict
            // whatever the era; so is any failure when no detection runs.
            if *plan != Plan::Detect || refused.failure != LinkFailure::HandshakeFailed {
                return Err(refused);
            }
            (refused.detail, true)
        }
        Err(_) if *plan != Plan::Detect => return Err(no_answer(request, None)),
        Err(_) => ("no answer in time".to_owned(), false),
    };
    // Detection found no modern answer: a fresh connection speaks legacy.
    let (served, parts, meter, activity) = attempt(ClientLifecycleMode::Initialize, until).await?;
    match served {
        Ok(Ok(service)) => {
            let opened = Opened {
                service,
                conclusive,
            };
            Ok(finish(
                spec,
                Some(http),
                opened,
                None,
                meter,
                activity,
                Some(parts),
                plan,
            )
            .await)
        }
        Ok(Err(e)) => {
            let mut refused = refusal(e).await;
            refused.detail = truncate(
                &format!(
                    "initialize: {} (server/discover was tried first: {tried})",
                    refused.detail
                ),
                900,
            );
            Err(refused)
        }
        Err(_) => Err(no_answer("initialize", Some(tried))),
    }
}

/// Who the server said it is, defused: its strings reach logs and labels.
fn server_info(service: &RunningService<RoleClient, Monitor>) -> ServerInfo {
    let Some(p) = service.peer().peer_info() else {
        return ServerInfo::default();
    };
    let (name, version) = p
        .server_info
        .as_ref()
        .map(|i| (i.name.clone(), i.version.clone()))
        .unwrap_or_default();
    let version_spoken = p.protocol_version.to_string();
    ServerInfo {
        // A revision mcpmon does not know is shown as such, not copied: the
        // server chose that string.
        protocol_version: if KNOWN_VERSIONS.contains(&version_spoken.as_str()) {
            version_spoken
        } else {
            "unknown".to_owned()
        },
        name: truncate(&name, 128),
        version: truncate(&version, 64),
    }
}

/// The session, once the handshake is done. A legacy HTTP session is only
/// a session id and headers: mcpmon keeps those and lets rmcp's tasks and
/// channels go (see `lean_link`).
#[allow(clippy::too_many_arguments)]
async fn finish(
    spec: &ServerSpec,
    http: Option<&reqwest::Client>,
    opened: Opened,
    child: Option<Child>,
    meter: Arc<Meter>,
    activity: Arc<Activity>,
    parts: Option<HttpParts>,
    plan: &Plan,
) -> RmcpSession {
    let service = opened.service;
    // A monitor must never be answered from a cache.
    service
        .peer()
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let info = server_info(&service);
    let era = if is_modern(&info.protocol_version) {
        Era::Modern
    } else {
        Era::Legacy
    };
    let (tokens, static_expiry) = parts
        .as_ref()
        .map_or((None, None), |p| (p.tokens.clone(), p.static_expiry));
    let lean = match (http, &parts, &spec.transport) {
        (Some(http), Some(parts), TransportSpec::Http { url, .. }) if era == Era::Legacy => {
            LeanLink::take_over(http.clone(), url.clone(), &parts.recorder, meter.clone())
                .map(|link| (link, http.clone()))
        }
        _ => None,
    };
    let link = match lean {
        Some((link, http)) => {
            let _ = tokio::time::timeout(Duration::from_secs(2), service.cancel()).await;
            Link::Lean(Lean {
                link: Arc::new(link),
                spec: Box::new(spec.clone()),
                http,
                version: plan.legacy_version(),
            })
        }
        None => Link::Rmcp(service),
    };
    RmcpSession {
        meter,
        link,
        child,
        era,
        conclusive: opened.conclusive,
        info,
        activity,
        tokens,
        static_expiry,
    }
}

#[cfg(test)]
#[path = "open_tests.rs"]
mod tests;
