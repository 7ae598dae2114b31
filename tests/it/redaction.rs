//! A known secret planted in every place the config can hold one (header
//! value, bearer token, stdio env value, URL query, URL password, URL path)
//! must not
//! appear in any output: `/health/*`, `/metrics`, the logs (even when a
//! server prints it to its stderr, or an error quotes the URL), error
//! messages, or `check-config`.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

const SECRET: &str = "s3cr3t-Planted-7f9c";
/// Used only in one URL path, so nothing else registers it.
const PATH_SECRET: &str = "p4th-0nly-Secret-21de";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_secret_appears_in_no_output() {
    let live = demo_http(&["--name", "live"], 0).await;
    let closed = ClosedPort::bind();
    let dead_port = closed.port();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let demo = demo_server().display().to_string();
    std::fs::write(
        &cfg,
        format!(
            r#"{FAST_GLOBAL}servers:
  - id: headers
    transport: http
    url: {live_url}
    headers: {{X-Api-Key: "${{PLANTED}}", Authorization-Extra: "Bearer ${{PLANTED}}"}}
    bearer_token_env: PLANTED
  - id: query
    transport: http
    url: "http://127.0.0.1:{dead_port}/mcp?token=${{PLANTED}}"
  - id: userinfo
    transport: http
    url: "http://admin:${{PLANTED}}@127.0.0.1:{dead_port}/mcp"
  - id: path
    transport: http
    url: "http://127.0.0.1:{dead_port}/api/s/${{PATH_ONLY}}/mcp"
  - id: env
    transport: stdio
    command: /bin/sh
    args: ["-c", "echo \"starting with password $DB_PASSWORD\" >&2; exec {demo} --name env"]
    env: {{DB_PASSWORD: "${{PLANTED}}"}}
    stderr_log_level: info
"#,
            live_url = live.url,
        ),
    )
    .expect("write");

    // check-config names problems, never values.
    let out = Command::new(env!("CARGO_BIN_EXE_mcpmon"))
        .args(["check-config"])
        .arg(&cfg)
        .env("PLANTED", SECRET)
        .env("PATH_ONLY", PATH_SECRET)
        .output()
        .expect("check-config");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(SECRET), "check-config: {text}");

    // The variable is given to the child only: setting it in this process
    // would race with other tests' threads.
    let mon = Binary::start_with_env(
        &cfg,
        &[],
        &[("PLANTED", SECRET), ("PATH_ONLY", PATH_SECRET)],
    )
    .await;
    mon.wait_status("headers", "healthy", Duration::from_secs(10))
        .await;
    mon.wait_status("env", "healthy", Duration::from_secs(10))
        .await;
    for id in ["query", "userinfo", "path"] {
        mon.wait_status(id, "unhealthy", Duration::from_secs(10))
            .await;
    }
    // Let errors repeat (reconnect attempts log their error text): three
    // attempts of each failing server, and the planted stderr line logged.
    eventually(
        "the failing servers retried",
        Duration::from_secs(30),
        async || {
            let (_, m) = mon.get("/metrics").await;
            let tries = ["query", "userinfo", "path"]
                .map(|id| exposition::sum(&m, "mcpmon_reconnects_total", &[("server", id)]));
            let logged = mon.log_text().contains("starting with password");
            if logged && tries.iter().all(|n| *n >= 3.0) {
                Ok(())
            } else {
                Err((logged, tries))
            }
        },
    )
    .await;

    let mut outputs = vec![("/health/fleet".to_owned(), mon.get("/health/fleet").await.1)];
    for id in ["headers", "query", "userinfo", "path", "env"] {
        let path = format!("/health/servers/{id}");
        outputs.push((path.clone(), mon.get(&path).await.1));
    }
    outputs.push(("/metrics".to_owned(), mon.get("/metrics").await.1));
    outputs.push(("logs".to_owned(), mon.log_text()));
    for (name, text) in &outputs {
        assert!(!text.contains(SECRET), "{name} leaks the secret:\n{text}");
        assert!(
            !text.contains(PATH_SECRET),
            "{name} leaks the URL path's secret:\n{text}"
        );
    }
    let (_, path) = mon.get("/health/servers/path").await;
    assert!(path.contains("/api/s/<redacted>/mcp"), "{path}");
    // The redaction is visible, so the test did see the places it checks.
    let logs = mon.log_text();
    assert!(logs.contains("starting with password <redacted>"), "{logs}");
    let (_, query) = mon.get("/health/servers/query").await;
    assert!(
        query.contains("token=<redacted>") || !query.contains("token="),
        "{query}"
    );

    // `probe` prints errors that quote the URL.
    let out = Command::new(env!("CARGO_BIN_EXE_mcpmon"))
        .args([
            "probe",
            "--output",
            "json",
            &format!("http://127.0.0.1:{dead_port}/mcp?token={SECRET}"),
        ])
        .output()
        .expect("probe");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains(SECRET), "probe: {text}");
}

/// What one server's settings are (literal `env:` values such as a log
/// level or a bind address) never censors another server's text: only
/// what the operator marked secret is, and only in its own server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_s_literal_env_values_never_change_another_server_s_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let demo = demo_server().display().to_string();
    let closed = ClosedPort::bind();
    let dead = closed.port();
    std::fs::write(
        &cfg,
        format!(
            r#"{FAST_GLOBAL}servers:
  - id: settings
    transport: stdio
    command: {demo:?}
    args: ["--name", "settings"]
    env: {{FASTMCP_LOG_LEVEL: ERROR, BIND_HOST: 127.0.0.1, LOG_FORMAT: plain}}
  - id: talker
    transport: stdio
    command: /bin/sh
    args: ["-c", "echo 'ERROR listening on 127.0.0.1 in plain words' >&2; exec {demo} --name talker"]
    stderr_log_level: info
  - id: remote
    transport: http
    url: http://127.0.0.1:{dead}/mcp
"#
        ),
    )
    .expect("write");
    let mon = Binary::start(&cfg, &[]).await;
    for id in ["settings", "talker"] {
        mon.wait_status(id, "healthy", Duration::from_secs(20))
            .await;
    }
    let (remote, _) = mon
        .wait_status("remote", "unhealthy", Duration::from_secs(20))
        .await;
    let detail = remote["detail"].as_str().unwrap_or("");
    assert!(detail.contains("127.0.0.1"), "censored: {detail}");
    eventually(
        "the talker's stderr logged",
        Duration::from_secs(10),
        async || {
            if mon.log_text().contains("in plain words") {
                Ok(())
            } else {
                Err("not yet")
            }
        },
    )
    .await;
    let logs = mon.log_text();
    assert!(
        logs.contains("ERROR listening on 127.0.0.1 in plain words"),
        "another server's settings changed the talker's line"
    );
    assert!(!logs.contains("<redacted>"), "nothing here is a secret");
}
