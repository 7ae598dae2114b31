//! The history as a server's status page shows it: uptime over 24 h, 7 d
//! and 30 d, a bar a day for 90 days, the liveness latency of the last
//! week, and the state changes. Server-rendered SVG: no script needed,
//! every text escaped by maud, readable on a phone (the SVGs scale).

use std::time::{Duration, SystemTime};

use maud::{Markup, html};

use super::rows::Row;
use super::{Read, uptime};

/// Days of bars.
const DAYS: i64 = 90;
/// Transitions listed.
const TRANSITIONS: usize = 50;

/// The section for `read`, a 90-day read at hourly rows, as of `now`.
pub fn section(read: &Read, now: SystemTime) -> Markup {
    let now = super::rows::unix(now);
    let within = |secs: i64| {
        read.rows
            .iter()
            .filter(move |r| r.t >= now - secs)
            .map(|r| &r.row)
    };
    let windows = [("24 h", 86_400), ("7 d", 7 * 86_400), ("30 d", 30 * 86_400)];
    html! {
        section #history aria-labelledby="history-title" {
            h3 #history-title { "History" }
            dl.uptimes {
                @for (name, secs) in windows {
                    dt { "Uptime, " (name) }
                    dd { (percent(uptime(within(secs)))) }
                }
            }
            (bars(read, now))
            (latency(read, now))
            h4 { "State changes" }
            @if read.transitions.is_empty() {
                p { "None in the last 90 days." }
            } @else {
                table.transitions {
                    thead { tr { @for c in ["When (UTC)", "State", "Reason", "Detail"] { th scope="col" { (c) } } } }
                    tbody {
                        @for t in read.transitions.iter().rev().take(TRANSITIONS) {
                            tr {
                                td { (date_time(t.at as i64)) }
                                td { span class={ "state s-" (t.state) } { (t.state) } }
                                td { (t.reason) }
                                td { (t.detail) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An uptime share in words.
fn percent(share: Option<f64>) -> String {
    match share {
        Some(1.0) => "100%".to_owned(),
        Some(s) => format!("{:.3}%", (s * 100_000.0).floor() / 1000.0),
        None => "no data".to_owned(),
    }
}

/// A bar a day, coloured by that day's uptime, each with its words.
fn bars(read: &Read, now: i64) -> Markup {
    let today = now - now.rem_euclid(86_400);
    let days: Vec<(i64, Option<f64>)> = (0..DAYS)
        .map(|i| {
            let start = today - (DAYS - 1 - i) * 86_400;
            let rows = read
                .rows
                .iter()
                .filter(|r| r.t >= start && r.t < start + 86_400)
                .map(|r| &r.row);
            (start, uptime(rows))
        })
        .collect();
    let seen = days.iter().filter(|(_, u)| u.is_some()).count();
    let label = format!("{DAYS} days of uptime, a bar a day; {seen} with data");
    html! {
        figure.bars {
            svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (DAYS * 10) " 40" } preserveAspectRatio="none" role="img" aria-label=(label) {
                @for (i, (start, u)) in days.iter().enumerate() {
                    rect x=(i * 10 + 1) y="0" width="8" height="40" rx="1" class=(level(*u)) {
                        title { (date(*start)) ": " (percent(*u)) }
                    }
                }
            }
            figcaption { (DAYS) " days ago" span.right { "today" } }
        }
    }
}

/// A server's last days as a strip of cells, for the fleet page: one a
/// day, coloured as the server page's bars, each saying its day.
pub fn days(daily: &super::rows::Daily, server: &str, now: SystemTime) -> Markup {
    let now = super::rows::unix(now);
    let cells = daily.cells(server, now);
    let today = now - now.rem_euclid(86_400);
    let n = cells.len() as i64;
    let worst = cells.iter().flatten().copied().reduce(f64::min);
    let label = match worst {
        Some(w) => format!("last {n} days: worst day {}", percent(Some(w))),
        None => format!("last {n} days: no data"),
    };
    html! {
        span.strip.days role="img" aria-label=(label) {
            @for (i, c) in cells.iter().enumerate() {
                @let day = today - (n - 1 - i as i64) * 86_400;
                span class={ "cell " (level(*c)) } title={ (date(day)) ": " (percent(*c)) } {}
            }
        }
    }
}

/// The class of a day's bar.
fn level(share: Option<f64>) -> &'static str {
    match share {
        None => "d-none",
        Some(s) if s >= 0.999 => "d-good",
        Some(s) if s >= 0.99 => "d-fair",
        Some(s) if s >= 0.95 => "d-poor",
        Some(_) => "d-bad",
    }
}

/// The median and 95th percentile liveness latency, an hour a point, for
/// the last week.
fn latency(read: &Read, now: i64) -> Markup {
    let week = 7 * 86_400;
    let points: Vec<(i64, &Row)> = read
        .rows
        .iter()
        .filter(|r| r.t >= now - week && r.row.latency_count > 0)
        .map(|r| (r.t, &r.row))
        .collect();
    if points.is_empty() {
        return html! { p.latency { "No liveness answers in the last week." } };
    }
    let top = points
        .iter()
        .map(|(_, r)| r.latency_p95_ms)
        .fold(1.0_f64, f64::max);
    let (w, h) = (700.0, 160.0);
    let x = |t: i64| (t - (now - week)) as f64 / week as f64 * w;
    let y = |ms: f64| h - ms / top * (h - 10.0);
    let line = |f: fn(&Row) -> f64| -> String {
        points
            .iter()
            .map(|(t, r)| format!("{:.1},{:.1}", x(*t), y(f(r))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let label = format!(
        "liveness latency, last 7 days: median up to {:.1} ms, 95th percentile up to {:.1} ms",
        points
            .iter()
            .map(|(_, r)| r.latency_p50_ms)
            .fold(0.0_f64, f64::max),
        top
    );
    html! {
        figure.latency {
            svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (w) " " (h) } role="img" aria-label=(label) {
                polyline.p95 fill="none" points=(line(|r| r.latency_p95_ms)) {}
                polyline.p50 fill="none" points=(line(|r| r.latency_p50_ms)) {}
                text x="4" y="12" { (format!("{top:.0} ms")) }
            }
            figcaption { "Liveness latency, 7 days: " span.p50 { "median" } ", " span.p95 { "95th percentile" } }
        }
    }
}

/// `YYYY-MM-DD` of unix time `t` (UTC).
fn date(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map_or_else(String::new, |d| d.format("%Y-%m-%d").to_string())
}

/// `YYYY-MM-DD HH:MM:SS` of unix time `t` (UTC).
fn date_time(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map_or_else(String::new, |d| d.format("%Y-%m-%d %H:%M:%S").to_string())
}

/// The window the page reads.
pub const WINDOW: Duration = Duration::from_secs(90 * 86_400);
