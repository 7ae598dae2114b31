//! `GET /api/v1/history/{id}?window=24h`: one server's history as JSON, for
//! scripts. A server neither watched now nor in the file is a 404.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::History;
use super::store::StoreError;
use crate::state::Reader;

/// The query string.
#[derive(Deserialize)]
pub struct Window {
    /// How far back: `1h`, `24h`, `7d`, `90d`… (default `24h`).
    window: Option<String>,
}

/// The handler.
pub async fn history(
    Path(id): Path<String>,
    Query(q): Query<Window>,
    State(fleet): State<Reader>,
    State(history): State<Option<History>>,
) -> Response {
    let Some(history) = history else {
        return (
            StatusCode::NOT_FOUND,
            "history is off (--history.disabled)\n",
        )
            .into_response();
    };
    let asked = q.window.unwrap_or_else(|| "24h".to_owned());
    let window = match crate::config::parse_duration(&asked) {
        Ok(w) if !w.is_zero() => w,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                "window: a duration such as 1h, 24h or 30d\n",
            )
                .into_response();
        }
    };
    let watched = fleet.published().servers.contains_key(id.as_str());
    match history.read(&id, window, &asked).await {
        Ok(read) if watched || !read.rows.is_empty() => Json(read).into_response(),
        Ok(_) => (StatusCode::NOT_FOUND, "no such server\n").into_response(),
        Err(e @ StoreError::Remote(_)) => {
            tracing::warn!(error = %e, "history read failed");
            (StatusCode::BAD_GATEWAY, format!("{e}\n")).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "history read failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the history cannot be read now\n",
            )
                .into_response()
        }
    }
}
