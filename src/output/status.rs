//! The status page: `/` (the fleet) and `/servers/{id}` (one server),
//! server-rendered HTML from the same snapshot as `/health` and `/metrics`,
//! readable with JavaScript off. Filters are a plain GET form; with
//! JavaScript on, `status.js` filters as you type and refreshes the page's
//! data in place. Everything is embedded in the binary, no external asset is
//! loaded, and a strict Content-Security-Policy allows only this origin's
//! own script and style. Every string that came from a server or the config
//! is escaped on the way out.

use std::fmt::Write as _;
use std::time::SystemTime;

use axum::extract::{Path, Query, RawQuery, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::api::ApiState;
use crate::state::snapshot::{HISTORY, ServerStatus, rfc3339};
use crate::state::verdict::State;

const CSS: &str = include_str!("status.css");
const JS: &str = include_str!("status.js");
/// Only this origin's own files; no inline script or style, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/// Cells of the history strip, each a twelfth of [`HISTORY`].
const CELLS: u32 = 12;

/// `?state=degraded&q=text`
#[derive(Deserialize, Default)]
pub struct Filter {
    #[serde(default)]
    state: String,
    #[serde(default)]
    q: String,
}

/// Text made safe for HTML content and quoted attribute values.
struct Esc<'a>(&'a str);

impl std::fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

fn html(body: impl IntoResponse) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// `/static/status.css`
pub async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

/// `/static/status.js`
pub async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
        .into_response()
}

/// A state as text and symbol, never by colour alone.
fn badge(out: &mut String, s: State) {
    let symbol = match s {
        State::Healthy => "✓",
        State::Degraded => "!",
        State::Unhealthy => "✗",
        State::Unknown => "?",
    };
    let _ = write!(
        out,
        r#"<span class="state s-{0}"><span aria-hidden="true">{symbol}</span> {0}</span>"#,
        s.as_str()
    );
}

fn ago(at: SystemTime, now: SystemTime) -> String {
    let secs = now.duration_since(at).unwrap_or_default().as_secs();
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        _ => format!("{}h ago", secs / 3600),
    }
}

fn time(out: &mut String, at: Option<SystemTime>, now: SystemTime) {
    match at {
        Some(t) => {
            let _ = write!(
                out,
                r#"<time datetime="{}">{}</time>"#,
                rfc3339(t),
                ago(t, now)
            );
        }
        None => out.push('—'),
    }
}

/// The worst state in each twelfth of the last hour; `None` before anything
/// was known.
fn strip(
    history: &std::collections::VecDeque<(SystemTime, State)>,
    now: SystemTime,
) -> Vec<Option<State>> {
    let cell = HISTORY / CELLS;
    (0..CELLS)
        .map(|i| {
            let start = now - HISTORY + cell * i;
            let end = start + cell;
            // The state in force at `start`, and every one that began inside.
            let before = history.iter().rev().find(|(at, _)| *at <= start);
            let inside = history.iter().filter(|(at, _)| *at > start && *at < end);
            before
                .into_iter()
                .chain(inside)
                .map(|(_, s)| *s)
                .max_by_key(|s| s.severity())
        })
        .collect()
}

fn history_strip(out: &mut String, s: &ServerStatus, now: SystemTime) {
    let cells = strip(&s.history, now);
    let worst = cells.iter().flatten().max_by_key(|s| s.severity());
    let label = match worst {
        Some(w) => format!("last hour: worst {}", w.as_str()),
        None => "last hour: no data".to_owned(),
    };
    let _ = write!(
        out,
        r#"<span class="strip" role="img" aria-label="{label}">"#
    );
    for (i, c) in cells.iter().enumerate() {
        let minutes = (CELLS as usize - i) * (HISTORY.as_secs() / 60) as usize / CELLS as usize;
        let name = c.map_or("none", State::as_str);
        let _ = write!(
            out,
            r#"<span class="cell s-{name}" title="{minutes} min ago: {name}"></span>"#
        );
    }
    out.push_str("</span>");
}

fn matches(s: &ServerStatus, f: &Filter) -> bool {
    if !f.state.is_empty() && s.status.as_str() != f.state {
        return false;
    }
    let q = f.q.trim().to_lowercase();
    q.is_empty() || search_text(s).contains(&q)
}

/// What the text filter looks through.
fn search_text(s: &ServerStatus) -> String {
    let name = s.server_info.as_ref().map_or("", |i| i.name.as_str());
    let labels: Vec<String> = s
        .labels
        .iter()
        .map(|l| format!("{}={}", l.name, l.value))
        .collect();
    format!(
        "{} {} {} {} {} {}",
        s.id,
        s.status.as_str(),
        s.reason.as_str(),
        s.transport,
        name,
        labels.join(" ")
    )
    .to_lowercase()
}

fn head(out: &mut String, title: &str, telemetry_path: &str) {
    let _ = write!(
        out,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{}</title><link rel="stylesheet" href="/static/status.css">
<script src="/static/status.js" defer></script></head><body>
<header><h1><a href="/">mcpmon</a></h1><nav aria-label="Machine-readable"><a href="{}">metrics</a> <a href="/health/fleet">fleet JSON</a></nav></header>
"#,
        Esc(title),
        Esc(telemetry_path)
    );
}

/// `/`: the fleet.
pub async fn fleet(
    AxState(st): AxState<ApiState>,
    Query(f): Query<Filter>,
    RawQuery(query): RawQuery,
) -> Response {
    let arrived = tokio::time::Instant::now();
    let _admitted = match st.renders.admit() {
        Ok(p) => p,
        Err(busy) => return *busy,
    };
    let query = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        query.hash(&mut h);
        h.finish()
    };
    let path = st.telemetry_path.clone();
    let page = st
        .renders
        .status
        .get(
            arrived,
            || {
                let snap = st.fleet.borrow().clone();
                ((snap.generation, query), snap)
            },
            // Thousands of rows take milliseconds: off the runtime's
            // workers, like every other whole-fleet render.
            |snap| async move {
                tokio::task::spawn_blocking(move || fleet_page(&snap, &f, &path))
                    .await
                    .ok()
                    .map(axum::body::Bytes::from)
            },
        )
        .await;
    match page {
        Some(body) => html(body),
        None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn fleet_page(snap: &crate::state::Snapshot, f: &Filter, telemetry_path: &str) -> String {
    let now = SystemTime::now();
    let mut out = String::with_capacity(4096 + snap.servers.len() * 600);
    head(&mut out, "mcpmon: fleet status", telemetry_path);
    let (verdict, meets) = snap.verdict();
    let sum = snap.summary();
    let _ = write!(
        out,
        r#"<form method="get" action="/" role="search" id="filter"><label>State <select name="state">"#
    );
    for (value, label) in [
        ("", "any"),
        ("healthy", "healthy"),
        ("degraded", "degraded"),
        ("unhealthy", "unhealthy"),
        ("unknown", "unknown"),
    ] {
        let selected = if f.state == value { " selected" } else { "" };
        let _ = write!(out, r#"<option value="{value}"{selected}>{label}</option>"#);
    }
    let _ = write!(
        out,
        r#"</select></label> <label>Search <input type="search" name="q" value="{}" placeholder="id, reason, name, team=…"></label> <button type="submit">Filter</button></form>
<main id="status" data-generation="{}"><section class="summary" aria-label="Fleet summary"><p>Fleet "#,
        Esc(&f.q),
        snap.generation
    );
    badge(&mut out, verdict);
    let _ = write!(
        out,
        " — {} of {} servers available; the policy asks for {}%{}</p><ul>",
        sum.healthy + sum.degraded,
        sum.total,
        snap.policy.min_available_percentage,
        if meets { "" } else { ", not met" }
    );
    for (s, n) in [
        (State::Healthy, sum.healthy),
        (State::Degraded, sum.degraded),
        (State::Unhealthy, sum.unhealthy),
        (State::Unknown, sum.unknown),
    ] {
        out.push_str("<li>");
        badge(&mut out, s);
        let _ = write!(out, " <strong>{n}</strong></li>");
    }
    out.push_str("</ul></section>");
    let shown: Vec<&ServerStatus> = snap
        .servers
        .values()
        .map(|r| &r.status)
        .filter(|s| matches(s, f))
        .collect();
    let _ = write!(
        out,
        r#"<table><caption>Servers: <span id="shown">{}</span> of {} shown</caption><thead><tr>
<th scope="col">Server</th><th scope="col">State</th><th scope="col">Reason</th><th scope="col">Since</th>
<th scope="col">Last check</th><th scope="col">Latency</th><th scope="col">Transport</th><th scope="col">Era</th>
<th scope="col">Last hour</th></tr></thead><tbody>"#,
        shown.len(),
        sum.total
    );
    for s in shown {
        let _ = write!(
            out,
            r#"<tr data-state="{}" data-text="{}"><th scope="row"><a href="/servers/{}">{}</a></th><td>"#,
            s.status.as_str(),
            Esc(&search_text(s)),
            Esc(&s.id),
            Esc(&s.id)
        );
        badge(&mut out, s.status);
        let _ = write!(
            out,
            r#"</td><td title="{}">{}</td><td>"#,
            Esc(&s.detail),
            s.reason.as_str()
        );
        time(&mut out, Some(s.since), now);
        out.push_str("</td><td>");
        time(&mut out, s.last_check, now);
        let _ = write!(
            out,
            "</td><td>{}</td><td>{}</td><td>{}</td><td>",
            s.response_time_ms
                .map_or("—".to_owned(), |v| format!("{v:.1} ms")),
            s.transport,
            s.era.map_or("—", |e| match e {
                crate::transport::Era::Legacy => "legacy",
                crate::transport::Era::Modern => "modern",
            })
        );
        history_strip(&mut out, s, now);
        out.push_str("</td></tr>\n");
    }
    out.push_str("</tbody></table></main></body></html>\n");
    out
}

/// `/servers/{id}`: one server.
pub async fn server(AxState(st): AxState<ApiState>, Path(id): Path<String>) -> Response {
    let snap = st.fleet.borrow().clone();
    let Some(record) = snap.servers.get(id.as_str()) else {
        let mut out = String::new();
        head(&mut out, "mcpmon: no such server", &st.telemetry_path);
        let _ = write!(
            out,
            r#"<main id="status"><p>No server {} in the fleet.</p></main></body></html>"#,
            Esc(&id)
        );
        let mut r = html(out);
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    };
    let s = &record.status;
    let now = SystemTime::now();
    let mut out = String::with_capacity(8192);
    head(&mut out, &format!("mcpmon: {}", s.id), &st.telemetry_path);
    let _ = write!(
        out,
        r#"<main id="status" data-generation="{}"><h2>{}</h2><p>"#,
        snap.generation,
        Esc(&s.id)
    );
    badge(&mut out, s.status);
    let _ = write!(out, " — {}", s.reason.as_str());
    if !s.detail.is_empty() {
        let _ = write!(out, ": {}", Esc(&s.detail));
    }
    let _ = write!(
        out,
        r#"</p><p><a href="/health/servers/{}">JSON</a></p><dl>"#,
        Esc(&s.id)
    );
    let mut row = |k: &str, v: String| {
        let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
    };
    let mut since = String::new();
    time(&mut since, Some(s.since), now);
    row("Since", since);
    if let Some(t) = &s.last_transition {
        let mut at = String::new();
        time(&mut at, Some(t.at), now);
        row(
            "Last change",
            format!(
                "{} → {} ({}), {at}",
                t.from.as_str(),
                t.to.as_str(),
                t.reason.as_str()
            ),
        );
    }
    let mut session = String::new();
    if s.session_open {
        session.push_str("open");
    } else if let Some(ended) = s.session_ended {
        session.push_str("none; the last ended ");
        time(&mut session, Some(ended), now);
        session.push_str(" (the fields below are from it)");
    } else {
        session.push_str("none yet");
    }
    row("Session", session);
    row(
        "Handshake",
        s.handshake_ms
            .map_or("—".to_owned(), |v| format!("{v:.0} ms")),
    );
    let mut last = String::new();
    time(&mut last, s.last_check, now);
    row("Last check", last);
    row(
        "Latency",
        s.response_time_ms
            .map_or("—".to_owned(), |v| format!("{v:.1} ms")),
    );
    row("Transport", s.transport.to_owned());
    if !s.labels.is_empty() {
        let labels: Vec<String> = s
            .labels
            .iter()
            .map(|l| format!("{}={}", Esc(&l.name), Esc(&l.value)))
            .collect();
        row("Labels", labels.join(", "));
    }
    if let Some(i) = &s.server_info {
        row(
            "Server",
            format!(
                "{} {} (protocol {})",
                Esc(&i.name),
                Esc(&i.version),
                Esc(&i.protocol_version)
            ),
        );
    }
    row("Sessions", s.sessions.to_string());
    if let Some(n) = s.tools {
        row("Tools", n.to_string());
    }
    if let Some(h) = &s.tools_hash {
        row("Tool surface", format!("<code>{}</code>", Esc(h)));
    }
    if !s.tools_missing.is_empty() {
        row(
            "Tools missing",
            Esc(&s.tools_missing.join(", ")).to_string(),
        );
    }
    let mut strip_html = String::new();
    history_strip(&mut strip_html, s, now);
    row("Last hour", strip_html);
    out.push_str("</dl>");
    if let Some(h) = &s.health_check {
        out.push_str("<h3>health_check</h3><p>");
        match h.status {
            Some(r) => {
                let _ = write!(out, "reported <strong>{r:?}</strong>");
            }
            None => out.push_str("no status"),
        }
        if h.failed {
            out.push_str(" (the call failed)");
        }
        out.push_str(", ");
        time(&mut out, Some(h.at), now);
        out.push_str("</p>");
        if !h.fields.is_empty() {
            out.push_str(r#"<table><thead><tr><th scope="col">Field</th><th scope="col">Value</th></tr></thead><tbody>"#);
            for (k, v) in &h.fields {
                let _ = write!(out, "<tr><td>{}</td><td>{v}</td></tr>", Esc(k));
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str(
        r#"<h3>Events</h3><table><thead><tr><th scope="col">When</th><th scope="col">What</th><th scope="col">Reason</th><th scope="col">Detail</th></tr></thead><tbody>"#,
    );
    for e in s.events.iter().rev() {
        out.push_str("<tr><td>");
        time(&mut out, Some(e.at), now);
        let _ = write!(
            out,
            "</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e.kind,
            e.reason.as_str(),
            Esc(&e.detail)
        );
    }
    out.push_str("</tbody></table></main></body></html>\n");
    html(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn text_is_escaped_for_content_and_attributes() {
        assert_eq!(
            Esc(r#"<script>alert("x")</script> & 'y'"#).to_string(),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn the_strip_shows_the_worst_state_of_each_twelfth_of_the_hour() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100_000);
        let min = |m: u64| now - Duration::from_secs(m * 60);
        let history = std::collections::VecDeque::from([
            (min(50), State::Unknown),
            (min(49), State::Healthy),
            (min(22), State::Unhealthy),
            (min(21), State::Healthy),
        ]);
        let cells = strip(&history, now);
        assert_eq!(cells.len(), 12);
        // Before anything was known: no data.
        assert_eq!(&cells[..2], &[None, None]);
        // Unknown (starting) then healthy: the worse of them is healthy.
        assert_eq!(cells[2], Some(State::Healthy));
        assert_eq!(cells[3], Some(State::Healthy));
        // A one-minute outage marks its cell; then healthy to the end.
        assert_eq!(cells[7], Some(State::Unhealthy));
        assert!(cells[8..].iter().all(|c| *c == Some(State::Healthy)));
    }
}
