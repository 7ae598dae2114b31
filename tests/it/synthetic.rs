//! The read-only synthetic probes, resource reads (`resources/read` of a
//! configured URI) and prompt gets (`prompts/get` of a configured name),
//! against real servers in both eras: the reference `server-everything`
//! over stdio (legacy, 2025-11-25) and a Python SDK server over Streamable
//! HTTP (modern, 2026-07-28, where rmcp sends the URI in `Mcp-Name`). What
//! the server has passes its condition and keeps the server healthy, or
//! fails it and reads degraded; what it refuses fails under the kind's own
//! reason, named in the detail, and the session stays.

use std::time::Duration;

use crate::support::*;

/// Node and Python start in a second or two; on a loaded host, more.
const SLOW_START: Duration = Duration::from_secs(30);
const DOC: &str = "demo://resource/static/document/architecture.md";
const MISSING: &str = "demo://resource/static/document/no-such-document.md";

fn resource(uri: &str, condition: &str) -> String {
    format!(
        "    resource_probes:\n      - uri: {uri:?}\n        interval: 500ms\n        \
         request_timeout: 5s\n{condition}"
    )
}

/// The series once server `id` has sent at least `n` probes of `kind`.
async fn sent(mon: &Monitor, kind: &str, id: &str, n: f64) -> String {
    let sent = format!(r#"mcpmon_probes_total{{probe="{kind}",server="{id}"}}"#);
    eventually(
        &format!("{id}: {n} {kind} probes"),
        SLOW_START,
        async || {
            let m = mon.metrics().await;
            if metric(&m, &sent).is_some_and(|v| v >= n) {
                return Ok(m);
            }
            Err(format!("{id}: no {n} {kind} probes: {m}"))
        },
    )
    .await
}

/// The failures of server `id`'s probes of `kind` that are not zero.
fn failures(m: &str, kind: &str, id: &str) -> Vec<String> {
    (m.lines())
        .filter(|l| l.starts_with("mcpmon_probe_failures_total{"))
        .filter(|l| l.contains(&format!(r#"probe="{kind}""#)))
        .filter(|l| l.contains(&format!(r#"server="{id}""#)))
        .filter(|l| !l.ends_with(" 0"))
        .map(str::to_owned)
        .collect()
}

/// Server `id`'s status once it is judged anything but healthy.
async fn judged(mon: &Monitor, id: &str) -> serde_json::Value {
    eventually(
        &format!("{id}: a failing probe showing"),
        SLOW_START,
        async || {
            let (_, v) = mon.server(id).await;
            if v["status"] != "healthy" && v["status"] != "unknown" {
                return Ok(v);
            }
            Err(format!("{id}: a failing probe never showed: {v}"))
        },
    )
    .await
}

/// The Python SDK's server of `tests/python/server.py`, over Streamable
/// HTTP in the modern era.
async fn modern_python() -> Spawned {
    let script = python_server();
    let port = free_port();
    let args = [
        script.to_str().expect("utf-8 path"),
        "http",
        &port.to_string(),
    ];
    third_party_http(&python("modern"), &args, &[], port).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readable_resource_is_healthy_and_a_missing_one_fails_as_not_found_in_both_eras() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-modern")
    );
    let bin = everything_bin();
    let modern = modern_python().await;
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
        stdio("docs", resource(DOC, markdown)),
        stdio("wrong", resource(DOC, json)),
        stdio("gone", resource(MISSING, "")),
        modern.url,
        resource("inventory://stock", stocked),
    );
    let mon = Monitor::start(&yaml).await;

    // Conditions that hold: healthy (one that failed would read degraded,
    // as `wrong` shows), the read counted and never failed.
    for id in ["docs", "inventory"] {
        let m = sent(&mon, "resource", id, 2.0).await;
        assert!(
            failures(&m, "resource", id).is_empty(),
            "{id}: {:?}",
            failures(&m, "resource", id)
        );
        let (v, _) = mon.wait_status(id, "healthy", SLOW_START).await;
        assert_eq!(v["sessions"], 1, "{v}");
    }
    let (v, _) = mon.wait_status("wrong", "degraded", SLOW_START).await;
    assert_eq!(v["reason"], "condition_failed", "{v}");
    let m = mon.metrics().await;
    let failed = r#"mcpmon_condition_failures_total{condition="json",server="wrong"}"#;
    assert!(metric(&m, failed).is_some_and(|n| n >= 1.0), "{m}");
    assert!(
        failures(&m, "resource", "wrong").is_empty(),
        "the read itself worked: {m}"
    );
    let (_, v) = mon.server("inventory").await;
    assert_eq!(v["era"], "modern", "{v}");

    let m = sent(&mon, "resource", "gone", 2.0).await;
    let not_found = r#"mcpmon_probe_failures_total{probe="resource",reason="resource_not_found",server="gone"}"#;
    assert!(metric(&m, not_found).is_some_and(|v| v >= 1.0), "{m}");
    assert_eq!(
        failures(&m, "resource", "gone").len(),
        1,
        "one reason: {:?}",
        failures(&m, "resource", "gone")
    );
    // The read fails, not the link: the session stays, and the detail names
    // the resource.
    let v = judged(&mon, "gone").await;
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(&format!("resource {MISSING}")), "{v}");
    assert_eq!(
        v["sessions"], 1,
        "a missing resource is no reason to reconnect: {v}"
    );
    mon.stop().await;
    drop(modern);
}

fn prompt(name: &str, arguments: &str, condition: &str) -> String {
    format!(
        "    prompt_probes:\n      - name: {name:?}\n{arguments}        interval: 500ms\n        \
         request_timeout: 5s\n{condition}"
    )
}

fn says(name: &str, text: &str) -> String {
    format!(
        "        conditions:\n          - name: {name}\n            \
         expr: 'result.messages[0].content.text.contains(\"{text}\")'\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_renders_is_healthy_and_one_refused_fails_as_rejected_in_both_eras() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-modern")
    );
    let bin = everything_bin();
    let modern = modern_python().await;
    let stdio = |id: &str, body: String| {
        format!(
            "  - id: {id}\n    transport: stdio\n    command: {bin:?}\n    args: [stdio]\n{body}"
        )
    };
    let city = "        arguments: {city: Lisbon}\n";
    let http = |id: &str, body: String| {
        format!(
            "  - id: {id}\n    transport: http\n    url: {}\n{body}",
            modern.url
        )
    };
    let service = "        arguments: {service: checkout}\n";
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}{}{}{}{}{}{}",
        stdio(
            "simple",
            prompt("simple-prompt", "", &says("plain", "simple prompt"))
        ),
        stdio(
            "argued",
            prompt("args-prompt", city, &says("city", "Lisbon"))
        ),
        stdio(
            "elsewhere",
            prompt("args-prompt", city, &says("city", "Porto"))
        ),
        stdio("unargued", prompt("args-prompt", "", "")),
        stdio("gone", prompt("no-such-prompt", "", "")),
        http(
            "triage",
            prompt("triage", service, &says("service", "checkout"))
        ),
        http("untriaged", prompt("no-such-prompt", "", "")),
    );
    let mon = Monitor::start(&yaml).await;

    // Rendered as the conditions want, with the arguments given: healthy,
    // in both eras.
    for id in ["simple", "argued", "triage"] {
        let m = sent(&mon, "prompt", id, 2.0).await;
        assert!(
            failures(&m, "prompt", id).is_empty(),
            "{id}: {:?}",
            failures(&m, "prompt", id)
        );
        let (v, _) = mon.wait_status(id, "healthy", SLOW_START).await;
        assert_eq!(v["sessions"], 1, "{v}");
    }
    let (_, v) = mon.server("triage").await;
    assert_eq!(v["era"], "modern", "{v}");
    // Rendered, but not as the condition wants: degraded, the get itself fine.
    let (v, _) = mon.wait_status("elsewhere", "degraded", SLOW_START).await;
    assert_eq!(v["reason"], "condition_failed", "{v}");
    let m = mon.metrics().await;
    assert!(failures(&m, "prompt", "elsewhere").is_empty(), "{m}");

    // No such prompt, or arguments it does not take: the server answers
    // -32602, the probe's own reason; the session stays and the detail
    // names the prompt.
    for (id, name) in [("gone", "no-such-prompt"), ("unargued", "args-prompt")] {
        let m = sent(&mon, "prompt", id, 2.0).await;
        let rejected = format!(
            r#"mcpmon_probe_failures_total{{probe="prompt",reason="prompt_rejected",server="{id}"}}"#
        );
        assert!(metric(&m, &rejected).is_some_and(|v| v >= 1.0), "{id}: {m}");
        assert_eq!(
            failures(&m, "prompt", id).len(),
            1,
            "{id}: {:?}",
            failures(&m, "prompt", id)
        );
        let v = judged(&mon, id).await;
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&format!("prompt {name}")), "{v}");
        assert_eq!(
            v["sessions"], 1,
            "a refused prompt is no reason to reconnect: {v}"
        );
    }
    // The Python SDK answers a prompt it does not have with code 0, no
    // code of the protocol's: a JSON-RPC error, not a refusal mcpmon can
    // read as the prompt's.
    let m = sent(&mon, "prompt", "untriaged", 2.0).await;
    let rpc =
        r#"mcpmon_probe_failures_total{probe="prompt",reason="rpc_error",server="untriaged"}"#;
    assert!(metric(&m, rpc).is_some_and(|v| v >= 1.0), "{m}");
    mon.stop().await;
    drop(modern);
}
