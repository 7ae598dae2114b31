//! One router: every endpoint, the state its handlers read (each takes
//! only its part, through [`FromRef`]), and the middleware every request
//! passes (count, compression, cache policy, body limit, deadline).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use super::lifecycle::{Reload, ReloadRequest};
use super::metrics::Metrics;
use super::render::Renders;
use super::status::Links;
use super::{health, lifecycle, scrape, status};
use crate::discovery::Shard;
use crate::state::Snapshot;

/// Everything handlers can read.
#[derive(Clone)]
pub struct AppState {
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
    pub shard: Shard,
}

impl FromRef<AppState> for watch::Receiver<Arc<Snapshot>> {
    fn from_ref(s: &AppState) -> Self {
        s.fleet.clone()
    }
}

impl FromRef<AppState> for Arc<Metrics> {
    fn from_ref(s: &AppState) -> Self {
        s.metrics.clone()
    }
}

impl FromRef<AppState> for Arc<Renders> {
    fn from_ref(s: &AppState) -> Self {
        s.renders.clone()
    }
}

impl FromRef<AppState> for Shard {
    fn from_ref(s: &AppState) -> Self {
        s.shard
    }
}

impl FromRef<AppState> for Reload {
    fn from_ref(s: &AppState) -> Self {
        Reload(s.reload.clone())
    }
}

impl FromRef<AppState> for Links {
    fn from_ref(s: &AppState) -> Self {
        Links {
            telemetry_path: s.telemetry_path.clone(),
        }
    }
}

/// Largest request body accepted (there are no body-taking endpoints yet).
const MAX_BODY: usize = 64 * 1024;
/// A request that takes longer than this is answered 408 (slow clients).
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// The router with every endpoint.
pub fn router(state: AppState) -> Router {
    let metrics = state.metrics.clone();
    Router::new()
        .route(&state.telemetry_path, get(scrape::metrics))
        .route("/health/fleet", get(health::fleet))
        .route("/health/servers/{id}", get(health::server))
        .route("/-/healthy", get(lifecycle::healthy))
        .route("/-/ready", get(lifecycle::ready))
        .route(
            "/-/reload",
            axum::routing::post(lifecycle::reload).put(lifecycle::reload),
        )
        .route("/", get(status::fleet))
        .route("/servers/{id}", get(status::server))
        .route("/static/status.css", get(status::css))
        .route("/static/status.js", get(status::js))
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
