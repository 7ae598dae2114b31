//! The fleet file: every invalid example is pinned to its exact messages
//! (file:line:column), checked through the real `check-config` command; valid
//! files resolve defaults, overrides, paths and secrets as documented.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mcpmon::config::{self, Protocol, TransportSpec};

fn check_config(file: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpmon"))
        .args(["check-config", file])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("MCPMON_TEST_UNSET_VAR")
        .output()
        .expect("run mcpmon");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TUNABLES: &str = "`ping_interval`, `ping_timeout`, `connect_timeout`, `request_timeout`, \
`max_request_timeout`, `session_idle_limit`, \
`health_check_interval`, `health_check_timeout`, `health_check_tool`, `health_check_arguments`, \
`health_check_max_fields`, `tools_interval`, `stuck_after`, `window`, `rise`, `fall`, `healthy_max_error_ratio`, \
`healthy_max_latency`, `degraded_max_error_ratio`, `degraded_max_latency`, `backoff_initial`, \
`backoff_max`, `backoff_reset_after`, `protocol`, `stderr_log_level`, `slo`";

#[test]
fn invalid_files_are_pinned_to_their_messages() {
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "tests/testdata/invalid-tls.yml",
            vec![
                "tests/testdata/invalid-tls.yml:5:10: `tls` applies to http servers, not stdio".to_owned(),
                "tests/testdata/invalid-tls.yml:10:7: `cert_file` and `key_file` go together".to_owned(),
                "tests/testdata/invalid-tls.yml:10:16: cannot read \"no-such-ca.pem\": No such file or directory (os error 2)".to_owned(),
                "tests/testdata/invalid-tls.yml:12:20: min_version \"TLS10\": TLS12 or TLS13".to_owned(),
            ],
        ),
        (
            "tests/testdata/invalid-condition.yml",
            vec![
                "tests/testdata/invalid-condition.yml:9:36: condition \"says-utc\": syntax error at 1:24 of the expression: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}".to_owned(),
                "tests/testdata/invalid-condition.yml:10:32: condition \"typo\": unknown variable \"reslt\"; a condition here reads result and duration".to_owned(),
                "tests/testdata/invalid-condition.yml:14:16: condition name \"bad name!\": 1 to 64 of [A-Za-z0-9_.-]".to_owned(),
                "tests/testdata/invalid-condition.yml:15:16: condition name \"has-tools\" is used twice in this server".to_owned(),
            ],
        ),
        (
            "tests/testdata/invalid-unknown-key.yml",
            vec![format!(
                "tests/testdata/invalid-unknown-key.yml:3:3: global: unknown field `pign_timeout`, expected one of {TUNABLES}"
            )],
        ),
        (
            "tests/testdata/invalid-server-key.yml",
            vec![format!(
                "tests/testdata/invalid-server-key.yml:5:21: server \"billing\": unknown field `ping_intervall`, expected one of {TUNABLES}"
            )],
        ),
        (
            "tests/testdata/invalid-duration.yml",
            vec!["tests/testdata/invalid-duration.yml:2:3: global: invalid duration \"10 sekonds\" (unknown time unit \"sekonds\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)); write it like 250ms, 5s or 2m".to_owned()],
        ),
        (
            // Durations past ten years: a window of 300000y once panicked
            // the state owner.
            "tests/testdata/invalid-long-duration.yml",
            vec![
                "tests/testdata/invalid-long-duration.yml:3:5: maintenance[0]: invalid duration \"300000y\" (over the longest accepted, 10years); write it like 250ms, 5s or 2m".to_owned(),
                "tests/testdata/invalid-long-duration.yml:8:5: server \"a\": invalid duration \"20y\" (over the longest accepted, 10years); write it like 250ms, 5s or 2m".to_owned(),
            ],
        ),
        (
            "tests/testdata/invalid-transport.yml",
            vec!["tests/testdata/invalid-transport.yml:3:16: servers[0].transport: unknown variant `websocket`, expected one of `stdio`, `http`, `sse`".to_owned()],
        ),
        (
            "tests/testdata/invalid-yaml.yml",
            vec!["tests/testdata/invalid-yaml.yml:4:4: did not find expected '-' indicator, while parsing a block collection at line 2 column 3".to_owned()],
        ),
        (
            "tests/testdata/invalid-many.yml",
            [
                "3:17: ping_timeout (5s) is longer than ping_interval (2s): probes would overlap",
                "8:9: duplicate server id \"billing\"",
                "10:10: url scheme \"ftp\" is not http or https",
                "11:9: server id \"bad id!\" must match [a-zA-Z0-9_.-]+",
                "14:14: `command` applies to stdio servers, not http",
                "15:11: rise must be at least 1",
                "19:30: environment variable \"MCPMON_TEST_UNSET_VAR\" is not set",
                "20:15: unknown protocol \"2099-01-01\"; use auto or one of 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25, 2026-07-28",
            ]
            .iter()
            .map(|l| format!("tests/testdata/invalid-many.yml:{l}"))
            .collect(),
        ),
        (
            // Type errors and unknown keys in several parts, and semantic
            // errors, all reported in one pass.
            "tests/testdata/invalid-types.yml",
            [
                "2:3: global: invalid duration \"10 sekonds\" (unknown time unit \"sekonds\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years (and few variations)); write it like 250ms, 5s or 2m".to_owned(),
                "4:29: fleet.min_available_percentage: invalid type: string \"lots\", expected f64".to_owned(),
                "7:16: servers[0].transport: unknown variant `websocket`, expected one of `stdio`, `http`, `sse`".to_owned(),
                "12:11: servers[1].args: invalid type: string \"not a list\", expected a sequence".to_owned(),
                "15:10: url scheme \"ftp\" is not http or https".to_owned(),
                format!("19:21: server \"d\": unknown field `ping_intervall`, expected one of {TUNABLES}"),
            ]
            .iter()
            .map(|l| format!("tests/testdata/invalid-types.yml:{l}"))
            .collect(),
        ),
        (
            // Objectives outside a percentage, a bound no exposition keeps,
            // a window too short for the burn-rate alerts.
            "tests/testdata/invalid-slo.yml",
            [
                "2:23: slo.availability is a percentage above 0 and below 100, got 100",
                "2:36: slo.window is whole hours, at least 1d (the burn-rate alerts look back up to 3d)",
                "8:26: slo.latency_threshold must be a bound every exposition keeps of the liveness histogram, in seconds one of 0.01, 0.1, 0.5, 2.5",
            ]
            .iter()
            .map(|l| format!("tests/testdata/invalid-slo.yml:{l}"))
            .collect(),
        ),
        (
            "tests/testdata/invalid-timers.yml",
            [
                "2:20: request_timeout (2m) is longer than max_request_timeout (1m)",
                "9:18: server \"a\": stuck_after (5s) must be longer than ping_timeout (5s): every late answer would be judged stuck",
                "13:25: server \"b\": ping_interval (10s) must be shorter than session_idle_limit (10s): the session would be cut between probes",
                "15:9: tool probe \"report\": request_timeout (30s) is longer than max_request_timeout (10s)",
            ]
            .iter()
            .map(|l| format!("tests/testdata/invalid-timers.yml:{l}"))
            .collect(),
        ),
    ];
    for (file, want) in cases {
        let (code, stdout, stderr) = check_config(file);
        assert_eq!(code, 1, "{file}: exit code; stdout {stdout}");
        let got: Vec<&str> = stderr.lines().collect();
        assert_eq!(got, want, "{file}");
    }
}

#[test]
fn every_invalid_example_has_a_pinned_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata");
    let source = include_str!("config.rs");
    for entry in std::fs::read_dir(dir).expect("testdata") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.starts_with("invalid-") {
            assert!(
                source.contains(&format!("\"tests/testdata/{name}\"")),
                "{name} is not pinned"
            );
        }
    }
}

#[test]
fn the_demo_fleet_and_the_design_example_are_valid() {
    let (code, stdout, stderr) = check_config("examples/demo-fleet.yaml");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.trim(),
        "examples/demo-fleet.yaml: valid, 5 server(s)"
    );
}

#[test]
fn risky_timers_are_warnings_not_errors() {
    let (code, stdout, stderr) = check_config("tests/testdata/warn-risky-timers.yml");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.trim(),
        "tests/testdata/warn-risky-timers.yml: valid, 1 server(s)"
    );
    let want: Vec<String> = [
        "3:17: ping_timeout (50ms) is shorter than 100ms: scheduling noise alone will read as lateness",
        "4:16: stuck_after (45s) allows fewer than 3 liveness probes (30s apart) before a server is judged stuck and restarted",
        "9:20: server \"behind-proxy\": ping_interval (55s) is within 20% of session_idle_limit (1m)",
        "13:9: tool probe \"build_report\": max_request_timeout (5m) is longer than its interval (1m); overdue calls will be skipped",
    ]
    .iter()
    .map(|l| format!("warning: tests/testdata/warn-risky-timers.yml:{l}"))
    .collect();
    assert_eq!(stderr.lines().collect::<Vec<_>>(), want);
}

#[test]
fn a_legacy_sse_url_under_http_is_a_warning() {
    let (code, stdout, stderr) = check_config("tests/testdata/warn-sse-url.yml");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.trim(),
        "tests/testdata/warn-sse-url.yml: valid, 2 server(s)"
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "warning: tests/testdata/warn-sse-url.yml:4:10: server \"old-bridge\": a URL ending in /sse is usually the legacy HTTP+SSE transport (2024-11-05): use `transport: sse`, or the server's Streamable HTTP endpoint (often /mcp)"
        ]
    );
}

#[test]
fn missing_file_is_a_clear_error() {
    let (code, _, stderr) = check_config("tests/testdata/nope.yml");
    assert_eq!(code, 1);
    assert!(
        stderr.contains("tests/testdata/nope.yml") && stderr.contains("cannot read config file"),
        "{stderr}"
    );
}

fn parse(text: &str, env: &[(&str, &str)]) -> Result<config::Config, config::ConfigErrors> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    config::parse(Path::new("/etc/mcpmon/fleet.yaml"), text, &move |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

#[test]
fn defaults_global_overrides_and_server_overrides_resolve_in_order() {
    let cfg = parse(
        r#"
global:
  ping_interval: 3s
  fall: 5
servers:
  - id: a
    transport: stdio
    command: bin/server
    cwd: work
  - id: b
    transport: http
    url: http://127.0.0.1:9/mcp
    ping_interval: 250ms
    ping_timeout: 100ms
    protocol: 2025-06-18
"#,
        &[],
    )
    .expect("valid");
    let a = &cfg.servers[0];
    assert_eq!(a.settings.ping_interval.0, Duration::from_secs(3));
    assert_eq!(
        a.settings.ping_timeout.0,
        Duration::from_secs(3),
        "an unset timeout is capped at its interval"
    );
    assert_eq!(a.settings.fall, 5);
    assert_eq!(a.settings.rise, 2, "default");
    assert_eq!(a.protocol, Protocol::Auto);
    let TransportSpec::Stdio { command, cwd, .. } = &a.transport else {
        panic!("stdio")
    };
    assert_eq!(
        command,
        Path::new("/etc/mcpmon/bin/server"),
        "relative to the file"
    );
    assert_eq!(cwd.as_deref(), Some(Path::new("/etc/mcpmon/work")));
    let b = &cfg.servers[1];
    assert_eq!(b.settings.ping_interval.0, Duration::from_millis(250));
    assert_eq!(b.protocol, Protocol::Pinned("2025-06-18".into()));
    assert_eq!(cfg.fleet.min_available_percentage, 100.0);
}

#[test]
fn plain_commands_are_looked_up_in_path() {
    let cfg = parse(
        "servers:\n  - {id: a, transport: stdio, command: npx, args: [x]}\n",
        &[],
    )
    .expect("valid");
    let TransportSpec::Stdio { command, .. } = &cfg.servers[0].transport else {
        panic!("stdio")
    };
    assert_eq!(command, Path::new("npx"));
}

#[test]
fn secrets_expand_from_the_environment_and_never_print() {
    let cfg = parse(
        r#"
servers:
  - id: api
    transport: http
    url: https://mcp.example.com/mcp
    headers: {X-Api-Key: "${API_KEY}"}
    bearer_token_env: TOKEN
  - id: local
    transport: stdio
    command: /bin/server
    env: {DB_PASSWORD: "pw-${DB_PW}"}
"#,
        &[
            ("API_KEY", "k-123456"),
            ("TOKEN", "t-abcdef"),
            ("DB_PW", "s3cret"),
        ],
    )
    .expect("valid");
    let TransportSpec::Http {
        headers,
        bearer_token,
        ..
    } = &cfg.servers[0].transport
    else {
        panic!("http")
    };
    assert_eq!(headers[0].1.expose(), "k-123456");
    assert_eq!(bearer_token.as_ref().map(|t| t.expose()), Some("t-abcdef"));
    let TransportSpec::Stdio { env, .. } = &cfg.servers[1].transport else {
        panic!("stdio")
    };
    assert_eq!(env[0].1.expose(), "pw-s3cret");
    let printed = format!("{cfg:?}");
    for secret in ["k-123456", "t-abcdef", "s3cret"] {
        assert!(!printed.contains(secret), "{secret} printed in {printed}");
    }
}

#[test]
fn a_missing_bearer_variable_is_an_error_naming_it() {
    let err = parse(
        "servers:\n  - id: a\n    transport: http\n    url: http://127.0.0.1:1/mcp\n    bearer_token_env: NOPE\n",
        &[],
    )
    .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "/etc/mcpmon/fleet.yaml:5:23: environment variable \"NOPE\" named by bearer_token_env is not set"
    );
}

#[test]
fn mixed_global_and_server_timers_are_checked_per_server() {
    let err = parse(
        "global: {ping_interval: 1s}\nservers:\n  - {id: a, transport: stdio, command: x, ping_timeout: 2s}\n",
        &[],
    )
    .expect_err("invalid");
    assert!(
        err.to_string()
            .contains("server \"a\": ping_timeout (2s) is longer than ping_interval (1s)"),
        "{err}"
    );
}

#[test]
fn oauth2_blocks_take_one_secret_an_http_token_url_and_only_on_http() {
    let base = "servers:\n  - id: a\n    transport: http\n    url: http://127.0.0.1:1/mcp\n    oauth2:\n      client_id: c\n";
    let ok = parse(
        &format!("{base}      client_secret: ${{SECRET}}\n      token_url: https://auth.example/token\n      scopes: [a, b]\n      endpoint_params: {{audience: \"${{AUD}}\"}}\n"),
        &[("SECRET", "s3cret-value"), ("AUD", "aud-value")],
    )
    .expect("valid");
    let config::TransportSpec::Http {
        oauth2: Some(o), ..
    } = &ok.servers[0].transport
    else {
        panic!("oauth2 parsed");
    };
    assert_eq!(o.client_secret.expose(), "s3cret-value");
    assert_eq!(o.scopes, ["a", "b"]);
    let secrets = ok.servers[0].secrets();
    assert!(secrets.contains(&"s3cret-value".to_owned()));
    assert!(secrets.contains(&"aud-value".to_owned()));
    assert!(!format!("{ok:?}").contains("s3cret-value"));

    for (extra, message) in [
        (
            "      token_url: https://auth.example/token\n",
            "set exactly one of `client_secret` and `client_secret_file`",
        ),
        (
            "      client_secret: x\n      client_secret_file: f\n      token_url: https://auth.example/token\n",
            "set exactly one of `client_secret` and `client_secret_file`",
        ),
        (
            "      client_secret: x\n      token_url: ftp://auth.example/token\n",
            "is not an http(s) URL",
        ),
        (
            "      client_secret: x\n      token_url: https://a/t\n      grant: password\n",
            "unknown field `grant`",
        ),
    ] {
        let err = parse(&format!("{base}{extra}"), &[]).expect_err(extra);
        assert!(err.to_string().contains(message), "{extra}: {err}");
    }
    let err = parse(
        "servers:\n  - id: a\n    transport: stdio\n    command: x\n    oauth2: {client_id: c, client_secret: s, token_url: 'https://a/t'}\n",
        &[],
    )
    .expect_err("stdio");
    assert!(
        err.to_string().contains("`oauth2` applies to http servers"),
        "{err}"
    );
}

#[test]
fn labels_are_exported_sanitised_and_collisions_name_both() {
    let ok = parse(
        "servers:\n  - id: a\n    transport: stdio\n    command: x\n    labels: {team: payments, app.kubernetes.io/name: mcp}\n",
        &[],
    )
    .expect("valid");
    let exported: Vec<(&str, &str)> = ok.servers[0]
        .labels
        .iter()
        .map(|l| (l.exported.as_str(), l.value.as_str()))
        .collect();
    assert_eq!(
        exported,
        [
            ("label_app_kubernetes_io_name", "mcp"),
            ("label_team", "payments")
        ]
    );
    let err = parse(
        "servers:\n  - id: a\n    transport: stdio\n    command: x\n    labels: {a-b: 1, a_b: 2}\n",
        &[],
    )
    .expect_err("collision");
    assert!(
        err.to_string()
            .contains(r#"labels "a-b" and "a_b" are both exported as label_a_b"#),
        "{err}"
    );
}

#[test]
fn check_config_reads_file_sd_files_and_names_each_problem() {
    let (code, out, err) = check_config("tests/testdata/invalid-file-sd.yml");
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "tests/testdata/invalid-file-sd.yml:6:13: file pattern \"sd/**/x.yaml\": only the file name may hold one `*`, and it must end in .json, .yml or .yaml",
        ],
        "{err}"
    );
    // With the bad pattern gone, the files themselves are checked.
    let dir = tempfile::tempdir().expect("tempdir");
    let main = dir.path().join("fleet.yml");
    std::fs::create_dir(dir.path().join("sd")).expect("mkdir");
    std::fs::copy(
        "tests/testdata/sd/entries.yaml",
        dir.path().join("sd/entries.yaml"),
    )
    .expect("copy");
    let text = std::fs::read_to_string("tests/testdata/invalid-file-sd.yml").expect("read");
    std::fs::write(&main, text.replace("  - files: [sd/**/x.yaml]\n", "")).expect("write");
    let (code, out, err) = check_config(main.to_str().expect("path"));
    assert_eq!(code, 1, "{out}{err}");
    let sd = dir.path().join("sd/entries.yaml");
    assert!(
        err.contains(&format!(
            "{}:3:3: server \"c\": http needs `url`",
            sd.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "duplicate server id \"a\": {} [1] repeats {} servers[0]; the first is kept",
            sd.display(),
            main.display()
        )),
        "{err}"
    );
    // Fixed: valid, counting both.
    std::fs::write(
        &sd,
        "- {id: b, transport: http, url: \"http://127.0.0.1:1/mcp\"}\n",
    )
    .expect("write");
    let (code, out, err) = check_config(main.to_str().expect("path"));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("valid, 1 server(s) and 1 from file_sd"),
        "{out}"
    );
}

/// A file nested twenty thousand brackets deep (the main file, or a client
/// config it reads), or a duration past ten years: a clear error naming
/// the file, line and column, from `check-config` and at start-up alike,
/// and an exit, never a crash (a recursing parser overflowed its stack).
#[test]
fn nested_files_and_endless_durations_are_clear_errors_not_crashes() {
    use crate::support::{mcpmon, outcome};
    let dir = tempfile::tempdir().expect("tempdir");
    let main = dir.path().join("fleet.yaml");
    std::fs::write(&main, format!("servers: {}", "[".repeat(20_000))).expect("write");
    let client = dir.path().join("claude_desktop_config.json");
    std::fs::write(&client, format!("{{\"mcpServers\": {}", "[".repeat(20_000))).expect("write");
    let reads_client = dir.path().join("clients.yaml");
    std::fs::write(
        &reads_client,
        format!(
            "client_config_sd_configs:\n  - files: [{:?}]\n",
            client.display()
        ),
    )
    .expect("write");
    let long = "tests/testdata/invalid-long-duration.yml";
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let cases = [
        (
            path(&main),
            format!("{}:1:265: nested more than 128 levels deep", main.display()),
        ),
        (
            path(&reads_client),
            format!(
                "{}:1:143: nested more than 128 levels deep",
                client.display()
            ),
        ),
        (
            long.to_owned(),
            format!("{long}:3:5: maintenance[0]: invalid duration \"300000y\""),
        ),
    ];
    for (file, want) in &cases {
        let (code, out, err) = outcome(
            mcpmon()
                .args(["check-config", file])
                .current_dir(env!("CARGO_MANIFEST_DIR")),
        );
        assert_eq!(code, 1, "check-config {file}: {out}{err}");
        assert!(err.contains(want.as_str()), "check-config {file}: {err}");
    }
    // At start-up the main file's errors stop the process with its words;
    // a client config's is a discovery failure, for the running monitor.
    for (file, want) in [&cases[0], &cases[2]] {
        let (code, out, err) = outcome(
            mcpmon()
                .args(["--config.file", file, "--web.listen-address", "127.0.0.1:0"])
                .current_dir(env!("CARGO_MANIFEST_DIR")),
        );
        assert_eq!(code, 2, "start-up on {file} exits, not crashes: {out}{err}");
        assert!(err.contains(want.as_str()), "start-up on {file}: {err}");
    }
}
