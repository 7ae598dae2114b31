//! Trust boundaries, tested through the real binary: what a third-party
//! server can see and do. `docs/security.md` maps each boundary to its test.

use std::collections::BTreeMap;

use crate::support::*;

/// Every variable a child may get from mcpmon's own environment.
const ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_child_sees_only_the_allowlist_its_own_env_and_what_it_inherits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("env.json");
    // Dumps its environment, then becomes a real MCP server.
    let dumper = "import json, os, sys\n\
                  open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))\n\
                  os.execv(sys.argv[2], sys.argv[2:])";
    // The interpreter itself, not a wrapper script (pyenv's shim is a shell
    // script that adds variables of its own).
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let python = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            r#"servers:
  - id: holder
    transport: stdio
    command: {demo:?}
    env: {{API_KEY: "${{HOLDER_SECRET}}"}}
  - id: dumper
    transport: stdio
    command: {python:?}
    args: ["-c", {dumper:?}, {dump:?}, {demo:?}, "--name", "dumper"]
    env: {{OWN_SETTING: "mine"}}
    inherit_env: [SHARED_SETTING]
"#,
            demo = demo_server().display(),
            dump = dump.display(),
        ),
    )
    .expect("write config");
    let secret = "holder-secret-4f1c9e";
    let mon = Binary::start_with_env(
        &cfg,
        &[],
        &[
            ("HOLDER_SECRET", secret),
            ("UNRELATED_TOKEN", "unrelated-token-77ab"),
            ("SHARED_SETTING", "visible"),
        ],
    )
    .await;
    mon.wait_status("dumper", "healthy", SLACK).await;
    let text = std::fs::read_to_string(&dump).expect("the child dumped its environment");
    let env: BTreeMap<String, String> = serde_json::from_str(&text).expect("json");
    assert!(
        !text.contains(secret),
        "another server's secret leaked: {env:?}"
    );
    assert!(!text.contains("unrelated-token-77ab"), "{env:?}");
    for name in env.keys() {
        // LC_CTYPE may also be Python's own locale coercion (PEP 538).
        assert!(
            ALLOWLIST.contains(&name.as_str()) || name == "OWN_SETTING" || name == "SHARED_SETTING",
            "{name} is outside the allowlist"
        );
    }
    assert_eq!(env.get("OWN_SETTING").map(String::as_str), Some("mine"));
    assert_eq!(
        env.get("SHARED_SETTING").map(String::as_str),
        Some("visible")
    );
    assert!(env.contains_key("PATH"), "PATH passes: {env:?}");
    drop(mon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_reload_mcpmon_but_curl_can() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "servers:\n  - id: a\n    transport: stdio\n    command: {:?}\n",
            demo_server().display()
        ),
    )
    .expect("write config");
    let mon = Binary::start(&cfg, &["--web.enable-lifecycle"]).await;
    let url = format!("http://{}/-/reload", mon.addr);
    let post = |headers: &[(&str, &str)]| {
        let mut r = mon.http.post(&url);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    for (what, headers) in [
        (
            "a cross-origin form post",
            vec![
                ("Origin", "http://evil.example"),
                ("Content-Type", "text/plain"),
            ],
        ),
        (
            "a cross-origin fetch",
            vec![("Origin", "http://evil.example")],
        ),
        ("an opaque origin", vec![("Origin", "null")]),
        ("a cross-site fetch", vec![("Sec-Fetch-Site", "cross-site")]),
        (
            "a same-host form",
            vec![("Content-Type", "application/x-www-form-urlencoded")],
        ),
    ] {
        let r = post(&headers).await.expect("request");
        assert_eq!(r.status().as_u16(), 403, "{what}");
    }
    // What an operator's curl sends, and a same-origin page's fetch.
    assert_eq!(mon.post("/-/reload").await.0, 200);
    let same = format!("http://{}", mon.addr);
    let r = post(&[
        ("Origin", same.as_str()),
        ("Content-Type", "application/json"),
    ])
    .await
    .expect("request");
    assert_eq!(r.status().as_u16(), 200);
}
