//! The HTTP surface: `/metrics`, `/health/fleet`, `/health/servers/{id}`,
//! `/-/healthy`, `/-/ready`. Handlers read the latest fleet snapshot and the
//! metrics registry; they never touch sessions.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;

use super::metrics::Metrics;
use crate::state::Snapshot;
use crate::state::snapshot::{ServerStatus, rfc3339};
use crate::state::verdict::{Reason, State};
use crate::transport::Era;

/// What handlers can read.
#[derive(Clone)]
pub struct ApiState {
    /// Latest fleet snapshot.
    pub fleet: watch::Receiver<Arc<Snapshot>>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Where `POST /-/reload` sends its request; `None` unless the
    /// lifecycle API is enabled.
    pub reload: Option<tokio::sync::mpsc::Sender<ReloadRequest>>,
    /// The last render of each whole-fleet page, shared by the requests
    /// that arrive together.
    pub renders: Arc<Renders>,
    /// Where the exposition is served (`--web.telemetry-path`).
    pub telemetry_path: String,
    /// This replica's share of the fleet: `/health/fleet` speaks for it only.
    pub shard: crate::discovery::Shard,
}

/// A request to reload the configuration; the reply carries what changed,
/// or the errors of a rejected file.
#[derive(Debug)]
pub struct ReloadRequest {
    /// Where the outcome goes, if anyone waits for it.
    pub reply: Option<tokio::sync::oneshot::Sender<Result<crate::config::Diff, String>>>,
}

/// Largest request body accepted (there are no body-taking endpoints yet).
const MAX_BODY: usize = 64 * 1024;
/// A request that takes longer than this is answered 408 (slow clients).
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// The router with every endpoint.
pub fn router(state: ApiState) -> Router {
    let metrics = state.metrics.clone();
    Router::new()
        .route(&state.telemetry_path, get(metrics_handler))
        .route("/health/fleet", get(fleet))
        .route("/health/servers/{id}", get(server))
        .route("/-/healthy", get(|| async { "mcpmon is healthy.\n" }))
        .route("/-/ready", get(ready))
        .route("/-/reload", axum::routing::post(reload).put(reload))
        .route("/", get(super::status::fleet))
        .route("/servers/{id}", get(super::status::server))
        .route("/static/status.css", get(super::status::css))
        .route("/static/status.js", get(super::status::js))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(deadline))
        .layer(axum::middleware::from_fn(limit_body))
        .layer(axum::middleware::from_fn(no_store))
        // gzip when the client asks (Prometheus does): 30 MB of text at
        // 10 000 servers is a few MB on the wire.
        .layer(tower_http::compression::CompressionLayer::new().gzip(true))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                count(metrics.clone(), req, next)
            },
        ))
        .with_state(state)
}

/// Count and time every request by its route (never by its raw path: a
/// scanner must not mint series) and status code.
async fn count(
    metrics: Arc<Metrics>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let handler = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("other", |p| p.as_str())
        .to_owned();
    let start = tokio::time::Instant::now();
    let response = next.run(req).await;
    metrics
        .http_duration
        .with_label_values(&[handler.as_str()])
        .observe(start.elapsed().as_secs_f64());
    metrics
        .http_requests
        .with_label_values(&[handler.as_str(), response.status().as_str()])
        .inc();
    response
}

/// Health answers change from one second to the next: no cache (a load
/// balancer's or a proxy's) may keep one.
async fn no_store(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(req).await;
    response
        .headers_mut()
        .entry(header::CACHE_CONTROL)
        .or_insert(header::HeaderValue::from_static("no-store"));
    response
}

/// Refuse a declared body over the limit before anything reads it (no
/// endpoint takes a body; the limit keeps it that way).
async fn limit_body(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    }
    next.run(req).await
}

async fn deadline(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match tokio::time::timeout(REQUEST_DEADLINE, next.run(req)).await {
        Ok(r) => r,
        Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
    }
}

/// Run a render of the whole fleet off the runtime's worker: at 10 000
/// servers it takes tens of milliseconds, which would otherwise delay every
/// probe answer waiting on that worker and distort its round trip.
async fn off_worker<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// How old a render may be and still answer a scrape of the same snapshot
/// (process metrics in it, such as CPU time, age by as much).
pub const RENDER_REUSE: Duration = Duration::from_secs(1);

/// Most requests for whole-fleet pages (`/metrics`, `/health/fleet`, `/`)
/// rendering or waiting for a render at once; more are answered 503. Each
/// waits on a shared render, and a client that never reads its answer
/// holds only a reference to it, not a copy.
pub const MAX_FLEET_RENDERS: usize = 32;

/// The shared renders of every whole-fleet page, and the bound on the
/// requests waiting for them.
pub struct Renders {
    /// `/metrics`, by (snapshot generation, metrics version).
    pub metrics: SharedRender,
    /// `/health/fleet`: its status code and body, by (generation, summary).
    pub fleet: SharedRender<(StatusCode, axum::body::Bytes)>,
    /// `/`, by (generation, a hash of the query).
    pub status: SharedRender,
    admitted: Arc<tokio::sync::Semaphore>,
}

impl Default for Renders {
    fn default() -> Self {
        Renders {
            metrics: SharedRender::default(),
            fleet: SharedRender::default(),
            status: SharedRender::default(),
            admitted: Arc::new(tokio::sync::Semaphore::new(MAX_FLEET_RENDERS)),
        }
    }
}

impl Renders {
    /// A place among the requests for whole-fleet pages, or the 503 to
    /// answer when they are all taken.
    pub fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Box<Response>> {
        self.admitted.clone().try_acquire_owned().map_err(|_| {
            Box::new(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "1")],
                    "too many whole-fleet requests at once; try again\n",
                )
                    .into_response(),
            )
        })
    }
}

/// One render shared by concurrent requests: at 10 000 servers a
/// `/metrics` render is 30 MB and tens of milliseconds, and two Prometheus
/// replicas (or a scraper and a person) should not each pay for it.
pub struct SharedRender<T = axum::body::Bytes> {
    last: tokio::sync::Mutex<Option<Rendered<T>>>,
}

impl<T> Default for SharedRender<T> {
    fn default() -> Self {
        SharedRender {
            last: tokio::sync::Mutex::new(None),
        }
    }
}

struct Rendered<T> {
    started: tokio::time::Instant,
    key: (u64, u64),
    text: T,
}

impl<T: Clone> SharedRender<T> {
    /// The text for a scrape that `arrived` at some instant: a render that
    /// began after it arrived (as fresh as its own would be), or one of the
    /// same key (snapshot generation, metrics version) younger than
    /// [`RENDER_REUSE`]; otherwise a new one of the `current` (key,
    /// snapshot). Renders never run concurrently; those waiting get the
    /// result.
    pub async fn get<S, F>(
        &self,
        arrived: tokio::time::Instant,
        current: impl FnOnce() -> ((u64, u64), S),
        render: impl FnOnce(S) -> F,
    ) -> Option<T>
    where
        F: Future<Output = Option<T>>,
    {
        let mut last = self.last.lock().await;
        let (key, snapshot) = current();
        if let Some(r) = last.as_ref() {
            let recent = r.key == key && arrived < r.started + RENDER_REUSE;
            if r.started >= arrived || recent {
                return Some(r.text.clone());
            }
        }
        let started = tokio::time::Instant::now();
        let text = render(snapshot).await?;
        *last = Some(Rendered {
            started,
            key,
            text: text.clone(),
        });
        Some(text)
    }
}

async fn metrics_handler(AxState(st): AxState<ApiState>) -> Response {
    let arrived = tokio::time::Instant::now();
    let _admitted = match st.renders.admit() {
        Ok(p) => p,
        Err(busy) => return *busy,
    };
    let text = st
        .renders
        .metrics
        .get(
            arrived,
            || {
                let snap = st.fleet.borrow().clone();
                ((snap.generation, st.metrics.version()), snap)
            },
            |snap| {
                let metrics = st.metrics.clone();
                async move {
                    off_worker(move || metrics.render(&snap))
                        .await
                        .map(axum::body::Bytes::from)
                }
            },
        )
        .await;
    let Some(text) = text else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// One server as the health endpoints show it.
#[derive(Serialize)]
struct ServerView<'a> {
    id: &'a str,
    status: State,
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
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools_missing: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools_invalid: Vec<InvalidTool<'a>>,
}

/// The last change of a server's state.
#[derive(Serialize)]
struct TransitionView {
    from: State,
    to: State,
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
            status: s.status,
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
            tools: s.tools,
            tools_hash: s.tools_hash.as_deref(),
            labels: s
                .labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()))
                .collect(),
            tools_missing: &s.tools_missing,
            tools_invalid: s
                .tools_invalid
                .iter()
                .map(|(name, problem)| InvalidTool { name, problem })
                .collect(),
        }
    }
}

/// Query of `/health/fleet`.
#[derive(serde::Deserialize)]
struct FleetQuery {
    /// Omit the per-server list (load balancers need only the verdict).
    #[serde(default)]
    summary: bool,
}

async fn fleet(
    AxState(st): AxState<ApiState>,
    axum::extract::Query(q): axum::extract::Query<FleetQuery>,
) -> Response {
    let arrived = tokio::time::Instant::now();
    let _admitted = match st.renders.admit() {
        Ok(p) => p,
        Err(busy) => return *busy,
    };
    let shard = ShardView {
        index: st.shard.index,
        count: st.shard.count,
    };
    let rendered = st
        .renders
        .fleet
        .get(
            arrived,
            || {
                let snap = st.fleet.borrow().clone();
                ((snap.generation, u64::from(q.summary)), snap)
            },
            |snap| off_worker(move || fleet_body(&snap, shard, q.summary)),
        )
        .await;
    let Some((code, body)) = rendered else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
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
    status: State,
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

async fn server(AxState(st): AxState<ApiState>, Path(id): Path<String>) -> Response {
    let snap = st.fleet.borrow().clone();
    let Some(s) = snap.servers.get(id.as_str()).map(|r| &r.status) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "no such server"})),
        )
            .into_response();
    };
    let Ok(mut body) = serde_json::to_value(ServerView::new(s)) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    body["generation"] = json!(snap.generation);
    body["session_started"] = json!(s.session_started.map(rfc3339));
    body["sessions"] = json!(s.sessions);
    body["health_check"] = json!(s.health_check);
    body["events"] = json!(s.events);
    let code = match s.status {
        State::Healthy | State::Degraded => StatusCode::OK,
        State::Unhealthy | State::Unknown => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, axum::Json(body)).into_response()
}

/// Why a lifecycle request must be refused as coming from a web page: a
/// browser sends `Origin` (and `Sec-Fetch-Site`) with every POST, and only
/// a page can send a form's content types across sites without a preflight.
/// `curl -X POST` sends none of these and passes.
fn cross_site(headers: &axum::http::HeaderMap) -> Option<&'static str> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    // mcpmon's own probes carry its user agent: a server entry aimed at
    // this endpoint must not make mcpmon reload itself in a loop.
    if text(header::USER_AGENT).is_some_and(|ua| ua.starts_with("mcpmon/")) {
        return Some("a request mcpmon itself sent");
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Some("a cross-site request (Sec-Fetch-Site)");
    }
    if let Some(origin) = text(header::ORIGIN) {
        let host = text(header::HOST).unwrap_or("");
        let origin_host = origin
            .split_once("://")
            .map_or(origin, |(_, rest)| rest)
            .trim_end_matches('/');
        if origin == "null" || !origin_host.eq_ignore_ascii_case(host) {
            return Some("a request from another origin");
        }
    }
    if let Some(kind) = text(header::CONTENT_TYPE) {
        let kind = kind
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if matches!(
            kind.as_str(),
            "text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data"
        ) {
            return Some("a form's content type");
        }
    }
    None
}

async fn reload(AxState(st): AxState<ApiState>, headers: axum::http::HeaderMap) -> Response {
    let Some(tx) = st.reload else {
        return (StatusCode::FORBIDDEN, "Lifecycle API is not enabled.\n").into_response();
    };
    if let Some(why) = cross_site(&headers) {
        return (
            StatusCode::FORBIDDEN,
            format!("Refused: {why} cannot reload mcpmon.\n"),
        )
            .into_response();
    }
    let (reply, rx) = tokio::sync::oneshot::channel();
    if tx.send(ReloadRequest { reply: Some(reply) }).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match rx.await {
        Ok(Ok(outcome)) => (StatusCode::OK, axum::Json(outcome)).into_response(),
        Ok(Err(errors)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to reload config:\n{errors}\n"),
        )
            .into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response(),
    }
}

async fn ready(AxState(st): AxState<ApiState>) -> Response {
    if st.fleet.borrow().ready {
        (StatusCode::OK, "mcpmon is ready.\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "mcpmon is starting.\n").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tokio::time::Instant;

    /// A render that takes 50 ms and counts itself.
    async fn scrape(shared: &SharedRender, renders: &AtomicU32, generation: u64) -> String {
        let text = shared
            .get(
                Instant::now(),
                || ((generation, 0), generation),
                |g| async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let n = renders.fetch_add(1, Ordering::SeqCst) + 1;
                    Some(format!("generation {g} render {n}").into())
                },
            )
            .await
            .expect("rendered");
        String::from_utf8(text.to_vec()).expect("utf-8")
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_scrapes_share_one_render() {
        let shared = SharedRender::default();
        let renders = AtomicU32::new(0);
        let texts = futures::future::join_all((0..10).map(|_| scrape(&shared, &renders, 7))).await;
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        assert!(
            texts.iter().all(|t| t == "generation 7 render 1"),
            "{texts:?}"
        );

        // Same snapshot, under a second later: the same text.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(scrape(&shared, &renders, 7).await, "generation 7 render 1");
        // A newer snapshot is rendered anew...
        assert_eq!(scrape(&shared, &renders, 8).await, "generation 8 render 2");
        // ...and so is the same one once the render is a second old.
        tokio::time::sleep(RENDER_REUSE).await;
        assert_eq!(scrape(&shared, &renders, 8).await, "generation 8 render 3");
    }

    #[tokio::test(start_paused = true)]
    async fn a_scrape_never_gets_a_render_older_than_itself_of_another_snapshot() {
        let shared = SharedRender::default();
        let renders = AtomicU32::new(0);
        // The second scrape arrives while the first renders generation 1;
        // when its turn comes the fleet is at generation 2, and the render
        // it waited for began before it arrived: it renders again.
        let first = scrape(&shared, &renders, 1);
        let second = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            scrape(&shared, &renders, 2).await
        };
        let (a, b) = tokio::join!(first, second);
        assert_eq!(a, "generation 1 render 1");
        assert_eq!(b, "generation 2 render 2");
    }
}
