//! The status page: `/` (the fleet) and `/servers/{id}` (one server),
//! server-rendered HTML from the same snapshot as `/health` and `/metrics`,
//! readable with JavaScript off. Filters are a plain GET form; with
//! JavaScript on, `status.js` filters as you type and refreshes the page's
//! data in place. Everything is embedded in the binary, no external asset is
//! loaded, and a strict Content-Security-Policy allows only this origin's
//! own script and style. The templates are maud's: every string that came
//! from a server or the config is escaped unless marked otherwise, and
//! nothing here is.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, Query, RawQuery, State as Extract};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::render::Renders;
use crate::state::Reader;
use crate::state::Snapshot;
use crate::state::snapshot::{HISTORY, HealthCheckStatus, ServerStatus, rfc3339};
use crate::state::verdict::State;

const CSS: &str = include_str!("status.css");
const JS: &str = include_str!("status.js");
/// Only this origin's own files; no inline script or style, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/// Cells of the history strip, each a twelfth of [`HISTORY`].
const CELLS: u32 = 12;

/// Where the page links to.
#[derive(Clone)]
pub struct Links {
    /// The exposition's path (`--web.telemetry-path`).
    pub telemetry_path: String,
}

/// `?state=degraded&q=text`
#[derive(Deserialize, Default)]
pub struct Filter {
    #[serde(default)]
    state: String,
    #[serde(default)]
    q: String,
}

fn html_response(page: impl IntoResponse) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        page,
    )
        .into_response()
}

/// `/static/status.css`
pub async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

/// `/static/status.js`
pub async fn js() -> Response {
    let kind = [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")];
    (kind, JS).into_response()
}

/// `/`: the fleet, rendered off the runtime's workers and shared by the
/// requests for the same snapshot and query.
pub async fn fleet(
    Extract(fleet): Extract<Reader>,
    Extract(renders): Extract<Arc<Renders>>,
    Extract(links): Extract<Links>,
    Extract(history): Extract<Option<super::history::History>>,
    Query(f): Query<Filter>,
    RawQuery(query): RawQuery,
) -> Response {
    let arrived = tokio::time::Instant::now();
    let _admitted = match renders.admit() {
        Ok(p) => p,
        Err(busy) => return busy.into_response(),
    };
    let daily = history.as_ref().map(super::history::History::daily);
    // A page is shared while neither the query, the snapshot nor the days
    // the history holds have changed.
    let query = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        query.hash(&mut h);
        daily.as_ref().map(|d| d.version).hash(&mut h);
        h.finish()
    };
    // Borrowed into the render's future (the Arc itself stays here).
    let on = &*renders;
    let page = renders
        .status
        .get(
            arrived,
            || async {
                let snap = fleet.current().await;
                ((snap.generation, query), snap)
            },
            |snap| async move {
                on.off_worker(move || fleet_page(&snap, &f, &links, daily.as_deref()).into_string())
                    .await
                    .map(axum::body::Bytes::from)
            },
        )
        .await;
    match page {
        Ok(body) => html_response(body),
        Err(failed) => failed.into_response(),
    }
}

/// `/servers/{id}`: one server.
pub async fn server(
    Extract(fleet): Extract<Reader>,
    Extract(links): Extract<Links>,
    Extract(history): Extract<Option<super::history::History>>,
    Path(id): Path<String>,
) -> Response {
    let snap = fleet.current().await;
    let Some(record) = snap.servers.get(id.as_str()) else {
        let body = html! { main #status { p { "No server " (id) " in the fleet." } } };
        let page = page("mcpmon: no such server", &links, body);
        return (StatusCode::NOT_FOUND, html_response(page.into_string())).into_response();
    };
    let s = &record.status;
    let title = format!("mcpmon: {}", s.id);
    let now = SystemTime::now();
    let past = match &history {
        Some(h) => {
            let window = super::history::page::WINDOW;
            match h.read(&s.id, window, "90d").await {
                Ok(read) => Some(super::history::page::section(&read, now)),
                Err(e) => Some(html! { p { "The history cannot be read now: " (e.to_string()) } }),
            }
        }
        None => None,
    };
    let body = server_main(s, snap.generation, now, past);
    html_response(page(&title, &links, body).into_string())
}

/// The frame of every page: head, links, and `body`.
fn page(title: &str, links: &Links, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href="/static/status.css";
                script src="/static/status.js" defer {}
            }
            body {
                header {
                    h1 { a href="/" { "mcpmon" } }
                    nav aria-label="Machine-readable" {
                        a href=(links.telemetry_path) { "metrics" } " "
                        a href="/health/fleet" { "fleet JSON" }
                    }
                }
                (body)
            }
        }
    }
}

/// The fleet page: the filter form, the summary, a row per server shown.
fn fleet_page(
    snap: &Snapshot,
    f: &Filter,
    links: &Links,
    daily: Option<&super::history::rows::Daily>,
) -> Markup {
    let now = SystemTime::now();
    let (verdict, meets) = snap.verdict();
    let sum = snap.summary();
    let shown: Vec<&ServerStatus> = snap
        .servers
        .values()
        .map(|r| &*r.status)
        .filter(|s| matches(s, f))
        .collect();
    let states = [("", "any")]
        .into_iter()
        .chain(State::ALL.iter().map(|s| (s.as_str(), s.as_str())));
    let counts = [
        (State::Healthy, sum.healthy),
        (State::Degraded, sum.degraded),
        (State::Unhealthy, sum.unhealthy),
        (State::Unknown, sum.unknown),
    ];
    let columns = [
        "Server",
        "State",
        "Reason",
        "Since",
        "Last check",
        "Latency",
        "Transport",
        "Era",
        "Last hour",
        "30 days",
    ];
    let body = html! {
        form method="get" action="/" role="search" #filter {
            label { "State " select name="state" {
                @for (value, label) in states {
                    option value=(value) selected[f.state == value] { (label) }
                }
            } }
            " "
            label { "Search " input type="search" name="q" value=(f.q) placeholder="id, reason, name, team=…"; }
            " "
            button type="submit" { "Filter" }
        }
        main #status data-generation=(snap.generation) {
            section.summary aria-label="Fleet summary" {
                p {
                    "Fleet " (badge(verdict))
                    " — " (sum.healthy + sum.degraded) " of " (sum.total)
                    " servers available; the policy asks for "
                    (snap.policy.min_available_percentage) "%"
                    @if !meets { ", not met" }
                }
                ul { @for (state, n) in counts { li { (badge(state)) " " strong { (n) } } } }
            }
            table {
                caption { "Servers: " span #shown { (shown.len()) } " of " (sum.total) " shown" }
                thead { tr { @for c in columns { th scope="col" { (c) } } } }
                tbody { @for s in shown { (fleet_row(s, now, daily)) } }
            }
        }
    };
    page("mcpmon: fleet status", links, body)
}

/// One server's row on the fleet page; `data-*` feed the live filter.
fn fleet_row(
    s: &ServerStatus,
    now: SystemTime,
    daily: Option<&super::history::rows::Daily>,
) -> Markup {
    html! {
        tr data-state=(s.status.as_str()) data-text=(search_text(s)) {
            th scope="row" { a href={ "/servers/" (s.id) } { (s.id) } }
            td { (badge(s.status)) (in_maintenance(s)) }
            td title=(s.detail) { (s.reason.as_str()) }
            td { (time(Some(s.since), now)) }
            td { (time(s.last_check, now)) }
            td { (ms(s.response_time_ms, 1)) }
            td { (s.transport) }
            td { (s.era.map_or("—", |e| e.as_str())) }
            td { (history_strip(s, now)) }
            td {
                @if let Some(daily) = daily { (super::history::page::days(daily, &s.id, now)) }
                @else { "history off" }
            }
        }
    }
}

/// The server page's `main`: verdict, facts, health check, timeline.
fn server_main(s: &ServerStatus, generation: u64, now: SystemTime, past: Option<Markup>) -> Markup {
    html! {
        main #status data-generation=(generation) {
            h2 { (s.id) }
            p {
                (badge(s.status)) (in_maintenance(s)) " — " (s.reason.as_str())
                @if !s.detail.is_empty() { ": " (s.detail) }
            }
            p { a href={ "/health/servers/" (s.id) } { "JSON" } }
            (facts(s, now))
            @if let Some(h) = &s.health_check { (health_check(h, now)) }
            @if let Some(past) = past { (past) }
            h3 { "Events" }
            table {
                thead { tr { @for c in ["When", "What", "Reason", "Detail"] { th scope="col" { (c) } } } }
                tbody {
                    @for e in s.events.iter().rev() {
                        tr { td { (time(Some(e.at), now)) } td { (e.kind.as_str()) } td { (e.reason.as_str()) } td { (e.detail) } }
                    }
                }
            }
        }
    }
}

/// The server page's list of facts about the server and its session.
fn facts(s: &ServerStatus, now: SystemTime) -> Markup {
    let labels: Vec<String> = s
        .labels
        .iter()
        .map(|l| format!("{}={}", l.name, l.value))
        .collect();
    html! {
        dl {
            dt { "Since" } dd { (time(Some(s.since), now)) }
            @if let Some(t) = &s.last_transition {
                dt { "Last change" }
                dd { (t.from.as_str()) " → " (t.to.as_str()) " (" (t.reason.as_str()) "), " (time(Some(t.at), now)) }
            }
            dt { "Session" } dd { (session(s, now)) }
            dt { "Handshake" } dd { (ms(s.handshake_ms, 0)) }
            dt { "Last check" } dd { (time(s.last_check, now)) }
            dt { "Latency" } dd { (ms(s.response_time_ms, 1)) }
            dt { "Transport" } dd { (s.transport) }
            @if !labels.is_empty() { dt { "Labels" } dd { (labels.join(", ")) } }
            @if let Some(i) = &s.server_info {
                dt { "Server" } dd { (i.name) " " (i.version) " (protocol " (i.protocol_version) ")" }
            }
            dt { "Sessions" } dd { (s.sessions) }
            @if let Some(t) = &s.tools {
                dt { "Tools" } dd { (t.surface.tools.len()) }
                dt { "Tool surface" } dd { code { (t.surface.hash) } }
                @if !t.missing.is_empty() { dt { "Tools missing" } dd { (t.missing.join(", ")) } }
            }
            dt { "Last hour" } dd { (history_strip(s, now)) }
        }
    }
}

/// Whether a session is open, and whose fields the page shows when not.
fn session(s: &ServerStatus, now: SystemTime) -> Markup {
    html! {
        @if s.session_open {
            "open"
        } @else if let Some(ended) = s.session_ended {
            "none; the last ended " (time(Some(ended), now)) " (the fields below are from it)"
        } @else {
            "none yet"
        }
    }
}

/// The last health check: what it reported, and its numeric fields.
fn health_check(h: &HealthCheckStatus, now: SystemTime) -> Markup {
    html! {
        h3 { "health_check" }
        p {
            @match h.status {
                Some(r) => { "reported " strong { (format!("{r:?}")) } },
                None => "no status",
            }
            @if h.failed { " (the call failed)" }
            ", " (time(Some(h.at), now))
        }
        @if !h.fields.is_empty() {
            table {
                thead { tr { th scope="col" { "Field" } th scope="col" { "Value" } } }
                tbody { @for (k, v) in &h.fields { tr { td { (k) } td { (v) } } } }
            }
        }
    }
}

/// A state as text and symbol, never by colour alone.
fn badge(s: State) -> Markup {
    let symbol = match s {
        State::Healthy => "✓",
        State::Degraded => "!",
        State::Unhealthy => "✗",
        State::Unknown => "?",
    };
    html! {
        span class={ "state s-" (s.as_str()) } { span aria-hidden="true" { (symbol) } " " (s.as_str()) }
    }
}

/// A mark for a server in a maintenance window: its verdict stays beside.
fn in_maintenance(s: &ServerStatus) -> Markup {
    html! {
        @if let Some(m) = &s.maintenance {
            " " span.maintenance title={ "maintenance window " (m.window) " until " (rfc3339(m.until)) } { "maintenance" }
        }
    }
}

/// Milliseconds with `decimals` places, or a dash.
fn ms(v: Option<f64>, decimals: usize) -> String {
    v.map_or("—".to_owned(), |v| format!("{v:.decimals$} ms"))
}

fn ago(at: SystemTime, now: SystemTime) -> String {
    let secs = now.duration_since(at).unwrap_or_default().as_secs();
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        _ => format!("{}h ago", secs / 3600),
    }
}

/// A moment, machine-readable and as an age; a dash when never.
fn time(at: Option<SystemTime>, now: SystemTime) -> Markup {
    html! {
        @if let Some(t) = at { time datetime=(rfc3339(t)) { (ago(t, now)) } } @else { "—" }
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

/// The last hour as twelve cells, with a text label for screen readers.
fn history_strip(s: &ServerStatus, now: SystemTime) -> Markup {
    let cells = strip(&s.history, now);
    let worst = cells.iter().flatten().max_by_key(|s| s.severity());
    let label = match worst {
        Some(w) => format!("last hour: worst {}", w.as_str()),
        None => "last hour: no data".to_owned(),
    };
    let minutes_ago =
        |i: usize| (CELLS as usize - i) * (HISTORY.as_secs() / 60) as usize / CELLS as usize;
    html! {
        span.strip role="img" aria-label=(label) {
            @for (i, c) in cells.iter().enumerate() {
                @let name = c.map_or("none", State::as_str);
                span class={ "cell s-" (name) } title={ (minutes_ago(i)) " min ago: " (name) } {}
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A snapshot of one server whose id, detail and identity are markup.
    fn hostile() -> Snapshot {
        let payload = r#"<script>alert("x")</script> & 'y'"#;
        let spec = crate::state::testing::spec("evil");
        let tracker = crate::state::evidence::Tracker::new(&spec, tokio::time::Instant::now());
        let mut status = tracker.status().clone();
        status.detail = payload.to_owned();
        status.server_info = Some(Arc::new(crate::transport::ServerInfo {
            name: payload.to_owned(),
            version: payload.to_owned(),
            protocol_version: payload.to_owned(),
        }));
        let record = crate::state::snapshot::ServerRecord {
            status: Arc::new(status),
            series: Default::default(),
        };
        let mut snap = Snapshot::default();
        snap.servers.insert(Arc::from("evil"), Arc::new(record));
        snap.counted()
    }

    #[test]
    fn text_from_servers_is_escaped_on_both_pages() {
        let snap = hostile();
        let links = Links {
            telemetry_path: r#"/m"><script>"#.to_owned(),
        };
        let fleet = fleet_page(&snap, &Filter::default(), &links, None).into_string();
        let status = &snap.servers.get("evil").expect("there").status;
        let server =
            page("t", &links, server_main(status, 1, SystemTime::now(), None)).into_string();
        for html in [&fleet, &server] {
            assert!(!html.contains("<script>"), "{html}");
            assert!(html.contains("&lt;script&gt;"), "{html}");
        }
        assert!(fleet.contains(r#"href="/servers/evil""#), "{fleet}");
        assert!(server.contains("<h2>evil</h2>"), "{server}");
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
