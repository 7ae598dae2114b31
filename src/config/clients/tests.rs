use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "GITHUB_TOKEN" | "BRAVE_API_KEY" | "API_KEY" => Some("set".to_owned()),
        _ => None,
    }
}

fn read_as(path: &str, text: &str) -> ClientConfig {
    read(Path::new(path), text, ClientFormat::Auto, &env, "/home/me").expect("reads")
}

fn server<'a>(c: &'a ClientConfig, name: &str) -> &'a ClientServer {
    c.servers
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} in {c:?}"))
}

#[test]
fn claude_desktop_as_its_docs_write_it() {
    let c = read_as(
        "/home/me/.config/Claude/claude_desktop_config.json",
        r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop"]
    },
    "brave search": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-brave-search"],
      "env": {"BRAVE_API_KEY": "literal-key"}
    }
  }
}"#,
    );
    assert_eq!(c.format, ClientFormat::Claude);
    let fs = server(&c, "filesystem");
    assert_eq!(fs.entry["id"], "filesystem");
    assert_eq!(fs.entry["transport"], "stdio");
    assert_eq!(fs.entry["command"], "npx");
    assert_eq!(fs.entry["args"][2], "/Users/username/Desktop");
    assert_eq!(fs.line, 3);
    assert!(fs.needs.is_empty());
    let brave = server(&c, "brave search");
    assert_eq!(brave.entry["id"], "brave-search", "sanitised");
    assert_eq!(brave.entry["env"]["BRAVE_API_KEY"], "literal-key");
    assert_eq!(brave.entry["labels"]["client_format"], "claude");
}

#[test]
fn cursor_with_env_interpolation_and_a_remote() {
    let c = read_as(
        "/work/app/.cursor/mcp.json",
        r#"{
  "mcpServers": {
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${env:GITHUB_TOKEN}"}
    },
    "docs": {"url": "https://docs.example.com/mcp", "headers": {"Authorization": "Bearer ${env:DOCS_TOKEN}"}},
    "local": {"command": "${workspaceFolder}/bin/server", "args": ["--home", "${userHome}"]}
  }
}"#,
    );
    assert_eq!(c.format, ClientFormat::Cursor);
    let gh = server(&c, "github");
    assert_eq!(
        gh.entry["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"],
        "${GITHUB_TOKEN}"
    );
    assert!(gh.needs.is_empty());
    let docs = server(&c, "docs");
    assert_eq!(docs.entry["transport"], "http");
    assert_eq!(
        docs.entry["headers"]["Authorization"],
        "Bearer ${DOCS_TOKEN}"
    );
    assert_eq!(docs.needs, ["environment variable DOCS_TOKEN is not set"]);
    let local = server(&c, "local");
    assert_eq!(local.entry["command"], "/work/app/bin/server");
    assert_eq!(local.entry["args"][1], "/home/me");
}

#[test]
fn claude_code_with_types_and_defaults() {
    let c = read_as(
        "/work/app/.mcp.json",
        r#"{
  "mcpServers": {
    "api-server": {
      "type": "http",
      "url": "${API_BASE_URL:-https://api.example.com}/mcp",
      "headers": {"Authorization": "Bearer ${API_KEY}"}
    },
    "events": {"type": "sse", "url": "https://events.example.com/stream"},
    "tool": {"type": "stdio", "command": "/usr/local/bin/tool", "args": ["--token", "${MISSING}"]}
  }
}"#,
    );
    assert_eq!(c.format, ClientFormat::ClaudeCode);
    let api = server(&c, "api-server");
    assert_eq!(api.entry["url"], "https://api.example.com/mcp");
    assert_eq!(api.entry["headers"]["Authorization"], "Bearer ${API_KEY}");
    assert!(api.needs.is_empty());
    assert_eq!(server(&c, "events").entry["transport"], "sse");
    assert_eq!(
        server(&c, "tool").needs,
        ["environment variable MISSING is not set"]
    );
}

#[test]
fn windsurf_reads_server_url_only() {
    let c = read_as(
        "/home/me/.codeium/windsurf/mcp_config.json",
        r#"{
  "mcpServers": {
    "remote": {"serverUrl": "https://remote.example.com/sse", "headers": {"X-Key": "${env:API_KEY}"}},
    "copied-from-cursor": {"url": "https://remote.example.com/mcp"}
  }
}"#,
    );
    assert_eq!(c.format, ClientFormat::Windsurf);
    let remote = server(&c, "remote");
    assert_eq!(remote.entry["transport"], "sse");
    assert_eq!(remote.entry["headers"]["X-Key"], "${API_KEY}");
    assert!(remote.needs.is_empty());
    assert!(!server(&c, "copied-from-cursor").needs.is_empty());
}

#[test]
fn vscode_servers_inputs_and_comments() {
    let c = read_as(
        "/work/app/.vscode/mcp.json",
        r#"{
  // Inputs are prompted on first server start.
  "inputs": [
    {"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true}
  ],
  "servers": {
    "Perplexity": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "server-perplexity-ask"],
      "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}"}
    },
    "fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"],},
    "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"},
    "untyped": {"command": "x"}
  }
}"#,
    );
    assert_eq!(c.format, ClientFormat::Vscode);
    assert_eq!(
        server(&c, "Perplexity").needs,
        ["the input \"perplexity-key\" is asked of a person"]
    );
    assert!(server(&c, "fetch").needs.is_empty());
    assert_eq!(server(&c, "github").entry["transport"], "http");
    assert_eq!(
        server(&c, "untyped").needs,
        ["a VS Code entry needs `type`"]
    );
}

#[test]
fn codex_toml_with_header_variables() {
    let c = read_as(
        "/home/me/.codex/config.toml",
        r#"
model = "o3"

[mcp_servers.docs]
command = "npx"
args = ["-y", "mcp-server"]
env = { "API_KEY" = "value" }

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_OAUTH_TOKEN"
env_http_headers = { "X-Figma-Region" = "FIGMA_REGION" }
"#,
    );
    assert_eq!(c.format, ClientFormat::Codex);
    let docs = server(&c, "docs");
    assert_eq!(docs.entry["command"], "npx");
    assert_eq!(docs.line, 4);
    let figma = server(&c, "figma");
    assert_eq!(figma.entry["bearer_token_env"], "FIGMA_OAUTH_TOKEN");
    assert_eq!(figma.entry["headers"]["X-Figma-Region"], "${FIGMA_REGION}");
    assert_eq!(figma.needs.len(), 2);
}

#[test]
fn a_broken_file_names_its_line_and_column() {
    let e = read(
        Path::new("/x/claude_desktop_config.json"),
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": }\n  }\n}",
        ClientFormat::Auto,
        &env,
        "/h",
    )
    .expect_err("broken");
    assert_eq!((e.line, e.column), (3, 22), "{e}");
    assert_eq!(e.message, "not JSON: expected value");
    let e = read(
        Path::new("/x/config.toml"),
        "[mcp_servers.a]\ncommand = \n",
        ClientFormat::Auto,
        &env,
        "/h",
    )
    .expect_err("broken");
    assert_eq!(e.line, 2, "{e}");
    let e = read(
        Path::new("/x/mcp.json"),
        "{\"servers\": 3}",
        ClientFormat::Cursor,
        &env,
        "/h",
    )
    .expect_err("no servers");
    assert!(e.message.contains("no `mcpServers` object"), "{e}");
}

#[test]
fn names_that_clash_once_sanitised_get_distinct_ids_and_disabled_ones_are_left_out() {
    let c = read_as(
        "/x/.mcp.json",
        r#"{"mcpServers": {"a b": {"command": "x"}, "a/b": {"command": "y"}, "off": {"command": "z", "disabled": true}}}"#,
    );
    let ids: Vec<&str> = c
        .servers
        .iter()
        .map(|s| s.entry["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["a-b", "a-b-2"]);
}
