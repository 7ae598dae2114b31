//! `GET /metrics` (or `--web.telemetry-path`): the exposition of the
//! latest snapshot, one render shared by concurrent scrapes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::metrics::Metrics;
use super::render::Renders;
use crate::state::Reader;

/// The exposition, rendered at most once per snapshot and second.
pub async fn metrics(
    State(fleet): State<Reader>,
    State(metrics): State<Arc<Metrics>>,
    State(renders): State<Arc<Renders>>,
) -> Response {
    let arrived = tokio::time::Instant::now();
    let _admitted = match renders.admit() {
        Ok(p) => p,
        Err(busy) => return busy.into_response(),
    };
    // Borrowed into the render's future (the Arc itself stays here).
    let on = &*renders;
    let text = renders
        .metrics
        .get(
            arrived,
            || async {
                let snap = fleet.current().await;
                ((snap.generation, metrics.version()), snap)
            },
            |snap| {
                let metrics = metrics.clone();
                async move {
                    on.off_worker(move || metrics.render(&snap))
                        .await
                        .map(axum::body::Bytes::from)
                }
            },
        )
        .await;
    let text = match text {
        Ok(text) => text,
        Err(failed) => return failed.into_response(),
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
