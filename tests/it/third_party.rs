//! mcpmon against MCP servers other people wrote: the official reference
//! server (`@modelcontextprotocol/server-everything`, TypeScript SDK) over
//! stdio and Streamable HTTP, and servers built with the PyPI `mcp` SDK in
//! both protocol eras (1.x legacy, 2.x modern). `.ci/setup` installs them.

use mcpmon::transport::Session as _;

use std::time::Duration;

use crate::support::*;

const SLOW_START: Duration = Duration::from_secs(20);

fn stdio(id: &str, marker: &str, command: &std::path::Path, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "  - id: {id}\n    transport: stdio\n    command: {:?}\n    args: [{}]\n    env: {{MCPMON_TEST_MARKER: {marker:?}}}\n",
        command.display(),
        args.join(", ")
    )
}

fn http(id: &str, url: &str) -> String {
    format!("  - id: {id}\n    transport: http\n    url: {url}\n")
}

/// Kill every process of a stdio server, expect `exited` promptly, then the
/// respawned server healthy again.
async fn kill_and_recover(mon: &Monitor, id: &str, mark: &str) {
    let pids = wait_pids(mark, Duration::from_secs(5)).await;
    kill(&pids, libc::SIGKILL);
    let (v, _) = mon
        .wait_status(id, "unhealthy", PING_INTERVAL + PING_TIMEOUT + SLACK)
        .await;
    assert_eq!(v["reason"], "exited", "{id}: {v}");
    let (v, _) = mon
        .wait_status(id, "healthy", BACKOFF_MAX + SLOW_START)
        .await;
    assert_eq!(v["sessions"], 2, "{id}: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_server_over_stdio() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    let mark = marker("everything");
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}",
        stdio("everything", &mark, &everything_bin(), &["stdio"])
    );
    let mon = Monitor::start(&yaml).await;
    let (v, _) = mon.wait_status("everything", "healthy", SLOW_START).await;
    assert_eq!(v["server_name"], "mcp-servers/everything", "{v}");
    assert_eq!(v["era"], "legacy");
    assert!(v["tools"].as_u64().unwrap_or(0) >= 5, "{v}");
    kill_and_recover(&mon, "everything", &mark).await;
    mon.stop().await;
    assert!(
        pids_with_marker(&mark).is_empty(),
        "node server left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_server_over_streamable_http_killed_and_restarted() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    let port = free_port();
    let env = [("PORT", port.to_string())];
    let mut server = third_party_http(&everything_bin(), &["streamableHttp"], &env, port).await;
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}",
        http("everything-http", &server.url)
    );
    let mon = Monitor::start(&yaml).await;
    let (v, _) = mon
        .wait_status("everything-http", "healthy", SLOW_START)
        .await;
    assert_eq!(v["server_name"], "mcp-servers/everything", "{v}");
    assert_eq!(v["transport"], "http");

    server.kill().await;
    let (v, _) = mon
        .wait_status(
            "everything-http",
            "unhealthy",
            PING_INTERVAL + PING_TIMEOUT + SLACK,
        )
        .await;
    assert_eq!(v["reason"], "unreachable", "{v}");

    // A new process on the same URL: the old session id is unknown to it.
    let _again = third_party_http(&everything_bin(), &["streamableHttp"], &env, port).await;
    mon.wait_status("everything-http", "healthy", BACKOFF_MAX + SLOW_START)
        .await;
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_servers_in_both_eras_over_stdio() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    let legacy = marker("py-legacy");
    let modern = marker("py-modern");
    let script = python_server();
    let script = script.to_str().expect("utf-8 path");
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}{}",
        stdio("py-legacy", &legacy, &python("legacy"), &[script, "stdio"]),
        stdio("py-modern", &modern, &python("modern"), &[script, "stdio"]),
    );
    let mon = Monitor::start(&yaml).await;
    for (id, era, version) in [
        ("py-legacy", "legacy", "2025-11-25"),
        ("py-modern", "modern", "2026-07-28"),
    ] {
        let (v, _) = mon.wait_status(id, "healthy", SLOW_START).await;
        assert_eq!(v["era"], era, "{v}");
        assert_eq!(v["protocol_version"], version, "{v}");
        assert_eq!(v["server_name"], "python-sdk-demo", "{v}");
    }
    // The SDK's health_check tool is read (structured or JSON text).
    for id in ["py-legacy", "py-modern"] {
        let what = format!("{id}'s health_check read");
        eventually(&what, Duration::from_secs(10), async || {
            let (_, v) = mon.server(id).await;
            if v["health_check"]["status"] == "healthy" {
                Ok(())
            } else {
                Err(v)
            }
        })
        .await;
    }
    let m = mon.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_probes_total{probe="ping",server="py-modern"}"#
        )
        .unwrap_or(0.0),
        0.0
    );
    kill_and_recover(&mon, "py-modern", &modern).await;
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_servers_in_both_eras_over_streamable_http() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    let script = python_server();
    let script = script.to_str().expect("utf-8 path");
    let lp = free_port();
    let mp = free_port();
    let _legacy = third_party_http(
        &python("legacy"),
        &[script, "http", &lp.to_string()],
        &[],
        lp,
    )
    .await;
    let mut modern = third_party_http(
        &python("modern"),
        &[script, "http", &mp.to_string()],
        &[],
        mp,
    )
    .await;
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}{}",
        http("py-legacy-http", &format!("http://127.0.0.1:{lp}/mcp")),
        http("py-modern-http", &modern.url),
    );
    let mon = Monitor::start(&yaml).await;
    let (v, _) = mon
        .wait_status("py-legacy-http", "healthy", SLOW_START)
        .await;
    assert_eq!(v["era"], "legacy", "{v}");
    let (v, _) = mon
        .wait_status("py-modern-http", "healthy", SLOW_START)
        .await;
    assert_eq!(v["era"], "modern", "{v}");

    modern.kill().await;
    let (v, _) = mon
        .wait_status(
            "py-modern-http",
            "unhealthy",
            PING_INTERVAL + PING_TIMEOUT + SLACK,
        )
        .await;
    assert_eq!(v["reason"], "unreachable", "{v}");
    let _again = third_party_http(
        &python("modern"),
        &[script, "http", &mp.to_string()],
        &[],
        mp,
    )
    .await;
    mon.wait_status("py-modern-http", "healthy", BACKOFF_MAX + SLOW_START)
        .await;
    mon.stop().await;
}

/// The Python SDK server (legacy era) over Streamable HTTP behind the test
/// gate of `tests/python/server.py`, set up by one environment variable.
async fn gated_python(var: &str, value: String) -> Spawned {
    let script = python_server();
    let port = free_port();
    third_party_http(
        &python("legacy"),
        &[
            script.to_str().expect("utf-8 path"),
            "http",
            &port.to_string(),
        ],
        &[(var, value)],
        port,
    )
    .await
}

/// A session to `url` opened the way a supervisor opens it.
async fn open_session(url: &str) -> mcpmon::transport::session::McpSession {
    let yaml = format!("servers:\n{}", http("lean", url));
    let config = mcpmon::config::parse(std::path::Path::new("lean.yml"), &yaml, &|_| None)
        .expect("valid config");
    let http = mcpmon::transport::Http::shared().expect("http clients");
    mcpmon::transport::session::McpSession::open(&config.servers[0], &http, None)
        .await
        .expect("session opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_http_pings_skip_rmcp_against_every_server_kind() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // Pings leave rmcp's worker only if real servers' answers (SSE from the
    // TypeScript and Python SDKs, JSON or SSE from rmcp) are read in full by
    // the lean path; a fallback would hide that it never works.
    let script = python_server();
    let script = script.to_str().expect("utf-8 path");
    let (tp, pp) = (free_port(), free_port());
    let env = [("PORT", tp.to_string())];
    let everything = third_party_http(&everything_bin(), &["streamableHttp"], &env, tp).await;
    let _py = third_party_http(
        &python("legacy"),
        &[script, "http", &pp.to_string()],
        &[],
        pp,
    )
    .await;
    let demo = demo_http(&["--name", "lean", "--era", "legacy"], 0).await;
    for url in [
        everything.url.clone(),
        format!("http://127.0.0.1:{pp}/mcp"),
        demo.url.clone(),
    ] {
        let session = open_session(&url).await;
        for _ in 0..3 {
            let answered = session.legacy_ping(Duration::from_secs(5)).await;
            assert!(matches!(answered, Some(Ok(_))), "{url}: {answered:?}");
        }
        Box::new(session).close(Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_sessions_never_take_the_lean_ping_path() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    let script = python_server();
    let script = script.to_str().expect("utf-8 path");
    let port = free_port();
    let _py = third_party_http(
        &python("modern"),
        &[script, "http", &port.to_string()],
        &[],
        port,
    )
    .await;
    let session = open_session(&format!("http://127.0.0.1:{port}/mcp")).await;
    assert_eq!(session.era(), mcpmon::transport::Era::Modern);
    assert!(session.legacy_ping(Duration::from_secs(5)).await.is_none());
    assert!(session.liveness(Duration::from_secs(5)).await.is_ok());
    Box::new(session).close(Duration::from_secs(2)).await;
}

/// A stdio server entry with HEALTH_SHAPE / HEALTH_STATUS in its env.
fn shaped(id: &str, command: &std::path::Path, args: &[&str], shape: &str, status: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "  - id: {id}\n    transport: stdio\n    command: {:?}\n    args: [{}]\n    env: {{HEALTH_SHAPE: {shape}, HEALTH_STATUS: {status}}}\n",
        command.display(),
        args.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_shapes_of_the_python_and_typescript_sdks_are_read() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // FastMCP (mcp 1.x) and MCPServer (mcp 2.x) wrap a `-> str` return as
    // structuredContent {"result": "<text>"}; TypeScript SDK tools answer
    // text blocks. A server saying "degraded" in any of them reads degraded.
    let script = python_server();
    let script = script.to_str().expect("utf-8 path");
    let node = repo().join("tests/node/node_modules/.bin/node");
    let ts = repo().join("tests/node/health-server.mjs");
    let ts = ts.to_str().expect("utf-8 path");
    let mut servers = String::new();
    for era in ["legacy", "modern"] {
        for shape in ["json", "word"] {
            let id = format!("py-{era}-{shape}");
            servers += &shaped(&id, &python(era), &[script, "stdio"], shape, "degraded");
        }
    }
    for shape in ["json", "word"] {
        servers += &shaped(&format!("ts-{shape}"), &node, &[ts], shape, "degraded");
    }
    servers += &shaped(
        "py-nominal",
        &python("legacy"),
        &[script, "stdio"],
        "word",
        "nominal",
    );
    servers += &shaped("ts-nominal", &node, &[ts], "word", "nominal");
    let mon = Monitor::start(&format!("{FAST_GLOBAL}servers:\n{servers}")).await;
    for id in [
        "py-legacy-json",
        "py-legacy-word",
        "py-modern-json",
        "py-modern-word",
        "ts-json",
        "ts-word",
    ] {
        let (v, _) = mon.wait_status(id, "degraded", SLOW_START + SLACK).await;
        assert_eq!(v["reason"], "health_check_degraded", "{id}: {v}");
        assert_eq!(v["health_check"]["status"], "degraded", "{id}: {v}");
    }
    // A word mcpmon does not know is visible as such, never read as healthy.
    for id in ["py-nominal", "ts-nominal"] {
        let (v, _) = mon.wait_status(id, "degraded", SLOW_START + SLACK).await;
        assert_eq!(v["reason"], "health_check_unreadable", "{id}: {v}");
        assert_eq!(v["health_check"]["status"], "unreadable", "{id}: {v}");
        let failures = metric(
            &mon.metrics().await,
            &format!(
                r#"mcpmon_probe_failures_total{{probe="health_check",reason="unreadable",server="{id}"}}"#
            ),
        )
        .unwrap_or(0.0);
        assert!(failures >= 1.0, "{id}: unreadable reports counted");
    }
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_server_blocked_by_another_client_recovers_within_rise_pings() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // Another client calls a tool that blocks the server's event loop for
    // 6 s. mcpmon sees it late (degraded), and once the block ends it must
    // read healthy again after `rise` prompt pings, not after its window.
    let script = python_server();
    let script = script.to_str().expect("utf-8 path");
    let port = free_port();
    let _py = third_party_http(
        &python("legacy"),
        &[script, "http", &port.to_string()],
        &[],
        port,
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (interval, rise) = (Duration::from_secs(2), 2);
    let yaml = format!(
        "global:\n  ping_interval: 2s\n  ping_timeout: 1s\n  rise: {rise}\n  stuck_after: 60s\nservers:\n{}",
        http("blocked", &url)
    );
    let mon = Monitor::start(&yaml).await;
    mon.wait_status("blocked", "healthy", SLOW_START).await;
    let mut other = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpmon"))
        // Options before the URL: everything after it is taken as the target.
        .args([
            "probe",
            "--call",
            "block",
            "--args",
            r#"{"seconds": 6}"#,
            &url,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("second client");
    let (v, _) = mon.wait_status("blocked", "degraded", SLACK).await;
    assert_eq!(v["reason"], "unresponsive", "{v}");
    tokio::time::timeout(SLACK, other.wait())
        .await
        .expect("the blocking call ends")
        .expect("second client ran");
    let (v, took) = mon.wait_status("blocked", "healthy", SLACK).await;
    assert_eq!(v["sessions"], 1, "recovered without a reconnect: {v}");
    eprintln!("healthy again {took:?} after the block ended");
    // A margin for a loaded machine, but far below the 5 min window that
    // used to hold it degraded.
    let bound = interval * rise + Duration::from_secs(1) + Duration::from_secs(10);
    assert!(took <= bound, "took {took:?}, bound {bound:?}");
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_judged_apart_from_reachability() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // A Python SDK server behind a bearer-token gate (as hosted servers
    // are): no token is `unauthenticated`, a token without the scope is
    // `forbidden`, the right one is healthy until it is revoked.
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "gate-s3cret").expect("write");
    let gate = gated_python(
        "REQUIRE_TOKEN_FILE",
        token_file.to_str().expect("utf-8").to_owned(),
    )
    .await;
    let port = gate.port;
    let cfg = dir.path().join("fleet.yaml");
    let with_token =
        |id: &str, var: &str| format!("{}    bearer_token_env: {var}\n", http(id, &gate.url));
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n{}{}{}",
            http("anonymous", &gate.url),
            with_token("readonly", "GATE_READONLY"),
            with_token("granted", "GATE_TOKEN"),
        ),
    )
    .expect("write");
    let mon = Binary::start_with_env(
        &cfg,
        &[],
        &[
            ("GATE_TOKEN", "gate-s3cret"),
            ("GATE_READONLY", "gate-s3cret-readonly"),
        ],
    )
    .await;
    let (v, _) = mon.wait_status("anonymous", "unhealthy", SLOW_START).await;
    assert_eq!(v["reason"], "unauthenticated", "{v}");
    let detail = v["detail"].as_str().expect("detail");
    assert!(
        detail.contains(&format!(
            "resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource\""
        )),
        "the challenge is shown: {detail}"
    );
    assert!(
        detail.contains(&format!("authorization servers: http://127.0.0.1:{port}")),
        "the protected-resource metadata is read: {detail}"
    );
    let (v, _) = mon.wait_status("readonly", "unhealthy", SLOW_START).await;
    assert_eq!(v["reason"], "forbidden", "{v}");
    mon.wait_status("granted", "healthy", SLOW_START).await;
    let (_, m) = mon.get("/metrics").await;
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_server_reason{reason="unauthenticated",server="anonymous"}"#
        ),
        Some(1.0)
    );

    // Revoked mid-session: the next probe is refused, the session ends on
    // it, and the verdict says why.
    std::fs::write(&token_file, "rotated").expect("write");
    let (v, _) = mon
        .wait_status("granted", "unhealthy", PING_INTERVAL + PING_TIMEOUT + SLACK)
        .await;
    assert_eq!(v["reason"], "unauthenticated", "{v}");
    for id in ["anonymous", "readonly", "granted"] {
        let (_, body) = mon.get(&format!("/health/servers/{id}")).await;
        assert!(!body.contains("gate-s3cret"), "a token leaked: {body}");
    }
    assert!(!mon.log_text().contains("gate-s3cret"), "a token leaked");

    // `mcpmon probe` sends the token named after the URL, and reads refusals
    // the same way.
    std::fs::write(&token_file, "gate-s3cret").expect("write");
    let probe = |with_token: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcpmon"));
        cmd.args(["probe", &gate.url, "--output", "json", "--pings", "1"])
            .env("GATE_TOKEN", "gate-s3cret");
        if with_token {
            cmd.args(["--bearer-token-env", "GATE_TOKEN"]);
        }
        let out = cmd.output().expect("probe");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(!text.contains("gate-s3cret"), "{text}");
        (out.status.code(), v)
    };
    let (code, v) = probe(true);
    assert_eq!(
        (code, &v["state"]),
        (Some(0), &serde_json::json!("healthy")),
        "{v}"
    );
    let (code, v) = probe(false);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["reason"], "unauthenticated", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_server_is_degraded_never_unhealthy_and_left_alone_as_asked() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // A Python SDK server that answers 429 with `Retry-After: 5` for 10 s.
    let dir = tempfile::tempdir().expect("tempdir");
    let throttle = dir.path().join("throttle");
    let log = dir.path().join("throttle.log");
    let server = gated_python(
        "THROTTLE_FILE",
        throttle.to_str().expect("utf-8").to_owned(),
    )
    .await;
    // Pings every 400 ms; the health check runs once, at session start.
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n{}    health_check_interval: 1h\n",
        http("throttled", &server.url)
    );
    let mon = Monitor::start(&yaml).await;
    mon.wait_status("throttled", "healthy", SLOW_START).await;

    std::fs::write(&throttle, "5").expect("write");
    let mut seen = false;
    throughout(
        Duration::from_secs(10),
        Duration::from_millis(100),
        async || {
            let (_, v) = mon.server("throttled").await;
            assert_ne!(v["status"], "unhealthy", "a throttle is not an outage: {v}");
            seen |= v["status"] == "degraded" && v["reason"] == "throttled";
        },
    )
    .await;
    std::fs::remove_file(&throttle).expect("remove");
    assert!(seen, "never degraded/throttled");
    // 10 s at one burst per 5 s: the first refusal (a ping, and the health
    // check if it was in flight too) and at most two more pings; at the
    // normal interval it would be 25.
    let refused = std::fs::read_to_string(&log).expect("log").lines().count();
    assert!(
        (1..=4).contains(&refused),
        "{refused} requests while asked to wait 5 s"
    );
    mon.wait_status("throttled", "healthy", Duration::from_secs(5) + SLACK)
        .await;
    let m = mon.metrics().await;
    // Every refused request was a probe (a ping, or the first health_check
    // if the throttle began before it ran), and each was counted.
    let throttled: f64 = ["ping", "health_check"]
        .iter()
        .filter_map(|p| {
            metric(
                &m,
                &format!(r#"mcpmon_probes_throttled_total{{probe="{p}",server="throttled"}}"#),
            )
        })
        .sum();
    assert_eq!(throttled, refused as f64, "{m}");
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_probe_failures_total{probe="ping",reason="throttled",server="throttled"}"#
        ),
        None,
        "throttled probes are not failures"
    );
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_client_credentials_keep_a_server_healthy_across_token_expiries() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // The gate issues client-credentials tokens that live 3 s and accepts
    // nothing else; mcpmon must keep fetching them without a bad reading.
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = gated_python("ISSUE_TOKENS", "mcpmon:client-s3cret:3".to_owned()).await;
    let port = gate.port;
    let oauth = |id: &str, secret: &str| {
        format!(
            "{}    oauth2:\n      client_id: mcpmon\n      client_secret: {secret}\n      \
             token_url: http://127.0.0.1:{port}/token\n      scopes: [mcp]\n",
            http(id, &gate.url)
        )
    };
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n{}{}",
            oauth("oauth", "${OAUTH_SECRET}"),
            oauth("wrong-secret", "not-the-secret"),
        ),
    )
    .expect("write");
    let mon = Binary::start_with_env(&cfg, &[], &[("OAUTH_SECRET", "client-s3cret")]).await;
    let (v, _) = mon
        .wait_status("wrong-secret", "unhealthy", SLOW_START)
        .await;
    assert_eq!(v["reason"], "unauthenticated", "{v}");
    assert!(
        v["detail"]
            .as_str()
            .is_some_and(|d| d.contains("invalid_client")),
        "{v}"
    );
    mon.wait_status("oauth", "healthy", SLOW_START).await;
    let expiry = || async {
        let (_, m) = mon.get("/metrics").await;
        metric(
            &m,
            r#"mcpmon_auth_token_expiry_timestamp_seconds{refreshable="true",server="oauth"}"#,
        )
        .expect("expiry exported")
    };
    let first = expiry().await;
    // Until the tokens fetched reach four lifetimes (12 s) past the
    // first: never a bad reading.
    eventually(
        "tokens for four lifetimes",
        Duration::from_secs(30),
        async || {
            let (_, v) = mon.server("oauth").await;
            assert_eq!(v["status"], "healthy", "a token lapsed: {v}");
            let moved = expiry().await - first;
            if moved >= 12.0 { Ok(()) } else { Err(moved) }
        },
    )
    .await;
    let last = expiry().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(last > now, "the exported expiry is in the future");
    assert!(
        last - first >= 9.0,
        "tokens were renewed: expiry moved {:.1} s",
        last - first
    );
    for id in ["oauth", "wrong-secret"] {
        let (_, body) = mon.get(&format!("/health/servers/{id}")).await;
        assert!(!body.contains("client-s3cret"), "{body}");
    }
    assert!(!mon.log_text().contains("client-s3cret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_surface_changes_are_seen_named_and_counted() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    // A Python SDK server over stdio. Its `grow` tool (called once by a
    // tool probe) adds a tool and announces it; later it is redeployed with
    // one more tool. `expected_tools` names that tool from the start.
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = dir.path().join("extra-tools");
    let mark = marker("tools");
    let script = python_server();
    let yaml = format!(
        "{FAST_GLOBAL}servers:\n  - id: tools\n    transport: stdio\n    command: {:?}\n    \
         args: [{:?}, stdio]\n    env: {{MCPMON_TEST_MARKER: {mark:?}, EXTRA_TOOLS_FILE: {:?}}}\n    \
         expected_tools: [echo, summarize]\n    \
         tool_probes: [{{tool: grow, interval: 1h}}]\n",
        python("legacy"),
        script.to_str().expect("utf-8"),
        extra.to_str().expect("utf-8"),
    );
    let mon = Monitor::start(&yaml).await;
    let changed = |v: &serde_json::Value, name: &str| {
        v["events"].as_array().is_some_and(|e| {
            e.iter().any(|e| {
                e["kind"] == "tools_changed"
                    && e["detail"].as_str().is_some_and(|d| d.contains(name))
            })
        })
    };
    let v = eventually("tools_changed for grown", SLOW_START, async || {
        let (_, v) = mon.server("tools").await;
        if changed(&v, "added: grown") {
            Ok(v)
        } else {
            Err(v)
        }
    })
    .await;
    assert_eq!(v["status"], "degraded", "{v}");
    assert_eq!(v["reason"], "tools_missing", "{v}");
    assert_eq!(v["tools_missing"], serde_json::json!(["summarize"]), "{v}");
    assert!(
        v["tools_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("sha256:"))
    );
    let m = mon.metrics().await;
    assert_eq!(
        metric(&m, r#"mcpmon_server_tools_changes_total{server="tools"}"#),
        Some(1.0)
    );

    // Redeploy with the expected tool: the new session's listing names it,
    // and nothing is missing any more.
    std::fs::write(&extra, "summarize\n").expect("write");
    let pids = wait_pids(&mark, Duration::from_secs(5)).await;
    kill(&pids, libc::SIGKILL);
    let v = eventually("the redeploy seen", SLOW_START + BACKOFF_MAX, async || {
        let (_, v) = mon.server("tools").await;
        let seen = changed(&v, "added: summarize") && v["status"] == "healthy";
        if seen { Ok(v) } else { Err(v) }
    })
    .await;
    assert!(v.get("tools_missing").is_none(), "{v}");
    let m = mon.metrics().await;
    assert!(
        metric(&m, r#"mcpmon_server_tools_changes_total{server="tools"}"#)
            .is_some_and(|n| n >= 2.0),
        "{m}"
    );
    mon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_carry_a_w3c_traceparent_the_server_can_read() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-legacy"),
        installed("tests/python/.venv-modern")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let traces = dir.path().join("traces");
    let script = python_server();
    let mut found = Vec::new();
    for era in ["legacy", "modern"] {
        let mark = marker(&format!("trace-{era}"));
        let yaml = format!(
            "{FAST_GLOBAL}servers:\n  - id: traced\n    transport: stdio\n    command: {:?}\n    \
             args: [{:?}, stdio]\n    env: {{MCPMON_TEST_MARKER: {mark:?}, TRACE_FILE: {:?}}}\n",
            python(era),
            script.to_str().expect("utf-8"),
            traces.to_str().expect("utf-8"),
        );
        let _ = std::fs::remove_file(&traces);
        let mon = Monitor::start(&yaml).await;
        let what = format!("{era}: health_check called twice");
        let lines = eventually(&what, SLOW_START, async || {
            let lines: Vec<String> = std::fs::read_to_string(&traces)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            if lines.len() >= 2 {
                Ok(lines)
            } else {
                Err(lines)
            }
        })
        .await;
        mon.stop().await;
        for tp in &lines {
            let parts: Vec<&str> = tp.split('-').collect();
            let hex = |s: &str, n: usize| {
                s.len() == n
                    && s.chars()
                        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            };
            assert!(
                parts.len() == 4
                    && parts[0] == "00"
                    && hex(parts[1], 32)
                    && hex(parts[2], 16)
                    && parts[1] != "0".repeat(32)
                    && parts[3] == "01",
                "{era}: not a W3C traceparent: {tp:?}"
            );
        }
        assert_ne!(lines[0], lines[1], "{era}: every call has its own trace");
        found.push(era);
    }
    assert_eq!(found, ["legacy", "modern"]);
}
