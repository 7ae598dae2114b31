//! The `mcpmon` binary as users run it: `probe` exit codes and output, the
//! official MCP conformance suite's client scenarios against `probe`, and the
//! service started from the command line and stopped with SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// The child's stderr, line by line, read on a thread of its own.
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn probe_exit_code_is_zero_only_when_healthy() {
    require!(installed("tests/node/node_modules"));
    let demo = demo_server();
    let (code, out, err) = outcome(
        mcpmon()
            .args(["probe", "--"])
            .arg(&demo)
            .args(["--name", "p"]),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("state:      healthy (ok)"), "{out}");
    assert!(out.contains("demo-p"), "{out}");
    assert!(
        out.contains("tools:      build_report, crunch, health_check, sleep"),
        "{out}"
    );

    let (code, out, _) = outcome(
        mcpmon()
            .args(["probe", "--output", "json", "--"])
            .arg(&demo)
            .args(["--status", "degraded", "--era", "legacy"]),
    );
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["state"], "degraded");
    assert_eq!(v["reason"], "health_check_degraded");
    assert_eq!(v["era"], "legacy");
    assert_eq!(v["ping_ms"].as_array().map(Vec::len), Some(3));
    assert_eq!(v["health_check"]["status"], "degraded");

    let closed = ClosedPort::bind();
    let dead = closed.mcp_url();
    let (code, out, _) = outcome(mcpmon().args(["probe", &dead]));
    assert_eq!(code, 1);
    assert!(out.contains("state:      unhealthy (unreachable)"), "{out}");

    let (code, out, _) = outcome(mcpmon().args(["probe", "--", "/nonexistent/server"]));
    assert_eq!(code, 1);
    assert!(out.contains("unhealthy (connect_failed)"), "{out}");
}

#[test]
fn probe_calls_a_tool_and_reports_its_failure() {
    require!(installed("tests/node/node_modules"));
    let demo = demo_server();
    let (code, out, err) = outcome(
        mcpmon()
            .args([
                "probe",
                "--call",
                "build_report",
                "--args",
                r#"{"steps":2,"step_ms":10}"#,
                "--",
            ])
            .arg(&demo),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("call:       ok: report built in 2 steps"),
        "{out}"
    );
    let (code, out, _) = outcome(
        mcpmon()
            .args(["probe", "--call", "no_such_tool", "--"])
            .arg(&demo),
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("call:       failed"), "{out}");
}

#[test]
fn probe_rejects_bad_arguments_clearly() {
    require!(installed("tests/node/node_modules"));
    let (code, _, err) = outcome(mcpmon().args([
        "probe",
        "--call",
        "x",
        "--args",
        "[1]",
        "http://127.0.0.1:1/mcp",
    ]));
    assert_eq!(code, 2);
    assert!(err.contains("--args must be a JSON object"), "{err}");
    let (code, _, err) = outcome(mcpmon().args([
        "probe",
        "--protocol",
        "1999-01-01",
        "http://127.0.0.1:1/mcp",
    ]));
    assert_eq!(code, 2);
    assert!(err.contains("unknown protocol \"1999-01-01\""), "{err}");
}

/// How `mcpmon probe` takes part in the conformance scenarios that need a
/// tool called (the rest are probed plainly).
const CONFORMANCE_CALLS: &[(&str, &str)] = &[
    ("tools_call", r#"--call add_numbers --args '{"a":2,"b":3}'"#),
    ("sse-retry", "--call test_reconnection"),
    ("http-invalid-tool-headers", "--call valid_tool"),
    (
        "http-custom-headers",
        r#"--call test_custom_headers --args '{"region":"us-west1","priority":42,"verbose":false,"debug":true,"empty_val":"","method_val":"test-method","float_val":3.14159,"non_ascii_val":"Hello, \u4e16\u754c","whitespace_val":" padded ","leading_space_val":" us-west1","trailing_space_val":"us-west1 ","internal_space_val":"us west 1","control_char_val":"line1\nline2","crlf_val":"line1\r\nline2","tab_val":"\tindented","query":"SELECT * FROM users"}'"#,
    ),
];

/// Client scenarios with nothing for a monitor to take part in, each with
/// why: they pass with no check at all, so they are not run.
const CONFORMANCE_NOT_A_MONITORS: &[(&str, &str)] = &[
    (
        "sep-2640-client-no-prefetch",
        "skills: how an agent loads skill files",
    ),
    (
        "sep-2640-client-verify-digest",
        "skills: how an agent loads skill files",
    ),
    (
        "sep-2640-client-verify-size",
        "skills: how an agent loads skill files",
    ),
    (
        "sep-2640-client-verify-frontmatter",
        "skills: how an agent loads skill files",
    ),
];

/// Every client scenario of the newest conformance suite, with `mcpmon
/// probe` as the client under test (the suite appends the server URL):
/// each passes, or fails exactly as `tests/conformance/expected-failures.yml`
/// says and why (the suite itself checks that, stale entries included).
#[test]
fn conformance_client_scenarios_pass_or_fail_as_expected() {
    require!(installed("tests/node/node_modules"));
    let node_bin = repo().join("tests/node/node_modules/.bin");
    let runner = node_bin.join("conformance");
    assert!(
        runner.exists(),
        "{} missing: run .ci/setup",
        runner.display()
    );
    let probe = env!("CARGO_BIN_EXE_mcpmon");
    let expected = repo().join("tests/conformance/expected-failures.yml");
    let baseline = std::fs::read_to_string(&expected).expect("expected failures");
    let scratch = tempfile::tempdir().expect("tempdir");
    let path = format!(
        "{}:{}",
        node_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (code, listed, err) = outcome(Command::new(&runner).arg("list").env("PATH", &path));
    assert_eq!(code, 0, "{err}");
    let scenarios: Vec<&str> = listed
        .split("Client scenarios")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a list of client scenarios")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(scenarios.len() >= 40, "{listed}");
    assert!(scenarios.contains(&"sse-retry"), "{listed}");
    let mut run = 0;
    for scenario in scenarios {
        if CONFORMANCE_NOT_A_MONITORS
            .iter()
            .any(|(s, _)| *s == scenario)
        {
            continue;
        }
        let call = CONFORMANCE_CALLS
            .iter()
            .find(|(s, _)| *s == scenario)
            .map_or("", |(_, c)| c);
        let command = format!("{probe} probe {call}");
        let (code, out, err) = outcome(
            Command::new(&runner)
                .args(["client", "--command", &command, "--scenario", scenario])
                .args(["--timeout", "30000", "--expected-failures"])
                .arg(&expected)
                .current_dir(scratch.path())
                .env("PATH", &path),
        );
        let all = format!("{out}\n{err}");
        assert_eq!(code, 0, "{scenario}: exit {code}\n{all}");
        let in_baseline = baseline
            .lines()
            .any(|l| l.trim().strip_prefix("- ") == Some(scenario));
        if !in_baseline {
            // "Passed: 3/3, 0 failed, 0 warnings": one check at least, all passed.
            let counts = all
                .lines()
                .find_map(|l| l.trim().strip_prefix("Passed: "))
                .and_then(|l| l.split(',').next())
                .and_then(|l| l.split_once('/'))
                .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()));
            let partly = baseline.contains(&format!("- {scenario}:"));
            let all_passed = matches!(&counts, Some((a, b)) if a == b && b != "0");
            assert!(
                partly || (all.contains("OVERALL: PASSED") && all_passed),
                "{scenario}: counts {counts:?}\n{all}"
            );
        }
        run += 1;
    }
    assert!(run >= 40, "{run} scenarios run");
}

/// The service as started from the command line: serves on the given
/// address, logs JSON when asked, and on SIGTERM closes every session, leaves
/// no child behind and exits 0.
#[test]
fn service_runs_from_the_command_line_and_stops_on_sigterm() {
    require!(installed("tests/node/node_modules"));
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = marker("svc");
    let config = dir.path().join("fleet.yaml");
    std::fs::write(
        &config,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: one\n    transport: stdio\n    command: {:?}\n    env: {{MCPMON_TEST_MARKER: {mark:?}}}\n",
            demo_server().display()
        ),
    )
    .expect("write");
    let mut child = mcpmon()
        .args(["--config.file"])
        .arg(&config)
        .args([
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.format",
            "json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpmon");
    let rx = stderr_lines(&mut child);
    let mut addr = None;
    let mut log = Vec::new();
    let start = Instant::now();
    while addr.is_none() && start.elapsed() < Duration::from_secs(10) {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {e}: {line}"));
        if v["fields"]["message"] == "listening" {
            addr = v["fields"]["address"].as_str().map(str::to_owned);
        }
        log.push(line);
    }
    let addr = addr.unwrap_or_else(|| panic!("no listening line in:\n{}", log.join("\n")));

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let http = crate::support::test_client();
        eventually("the server healthy", Duration::from_secs(10), async || {
            let r = http
                .get(format!("http://{addr}/health/servers/one"))
                .send()
                .await;
            if let Ok(r) = r
                && r.status() == 200
            {
                return Ok(());
            }
            Err("server never healthy")
        })
        .await;
        for path in ["/-/healthy", "/-/ready", "/metrics"] {
            let r = http
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .expect("get");
            assert_eq!(r.status(), 200, "{path}");
        }
    });
    assert!(!pids_with_marker(&mark).is_empty());

    kill(&[child.id() as i32], libc::SIGTERM);
    let exited = eventually(
        "mcpmon exiting after SIGTERM",
        Duration::from_secs(15),
        async || child.try_wait().expect("wait").ok_or("running"),
    );
    let status = rt.block_on(exited);
    assert!(status.success(), "exit status {status}");
    assert!(
        pids_with_marker(&mark).is_empty(),
        "child survived mcpmon's shutdown"
    );
    // Every line was JSON and none leaked the marker's environment value.
    while let Ok(line) = rx.try_recv() {
        log.push(line);
    }
    assert!(
        log.iter().any(|l| l.contains("SIGTERM received")),
        "{}",
        log.join("\n")
    );
}

#[test]
fn probe_options_count_after_the_url_too() {
    require!(installed("tests/node/node_modules"));
    // Nothing listens there: the answer is quick, and it must be JSON.
    let closed = ClosedPort::bind();
    let url = closed.mcp_url();
    let (code, out, err) =
        outcome(mcpmon().args(["probe", &url, "--output", "json", "--pings", "1"]));
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["reason"], "unreachable", "{v}");
    // After `--`, hyphenated words belong to the command.
    let demo = demo_server();
    let (code, out, _) = outcome(
        mcpmon()
            .args(["probe", "--output", "json", "--"])
            .arg(&demo)
            .args(["--name", "dashed"]),
    );
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["server_info"]["name"], "demo-dashed", "{v}");
}

#[test]
fn logs_to_a_pipe_are_plain_and_an_unreachable_server_is_not_an_error() {
    require!(installed("tests/node/node_modules"));
    // stderr is a pipe here, as under systemd or a log shipper.
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let closed = ClosedPort::bind();
    let url = closed.mcp_url();
    std::fs::write(
        &cfg,
        format!("{FAST_GLOBAL}servers:\n  - id: gone\n    transport: http\n    url: {url}\n"),
    )
    .expect("write");
    let mut child = mcpmon()
        .arg("--config.file")
        .arg(&cfg)
        .args(["--web.listen-address", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    let mut lines: Vec<String> = Vec::new();
    let pump = |lines: &mut Vec<String>| {
        while let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
    };
    // The address it listens on, from its own log line.
    let start = Instant::now();
    let address = loop {
        pump(&mut lines);
        if let Some(a) = lines.iter().find_map(|l| {
            l.contains("listening")
                .then(|| l.split("address=").nth(1)?.split_whitespace().next())
                .flatten()
        }) {
            break a.to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            lines.join("\n")
        );
    };
    // Let it fail to connect several times (backoff tops out at 1 s).
    let reconnects = || {
        let body = std::process::Command::new("curl")
            .args(["-s", &format!("http://{address}/metrics")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        metric(
            &body,
            r#"mcpmon_reconnects_total{reason="unreachable",server="gone"}"#,
        )
        .unwrap_or(0.0)
    };
    while reconnects() < 3.0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            lines.join("\n")
        );
        pump(&mut lines);
    }
    kill(&[child.id() as i32], libc::SIGTERM);
    let _ = child.wait();
    pump(&mut lines);
    let all = lines.join("\n");
    assert!(!all.contains('\u{1b}'), "colour codes in a pipe:\n{all}");
    assert!(
        !all.contains("ERROR"),
        "an expected state logged as an error:\n{all}"
    );
    // Said once, when it started failing; the retries failing the same way are not news.
    let said = lines
        .iter()
        .filter(|l| l.contains("cannot open session"))
        .count();
    assert_eq!(said, 1, "{all}");
}

#[test]
fn json_log_fields_are_the_documented_ones() {
    require!(installed("tests/node/node_modules"));
    // docs/running.md's "Logs" section lists these; dashboards and log queries
    // are built on them, so a rename must fail here first.
    let closed = ClosedPort::bind();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: up\n    transport: stdio\n    command: {:?}\n  \
             - id: down\n    transport: http\n    url: http://127.0.0.1:{}/mcp\n",
            demo_server(),
            closed.port()
        ),
    )
    .expect("write");
    let mut child = mcpmon()
        .arg("--config.file")
        .arg(&cfg)
        .args([
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.format",
            "json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = stderr_lines(&mut child);
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let start = Instant::now();
    let wanted = [
        "listening",
        "monitoring started",
        "session opened",
        "cannot open session",
        "state changed",
    ];
    while !wanted
        .iter()
        .all(|m| seen.iter().any(|v| v["fields"]["message"] == *m))
    {
        assert!(start.elapsed() < Duration::from_secs(30), "{seen:?}");
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}")));
        }
    }
    kill(&[child.id() as i32], libc::SIGTERM);
    let _ = child.wait();
    for v in &seen {
        for key in ["timestamp", "level", "target"] {
            assert!(v[key].is_string(), "{key} in {v}");
        }
        assert!(v["fields"]["message"].is_string(), "{v}");
    }
    let with = |message: &str, keys: &[&str]| {
        let v = seen
            .iter()
            .find(|v| v["fields"]["message"] == message)
            .expect(message);
        for k in keys {
            assert!(!v["fields"][*k].is_null(), "{message}: no {k} in {v}");
        }
    };
    with("listening", &["address", "tls"]);
    with("monitoring started", &["servers", "config"]);
    with(
        "session opened",
        &[
            "server",
            "era",
            "protocol",
            "server_name",
            "server_version",
            "tools",
            "handshake_ms",
        ],
    );
    with("cannot open session", &["server", "reason", "detail"]);
    with("state changed", &["server", "from", "to", "reason"]);
}
