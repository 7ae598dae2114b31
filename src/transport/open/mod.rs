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

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::RunningService;
use rmcp::{ClientCacheConfig, ClientLifecycleMode, RoleClient};
use tokio::time::Instant;

use super::budget::{Breach, Meter};
use super::child::Child;
use super::legacy_http::LegacyLink;
use super::oauth2::TokenSource;
use super::progress::Activity;
use super::rmcp_http::RmcpHttp;
use super::session::{Carrier, Legacy, McpSession, Monitor};
use super::{Era, OpenError, ServerInfo, truncate};
use crate::config::{KNOWN_VERSIONS, Protocol, ServerSpec, TransportSpec, is_modern};

mod http;
mod sse;
mod starting;
mod stdio;

pub(super) use http::open_http;

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

/// The configured headers a request can carry (a name or value HTTP cannot
/// hold was refused by config validation, and is skipped here).
pub(super) fn header_pairs(
    headers: &[(String, crate::config::Secret)],
) -> impl Iterator<Item = (reqwest::header::HeaderName, reqwest::header::HeaderValue)> + '_ {
    headers.iter().filter_map(|(k, v)| {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).ok()?;
        let value = reqwest::header::HeaderValue::from_str(v.expose()).ok()?;
        Some((name, value))
    })
}

/// A duration as people read it, to the millisecond: `1s 499ms`.
pub(super) fn shown(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

/// What detection concluded, with the running service.
pub(super) struct Opened {
    /// rmcp's service.
    pub service: RunningService<RoleClient, Monitor>,
    /// Whether the era it speaks was settled by an answer (a legacy server
    /// that let `server/discover` time out is not: it may have been slow).
    pub conclusive: bool,
}

/// Why a session could not be opened, when a bound of the inbound budget
/// ended it.
pub(super) fn flooded(meter: &Meter) -> Option<OpenError> {
    let breach: Breach = meter.breach()?;
    Some(OpenError::new(
        breach.failure(),
        "handshake",
        breach.describe(meter.budget()),
    ))
}

impl McpSession {
    /// Open a session: spawn or connect, then the handshake the era needs,
    /// all within the server's `connect_timeout`. `hint` is the era this
    /// server spoke last time, which skips detection under `protocol: auto`.
    pub async fn open(
        spec: &ServerSpec,
        http: &super::Http,
        hint: Option<Era>,
    ) -> Result<McpSession, OpenError> {
        let until = Instant::now() + spec.settings.connect_timeout.0;
        let plan = Plan::new(&spec.protocol, hint);
        match &spec.transport {
            TransportSpec::Stdio { .. } => stdio::open_stdio(spec, &plan, until).await,
            TransportSpec::Http { sse: true, .. } => {
                sse::open_sse(spec, &http.client, &plan, until).await
            }
            TransportSpec::Http { .. } => http::open_http(spec, http, &plan, until).await,
        }
    }
}

/// A session's parts once its handshake is done.
pub(super) struct Started {
    pub(super) opened: Opened,
    pub(super) child: Option<Child>,
    /// A legacy HTTP+SSE session's event stream.
    pub(super) stream: Option<Arc<super::legacy_sse::StreamEnd>>,
    pub(super) meter: Arc<Meter>,
    pub(super) activity: Arc<Activity>,
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
    http: Option<&super::Http>,
    started: Started,
    parts: Option<HttpParts>,
    plan: &Plan,
) -> McpSession {
    let Started {
        opened,
        child,
        stream,
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
            LegacyLink::take_over(http.wire.clone(), url, &parts.client, meter.clone())
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
        stream,
    }
}

#[cfg(test)]
mod tests;
