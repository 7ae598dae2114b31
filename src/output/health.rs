//! `GET /health/fleet` and `GET /health/servers/{id}`: the verdicts as
//! JSON, for load balancers (status codes) and people (bodies).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::render::Renders;
use crate::discovery::Shard;
use crate::state::Reader;
use crate::state::Snapshot;
use crate::state::snapshot::{Era, ServerStatus, TaskSeen, rfc3339};
use crate::state::verdict::{Reason, State as Verdict};

/// One server as the health endpoints show it.
#[derive(Serialize)]
struct ServerView<'a> {
    id: &'a str,
    /// The verdict, or `maintenance` while a window is open.
    status: &'static str,
    /// The verdict while `status` reads `maintenance`.
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    maintenance: Option<MaintenanceView<'a>>,
    reason: Reason,
    detail: &'a str,
    transport: &'a str,
    since: String,
    /// The same as `since`, by the name people search for.
    state_since: String,
    last_transition: Option<TransitionView>,
    last_check: Option<String>,
    response_time_ms: Option<f64>,
    handshake_ms: Option<f64>,
    /// Whether a session is open; when not, era, names, tools and latency
    /// are the last session's, ended at `session_ended`.
    session_open: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_ended: Option<String>,
    era: Option<Era>,
    protocol_version: Option<&'a str>,
    server_name: Option<&'a str>,
    server_version: Option<&'a str>,
    consecutive_failures: u32,
    tools: Option<usize>,
    tools_hash: Option<&'a str>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    labels: std::collections::BTreeMap<&'a str, &'a str>,
    /// What the operator that runs it says, beside the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    operator: Option<&'a crate::config::OperatorWord>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools_missing: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools_invalid: Vec<InvalidTool<'a>>,
    /// Each task probe's latest task: the busy evidence while one works.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tasks: &'a [TaskSeen],
}

/// The last change of a server's state.
#[derive(Serialize)]
struct TransitionView {
    from: Verdict,
    to: Verdict,
    reason: Reason,
    at: String,
}

/// A listed tool that breaks the spec's rules.
#[derive(Serialize)]
struct InvalidTool<'a> {
    name: &'a str,
    problem: &'a str,
}

impl<'a> ServerView<'a> {
    fn new(s: &'a ServerStatus) -> Self {
        let info = s.server_info.as_ref();
        ServerView {
            id: &s.id,
            status: match s.maintenance {
                Some(_) => "maintenance",
                None => s.status.as_str(),
            },
            verdict: s.maintenance.as_ref().map(|_| s.status),
            maintenance: s.maintenance.as_ref().map(|m| MaintenanceView {
                window: &m.window,
                until: rfc3339(m.until),
            }),
            reason: s.reason,
            detail: &s.detail,
            transport: s.transport,
            since: rfc3339(s.since),
            state_since: rfc3339(s.since),
            last_transition: s.last_transition.map(|t| TransitionView {
                from: t.from,
                to: t.to,
                reason: t.reason,
                at: rfc3339(t.at),
            }),
            last_check: s.last_check.map(rfc3339),
            response_time_ms: s.response_time_ms.map(|v| (v * 1000.0).round() / 1000.0),
            handshake_ms: s.handshake_ms.map(|v| v.round()),
            session_open: s.session_open,
            session_ended: s.session_ended.map(rfc3339),
            era: s.era,
            protocol_version: info.map(|i| i.protocol_version.as_str()),
            server_name: info.map(|i| i.name.as_str()),
            server_version: info.map(|i| i.version.as_str()),
            consecutive_failures: s.consecutive_failures,
            tools: s.tools.as_ref().map(|t| t.surface.tools.len()),
            tools_hash: s.tools.as_ref().map(|t| t.surface.hash.as_str()),
            labels: s
                .labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect(),
            operator: s.operator.as_ref(),
            tools_missing: s.tools.as_ref().map_or(&[], |t| &t.missing[..]),
            tools_invalid: (s.tools.iter())
                .flat_map(|t| t.invalid())
                .map(|(name, problem)| InvalidTool { name, problem })
                .collect(),
            tasks: &s.tasks,
        }
    }
}

/// An open maintenance window.
#[derive(Serialize)]
struct MaintenanceView<'a> {
    window: &'a str,
    until: String,
}

/// Query of `/health/fleet`.
#[derive(serde::Deserialize)]
pub struct FleetQuery {
    /// Omit the per-server list (load balancers need only the verdict).
    #[serde(default)]
    summary: bool,
}

/// The fleet's verdict: 200 while the availability policy is met, else
/// 503; every server's view unless `?summary=true`.
pub async fn fleet(
    State(fleet): State<Reader>,
    State(renders): State<Arc<Renders>>,
    State(shard): State<Shard>,
    Query(q): Query<FleetQuery>,
) -> Response {
    let arrived = tokio::time::Instant::now();
    let _admitted = match renders.admit() {
        Ok(p) => p,
        Err(busy) => return busy.into_response(),
    };
    let shard = ShardView {
        index: shard.index,
        count: shard.count,
    };
    let rendered = renders
        .fleet
        .get(
            arrived,
            || async {
                let snap = fleet.current().await;
                ((snap.generation, u64::from(q.summary)), snap)
            },
            |snap| renders.off_worker(move || fleet_body(&snap, shard, q.summary)),
        )
        .await;
    let (code, body) = match rendered {
        Ok(rendered) => rendered,
        Err(failed) => return failed.into_response(),
    };
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The `/health/fleet` answer for `snap`: 200 while the policy is met.
fn fleet_body(snap: &Snapshot, shard: ShardView, summary: bool) -> (StatusCode, axum::body::Bytes) {
    let (state, meets) = snap.verdict();
    // Serialized straight from borrowed views: no JSON value tree per server.
    let body = serde_json::to_vec(&FleetView {
        status: state,
        generation: snap.generation,
        shard,
        summary: snap.summary(),
        policy: PolicyView {
            min_available_percentage: snap.policy.min_available_percentage,
            degraded_is_available: snap.policy.degraded_is_available,
            met: meets,
        },
        servers: (!summary).then_some(Servers(snap)),
    })
    .unwrap_or_default();
    let code = if meets {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body.into())
}

/// The `/health/fleet` body.
#[derive(Serialize)]
struct FleetView<'a> {
    status: Verdict,
    generation: u64,
    /// The servers counted are this shard's only.
    shard: ShardView,
    summary: crate::state::Summary,
    policy: PolicyView,
    #[serde(skip_serializing_if = "Option::is_none")]
    servers: Option<Servers<'a>>,
}

#[derive(Serialize)]
struct ShardView {
    index: u64,
    count: u64,
}

#[derive(Serialize)]
struct PolicyView {
    min_available_percentage: f64,
    degraded_is_available: bool,
    met: bool,
}

/// Every server of a snapshot, serialized as a list of [`ServerView`]s.
struct Servers<'a>(&'a Snapshot);

impl Serialize for Servers<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.servers.values().map(|r| ServerView::new(&r.status)))
    }
}

/// `/health/servers/{id}`: the server's view with its session, health
/// check and timeline.
#[derive(Serialize)]
struct ServerDetail<'a> {
    #[serde(flatten)]
    view: ServerView<'a>,
    generation: u64,
    session_started: Option<String>,
    sessions: u64,
    health_check: &'a Option<crate::state::snapshot::HealthCheckStatus>,
    events: &'a std::collections::VecDeque<crate::state::snapshot::TimelineEntry>,
}

/// One server: 200 while it is available (healthy or degraded), else 503.
pub async fn server(State(fleet): State<Reader>, Path(id): Path<String>) -> Response {
    let snap = fleet.current().await;
    let Some(s) = snap.servers.get(id.as_str()).map(|r| &r.status) else {
        let body = serde_json::json!({"error": "no such server"});
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    };
    let detail = ServerDetail {
        view: ServerView::new(s),
        generation: snap.generation,
        session_started: s.session_started.map(rfc3339),
        sessions: s.sessions,
        health_check: &s.health_check,
        events: &s.events,
    };
    let code = match s.status {
        Verdict::Healthy | Verdict::Degraded => StatusCode::OK,
        Verdict::Unhealthy | Verdict::Unknown => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, axum::Json(detail)).into_response()
}
