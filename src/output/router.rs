//! One router: every endpoint, the state its handlers read (each takes
//! only its part, through [`FromRef`]), and the middleware every request
//! passes (count, compression, cache policy, body limit, deadline).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::get;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;

use super::lifecycle::Reload;
use super::metrics::Metrics;
use super::render::Renders;
use super::status::Links;
use super::{health, lifecycle, scrape, status};
use crate::discovery::Shard;
use crate::state::Reader;

/// Everything handlers can read; each handler takes one field by its type.
#[derive(Clone, FromRef)]
pub struct AppState {
    /// Latest fleet snapshot.
    pub fleet: Reader,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Where `POST /-/reload` sends its request.
    pub reload: Reload,
    /// The last render of each whole-fleet page, shared by the requests
    /// that arrive together.
    pub renders: Arc<Renders>,
    /// Where the pages link to, the exposition's path among them.
    pub links: Links,
    /// This replica's share of the fleet: `/health/fleet` speaks for it only.
    pub shard: Shard,
    /// The history, unless it is off.
    pub history: Option<super::history::History>,
    /// Whether badges are served.
    pub badges: super::badges::Badges,
}

/// Largest request body accepted (there are no body-taking endpoints yet).
const MAX_BODY: usize = 64 * 1024;
/// A request that takes longer than this is answered 408 (slow clients).
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Every path the router answers besides the exposition's, in the order
/// [`router`] routes them; `{id}` names a server.
pub const PATHS: [&str; 11] = [
    "/health/fleet",
    "/health/servers/{id}",
    "/-/healthy",
    "/-/ready",
    "/-/reload",
    "/",
    "/servers/{id}",
    "/static/status.css",
    "/static/status.js",
    "/api/v1/history/{id}",
    "/api/v1/servers/{id}/{*badge}",
];

/// Whether the router answers `path` already, so the exposition may not
/// be served there.
pub fn answers(path: &str) -> bool {
    PATHS.iter().any(|p| match p.find('{') {
        Some(i) => path.starts_with(&p[..i]),
        None => *p == path,
    })
}

/// The router with every endpoint.
pub fn router(state: AppState) -> Router {
    let metrics = state.metrics.clone();
    let [
        fleet,
        server,
        healthy,
        ready,
        reload,
        page,
        server_page,
        css,
        js,
        history,
        badge,
    ] = PATHS;
    Router::new()
        .route(&state.links.telemetry_path, get(scrape::metrics))
        .route(fleet, get(health::fleet))
        .route(server, get(health::server))
        .route(healthy, get(lifecycle::healthy))
        .route(ready, get(lifecycle::ready))
        .route(
            reload,
            axum::routing::post(lifecycle::reload).put(lifecycle::reload),
        )
        .route(page, get(status::fleet))
        .route(server_page, get(status::server))
        .route(css, get(status::css))
        .route(js, get(status::js))
        .route(history, get(super::history::api::history))
        .route(badge, get(super::badges::badge))
        // A slow client is answered 408; no endpoint takes a body, and a
        // declared one over the limit is refused before anything reads it.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_DEADLINE,
        ))
        .layer(RequestBodyLimitLayer::new(MAX_BODY))
        // Health answers change from one second to the next: no cache (a
        // load balancer's or a proxy's) may keep one.
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        ))
        // gzip when the client asks (Prometheus does): 12 MB of text at
        // 10 000 servers is under 1 MB on the wire. At the fastest level:
        // the default one took 11x as long (150 ms against 14 ms) for 19 %
        // fewer bytes (docs/benchmarks.md), and a scrape's time is the
        // budget that binds.
        .layer(
            tower_http::compression::CompressionLayer::new()
                .gzip(true)
                .quality(tower_http::CompressionLevel::Fastest),
        )
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

#[cfg(test)]
mod tests {
    use super::answers;

    #[test]
    fn the_exposition_may_take_no_path_the_router_answers() {
        for taken in [
            "/",
            "/health/fleet",
            "/health/servers/a",
            "/servers/a",
            "/-/reload",
        ] {
            assert!(answers(taken), "{taken}");
        }
        for free in [
            "/metrics",
            "/prometheus/metrics",
            "/healthz",
            "/static/other.css",
        ] {
            assert!(!answers(free), "{free}");
        }
    }
}
