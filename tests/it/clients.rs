//! Client configs as a fleet: `mcpmon import` turns them into a fleet file,
//! and `client_config_sd_configs` runs them as they are, picking up edits.
//! Each tool's file is written the way its own documentation writes it.

use std::time::{Duration, Instant};

use crate::support::*;

/// `mcpmon import` turns a Claude Desktop file and a VS Code file into one
/// fleet that `check-config` accepts and mcpmon runs; an entry that needs
/// a person's input is written out commented, with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_turns_client_configs_into_a_fleet_that_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo_server().display().to_string();
    let claude = dir.path().join("claude_desktop_config.json");
    std::fs::write(
        &claude,
        format!(
            r#"{{"mcpServers": {{"billing": {{"command": {demo:?}, "args": ["--name", "billing"]}}}}}}"#
        ),
    )
    .expect("write");
    std::fs::create_dir(dir.path().join(".vscode")).expect("mkdir");
    let vscode = dir.path().join(".vscode/mcp.json");
    std::fs::write(
        &vscode,
        format!(
            r#"{{
  // VS Code writes comments and trailing commas.
  "inputs": [{{"type": "promptString", "id": "token", "password": true}}],
  "servers": {{
    "search": {{"type": "stdio", "command": {demo:?}, "args": ["--name", "search"], "env": {{"HOME_DIR": "${{env:HOME}}"}},}},
    "private": {{"type": "stdio", "command": {demo:?}, "env": {{"TOKEN": "${{input:token}}"}}}}
  }}
}}"#
        ),
    )
    .expect("write");
    let (code, yaml, stderr) = outcome(mcpmon().args([
        "import",
        claude.to_str().expect("utf-8"),
        vscode.to_str().expect("utf-8"),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(yaml.contains("  - id: billing\n"), "{yaml}");
    assert!(
        yaml.contains("HOME_DIR: ${HOME}"),
        "a variable stays a reference: {yaml}"
    );
    assert!(
        yaml.contains(
            "# \"private\" needs configuration: the input \"token\" is asked of a person"
        ),
        "{yaml}"
    );
    let fleet = dir.path().join("fleet.yaml");
    std::fs::write(&fleet, &yaml).expect("write");
    let (code, out, err) = outcome(mcpmon().args(["check-config", fleet.to_str().expect("utf-8")]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("valid, 2 server(s)"), "{out}");
    let mon = Binary::start(&fleet, &[]).await;
    for id in ["billing", "search"] {
        mon.wait_status(id, "healthy", Duration::from_secs(30))
            .await;
    }
    let (_, v) = mon.server("search").await;
    assert_eq!(v["labels"]["client_format"], "vscode", "{v}");

    // `probe --from` checks one entry once, as the tool would start it.
    let (code, out, err) = outcome(mcpmon().args([
        "probe",
        "--from",
        vscode.to_str().expect("utf-8"),
        "--name",
        "search",
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("state:      healthy (ok)"), "{out}");
    let (code, _, err) = outcome(mcpmon().args([
        "probe",
        "--from",
        vscode.to_str().expect("utf-8"),
        "--name",
        "private",
    ]));
    assert_eq!(code, 2);
    assert!(
        err.contains("mcp.json:6: server \"private\" needs configuration"),
        "{err}"
    );

    // A broken file is an error naming where.
    std::fs::write(&claude, "{\"mcpServers\": {\"a\": }}").expect("write");
    let (code, _, err) = outcome(mcpmon().args(["import", claude.to_str().expect("utf-8")]));
    assert_eq!(code, 2);
    assert!(
        err.contains("claude_desktop_config.json:1:22: not JSON"),
        "{err}"
    );
}

/// One demo server as each tool writes a stdio entry, in the tool's own
/// file; `name` is its name there.
fn write_client_configs(dir: &std::path::Path) {
    let demo = format!("{:?}", demo_server().display().to_string());
    let stdio = |name: &str| format!(r#""command": {demo}, "args": ["--name", "{name}"]"#);
    let files = [
        (
            "claude_desktop_config.json",
            format!(
                r#"{{"mcpServers": {{"desktop": {{{}}}}}}}"#,
                stdio("desktop")
            ),
        ),
        (
            ".cursor/mcp.json",
            format!(
                r#"{{"mcpServers": {{"cursor": {{{}, "env": {{"TOKEN": "${{env:CLIENT_TEST_TOKEN}}"}}}}}}}}"#,
                stdio("cursor")
            ),
        ),
        (
            ".mcp.json",
            format!(
                r#"{{"mcpServers": {{"claude-code": {{"type": "stdio", {}, "env": {{"MODE": "${{UNSET_MODE:-fast}}"}}}}}}}}"#,
                stdio("claude-code")
            ),
        ),
        (
            "mcp_config.json",
            format!(
                r#"{{"mcpServers": {{"windsurf": {{{}}}}}}}"#,
                stdio("windsurf")
            ),
        ),
        (
            ".vscode/mcp.json",
            format!(
                r#"{{
  // Inputs are prompted for when the server starts.
  "inputs": [{{"type": "promptString", "id": "api-key", "password": true}}],
  "servers": {{
    "vscode": {{"type": "stdio", {},}},
    "asks": {{"type": "stdio", {}, "env": {{"KEY": "${{input:api-key}}"}}}}
  }}
}}"#,
                stdio("vscode"),
                stdio("asks")
            ),
        ),
        (
            ".codex/config.toml",
            format!("[mcp_servers.codex]\ncommand = {demo}\nargs = [\"--name\", \"codex\"]\n"),
        ),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

/// Every format at once through `client_config_sd_configs`: each runs, is
/// labelled with its file and format, the entry that needs a person's
/// input is counted and left out, and an edit is picked up without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_configs_are_a_discovery_source_that_follows_edits() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_client_configs(dir.path());
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        "client_config_sd_configs:\n  - files: [claude_desktop_config.json, .cursor/mcp.json, .mcp.json, mcp_config.json, .vscode/mcp.json, .codex/config.toml]\n    labels: {team: tools}\n",
    )
    .expect("write");
    let (code, out, err) = outcome(mcpmon().args(["check-config", cfg.to_str().expect("utf-8")]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains(
            "server \"asks\" needs configuration: the input \"api-key\" is asked of a person"
        ),
        "the entry that needs a person is a warning: {err}"
    );
    let mon = Binary::start_with_env(&cfg, &[], &[("CLIENT_TEST_TOKEN", "t0ken-value")]).await;
    let formats = [
        ("desktop", "claude"),
        ("cursor", "cursor"),
        ("claude-code", "claude-code"),
        ("windsurf", "windsurf"),
        ("vscode", "vscode"),
        ("codex", "codex"),
    ];
    for (id, format) in formats {
        mon.wait_status(id, "healthy", Duration::from_secs(30))
            .await;
        let (_, v) = mon.server(id).await;
        assert_eq!(v["labels"]["client_format"], format, "{id}: {v}");
        assert_eq!(v["labels"]["team"], "tools", "{id}: {v}");
        assert!(
            v["labels"]["client_config"]
                .as_str()
                .is_some_and(|f| f.starts_with('/')),
            "{id}: {v}"
        );
    }
    let (code, asks) = mon.server("asks").await;
    assert_eq!(code, 404, "a server that needs input ran: {asks}");
    let (_, m) = mon.get("/metrics").await;
    assert!(
        m.contains(r#"mcpmon_sd_entries_rejected_total{mechanism="client_config",reason="needs_configuration"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"mcpmon_sd_servers{mechanism="client_config"} 6"#),
        "{m}"
    );

    // An edit, as an editor saves it, is picked up: no reload.
    let demo = format!("{:?}", demo_server().display().to_string());
    std::fs::write(
        dir.path().join("claude_desktop_config.json"),
        format!(
            r#"{{"mcpServers": {{"desktop": {{"command": {demo}, "args": ["--name", "desktop"]}}, "added": {{"command": {demo}, "args": ["--name", "added"]}}}}}}"#
        ),
    )
    .expect("write");
    let start = Instant::now();
    mon.wait_status("added", "healthy", Duration::from_secs(30))
        .await;
    eprintln!("picked up in {:?}", start.elapsed());
    // The servers that did not change were left alone.
    let (_, v) = mon.server("desktop").await;
    assert_eq!(v["sessions"], 1, "{v}");
}

/// `/srv/*/.mcp.json`: a wildcard in a folder reads every project's file
/// (dot folders aside), and a project added later is picked up without a
/// reload, its folder appearing under the watched one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_folder_reads_every_project_and_follows_new_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo_server().display().to_string();
    let project = |name: &str| {
        let folder = dir.path().join("srv").join(name);
        std::fs::create_dir_all(&folder).expect("mkdir");
        let text = format!(
            r#"{{"mcpServers": {{"{name}": {{"command": {demo:?}, "args": ["--name", "{name}"]}}}}}}"#
        );
        let tmp = folder.join(".mcp.json.tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, folder.join(".mcp.json")).expect("rename");
    };
    project("alpha");
    project("beta");
    project(".hidden");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        "client_config_sd_configs:\n  - files: [srv/*/.mcp.json]\n    refresh_interval: 1h\n",
    )
    .expect("write");
    let (code, out, err) = outcome(mcpmon().args(["check-config", cfg.to_str().expect("utf-8")]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 from file_sd"), "{out}");
    let mon = Binary::start(&cfg, &[]).await;
    for id in ["alpha", "beta"] {
        mon.wait_status(id, "healthy", Duration::from_secs(30))
            .await;
    }
    // Long before the hour's refresh: the watch sees the new folder.
    project("gamma");
    mon.wait_status("gamma", "healthy", Duration::from_secs(30))
        .await;
    assert_eq!(mon.server("hidden").await.0, 404, "dot folders are skipped");
}
