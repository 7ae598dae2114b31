//! mcpmon against the demo server over both transports and both eras: real
//! child processes, real sockets, readiness waits, bounded polling.

use std::time::{Duration, Instant};

use crate::support::*;

fn stdio_server(id: &str, marker: &str, args: &[&str]) -> String {
    let args: Vec<String> = ["--name", id]
        .iter()
        .chain(args)
        .map(|a| format!("{a:?}"))
        .collect();
    format!(
        "  - id: {id}\n    transport: stdio\n    command: {:?}\n    args: [{}]\n    env: {{MCPMON_TEST_MARKER: {marker:?}}}\n",
        demo_server().display(),
        args.join(", ")
    )
}

fn http_server(id: &str, url: &str) -> String {
    format!("  - id: {id}\n    transport: http\n    url: {url}\n")
}

fn fleet(servers: &[String]) -> String {
    format!("{FAST_GLOBAL}servers:\n{}", servers.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_and_degraded_servers_over_both_transports() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    let ok_http = demo_http(&["--name", "web"], 0).await;
    let degraded_http = demo_http(&["--name", "webdeg", "--status", "degraded"], 0).await;
    let mon = Monitor::start(&fleet(&[
        stdio_server("ok-stdio", &marker("ok"), &[]),
        stdio_server("deg-stdio", &marker("deg"), &["--status", "degraded"]),
        http_server("ok-http", &ok_http.url),
        http_server("deg-http", &degraded_http.url),
    ]))
    .await;
    mon.wait_ready(Duration::from_secs(15)).await;
    let within = Duration::from_secs(10);
    let (v, _) = mon.wait_status("ok-stdio", "healthy", within).await;
    assert_eq!(v["reason"], "ok");
    assert_eq!(v["transport"], "stdio");
    assert_eq!(v["server_name"], "demo-ok-stdio");
    let (v, _) = mon.wait_status("ok-http", "healthy", within).await;
    assert_eq!(v["transport"], "http");
    for id in ["deg-stdio", "deg-http"] {
        let (v, _) = mon.wait_status(id, "degraded", within).await;
        assert_eq!(v["reason"], "health_check_degraded", "{id}");
        assert_eq!(v["health_check"]["status"], "degraded", "{id}");
    }
    // Per-server endpoint codes: degraded still serves traffic.
    assert_eq!(mon.server("deg-http").await.0, 200);
    assert_eq!(mon.server("nope").await.0, 404);

    // The fleet view: two healthy, two degraded; the default policy counts
    // degraded as available, so the fleet answers 200 but reads degraded.
    let (code, f) = mon.get_json("/health/fleet").await;
    assert_eq!(code, 200, "{f}");
    assert_eq!(f["status"], "degraded");
    assert_eq!(f["summary"]["total"], 4);
    assert_eq!(f["summary"]["healthy"], 2);
    assert_eq!(f["summary"]["degraded"], 2);
    assert_eq!(f["summary"]["health_percentage"], 50.0);
    let first = &f["servers"][0];
    for key in [
        "id",
        "status",
        "reason",
        "transport",
        "last_check",
        "response_time_ms",
    ] {
        assert!(
            first.get(key).is_some(),
            "fleet server entry lacks {key}: {first}"
        );
    }

    // Metrics carry the contract names and the health_check values. A
    // healthy verdict comes from the first ping; the first health check may
    // still be in flight, so wait for its answer.
    let m = eventually("a health_check answer from ok-stdio", within, async || {
        let m = mon.metrics().await;
        let uptime = r#"mcpmon_health_check_value{field="uptime_seconds",server="ok-stdio"}"#;
        if metric(&m, uptime).is_some() {
            return Ok(m);
        }
        Err(format!("no health_check answer from ok-stdio:\n{m}"))
    })
    .await;
    assert_eq!(
        metric(&m, r#"mcpmon_server_up{server="ok-http"}"#),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_server_state{server="deg-stdio",state="degraded"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_server_state{server="deg-stdio",state="healthy"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        metric(&m, r#"mcpmon_fleet_servers{state="degraded"}"#),
        Some(2.0)
    );
    // The series budget holds for real servers over both transports (the
    // fields a server reports in its health check are its own, on top).
    for id in ["ok-stdio", "deg-stdio", "ok-http", "deg-http"] {
        let needle = format!("server=\"{id}\"");
        let own: Vec<&str> = m
            .lines()
            .filter(|l| l.contains(&needle) && !l.starts_with("mcpmon_health_check_value{"))
            .collect();
        assert!(
            !own.is_empty() && own.len() <= mcpmon::output::metrics::SERIES_BUDGET,
            "{id}: {} series\n{}",
            own.len(),
            own.join("\n")
        );
    }
    // Series that exist from the first probe on (failure and reconnect
    // counters appear with their first event).
    for name in [
        "mcpmon_server_up",
        "mcpmon_server_state",
        "mcpmon_ping_duration_seconds",
        "mcpmon_probes_total",
        "mcpmon_health_check_duration_seconds",
        "mcpmon_server_info",
        "mcpmon_fleet_servers",
        "mcpmon_build_info",
    ] {
        assert!(m.contains(&format!("# HELP {name} ")), "no {name} in\n{m}");
    }
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_stdio_server_is_unhealthy_at_once_and_recovers_after_backoff() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    let mark = marker("kill");
    let mon = Monitor::start(&fleet(&[stdio_server("victim", &mark, &[])])).await;
    mon.wait_status("victim", "healthy", Duration::from_secs(10))
        .await;
    let pids = wait_pids(&mark, Duration::from_secs(5)).await;
    let m = mon.metrics().await;
    let reconnects_before = metric(
        &m,
        r#"mcpmon_reconnects_total{reason="exited",server="victim"}"#,
    )
    .unwrap_or(0.0);

    kill(&pids, libc::SIGKILL);
    let (v, took) = mon
        .wait_status("victim", "unhealthy", PING_INTERVAL + PING_TIMEOUT + SLACK)
        .await;
    assert_eq!(v["reason"], "exited", "{v}");
    assert!(
        v["detail"].as_str().unwrap_or("").contains("signal 9"),
        "{v}"
    );

    // It is respawned after the first backoff delay (at most 2 x initial with
    // jitter) and must then read healthy again.
    let (v, back) = mon
        .wait_status(
            "victim",
            "healthy",
            BACKOFF_MAX + SLACK + Duration::from_secs(2),
        )
        .await;
    assert_eq!(v["sessions"], 2, "{v}");
    let events: Vec<&str> = v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(events.contains(&"session_closed"), "{events:?}");
    let m = mon.metrics().await;
    let reconnects = metric(
        &m,
        r#"mcpmon_reconnects_total{reason="exited",server="victim"}"#,
    )
    .unwrap_or(0.0);
    assert_eq!(reconnects, reconnects_before + 1.0, "one reconnect counted");
    let new_pids = pids_with_marker(&mark);
    assert!(
        !new_pids.is_empty() && new_pids != pids,
        "a new process runs"
    );
    eprintln!("detected death in {took:?}, back to healthy in {back:?}");
    mon.stop().await;
    assert!(
        pids_with_marker(&mark).is_empty(),
        "no child survives shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_http_server_is_unhealthy_within_a_ping_and_recovers_when_restarted() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    let mut server = demo_http(&["--name", "h"], 0).await;
    let port = server.port;
    let mon = Monitor::start(&fleet(&[http_server("web", &server.url)])).await;
    mon.wait_status("web", "healthy", Duration::from_secs(10))
        .await;

    server.kill().await;
    let killed = Instant::now();
    let (v, _) = mon
        .wait_status("web", "unhealthy", PING_INTERVAL + PING_TIMEOUT + SLACK)
        .await;
    assert_eq!(v["reason"], "unreachable", "{v}");
    let detected = killed.elapsed();

    // Same URL, new process: must be picked up within one backoff cap.
    let _again = demo_http(&["--name", "h2"], port).await;
    let (v, back) = mon
        .wait_status(
            "web",
            "healthy",
            BACKOFF_MAX + SLACK + Duration::from_secs(2),
        )
        .await;
    assert_eq!(v["server_name"], "demo-h2", "{v}");
    eprintln!("detected in {detected:?}, recovered in {back:?}");
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_era_servers_are_monitored_without_ping() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    let http = demo_http(&["--name", "mh", "--era", "modern"], 0).await;
    let mon = Monitor::start(&fleet(&[
        stdio_server("modern-stdio", &marker("m"), &["--era", "modern"]),
        http_server("modern-http", &http.url),
        stdio_server("legacy-stdio", &marker("l"), &["--era", "legacy"]),
    ]))
    .await;
    for id in ["modern-stdio", "modern-http"] {
        let (v, _) = mon
            .wait_status(id, "healthy", Duration::from_secs(10))
            .await;
        assert_eq!(v["era"], "modern", "{v}");
        assert_eq!(v["protocol_version"], "2026-07-28");
    }
    let (v, _) = mon
        .wait_status("legacy-stdio", "healthy", Duration::from_secs(10))
        .await;
    assert_eq!(v["era"], "legacy", "{v}");
    // Let a few liveness rounds pass, then count what was sent.
    eventually(
        "enough discover probes",
        Duration::from_secs(10),
        async || {
            let m = mon.metrics().await;
            let discover = metric(
                &m,
                r#"mcpmon_probes_total{probe="discover",server="modern-http"}"#,
            )
            .unwrap_or(0.0);
            if discover >= 3.0 {
                for id in ["modern-stdio", "modern-http"] {
                    assert_eq!(
                        metric(
                            &m,
                            &format!(r#"mcpmon_probes_total{{probe="ping",server="{id}"}}"#)
                        )
                        .unwrap_or(0.0),
                        0.0,
                        "{id} was pinged"
                    );
                    assert!(
                        metric(
                            &m,
                            &format!(r#"mcpmon_probes_total{{probe="discover",server="{id}"}}"#)
                        )
                        .unwrap_or(0.0)
                            >= 2.0
                    );
                }
                assert!(
                    metric(
                        &m,
                        r#"mcpmon_probes_total{probe="ping",server="legacy-stdio"}"#
                    )
                    .unwrap_or(0.0)
                        >= 1.0
                );
                assert_eq!(
                    metric(
                        &m,
                        r#"mcpmon_probes_total{probe="discover",server="legacy-stdio"}"#
                    )
                    .unwrap_or(0.0),
                    0.0
                );
                return Ok(());
            }
            Err(format!("too few discover probes:\n{m}"))
        },
    )
    .await;
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_policy_and_unknown_states_decide_the_fleet_code() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    // Nothing listens on this port: the server is unreachable from the start.
    let closed = ClosedPort::bind();
    let dead = closed.mcp_url();
    let yaml = format!(
        "{FAST_GLOBAL}fleet:\n  min_available_percentage: 50\nservers:\n{}{}",
        stdio_server("up", &marker("up"), &[]),
        http_server("down", &dead)
    );
    let mon = Monitor::start(&yaml).await;
    let (v, _) = mon
        .wait_status("down", "unhealthy", Duration::from_secs(10))
        .await;
    assert_eq!(v["reason"], "unreachable");
    assert_eq!(mon.server("down").await.0, 503);
    mon.wait_status("up", "healthy", Duration::from_secs(10))
        .await;
    mon.wait_ready(Duration::from_secs(5)).await;
    let (code, f) = mon.get_json("/health/fleet").await;
    assert_eq!((code, f["status"].as_str()), (200, Some("degraded")), "{f}");
    assert_eq!(f["policy"]["met"], true);
    mon.stop().await;

    // The same fleet with a strict policy fails it.
    let strict = yaml.replace(
        "min_available_percentage: 50",
        "min_available_percentage: 100",
    );
    let mon = Monitor::start(&strict).await;
    mon.wait_status("down", "unhealthy", Duration::from_secs(10))
        .await;
    mon.wait_status("up", "healthy", Duration::from_secs(10))
        .await;
    let (code, f) = mon.get_json("/health/fleet").await;
    assert_eq!(
        (code, f["status"].as_str()),
        (503, Some("unhealthy")),
        "{f}"
    );
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_to_start_is_unhealthy_and_retried_with_backoff() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n  - id: missing\n    transport: stdio\n    command: /nonexistent/mcp-server\n"
    );
    let mon = Monitor::start(&yaml).await;
    let (v, _) = mon
        .wait_status("missing", "unhealthy", Duration::from_secs(5))
        .await;
    assert_eq!(v["reason"], "connect_failed", "{v}");
    assert!(v["detail"].as_str().unwrap_or("").contains("spawn"), "{v}");
    // Retries happen, but spaced by backoff (200 ms doubling, jitter only
    // adding): the three after the next one wait at least 0.4 + 0.8 + 0.8 s
    // between them, where a tight loop would take milliseconds.
    let attempts = async || {
        let m = mon.metrics().await;
        let series = r#"mcpmon_reconnects_total{reason="connect_failed",server="missing"}"#;
        metric(&m, series).unwrap_or(0.0)
    };
    let until = async |n: f64| {
        eventually("more attempts", Duration::from_secs(30), async || {
            let now = attempts().await;
            if now >= n { Ok(()) } else { Err(now) }
        })
        .await;
    };
    let first = attempts().await;
    until(first + 1.0).await;
    let start = Instant::now();
    until(first + 4.0).await;
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(1), "3 attempts in {took:?}");
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_exposition_passes_promtool() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    let promtool = which("promtool");
    let mon = Monitor::start(&fleet(&[stdio_server("p", &marker("p"), &[])])).await;
    mon.wait_status("p", "healthy", Duration::from_secs(10))
        .await;
    let text = mon.metrics().await;
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
    }
    let out = child.wait_with_output().expect("promtool");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}"
    );
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_of_one_generation_never_disagree() {
    require!(program("promtool"), installed("tests/node/node_modules"));
    // Two servers flap (one crashes every 300 ms and is restarted, one fails
    // half its pings); /health/fleet and /metrics are sampled back to back,
    // and whenever both carry the same generation they must agree on every
    // server's state and reason, and on the fleet counts.
    let yaml = fleet(&[
        stdio_server("crashy", &marker("gc"), &["--crash-after-ms", "300"]),
        stdio_server("flaky", &marker("gf"), &["--fail-rate", "0.5"]),
        stdio_server("steady", &marker("gs"), &[]),
    ]);
    let mon = Monitor::start(&yaml).await;
    let mut compared = 0;
    let mut crashy_states = std::collections::HashSet::new();
    let start = Instant::now();
    while (compared < 60 || crashy_states.len() < 2) && start.elapsed() < Duration::from_secs(60) {
        let (_, f) = mon.get_json("/health/fleet").await;
        let m = mon.metrics().await;
        let generation = metric(&m, "mcpmon_snapshot_generation");
        if f["generation"].as_f64() != generation {
            continue;
        }
        compared += 1;
        for s in f["servers"].as_array().expect("servers") {
            let (id, state, reason) = (
                s["id"].as_str().expect("id"),
                s["status"].as_str().expect("status"),
                s["reason"].as_str().expect("reason"),
            );
            let series = format!(r#"mcpmon_server_state{{server="{id}",state="{state}"}}"#);
            assert_eq!(
                metric(&m, &series),
                Some(1.0),
                "{id} is {state} in JSON\n{m}"
            );
            let series = format!(r#"mcpmon_server_reason{{reason="{reason}",server="{id}"}}"#);
            assert_eq!(metric(&m, &series), Some(1.0), "{id} is {reason} in JSON");
            if id == "crashy" {
                crashy_states.insert(state.to_owned());
            }
        }
        for state in ["healthy", "degraded", "unhealthy", "unknown"] {
            let series = format!(r#"mcpmon_fleet_servers{{state="{state}"}}"#);
            assert_eq!(
                metric(&m, &series),
                f["summary"][state].as_f64(),
                "{state} count"
            );
        }
    }
    assert!(
        compared >= 60,
        "only {compared} samples shared a generation"
    );
    assert!(
        crashy_states.len() >= 2,
        "the flapping server never changed state: {crashy_states:?}"
    );
    mon.stop().await;
}
