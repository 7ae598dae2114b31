//! The load-balancer recipes of `docs/operations.md`, run on live proxies:
//! HAProxy and nginx send traffic only to the MCP servers mcpmon judges fit,
//! route around one it judges dead, and keep serving (fail open) when
//! mcpmon itself is gone. The proxies' configs, the nginx generator's command
//! and the Kubernetes readiness probe are taken from docs/operations.md.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::*;

/// The first fenced block of `lang` under the `### {section}` heading of
/// docs/operations.md: the tests run the recipes as written there.
fn recipe(section: &str, lang: &str) -> String {
    let doc = std::fs::read_to_string(repo().join("docs/operations.md")).expect("operations.md");
    let body = doc
        .split(&format!("\n### {section}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no section {section}"));
    let body = body.split("\n### ").next().unwrap_or_default();
    let fence = format!("```{lang}\n");
    let start = body
        .find(&fence)
        .unwrap_or_else(|| panic!("no {lang} block in {section}"))
        + fence.len();
    body[start..]
        .split("```")
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The Kubernetes readiness command of docs/operations.md for `search-2`,
/// pointed at `mcpmon`; its exit status says ready (0) or not.
fn k8s_ready(mcpmon: &str) -> Option<i32> {
    let doc = std::fs::read_to_string(repo().join("docs/operations.md")).expect("operations.md");
    let section = doc
        .split("\n### Kubernetes\n")
        .nth(1)
        .expect("Kubernetes section");
    let block = section
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap_or_default())
        .find(|b| b.contains("exec:"))
        .expect("an exec readiness probe");
    let probe: serde_json::Value = yaml_serde::from_str(block).expect("yaml");
    let argv: Vec<String> = probe["readinessProbe"]["exec"]["command"]
        .as_array()
        .expect("command")
        .iter()
        .map(|a| {
            a.as_str()
                .expect("string")
                .replace("http://mcpmon.monitoring:9850", mcpmon)
                .replace("search-1", "search-2")
        })
        .collect();
    std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .expect("run the probe")
        .code()
}

/// Which demo server answers an `initialize` sent to `url` ("none" if none).
async fn who(client: &reqwest::Client, url: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"lb-test","version":"1"}}}"#;
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body)
        .send()
        .await;
    let text = match sent {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    ["demo-s1", "demo-s2"]
        .into_iter()
        .find(|n| text.contains(n))
        .unwrap_or("none")
        .to_owned()
}

/// Who answers 12 requests in a row.
async fn answering(client: &reqwest::Client, url: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..12 {
        seen.insert(who(client, url).await);
    }
    seen
}

/// Wait (bounded) until exactly `want` answer.
async fn until_answering(client: &reqwest::Client, url: &str, want: &[&str], what: &str) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    eventually(
        &format!("{what}: answering {want:?}"),
        Duration::from_secs(40),
        async || {
            let seen = answering(client, url).await;
            if seen == want {
                return Ok(());
            }
            Err(format!("{what}: answering {seen:?}, want {want:?}"))
        },
    )
    .await
}

async fn two_backends() -> (Spawned, Spawned, Binary, tempfile::TempDir) {
    let s1 = demo_http(&["--name", "s1"], 0).await;
    let s2 = demo_http(&["--name", "s2"], 0).await;
    // The ids the recipes in docs/operations.md use.
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: search-1\n    transport: http\n    url: {}\n  \
             - id: search-2\n    transport: http\n    url: {}\n",
            s1.url, s2.url
        ),
    )
    .expect("write");
    let mon = Binary::start(&cfg, &[]).await;
    mon.wait_status("search-1", "healthy", Duration::from_secs(20))
        .await;
    mon.wait_status("search-2", "healthy", Duration::from_secs(20))
        .await;
    (s1, s2, mon, dir)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_checks_each_server_through_mcpmon_and_fails_open() {
    require!(
        program("haproxy"),
        program("nginx"),
        installed("tests/python/.venv-envoy")
    );
    let (s1, mut s2, mut mon, dir) = two_backends().await;
    let mcpmon_port = mon.addr.rsplit(':').next().expect("port").to_owned();
    let port = free_port();
    let socket = dir.path().join("haproxy.sock");
    // The recipe as docs/operations.md writes it, pointed at this test's
    // addresses, after a prelude of process settings and faster timers.
    let doc = recipe("HAProxy", "haproxy")
        .replace("bind :8443", &format!("bind 127.0.0.1:{port}"))
        .replace(
            "mcpmon.internal port 9850",
            &format!("127.0.0.1 port {mcpmon_port}"),
        )
        .replace("inter 2s", "inter 300ms")
        .replace("10.0.0.11:8931", &format!("127.0.0.1:{}", s1.port))
        .replace("10.0.0.12:8931", &format!("127.0.0.1:{}", s2.port));
    assert!(
        !doc.contains("10.0.0.") && !doc.contains(".internal"),
        "{doc}"
    );
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 256\n  stats socket {}\n\
             defaults\n  mode http\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n{doc}",
            socket.display(),
        ),
    )
    .expect("write");
    let _proxy = third_party_http(
        &which("haproxy"),
        &["-f", cfg.to_str().expect("utf-8"), "-db"],
        &[],
        port,
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let c = client();
    until_answering(&c, &url, &["demo-s1", "demo-s2"], "both up").await;

    // s2 dies: mcpmon judges it, HAProxy takes it out, s1 carries on.
    s2.kill().await;
    mon.wait_status("search-2", "unhealthy", Duration::from_secs(20))
        .await;
    until_answering(&c, &url, &["demo-s1"], "s2 taken out").await;

    // mcpmon goes away: every check fails, and traffic falls back to the
    // unchecked backend instead of stopping.
    mon.signal(libc::SIGTERM);
    assert!(mon.wait_exit(Duration::from_secs(15)).await.success());
    eventually("the checks failing", Duration::from_secs(20), async || {
        if haproxy_stat(&socket)
            .await
            .lines()
            .any(|l| l.starts_with("mcp_search,search-1,") && l.contains(",DOWN,"))
        {
            Ok(())
        } else {
            Err("not yet")
        }
    })
    .await;
    assert_eq!(
        answering(&c, &url).await,
        BTreeSet::from(["demo-s1".to_owned()]),
        "fail open: served while mcpmon is down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_upstreams_written_from_mcpmon_route_around_a_dead_server() {
    require!(
        program("haproxy"),
        program("nginx"),
        installed("tests/python/.venv-envoy")
    );
    let (s1, mut s2, mut mon, dir) = two_backends().await;
    let port = free_port();
    let upstreams = dir.path().join("mcp.upstream.conf");
    let (mcpmon_url, p1, p2) = (format!("http://{}", mon.addr), s1.port, s2.port);
    // The generator command as docs/operations.md writes it.
    let command = recipe("nginx", "sh")
        .replace("\\\n", " ")
        .replace("http://mcpmon.internal:9850", &mcpmon_url)
        .replace("10.0.0.11:8931", &format!("127.0.0.1:{p1}"))
        .replace("10.0.0.12:8931", &format!("127.0.0.1:{p2}"))
        .replace(
            "/etc/nginx/conf.d/mcp_search.upstream.conf",
            upstreams.to_str().expect("utf-8"),
        );
    let command = command
        .split(" && ")
        .next()
        .expect("the generator")
        .to_owned();
    let words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
    assert_eq!(words[0], "deploy/nginx/mcpmon-upstreams.py", "{command}");
    let render = || {
        std::process::Command::new("python3")
            .current_dir(repo())
            .args(&words)
            .status()
            .expect("run the generator")
            .code()
    };
    assert_eq!(render(), Some(0), "first write");
    // The server block as docs/operations.md writes it, inside a minimal
    // http block of process settings.
    let doc = recipe("nginx", "nginx")
        .replace(
            "/etc/nginx/conf.d/mcp_search.upstream.conf",
            upstreams.to_str().expect("utf-8"),
        )
        .replace("listen 8443;", &format!("listen 127.0.0.1:{port};"));
    assert!(!doc.contains("8443") && !doc.contains("/etc/"), "{doc}");
    let conf = dir.path().join("nginx.conf");
    let d = dir.path().display();
    std::fs::write(
        &conf,
        format!(
            "pid {d}/nginx.pid;\nerror_log stderr;\nevents {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
             fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{doc}}}\n"
        ),
    )
    .expect("write");
    let nginx = third_party_http(
        &which("nginx"),
        &[
            "-p",
            dir.path().to_str().expect("utf-8"),
            "-c",
            conf.to_str().expect("utf-8"),
            "-g",
            "daemon off;",
        ],
        &[],
        port,
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let c = client();
    until_answering(&c, &url, &["demo-s1", "demo-s2"], "both up").await;
    assert_eq!(render(), Some(3), "nothing changed, no reload");

    assert_eq!(
        k8s_ready(&mcpmon_url),
        Some(0),
        "ready while mcpmon says healthy"
    );
    s2.kill().await;
    mon.wait_status("search-2", "unhealthy", Duration::from_secs(20))
        .await;
    assert_eq!(k8s_ready(&mcpmon_url), Some(1), "unready on mcpmon's 503");
    assert_eq!(render(), Some(0), "s2 written down");
    assert!(
        std::fs::read_to_string(&upstreams)
            .expect("read")
            .contains(&format!("server 127.0.0.1:{} down;", s2.port))
    );
    let master = nginx.child.id().expect("nginx pid") as i32;
    kill(&[master], libc::SIGHUP);
    until_answering(&c, &url, &["demo-s1"], "s2 routed around").await;

    // mcpmon gone: the generator leaves the last good file, nginx keeps serving.
    mon.signal(libc::SIGTERM);
    assert!(mon.wait_exit(Duration::from_secs(15)).await.success());
    let before = std::fs::read_to_string(&upstreams).expect("read");
    assert_eq!(render(), Some(2), "mcpmon unreachable");
    assert_eq!(
        k8s_ready(&mcpmon_url),
        Some(0),
        "the readiness probe fails open too"
    );
    assert_eq!(std::fs::read_to_string(&upstreams).expect("read"), before);
    assert_eq!(
        answering(&c, &url).await,
        BTreeSet::from(["demo-s1".to_owned()])
    );
}

#[test]
fn the_envoy_recipe_matches_envoys_own_api() {
    require!(
        program("haproxy"),
        program("nginx"),
        installed("tests/python/.venv-envoy")
    );
    // No Envoy build installs here: the recipe is checked against Envoy's
    // API definitions instead (and a health check address must be an IP).
    let python = repo().join("tests/python/.venv-envoy/bin/python");
    assert!(
        python.exists(),
        "{} missing: run .ci/setup",
        python.display()
    );
    let out = std::process::Command::new(python)
        .arg(repo().join("tests/lb/check_envoy.py"))
        .arg(repo().join("docs/operations.md"))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
