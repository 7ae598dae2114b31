//! The compatibility fleet: thirty-four third-party MCP servers from npm
//! and PyPI, thirty of them stdio children (reference servers, FastMCP 2
//! and 4, markitdown, the Python SDK of both eras, one started through
//! npx, most of them twice or three times: the slow starters are the
//! point), four over
//! HTTP (two of them bridges), three that fail at start for reasons of
//! their own, both eras, started together under mcpmon's default settings
//! on two cores, the way a new user starts them. Every working server
//! reads `unknown`, then healthy, and nothing between; every failing one
//! reads unhealthy with its own words in the detail; every modern server
//! speaks 2026-07-28.

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
async fn thirty_stdio_servers_and_four_http_started_together_read_right_from_the_first_second() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-reference"),
        installed("tests/python/.venv-fastmcp2"),
        installed("tests/python/.venv-fastmcp4"),
        installed("tests/python/.venv-proxy"),
        installed("tests/python/.venv-modern"),
        installed("tests/python/.venv-markitdown")
    );
    // The claim is about a herd starting on this machine, not about
    // whatever other tests run beside them.
    alone(the_herd()).await;
}

/// A second (or third) instance of a stdio member: the same server under
/// another id, for the herd's numbers.
fn again(id: &'static str, of: &Member) -> Member {
    let first = of.yaml.lines().next().unwrap_or_default();
    let yaml = of.yaml.replacen(first, &format!("  - id: {id}"), 1);
    Member {
        id,
        yaml,
        era: of.era,
        says: of.says,
    }
}

/// A server started the way READMEs tell people to: through npx (here
/// `--no`: the package is installed, nothing is fetched).
fn npx(id: &'static str, bin: &str, era: Option<&'static str>) -> Member {
    let cwd = repo().join("tests/node");
    Member {
        id,
        yaml: format!(
            "  - id: {id}\n    transport: stdio\n    command: npx\n    args: [\"--no\", {bin:?}]\n    cwd: {:?}\n",
            cwd.display()
        ),
        era,
        says: "",
    }
}

async fn the_herd() {
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
        stdio(
            "python-sdk-legacy",
            python("legacy"),
            &[python_server().to_str().expect("utf-8"), "stdio"],
            Some("legacy"),
        ),
        npx("everything-npx", "mcp-server-everything", Some("legacy")),
        stdio(
            "markitdown",
            venv_bin("markitdown", "markitdown-mcp"),
            &[],
            Some("modern"),
        ),
    ];
    let mut fleet = fleet;
    let twice = [
        ("everything", ["everything-2", "everything-3"].as_slice()),
        ("memory", &["memory-2"]),
        ("filesystem", &["filesystem-2"]),
        ("sequential-thinking", &["sequential-thinking-2"]),
        ("time", &["time-2", "time-3"]),
        ("fetch", &["fetch-2"]),
        ("fastmcp2", &["fastmcp2-2", "fastmcp2-3"]),
        ("fastmcp4", &["fastmcp4-2", "fastmcp4-3"]),
        ("python-sdk", &["python-sdk-2"]),
        ("python-sdk-legacy", &["python-sdk-legacy-2"]),
        ("markitdown", &["markitdown-2"]),
    ];
    for (of, ids) in twice {
        let first = fleet.iter().position(|m| m.id == of).expect("a member");
        for &id in ids {
            let more = again(id, &fleet[first]);
            fleet.push(more);
        }
    }
    let stdio_count = fleet
        .iter()
        .filter(|m| m.yaml.contains("transport: stdio"))
        .count();
    assert_eq!((fleet.len(), stdio_count), (34, 30));
    let cfg = dir.path().join("fleet.yaml");
    let servers: String = fleet.iter().map(|m| m.yaml.clone()).collect();
    // Defaults only: no global: block, as a new user writes it.
    std::fs::write(&cfg, format!("servers:\n{servers}")).expect("write");
    let mon = Binary::start(&cfg, &[]).await;

    // Settled: every working server healthy, every failing one unhealthy.
    let start = Instant::now();
    let settled = eventually("the fleet settled", Duration::from_secs(240), async || {
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
            return Ok(v);
        }
        Err(format!("the fleet did not settle in 240 s: {v:#}"))
    })
    .await;
    eprintln!("settled in {:?}", start.elapsed());
    assert_eq!(settled["summary"]["total"], 34);

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
                // Its own words made the verdict at its first attempt: no
                // second is needed to judge a server that said why.
                let kinds: Vec<&str> = (v["events"].as_array().into_iter().flatten())
                    .filter_map(|e| e["kind"].as_str())
                    .take(2)
                    .collect();
                assert_eq!(
                    kinds,
                    ["connect_failed", "state_changed"],
                    "{}: {v:#}",
                    m.id
                );
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

/// Four legacy HTTP+SSE servers from npm and PyPI, listening: the
/// reference server-everything, supergateway bridging a stdio server (its
/// default output), and FastMCP 2 and 4 with `transport="sse"`.
struct SseServers {
    /// `(id, port, process)`, each serving `/sse`.
    servers: Vec<(&'static str, u16, Spawned)>,
}

impl SseServers {
    async fn start() -> SseServers {
        let fastmcp = repo().join("tests/python/fastmcp_server.py");
        let fastmcp = fastmcp.to_str().expect("utf-8").to_owned();
        let memory = node_bin("mcp-server-memory");
        let mut servers = Vec::new();
        for id in [
            "everything-sse",
            "supergateway-sse",
            "fastmcp2-sse",
            "fastmcp4-sse",
        ] {
            let port = free_port();
            let p = port.to_string();
            let spawned = match id {
                "everything-sse" => {
                    third_party_http(
                        &node_bin("mcp-server-everything"),
                        &["sse"],
                        &[("PORT", p)],
                        port,
                    )
                    .await
                }
                "supergateway-sse" => {
                    let memory = memory.to_str().expect("utf-8");
                    let args = ["--stdio", memory, "--port", &p];
                    third_party_http(&node_bin("supergateway"), &args, &[], port).await
                }
                _ => Self::fastmcp(id, &fastmcp, port).await,
            };
            servers.push((id, port, spawned));
        }
        SseServers { servers }
    }

    async fn fastmcp(id: &str, script: &str, port: u16) -> Spawned {
        let venv = if id == "fastmcp2-sse" {
            "fastmcp2"
        } else {
            "fastmcp4"
        };
        let args = [script, "sse", &port.to_string()];
        third_party_http(&venv_bin(venv, "python"), &args, &[], port).await
    }

    fn port(&self, id: &str) -> u16 {
        self.servers
            .iter()
            .find(|(i, ..)| *i == id)
            .map(|(_, port, _)| *port)
            .expect("a server of the four")
    }
}

/// Poll `/health/fleet` until every `(id, status, reason)` holds.
async fn wait_fleet(mon: &Binary, want: &[(&str, &str, &str)], within: Duration) {
    eventually(&format!("{want:?}"), within, async || {
        let (_, fleet_json) = mon.get("/health/fleet").await;
        let v: Value = serde_json::from_str(&fleet_json).expect("json");
        let read = |id: &str| {
            let s = v["servers"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["id"] == id));
            let field = |f: &str| s.and_then(|s| s[f].as_str()).unwrap_or("").to_owned();
            (field("status"), field("reason"))
        };
        if want
            .iter()
            .all(|(id, status, reason)| read(id) == ((*status).to_owned(), (*reason).to_owned()))
        {
            return Ok(());
        }
        Err(format!("not {want:?} in {within:?}: {v:#}"))
    })
    .await
}

/// The legacy HTTP+SSE transport under `transport: sse`: the four servers
/// read healthy at defaults, a tool call's progress arrives on the stream
/// and holds its idle deadline off, and a server that is killed reads
/// unhealthy at once (its stream ended), then healthy once restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_legacy_sse_servers_read_healthy_and_one_comes_back_after_a_restart() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-fastmcp2"),
        installed("tests/python/.venv-fastmcp4")
    );
    let mut sse = SseServers::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    // Progress every 500 ms for 3 s, against a 1.5 s idle deadline: only
    // progress heard on the stream lets the call finish.
    let probe = "    tool_probes:\n      - {tool: trigger-long-running-operation, arguments: {duration: 3, steps: 6}, interval: 1h, request_timeout: 1500ms, max_request_timeout: 20s}\n";
    let servers: String = sse
        .servers
        .iter()
        .map(|(id, port, _)| {
            let extra = if *id == "everything-sse" { probe } else { "" };
            format!(
                "  - id: {id}\n    transport: sse\n    url: http://127.0.0.1:{port}/sse\n{extra}"
            )
        })
        .collect();
    std::fs::write(&cfg, format!("servers:\n{servers}")).expect("write");
    let (code, out, err) = outcome(mcpmon().args(["check-config", cfg.to_str().expect("utf-8")]));
    assert!(code == 0 && err.is_empty(), "{out}{err}");
    let mon = Binary::start(&cfg, &[]).await;

    let healthy: Vec<(&str, &str, &str)> = sse
        .servers
        .iter()
        .map(|(id, ..)| (*id, "healthy", "ok"))
        .collect();
    wait_fleet(&mon, &healthy, Duration::from_secs(60)).await;
    for (id, ..) in &sse.servers {
        let (_, v) = mon.server(id).await;
        assert_eq!(v["era"], "legacy", "{id}: {v:#}");
        assert_eq!(v["transport"], "sse", "{id}: {v:#}");
        assert!(v["tools"].as_u64() >= Some(1), "{id}: {v:#}");
    }

    // `mcpmon probe` speaks it too.
    let url = format!("http://127.0.0.1:{}/sse", sse.port("supergateway-sse"));
    let (code, said, err) = outcome(mcpmon().args(["probe", "--transport", "sse", &url]));
    assert!(
        code == 0 && said.contains("state:      healthy (ok)"),
        "{said}{err}"
    );

    let tool = r#"server="everything-sse",tool="trigger-long-running-operation""#;
    let metrics = eventually("a tool call", Duration::from_secs(30), async || {
        let (_, m) = mon.get("/metrics").await;
        if m.contains(&format!(
            "mcpmon_tool_call_duration_seconds_count{{{tool}}} 1"
        )) {
            return Ok(m);
        }
        Err(format!("no tool call in 30 s:\n{m}"))
    })
    .await;
    assert!(
        !metrics.contains(&format!(
            "mcpmon_tool_call_cancellations_total{{reason=\"request_timeout\",{tool}}} 1"
        )),
        "the call was cancelled: its progress was not heard"
    );
    let progress = exposition::value(
        &metrics,
        "mcpmon_progress_interval_seconds_count",
        &[("server", "everything-sse")],
    );
    assert!(progress >= Some(4.0), "progress heard: {progress:?}");

    // Killed: its stream ends, and that is the verdict, before any ping.
    let port = sse.port("fastmcp2-sse");
    let (_, _, killed) = sse
        .servers
        .iter_mut()
        .find(|(id, ..)| *id == "fastmcp2-sse")
        .expect("listed");
    killed.kill().await;
    wait_fleet(
        &mon,
        &[("fastmcp2-sse", "unhealthy", "unreachable")],
        Duration::from_secs(8),
    )
    .await;
    let fastmcp = repo().join("tests/python/fastmcp_server.py");
    *killed = SseServers::fastmcp("fastmcp2-sse", fastmcp.to_str().expect("utf-8"), port).await;
    wait_fleet(&mon, &healthy, Duration::from_secs(60)).await;
    let (_, v) = mon.server("fastmcp2-sse").await;
    let closed = v["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["kind"] == "session_closed"))
        .map(|e| e["detail"].as_str().unwrap_or("").to_owned());
    assert!(
        closed
            .as_deref()
            .is_some_and(|d| d.contains("event stream")),
        "the close names the stream: {v:#}"
    );
}

/// The legacy HTTP+SSE transport under `transport: http`, as the four
/// servers serve it, reads `wrong_transport`; a plain web page and a path
/// with no endpoint read `not_mcp`. Each says so in few words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sse_servers_and_web_pages_under_http_are_named() {
    require!(
        installed("tests/node/node_modules"),
        installed("tests/python/.venv-fastmcp2"),
        installed("tests/python/.venv-fastmcp4")
    );
    let sse = SseServers::start().await;
    let page = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        page.path().join("index.html"),
        "<html><body><h1>Welcome</h1></body></html>",
    )
    .expect("write");
    let web_port = free_port();
    let web = third_party_http(
        &venv_bin("fastmcp4", "python"),
        &[
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "--directory",
            page.path().to_str().expect("utf-8"),
            &web_port.to_string(),
        ],
        &[],
        web_port,
    )
    .await;

    let url = |port: u16, path: &str| format!("http://127.0.0.1:{port}{path}");
    let p = |id| sse.port(id);
    let want = [
        (
            "everything-sse",
            url(p("everything-sse"), "/sse"),
            "wrong_transport",
            "Cannot POST /sse",
        ),
        (
            "supergateway-sse",
            url(p("supergateway-sse"), "/sse"),
            "wrong_transport",
            "Cannot POST /sse",
        ),
        (
            "fastmcp2-sse",
            url(p("fastmcp2-sse"), "/sse"),
            "wrong_transport",
            "HTTP 405",
        ),
        (
            "fastmcp4-sse",
            url(p("fastmcp4-sse"), "/sse"),
            "wrong_transport",
            "HTTP 405",
        ),
        ("web-page", url(web_port, "/"), "not_mcp", "HTTP 501"),
        (
            "no-endpoint",
            url(p("everything-sse"), "/nothing"),
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

    let named: Vec<(&str, &str, &str)> = want
        .iter()
        .map(|(id, _, reason, _)| (*id, "unhealthy", *reason))
        .collect();
    wait_fleet(&mon, &named, Duration::from_secs(60)).await;
    for (id, _, reason, says) in &want {
        let (_, v) = mon.server(id).await;
        let detail = v["detail"].as_str().unwrap_or("");
        assert!(detail.contains(says), "{id}: {detail}");
        assert!(
            !detail.contains('<') && detail.len() < 400,
            "{id}: the page itself is in the detail: {detail}"
        );
        if *reason == "wrong_transport" {
            assert!(
                detail.contains("legacy HTTP+SSE") && detail.contains("use `transport: sse`"),
                "{id}: {detail}"
            );
        }
    }
    drop((sse, web));
}
