//! Resource probes (`resources/read` of a configured URI) against real
//! servers in both eras: the reference `server-everything` over stdio
//! (legacy, 2025-11-25) and a Python SDK server over Streamable HTTP
//! (modern, 2026-07-28, where rmcp sends the URI in `Mcp-Name`). A readable
//! resource passes its condition and keeps the server healthy, or fails it
//! and reads degraded; one the server does not have fails as
//! `resource_not_found`, named in the detail.

use std::time::{Duration, Instant};

use crate::support::*;

/// Node and Python start in a second or two; on a loaded host, more.
const SLOW_START: Duration = Duration::from_secs(30);
const DOC: &str = "demo://resource/static/document/architecture.md";
const MISSING: &str = "demo://resource/static/document/no-such-document.md";

fn probe(uri: &str, condition: &str) -> String {
    format!(
        "    resource_probes:\n      - uri: {uri:?}\n        interval: 500ms\n        \
         request_timeout: 5s\n{condition}"
    )
}

/// The series of server `id`'s resource probes, once it has at least `n`.
async fn resource_series(mon: &Monitor, id: &str, n: f64) -> String {
    let sent = format!(r#"mcpmon_probes_total{{probe="resource",server="{id}"}}"#);
    let start = Instant::now();
    loop {
        let m = mon.metrics().await;
        if metric(&m, &sent).is_some_and(|v| v >= n) {
            return m;
        }
        assert!(
            start.elapsed() < SLOW_START,
            "{id}: no {n} resource probes: {m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The failures of server `id`'s resource probes that are not zero.
fn failures(m: &str, id: &str) -> Vec<String> {
    (m.lines())
        .filter(|l| l.starts_with("mcpmon_probe_failures_total{"))
        .filter(|l| l.contains(r#"probe="resource""#) && l.contains(&format!(r#"server="{id}""#)))
        .filter(|l| !l.ends_with(" 0"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readable_resource_is_healthy_and_a_missing_one_fails_as_not_found_in_both_eras() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-modern")
    );
    let bin = everything_bin();
    let script = python_server();
    let port = free_port();
    let modern = third_party_http(
        &python("modern"),
        &[
            script.to_str().expect("utf-8 path"),
            "http",
            &port.to_string(),
        ],
        &[],
        port,
    )
    .await;
    let markdown = "        conditions:\n          - name: markdown\n            \
                    expr: 'result.contents[0].mimeType == \"text/markdown\"'\n";
    let stocked = "        conditions:\n          - name: stocked\n            \
                   expr: 'result.contents[0].text.contains(\"widgets\")'\n";
    let json = "        conditions:\n          - name: json\n            \
                expr: 'result.contents[0].mimeType == \"application/json\"'\n";
    let stdio = |id: &str, body: String| {
        format!(
            "  - id: {id}\n    transport: stdio\n    command: {bin:?}\n    args: [stdio]\n{body}"
        )
    };
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}{}{}  - id: inventory\n    transport: http\n    url: {}\n{}",
        stdio("docs", probe(DOC, markdown)),
        stdio("wrong", probe(DOC, json)),
        stdio("gone", probe(MISSING, "")),
        modern.url,
        probe("inventory://stock", stocked),
    );
    let mon = Monitor::start(&yaml).await;

    // Conditions that hold: healthy (one that failed would read degraded,
    // as `wrong` shows), the read counted and never failed.
    for id in ["docs", "inventory"] {
        let m = resource_series(&mon, id, 2.0).await;
        assert!(failures(&m, id).is_empty(), "{id}: {:?}", failures(&m, id));
        let (v, _) = mon.wait_status(id, "healthy", SLOW_START).await;
        assert_eq!(v["sessions"], 1, "{v}");
    }
    let (v, _) = mon.wait_status("wrong", "degraded", SLOW_START).await;
    assert_eq!(v["reason"], "condition_failed", "{v}");
    let m = mon.metrics().await;
    let failed = r#"mcpmon_condition_failures_total{condition="json",server="wrong"}"#;
    assert!(metric(&m, failed).is_some_and(|n| n >= 1.0), "{m}");
    assert!(
        failures(&m, "wrong").is_empty(),
        "the read itself worked: {m}"
    );
    let (_, v) = mon.server("inventory").await;
    assert_eq!(v["era"], "modern", "{v}");

    let m = resource_series(&mon, "gone", 2.0).await;
    let not_found = r#"mcpmon_probe_failures_total{probe="resource",reason="resource_not_found",server="gone"}"#;
    assert!(metric(&m, not_found).is_some_and(|v| v >= 1.0), "{m}");
    assert_eq!(
        failures(&m, "gone").len(),
        1,
        "one reason: {:?}",
        failures(&m, "gone")
    );
    // The read fails, not the link: the session stays, and the detail names
    // the resource.
    let start = Instant::now();
    let v = loop {
        let (_, v) = mon.server("gone").await;
        if v["status"] != "healthy" && v["status"] != "unknown" {
            break v;
        }
        assert!(
            start.elapsed() < SLOW_START,
            "a failing read never showed: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(&format!("resource {MISSING}")), "{v}");
    assert_eq!(
        v["sessions"], 1,
        "a missing resource is no reason to reconnect: {v}"
    );
    mon.stop().await;
    drop(modern);
}
