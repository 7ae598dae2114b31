//! `/-/healthy`, `/-/ready` and `POST /-/reload`: the process's own
//! lifecycle, as Prometheus serves it.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::state::Reader;

/// A request to reload the configuration; the reply carries what changed,
/// or the errors of a rejected file.
#[derive(Debug)]
pub struct ReloadRequest {
    /// Where the outcome goes, if anyone waits for it.
    pub reply: Option<tokio::sync::oneshot::Sender<Result<crate::config::Diff, String>>>,
}

/// Where `POST /-/reload` sends its request; `None` unless the lifecycle
/// API is enabled.
#[derive(Clone)]
pub struct Reload(pub Option<tokio::sync::mpsc::Sender<ReloadRequest>>);

/// `GET /-/healthy`: the process answers.
pub async fn healthy() -> &'static str {
    "mcpmon is healthy.\n"
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

/// `POST /-/reload` (or PUT): reload the config file and answer what
/// changed, or the errors of a rejected file (the running config stays).
pub async fn reload(
    State(Reload(reload)): State<Reload>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(tx) = reload else {
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

/// `GET /-/ready`: 200 once every server had its first verdict (or the
/// time it could take has passed).
pub async fn ready(State(fleet): State<Reader>) -> Response {
    if fleet.published().ready {
        (StatusCode::OK, "mcpmon is ready.\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "mcpmon is starting.\n").into_response()
    }
}
