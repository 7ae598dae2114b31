//! Conditions users write, through the binary, against the PyPI reference
//! time server (`mcp-server-time`): one on a real tool's result that holds
//! and one that fails, and two on its tool list.

use std::time::Duration;

use crate::support::*;

/// A Python server starts in a second or two; on a loaded host, more.
const SETTLE: Duration = Duration::from_secs(40);

fn time_server() -> std::path::PathBuf {
    repo().join("tests/python/.venv-reference/bin/mcp-server-time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_on_a_real_tool_s_result_and_tool_list_hold_or_name_what_failed() {
    require!(installed("tests/python/.venv-reference"));
    let time = time_server();
    let server = |id: &str, expr: &str, tools_expr: &str| {
        format!(
            "  - id: {id}\n    transport: stdio\n    command: {time:?}\n    \
             tool_probes:\n      - tool: get_current_time\n        arguments: {{timezone: UTC}}\n        \
             interval: 1s\n        conditions:\n          - {{name: tz-{id}, expr: '{expr}'}}\n    \
             tools_conditions:\n      - {{name: tools-{id}, expr: '{tools_expr}'}}\n"
        )
    };
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}{}{}",
        server(
            "holds",
            r#"result.json.timezone == "UTC""#,
            r#"tools.exists(t, t.name == "get_current_time")"#
        ),
        server(
            "paris",
            r#"result.json.timezone == "Europe/Paris""#,
            r#"tools.exists(t, t.name == "convert_time")"#
        ),
        server(
            "nosearch",
            "!result.isError",
            r#"tools.exists(t, t.name == "search")"#
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, &yaml).expect("write");
    let mon = Binary::start(&cfg, &[]).await;

    // The one whose conditions all hold is healthy, and stays so once its
    // tool probe has answered (the condition was evaluated, not skipped).
    mon.wait_status("holds", "healthy", SETTLE).await;
    eventually("the tool probe answering twice", SETTLE, async || {
        let (_, m) = mon.get("/metrics").await;
        let calls = metric(
            &m,
            r#"mcpmon_tool_call_duration_seconds_count{server="holds",tool="get_current_time"}"#,
        );
        if calls.is_some_and(|n| n >= 2.0) {
            assert!(!m.contains(r#"condition="tz-holds""#), "{m}");
            assert!(!m.contains(r#"condition="tools-holds""#), "{m}");
            return Ok(());
        }
        Err(format!("the tool probe never answered twice: {m}"))
    })
    .await;
    let (_, v) = mon.server("holds").await;
    assert_eq!(v["status"], "healthy", "{v}");

    // A condition on the result that fails: degraded, named, counted.
    let (v, _) = mon.wait_status("paris", "degraded", SETTLE).await;
    assert_eq!(v["reason"], "condition_failed", "{v}");
    let detail = v["detail"].as_str().expect("detail");
    assert!(
        detail.contains(
            r#"condition tz-paris failed: result.json.timezone == "Europe/Paris" is false"#
        ),
        "{detail}"
    );
    assert!(
        !detail.contains("tools-paris"),
        "convert_time is listed: {detail}"
    );

    // A tool that must exist and does not: degraded, named.
    let (v, _) = mon.wait_status("nosearch", "degraded", SETTLE).await;
    assert_eq!(v["reason"], "condition_failed", "{v}");
    let detail = v["detail"].as_str().expect("detail");
    assert!(
        detail.contains(
            r#"condition tools-nosearch failed: tools.exists(t, t.name == "search") is false"#
        ),
        "{detail}"
    );
    let (_, m) = mon.get("/metrics").await;
    for (condition, server) in [("tz-paris", "paris"), ("tools-nosearch", "nosearch")] {
        let series = format!(
            r#"mcpmon_condition_failures_total{{condition="{condition}",server="{server}"}}"#
        );
        assert!(
            metric(&m, &series).is_some_and(|n| n >= 1.0),
            "{series} in {m}"
        );
    }
}

#[test]
fn an_http_sd_entry_may_not_carry_conditions() {
    use mcpmon::config::{EntrySource, Format, Trust, TunablesFile, parse_entries};
    let labels = std::collections::BTreeMap::new();
    let entry = |trust| EntrySource {
        trust,
        format: Format::Json,
        labels: &labels,
        base: std::path::Path::new("/nonexistent"),
        max_servers: 10,
        own_addresses: &[],
        relabel: &[],
    };
    let text = r#"[{"id": "a", "transport": "http", "url": "http://127.0.0.1:1/mcp",
        "tools_conditions": [{"name": "t", "expr": "tools.size() > 0"}]}]"#;
    let parse = |trust| {
        parse_entries(
            std::path::Path::new("sd.json"),
            text,
            &TunablesFile::default(),
            &entry(trust),
            &|_| None,
        )
        .expect("a list")
    };
    let local = parse(Trust::Local);
    assert_eq!(
        local.servers.len(),
        1,
        "a local file may: {:?}",
        local.rejected
    );
    assert_eq!(local.servers[0].0.conditions.len(), 1);
    let remote = parse(Trust::Remote { allow_stdio: false });
    assert!(remote.servers.is_empty(), "an http_sd entry may not");
    let why = format!("{:?}", remote.rejected);
    assert!(why.contains("an http_sd entry may not carry them"), "{why}");
}
