//! Task-aware tool probes, through the binary, against the reference
//! `server-everything`'s task tool (`simulate-research-query`, 2025-11-25
//! experimental tasks: four stages of a second each, `pollInterval` 1 s,
//! `taskSupport: required`). While the task works the server reads busy
//! evidence and stays healthy; after, it is healthy, with one call made,
//! one session, and polls no faster than the server asked.
//!
//! Both probes are left to `task: auto`, which reads `taskSupport` from the
//! listing: over Streamable HTTP from mcpmon's own legacy link, over stdio
//! from the raw line (rmcp, which carries stdio sessions, drops a listed
//! tool's `execution`).

use std::time::{Duration, Instant};

use crate::support::*;

/// Node starts in a second or two; on a loaded host, more.
const SETTLE: Duration = Duration::from_secs(40);
const TOOL: &str = "simulate-research-query";

fn probe(task: &str) -> String {
    // The interval is long: one call in the test, whose task outlives
    // many liveness probes.
    format!(
        "    tool_probes:\n      - tool: {TOOL}\n        arguments: {{topic: monitoring}}\n        \
         interval: 1h\n        request_timeout: 5s\n        max_request_timeout: 60s\n{task}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_probe_reads_busy_while_the_task_works_and_healthy_after_with_one_call() {
    require!(installed("tests/node/node_modules"));
    let bin = everything_bin();
    let port = free_port();
    let env = [("PORT", port.to_string())];
    let server = third_party_http(&bin, &["streamableHttp"], &env, port).await;
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n  - id: research-http\n    transport: http\n    url: {}\n{}  \
         - id: research-stdio\n    transport: stdio\n    command: {bin:?}\n    args: [stdio]\n{}",
        server.url,
        probe(""),
        probe(""),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, &yaml).expect("write");
    let start = Instant::now();
    let mon = Binary::start(&cfg, &[]).await;
    tokio::join!(
        follow(&mon, "research-http", start),
        follow(&mon, "research-stdio", start)
    );
    drop(server);
}

/// Follow server `id`'s one task probe from busy to done; the monitor
/// started at `start`. From the start: the task begins with the session,
/// before the first verdict, and lasts four seconds.
async fn follow(mon: &Binary, id: &str, start: Instant) {
    // Busy: the task works, its lastUpdatedAt advancing, while the server
    // reads healthy.
    let within = SETTLE.saturating_sub(start.elapsed());
    let busy = eventually("a busy task", within, async || {
        let (_, v) = mon.server(id).await;
        let task = &v["tasks"][0];
        if task["busy"] == true && v["status"] == "healthy" {
            return Ok(v);
        }
        assert!(
            task["status"] != "completed",
            "the task ended before a poll saw it busy: {v}"
        );
        Err(v)
    })
    .await;
    let task = &busy["tasks"][0];
    assert_eq!(busy["status"], "healthy", "{busy}");
    assert_eq!(task["tool"], TOOL, "{busy}");
    assert_eq!(task["status"], "working", "{busy}");
    assert!(
        task["task_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{busy}"
    );
    let (_, m) = mon.get("/metrics").await;
    let busy_series = format!(r#"mcpmon_tool_task_busy{{server="{id}",tool="{TOOL}"}}"#);
    assert_eq!(metric(&m, &busy_series), Some(1.0), "{m}");

    // Completed: the result was read (the probe ended: its call is
    // recorded, which comes after the poll that saw `completed`), the
    // server is healthy, nothing was called twice, no session rebuilt.
    let tool = |family: &str| format!(r#"{family}{{server="{id}",tool="{TOOL}"}}"#);
    let calls = tool("mcpmon_tool_call_duration_seconds_count");
    let within = SETTLE.saturating_sub(start.elapsed());
    let (done, m) = eventually("the task completed", within, async || {
        let (_, v) = mon.server(id).await;
        let (_, m) = mon.get("/metrics").await;
        if v["tasks"][0]["status"] == "completed" && metric(&m, &calls).is_some() {
            return Ok((v, m));
        }
        assert_eq!(v["status"], "healthy", "healthy while the task works: {v}");
        Err(v)
    })
    .await;
    let took = start.elapsed();
    assert_eq!(done["status"], "healthy", "{done}");
    assert_eq!(done["tasks"][0]["busy"], false, "{done}");
    assert_eq!(
        done["sessions"], 1,
        "a busy server is never rebuilt: {done}"
    );
    assert_eq!(metric(&m, &busy_series), Some(0.0), "{m}");
    assert_eq!(
        metric(
            &m,
            &format!(r#"mcpmon_probes_total{{probe="tool",server="{id}"}}"#)
        ),
        Some(1.0),
        "one call, one execution: {m}"
    );
    assert_eq!(metric(&m, &calls), Some(1.0), "{m}");
    let failures = m
        .lines()
        .filter(|l| {
            l.starts_with("mcpmon_probe_failures_total")
                && l.contains("probe=\"tool\"")
                && l.contains(&format!("server=\"{id}\""))
        })
        .filter(|l| !l.ends_with(" 0"))
        .collect::<Vec<_>>();
    assert!(failures.is_empty(), "the task probe failed: {failures:?}");
    // Four stages of a second: at least three polls, and (at one a
    // second, never faster) no more than the seconds it took, plus one.
    let polls = metric(&m, &tool("mcpmon_tool_task_polls_total")).expect("polls counted");
    assert!(
        polls >= 3.0 && polls <= took.as_secs_f64() + 1.0,
        "{id}: {polls} polls in {took:?}"
    );
    let called = metric(&m, &tool("mcpmon_tool_call_duration_seconds_sum")).expect("duration");
    assert!(
        called >= 3.5,
        "the call spans the task's four stages: {called}"
    );
}

/// A 2026-07-28 task server on the Python SDK's extension interface
/// (`tests/python/task_server.py`), logging to `log`.
async fn task_server(log: &std::path::Path, env: &[(&str, String)]) -> Spawned {
    let port = free_port();
    let script = repo().join("tests/python/task_server.py");
    let args = [
        script.to_str().expect("utf-8"),
        &port.to_string(),
        log.to_str().expect("utf-8"),
    ];
    third_party_http(&python("modern"), &args, env, port).await
}

fn logged(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_task_is_polled_with_its_id_in_mcp_name_and_one_that_stops_advancing_is_stuck() {
    require!(installed("tests/python/.venv-modern"));
    let dir = tempfile::tempdir().expect("tempdir");
    let (works, stalls) = (dir.path().join("works.log"), dir.path().join("stalls.log"));
    let working = task_server(&works, &[]).await;
    let stuck = task_server(&stalls, &[("STUCK_AFTER", "1".into())]).await;
    // rmcp drops a listed tool's `execution`: the probes say `always`.
    let server = |id: &str, url: &str| {
        format!(
            "  - id: {id}\n    transport: http\n    url: {url}\n    tool_probes:\n      - tool: research\n        \
             arguments: {{topic: monitoring}}\n        interval: 1h\n        request_timeout: 5s\n        \
             max_request_timeout: 60s\n        task: always\n        conditions:\n          \
             - {{name: done-{id}, expr: 'result.json.done == true'}}\n"
        )
    };
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}{}",
        server("works", &working.url),
        server("stalls", &stuck.url)
    );
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, &yaml).expect("write");
    let start = Instant::now();
    let mon = Binary::start(&cfg, &[]).await;

    // The one that works: busy while healthy, then done, its result's
    // condition holding, every poll carrying the task's id in Mcp-Name.
    // Done once the probe ended: its call is recorded (after the poll
    // that saw `completed`), its condition evaluated.
    let calls = r#"mcpmon_tool_call_duration_seconds_count{server="works",tool="research"}"#;
    let within = SETTLE.saturating_sub(start.elapsed());
    let (done, m) = eventually("the task completed", within, async || {
        let (_, v) = mon.server("works").await;
        let (_, m) = mon.get("/metrics").await;
        let completed = v["tasks"][0]["status"] == "completed" && metric(&m, calls).is_some();
        if completed { Ok((v, m)) } else { Err(v) }
    })
    .await;
    assert_eq!(done["status"], "healthy", "{done}");
    assert_eq!(done["era"], "modern", "{done}");
    let lines = logged(&works);
    let created: Vec<_> = lines.iter().filter(|l| l["method"] == "create").collect();
    assert_eq!(created.len(), 1, "one task: {lines:?}");
    let polls: Vec<_> = lines
        .iter()
        .filter(|l| l["method"] == "tasks/get")
        .collect();
    assert!(polls.len() >= 3, "polled while it worked: {lines:?}");
    for p in &polls {
        assert_eq!(
            p["mcp_name"], p["task"],
            "Mcp-Name carries the task id: {p}"
        );
    }
    // Read and judged: no failure, and its condition held.
    let failed = m.lines().any(|l| {
        l.starts_with("mcpmon_probe_failures_total")
            && l.contains(r#"probe="tool""#)
            && l.contains(r#"server="works""#)
            && !l.ends_with(" 0")
    });
    assert!(!failed, "the task probe failed: {m}");
    assert!(
        !m.contains(r#"condition="done-works""#),
        "the result was read: {m}"
    );

    // The one that stops advancing: stuck once its ttl (2 s) passes
    // without change, cancelled, and unhealthy for it.
    let (v, _) = mon.wait_status("stalls", "unhealthy", SETTLE).await;
    assert_eq!(v["reason"], "task_stuck", "{v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("tool research") && detail.contains("unchanged for 2s"),
        "{detail}"
    );
    assert_eq!(v["sessions"], 1, "a stuck task rebuilds no session: {v}");
    let lines = logged(&stalls);
    let cancels: Vec<_> = lines
        .iter()
        .filter(|l| l["method"] == "tasks/cancel")
        .collect();
    assert_eq!(cancels.len(), 1, "{lines:?}");
    assert_eq!(cancels[0]["mcp_name"], cancels[0]["task"], "{lines:?}");
    let (_, m) = mon.get("/metrics").await;
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_probe_failures_total{probe="tool",reason="task_stuck",server="stalls"}"#
        ),
        Some(1.0),
        "{m}"
    );
    drop((working, stuck));
}
