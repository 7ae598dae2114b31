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
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, RoleClient};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::budget::{Breach, Meter, Metered, MeteredRead};
use super::child::{self, Child};
use super::legacy_http::LegacyLink;
use super::oauth2::TokenSource;
use super::rmcp_http::RmcpHttp;
use super::session::{Activity, Carrier, Legacy, MAX_LINE_BYTES, McpSession, Monitor};
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
    pub(super) fn legacy_version(&self) -> ProtocolVersion {
        match self {
            Plan::Initialize(v) => v.clone(),
            _ => latest_legacy(),
        }
    }
}

fn latest_legacy() -> ProtocolVersion {
    ProtocolVersion::V_2025_11_25
}

pub(super) fn discover_mode() -> ClientLifecycleMode {
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
pub(super) fn shown(d: Duration) -> String {
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
            None => format!(
                "no answer to {} within {}",
                self.request,
                shown(self.within)
            ),
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
    let pipes = Pipes {
        handler,
        meter,
        until,
        within: until.saturating_duration_since(Instant::now()),
    };
    let transport = AsyncRwTransport::new_client(MeteredRead::new(read, meter.clone()), write)
        .with_max_line_length(MAX_LINE_BYTES);
    let settled = |service| Opened {
        service,
        conclusive: true,
    };
    match plan {
        Plan::Initialize(_) => pipes
            .serve(
                transport,
                ClientLifecycleMode::Initialize,
                "initialize",
                None,
            )
            .await
            .map(settled),
        Plan::Discover => pipes
            .serve(transport, discover_mode(), "server/discover", None)
            .await
            .map(settled),
        Plan::Detect => pipes.detect(transport).await,
    }
}

/// What a handshake over one pair of pipes works with.
struct Pipes<'a> {
    handler: &'a Monitor,
    meter: &'a Arc<Meter>,
    until: Instant,
    /// The time it had when it began.
    within: Duration,
}

impl Pipes<'_> {
    /// Serve `transport` in `mode` until the deadline.
    async fn serve<T>(
        &self,
        transport: T,
        mode: ClientLifecycleMode,
        request: &'static str,
        tried: Option<String>,
    ) -> Result<RunningService<RoleClient, Monitor>, Failed>
    where
        T: rmcp::transport::Transport<RoleClient> + Send + 'static,
    {
        let served = tokio::time::timeout_at(
            self.until,
            self.handler
                .clone()
                .serve_with_lifecycle(Metered::new(transport, self.meter.clone()), mode),
        )
        .await;
        let error = match served {
            Ok(Ok(service)) => return Ok(service),
            Ok(Err(e)) => Some(e),
            Err(_) => None,
        };
        Err(Failed {
            error,
            request,
            tried,
            within: self.within,
        })
    }

    /// `server/discover`, then `initialize` on the same pipes if the answer
    /// was not modern (or there was none in time).
    async fn detect<T>(&self, transport: T) -> Result<Opened, Failed>
    where
        T: rmcp::transport::Transport<RoleClient> + Send + 'static,
    {
        let share = discover_share(self.within);
        let slot = Arc::new(Mutex::new(None));
        let first = tokio::time::timeout_at(
            Instant::now() + share,
            self.handler.clone().serve_with_lifecycle(
                Metered::returning(transport, self.meter.clone(), slot.clone()),
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
                    within: self.within,
                };
                if failed.closed() {
                    return Err(failed);
                }
                (text, true)
            }
            Err(_) => (format!("no answer within {}", shown(share)), false),
        };
        let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(transport) = taken else {
            return Err(Failed {
                error: None,
                request: "server/discover",
                tried: None,
                within: self.within,
            });
        };
        tracing::debug!(tried = %tried, "server/discover was not answered as modern; initialize follows");
        self.serve(
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

/// Why a session could not be opened, when a bound of the inbound budget
/// ended it.
pub(super) fn flooded(meter: &Meter) -> Option<OpenError> {
    let breach: Breach = meter.breach()?;
    Some(OpenError {
        failure: breach.failure(),
        phase: "handshake",
        detail: breach.describe(meter.budget()),
    })
}

impl McpSession {
    /// Open a session: spawn or connect, then the handshake the era needs,
    /// all within the server's `connect_timeout`. `hint` is the era this
    /// server spoke last time, which skips detection under `protocol: auto`.
    pub async fn open(
        spec: &ServerSpec,
        http: &reqwest::Client,
        hint: Option<Era>,
    ) -> Result<McpSession, OpenError> {
        let until = Instant::now() + spec.settings.connect_timeout.0;
        let plan = Plan::new(&spec.protocol, hint);
        match &spec.transport {
            TransportSpec::Stdio { .. } => open_stdio(spec, &plan, until).await,
            TransportSpec::Http { .. } => {
                super::open_http::open_http(spec, http, &plan, until).await
            }
        }
    }
}

async fn open_stdio(
    spec: &ServerSpec,
    plan: &Plan,
    until: Instant,
) -> Result<McpSession, OpenError> {
    let (failed, exited) = match stdio_attempt(spec, plan.clone(), until).await? {
        Ok(started) => return Ok(finish(spec, None, started, None, plan).await),
        Err(f) => f,
    };
    // A legacy server may exit on a method it does not know: the exchange
    // cannot go on with that process, so a fresh one speaks legacy from the
    // start, inside what is left of the same deadline.
    let (failed, exited) = match (&exited, plan, failed.request) {
        (Some(child), Plan::Detect, "server/discover") => {
            let first = child.epitaph().await;
            tracing::debug!(server = %spec.id, exit = %first, "the server exited on server/discover; starting it again for initialize");
            match stdio_attempt(spec, Plan::Initialize(latest_legacy()), until).await? {
                Ok(mut started) => {
                    started.opened.conclusive = true;
                    return Ok(finish(spec, None, started, None, plan).await);
                }
                Err((mut again, exited)) => {
                    again.tried = Some(format!("the process {first}"));
                    (again, exited)
                }
            }
        }
        _ => (failed, exited),
    };
    Err(stdio_failure(failed, exited).await)
}

/// A session's parts once its handshake is done.
pub(super) struct Started {
    pub(super) opened: Opened,
    pub(super) child: Option<Child>,
    pub(super) meter: Arc<Meter>,
    pub(super) activity: Arc<Activity>,
}

/// One process, one handshake: the session's parts, or why not (with the
/// child, when it exited).
async fn stdio_attempt(
    spec: &ServerSpec,
    plan: Plan,
    until: Instant,
) -> Result<Result<Started, (Failed, Option<Child>)>, OpenError> {
    let spawned = child::spawn(spec).map_err(|e| OpenError {
        failure: LinkFailure::ConnectFailed,
        phase: "spawn",
        detail: e.to_string(),
    })?;
    let activity = Arc::new(Activity::default());
    let handler = Monitor::new(activity.clone(), plan.legacy_version());
    let meter = Arc::new(Meter::default());
    let child = spawned.child;
    let shook = handshake(
        &handler,
        spawned.stdout,
        spawned.stdin,
        &meter,
        &plan,
        until,
    )
    .await;
    let failed = match shook {
        Ok(opened) => {
            return Ok(Ok(Started {
                opened,
                child: Some(child),
                meter,
                activity,
            }));
        }
        Err(failed) => failed,
    };
    if let Some(e) = flooded(&meter) {
        child.shutdown(Duration::from_millis(500)).await;
        return Err(e);
    }
    // A handshake that failed (not one that ran out of time, whose closing
    // pipes may kill the child) may be a child that died: give it a moment
    // to be reaped so the reason is right.
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

/// What a failed stdio handshake reads as: the child's exit and last
/// words, or what the handshake tried.
async fn stdio_failure(failed: Failed, exited: Option<Child>) -> OpenError {
    let Some(child) = exited else {
        return OpenError {
            failure: LinkFailure::HandshakeFailed,
            phase: "handshake",
            detail: truncate(&failed.describe(), 900),
        };
    };
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

/// What a Streamable HTTP session is built from, besides the transport.
pub(super) struct HttpParts {
    pub(super) client: RmcpHttp,
    pub(super) tokens: Option<Arc<TokenSource>>,
    pub(super) static_expiry: Option<std::time::SystemTime>,
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
/// channels go (see `legacy_http`).
pub(super) async fn finish(
    spec: &ServerSpec,
    http: Option<&reqwest::Client>,
    started: Started,
    parts: Option<HttpParts>,
    plan: &Plan,
) -> McpSession {
    let Started {
        opened,
        child,
        meter,
        activity,
    } = started;
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
            LegacyLink::take_over(http.clone(), url.clone(), &parts.client, meter.clone())
                .map(|link| (link, http.clone()))
        }
        _ => None,
    };
    let link = match lean {
        Some((link, http)) => {
            let _ = tokio::time::timeout(Duration::from_secs(2), service.cancel()).await;
            Carrier::Legacy(Legacy {
                link: Arc::new(link),
                spec: Box::new(spec.clone()),
                http,
                version: plan.legacy_version(),
            })
        }
        None => Carrier::Rmcp(service),
    };
    McpSession {
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
