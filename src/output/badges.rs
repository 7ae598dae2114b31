//! Badges for READMEs and wikis, in the paths people know from Gatus:
//! `/api/v1/servers/{id}/health/badge.svg`, `…/uptimes/{window}/badge.svg`
//! and `…/response-times/{window}/badge.svg`, each also as `badge.json`,
//! the shape shields.io's endpoint badge reads. The SVG is drawn here, its
//! text escaped by construction; nothing a server says is in it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::history::History;
use crate::state::Reader;
use crate::state::verdict::State as Verdict;

/// The windows uptime and response-time badges take.
pub const WINDOWS: [&str; 5] = ["1h", "24h", "7d", "30d", "90d"];

/// Whether badges are served (`--badges.disabled` turns them off).
#[derive(Clone, Copy, Debug)]
pub struct Badges(pub bool);

/// A badge's content: the left text, the right text, a shields.io colour.
#[derive(Debug, PartialEq, Serialize)]
pub struct Badge {
    /// Always 1 (shields.io's endpoint schema).
    #[serde(rename = "schemaVersion")]
    pub schema_version: u8,
    /// The left text.
    pub label: String,
    /// The right text.
    pub message: String,
    /// A shields.io colour name.
    pub color: &'static str,
}

impl Badge {
    fn new(label: &str, message: String, color: &'static str) -> Badge {
        Badge {
            schema_version: 1,
            label: label.to_owned(),
            message,
            color,
        }
    }

    /// The badge as a flat SVG, shields.io's look.
    pub fn svg(&self) -> String {
        let (lw, mw) = (width(&self.label), width(&self.message));
        let total = lw + mw;
        let (label, message) = (escape(&self.label), escape(&self.message));
        let fill = hex(self.color);
        format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" aria-label="{label}: {message}"><title>{label}: {message}</title><linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient><clipPath id="r"><rect width="{total}" height="20" rx="3" fill="#fff"/></clipPath><g clip-path="url(#r)"><rect width="{lw}" height="20" fill="#555"/><rect x="{lw}" width="{mw}" height="20" fill="{fill}"/><rect width="{total}" height="20" fill="url(#s)"/></g><g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" font-size="11"><text x="{lx}" y="14">{label}</text><text x="{mx}" y="14">{message}</text></g></svg>"##,
            lx = lw / 2,
            mx = lw + mw / 2,
        )
    }
}

/// Width of a badge half holding `text` (Verdana 11 px averages about 7 px
/// a character), with its padding.
fn width(text: &str) -> usize {
    text.chars().count() * 7 + 10
}

/// XML text and attribute escaping.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// shields.io's colours.
fn hex(color: &str) -> &'static str {
    match color {
        "brightgreen" => "#4c1",
        "green" => "#97ca00",
        "yellow" => "#dfb317",
        "orange" => "#fe7d37",
        "red" => "#e05d44",
        "blue" => "#007ec6",
        _ => "#9f9f9f",
    }
}

/// The status badge of a server's verdict.
pub fn status(state: Verdict, in_maintenance: bool) -> Badge {
    if in_maintenance {
        return Badge::new("status", "maintenance".into(), "blue");
    }
    let color = match state {
        Verdict::Healthy => "brightgreen",
        Verdict::Degraded => "orange",
        Verdict::Unhealthy => "red",
        Verdict::Unknown => "lightgrey",
    };
    Badge::new("status", state.as_str().into(), color)
}

/// The uptime badge: a share, or "no data".
pub fn uptime(window: &str, share: Option<f64>) -> Badge {
    let label = format!("uptime {window}");
    let Some(share) = share else {
        return Badge::new(&label, "no data".into(), "lightgrey");
    };
    let pct = share * 100.0;
    let color = match pct {
        p if p >= 99.9 => "brightgreen",
        p if p >= 99.0 => "green",
        p if p >= 95.0 => "yellow",
        p if p >= 90.0 => "orange",
        _ => "red",
    };
    // Two decimals, but never 100% for what was not.
    let shown = if share < 1.0 {
        (pct * 100.0).floor() / 100.0
    } else {
        100.0
    };
    Badge::new(&label, format!("{shown}%"), color)
}

/// The response-time badge: the median liveness latency, or "no data".
pub fn response_time(window: &str, ms: Option<f64>) -> Badge {
    let label = format!("response time {window}");
    let Some(ms) = ms else {
        return Badge::new(&label, "no data".into(), "lightgrey");
    };
    let color = match ms {
        m if m < 100.0 => "brightgreen",
        m if m < 300.0 => "green",
        m if m < 500.0 => "yellow",
        m if m < 1000.0 => "orange",
        _ => "red",
    };
    Badge::new(&label, format!("{} ms", ms.round()), color)
}

/// `GET /api/v1/servers/{id}/{*badge}`: `health/badge.svg`,
/// `uptimes/{window}/badge.svg`, `response-times/{window}/badge.svg`, or the
/// same as `badge.json`.
pub async fn badge(
    Path((id, rest)): Path<(String, String)>,
    State(fleet): State<Reader>,
    State(history): State<Option<History>>,
    State(Badges(on)): State<Badges>,
) -> Response {
    let not_found = |why: &'static str| (StatusCode::NOT_FOUND, why).into_response();
    if !on {
        return not_found("badges are off (--badges.disabled)\n");
    }
    let Some(record) = fleet.current().await.servers.get(id.as_str()).cloned() else {
        return not_found("no such server\n");
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let (kind, window, file) = match parts.as_slice() {
        ["health", file] => ("health", None, *file),
        [kind @ ("uptimes" | "response-times"), w, file] if WINDOWS.contains(w) => {
            (*kind, Some(*w), *file)
        }
        _ => return not_found("no such badge\n"),
    };
    let b = match (kind, window) {
        ("health", _) => status(record.status.status, record.status.maintenance.is_some()),
        (kind, Some(w)) => {
            let Some(history) = history else {
                return not_found("history is off (--history.disabled)\n");
            };
            let window = crate::config::parse_duration(w).unwrap_or_default();
            let read = match history.read(&id, window, w).await {
                Ok(r) => r,
                Err(_) => {
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the history cannot be read now\n",
                    )
                        .into_response();
                }
            };
            if kind == "uptimes" {
                uptime(w, read.uptime)
            } else {
                let (n, sum) = read.rows.iter().fold((0u64, 0.0), |(n, s), r| {
                    (
                        n + r.row.latency_count,
                        s + r.row.latency_p50_ms * r.row.latency_count as f64,
                    )
                });
                response_time(w, (n > 0).then(|| sum / n as f64))
            }
        }
        _ => return not_found("no such badge\n"),
    };
    match file {
        "badge.svg" => ([(header::CONTENT_TYPE, "image/svg+xml")], b.svg()).into_response(),
        "badge.json" => Json(b).into_response(),
        _ => not_found("no such badge\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_follow_the_numbers_and_100_percent_is_only_for_all_of_it() {
        assert_eq!(uptime("24h", Some(1.0)).message, "100%");
        assert_eq!(uptime("24h", Some(0.99999)).message, "99.99%");
        assert_eq!(uptime("24h", Some(0.99999)).color, "brightgreen");
        assert_eq!(uptime("7d", Some(0.995)).color, "green");
        assert_eq!(uptime("7d", Some(0.5)).color, "red");
        assert_eq!(uptime("7d", None).message, "no data");
        assert_eq!(response_time("1h", Some(42.4)).message, "42 ms");
        assert_eq!(response_time("1h", Some(1500.0)).color, "red");
        assert_eq!(status(Verdict::Unhealthy, true).message, "maintenance");
        assert_eq!(status(Verdict::Degraded, false).color, "orange");
    }

    #[test]
    fn the_svg_escapes_its_text_and_says_it_for_screen_readers() {
        let b = Badge::new("a<b", "\"x\" & 'y'".into(), "red");
        let svg = b.svg();
        assert!(
            svg.contains("a&lt;b: &quot;x&quot; &amp; &#39;y&#39;"),
            "{svg}"
        );
        assert!(!svg.contains("a<b"), "{svg}");
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("fill=\"#e05d44\""));
    }
}
