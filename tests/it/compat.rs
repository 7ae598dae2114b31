//! The compatibility fleet: sixteen third-party MCP servers from npm and
//! PyPI (reference servers, FastMCP 2 and 4, two bridges, three that fail
//! at start for reasons of their own), both eras, stdio and HTTP, started
//! together under mcpmon's default settings, the way a new user starts
//! them. Every working server reads `unknown`, then healthy, and nothing
//! between; every failing one reads unhealthy with its own words in the
//! detail; every modern server speaks 2026-07-28.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::Value;

fn node_bin(name: &str) -> PathBuf {
    let p = repo().join("tests/node/node_modules/.bin").join(name);
    assert!(p.exists(), "{} missing: run .ci/setup", p.display());
    p
}

fn venv_bin(venv: &str, name: &str) -> PathBuf {
    let p = repo()
        .join("tests/python")
        .join(format!(".venv-{venv}"))
        .join("bin")
        .join(name);
    assert!(p.exists(), "{} missing: run .ci/setup", p.display());
    p
}

/// One server of the fleet, and what it must read once settled.
struct Member {
    id: &'static str,
    yaml: String,
    /// `Some(era)` for a working server, `None` for one that fails at start.
    era: Option<&'static str>,
    /// For a failing server: words of its own its detail must hold.
    says: &'static str,
}

fn stdio(id: &'static str, command: PathBuf, args: &[&str], era: Option<&'static str>) -> Member {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    Member {
        id,
        yaml: format!(
            "  - id: {id}\n    transport: stdio\n    command: {:?}\n    args: [{}]\n",
            command.display(),
            args.join(", ")
        ),
        era,
        says: "",
    }
}

fn failing(id: &'static str, command: PathBuf, args: &[&str], says: &'static str) -> Member {
    Member {
        says,
        ..stdio(id, command, args, None)
    }
}

fn http(id: &'static str, url: &str, era: &'static str) -> Member {
    Member {
        id,
        yaml: format!("  - id: {id}\n    transport: http\n    url: {url}\n"),
        era: Some(era),
        says: "",
    }
}

/// The state changes of a server's timeline, oldest first.
fn changes(v: &Value) -> Vec<String> {
    v["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| e["kind"] == "state_changed")
                .map(|e| e["detail"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_third_party_servers_started_together_read_right_from_the_first_second() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-reference"),
        installed("tests/python/.venv-fastmcp2"),
        installed("tests/python/.venv-fastmcp4"),
        installed("tests/python/.venv-proxy"),
        installed("tests/python/.venv-modern")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("files");
    std::fs::create_dir(&files).expect("mkdir");
    let fastmcp = repo().join("tests/python/fastmcp_server.py");
    let fastmcp = fastmcp.to_str().expect("utf-8");

    // The HTTP servers and bridges listen first, as deployed ones would.
    let everything_port = free_port();
    let everything = third_party_http(
        &node_bin("mcp-server-everything"),
        &["streamableHttp"],
        &[("PORT", everything_port.to_string())],
        everything_port,
    )
    .await;
    let fastmcp_port = free_port();
    let fastmcp_http = third_party_http(
        &venv_bin("fastmcp4", "python"),
        &[fastmcp, "http", &fastmcp_port.to_string()],
        &[],
        fastmcp_port,
    )
    .await;
    let gateway_port = free_port();
    let memory = node_bin("mcp-server-memory");
    let gateway = third_party_http(
        &node_bin("supergateway"),
        &[
            "--stdio",
            memory.to_str().expect("utf-8"),
            "--outputTransport",
            "streamableHttp",
            "--port",
            &gateway_port.to_string(),
        ],
        &[],
        gateway_port,
    )
    .await;
    let proxy_port = free_port();
    let time_server = venv_bin("reference", "mcp-server-time");
    let proxy = third_party_http(
        &venv_bin("proxy", "mcp-proxy"),
        &[
            "--host",
            "127.0.0.1",
            "--port",
            &proxy_port.to_string(),
            "--",
            time_server.to_str().expect("utf-8"),
        ],
        &[],
        proxy_port,
    )
    .await;

    let fleet = vec![
        stdio(
            "everything",
            node_bin("mcp-server-everything"),
            &[],
            Some("legacy"),
        ),
        stdio("memory", node_bin("mcp-server-memory"), &[], Some("legacy")),
        stdio(
            "filesystem",
            node_bin("mcp-server-filesystem"),
            &[files.to_str().expect("utf-8")],
            Some("legacy"),
        ),
        stdio(
            "sequential-thinking",
            node_bin("mcp-server-sequential-thinking"),
            &[],
            Some("legacy"),
        ),
        stdio(
            "time",
            venv_bin("reference", "mcp-server-time"),
            &[],
            Some("modern"),
        ),
        stdio(
            "fetch",
            venv_bin("reference", "mcp-server-fetch"),
            &[],
            Some("modern"),
        ),
        stdio(
            "fastmcp2",
            venv_bin("fastmcp2", "python"),
            &[fastmcp, "stdio"],
            Some("legacy"),
        ),
        stdio(
            "fastmcp4",
            venv_bin("fastmcp4", "python"),
            &[fastmcp, "stdio"],
            Some("modern"),
        ),
        http(
            "everything-http",
            &format!("http://127.0.0.1:{everything_port}/mcp"),
            "legacy",
        ),
        http(
            "fastmcp4-http",
            &format!("http://127.0.0.1:{fastmcp_port}/mcp"),
            "modern",
        ),
        http(
            "supergateway",
            &format!("http://127.0.0.1:{gateway_port}/mcp"),
            "legacy",
        ),
        http(
            "mcp-proxy",
            &format!("http://127.0.0.1:{proxy_port}/mcp"),
            "legacy",
        ),
        failing(
            "brave-search",
            node_bin("mcp-server-brave-search"),
            &[],
            "BRAVE_API_KEY environment variable is required",
        ),
        failing(
            "slack",
            node_bin("mcp-server-slack"),
            &[],
            "SLACK_BOT_TOKEN",
        ),
        failing(
            "git",
            venv_bin("reference", "mcp-server-git"),
            &["--repository", "/nonexistent-repository"],
            "/nonexistent-repository does not exist",
        ),
        stdio(
            "python-sdk",
            python("modern"),
            &[python_server().to_str().expect("utf-8"), "stdio"],
            Some("modern"),
        ),
    ];
    let cfg = dir.path().join("fleet.yaml");
    let servers: String = fleet.iter().map(|m| m.yaml.clone()).collect();
    // Defaults only: no global: block, as a new user writes it.
    std::fs::write(&cfg, format!("servers:\n{servers}")).expect("write");
    let mon = Binary::start(&cfg, &[]).await;

    // Settled: every working server healthy, every failing one unhealthy.
    let start = Instant::now();
    let settled = loop {
        let (_, fleet_json) = mon.get("/health/fleet").await;
        let v: Value = serde_json::from_str(&fleet_json).expect("json");
        let status = |id: &str| {
            v["servers"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["id"] == id))
                .map(|s| s["status"].as_str().unwrap_or("").to_owned())
                .unwrap_or_default()
        };
        let done = fleet.iter().all(|m| match m.era {
            Some(_) => status(m.id) == "healthy",
            None => status(m.id) == "unhealthy",
        });
        if done {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the fleet did not settle in 120 s: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("settled in {:?}", start.elapsed());
    assert_eq!(settled["summary"]["total"], 16);

    for m in &fleet {
        let (_, v) = mon.server(m.id).await;
        match m.era {
            Some(era) => {
                assert_eq!(v["era"], era, "{}: {v:#}", m.id);
                if era == "modern" {
                    assert_eq!(v["protocol_version"], "2026-07-28", "{}: {v:#}", m.id);
                }
                // unknown, then healthy, and nothing between.
                assert_eq!(
                    changes(&v),
                    ["unknown -> healthy"],
                    "{}: a state before its first healthy: {v:#}",
                    m.id
                );
                assert_eq!(v["consecutive_failures"], 0, "{}", m.id);
                assert!(v["handshake_ms"].as_f64().is_some(), "{}: {v:#}", m.id);
            }
            None => {
                let detail = v["detail"].as_str().unwrap_or("");
                assert!(
                    detail.contains(m.says),
                    "{}: its own words are not in the detail: {detail}",
                    m.id
                );
                assert!(
                    matches!(v["reason"].as_str(), Some("exited" | "handshake_failed")),
                    "{}: {v:#}",
                    m.id
                );
                assert!(v["consecutive_failures"].as_u64() >= Some(1), "{}", m.id);
            }
        }
    }
    // The children's stderr is at debug: the log holds mcpmon's own words.
    let stderr_lines = mon
        .log_text()
        .lines()
        .filter(|l| l.contains("\"target\":\"mcpmon::stderr\""))
        .count();
    assert_eq!(stderr_lines, 0, "child stderr logged at info by default");
    drop((everything, fastmcp_http, gateway, proxy));
}

/// The legacy HTTP+SSE transport under `transport: http`, as four servers
/// from npm and PyPI serve it, reads `wrong_transport`; a plain web page
/// and a path with no endpoint read `not_mcp`. Each says so in few words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sse_servers_and_web_pages_under_http_are_named() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-fastmcp2"),
        installed("tests/python/.venv-fastmcp4")
    );
    let fastmcp = repo().join("tests/python/fastmcp_server.py");
    let fastmcp = fastmcp.to_str().expect("utf-8");
    let memory = node_bin("mcp-server-memory");
    let page = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        page.path().join("index.html"),
        "<html><body><h1>Welcome</h1></body></html>",
    )
    .expect("write");

    let ports: Vec<u16> = (0..5).map(|_| free_port()).collect();
    let everything = third_party_http(
        &node_bin("mcp-server-everything"),
        &["sse"],
        &[("PORT", ports[0].to_string())],
        ports[0],
    )
    .await;
    let gateway = third_party_http(
        &node_bin("supergateway"),
        &[
            "--stdio",
            memory.to_str().expect("utf-8"),
            "--port",
            &ports[1].to_string(),
        ],
        &[],
        ports[1],
    )
    .await;
    let fastmcp2 = third_party_http(
        &venv_bin("fastmcp2", "python"),
        &[fastmcp, "sse", &ports[2].to_string()],
        &[],
        ports[2],
    )
    .await;
    let fastmcp4 = third_party_http(
        &venv_bin("fastmcp4", "python"),
        &[fastmcp, "sse", &ports[3].to_string()],
        &[],
        ports[3],
    )
    .await;
    let web = third_party_http(
        &venv_bin("fastmcp4", "python"),
        &[
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            page.path().to_str().expect("utf-8"),
            &ports[4].to_string(),
        ],
        &[],
        ports[4],
    )
    .await;

    let url = |port: u16, path: &str| format!("http://127.0.0.1:{port}{path}");
    let want = [
        (
            "everything-sse",
            url(ports[0], "/sse"),
            "wrong_transport",
            "Cannot POST /sse",
        ),
        (
            "supergateway-sse",
            url(ports[1], "/sse"),
            "wrong_transport",
            "Cannot POST /sse",
        ),
        (
            "fastmcp2-sse",
            url(ports[2], "/sse"),
            "wrong_transport",
            "HTTP 405",
        ),
        (
            "fastmcp4-sse",
            url(ports[3], "/sse"),
            "wrong_transport",
            "HTTP 405",
        ),
        ("web-page", url(ports[4], "/"), "not_mcp", "HTTP 501"),
        (
            "no-endpoint",
            url(ports[0], "/nothing"),
            "not_mcp",
            "Cannot POST /nothing",
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let servers: String = want
        .iter()
        .map(|(id, url, ..)| format!("  - id: {id}\n    transport: http\n    url: {url}\n"))
        .collect();
    std::fs::write(&cfg, format!("servers:\n{servers}")).expect("write");
    let mon = Binary::start(&cfg, &[]).await;

    let start = Instant::now();
    loop {
        let (_, fleet_json) = mon.get("/health/fleet").await;
        let v: Value = serde_json::from_str(&fleet_json).expect("json");
        let reason = |id: &str| {
            v["servers"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["id"] == id))
                .and_then(|s| s["reason"].as_str())
                .unwrap_or("")
                .to_owned()
        };
        if want.iter().all(|(id, _, r, _)| reason(id) == *r) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not named in 60 s: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (id, _, reason, says) in &want {
        let (_, v) = mon.server(id).await;
        assert_eq!(v["status"], "unhealthy", "{id}: {v:#}");
        assert_eq!(v["reason"], *reason, "{id}: {v:#}");
        let detail = v["detail"].as_str().unwrap_or("");
        assert!(detail.contains(says), "{id}: {detail}");
        assert!(
            !detail.contains('<') && detail.len() < 400,
            "{id}: the page itself is in the detail: {detail}"
        );
        if *reason == "wrong_transport" {
            assert!(detail.contains("legacy HTTP+SSE"), "{id}: {detail}");
        }
    }
    drop((everything, gateway, fastmcp2, fastmcp4, web));
}
