//! Client configs: the server lists that Claude Desktop, Cursor, Claude
//! Code, Windsurf, VS Code and Codex keep, read as mcpmon server entries.
//!
//! Each tool has its own shape and its own interpolation, and both are
//! followed as the tool itself does:
//!
//! | format | file | servers under | a URL is | interpolation |
//! |---|---|---|---|---|
//! | `claude` | `claude_desktop_config.json` | `mcpServers` | `url` | none |
//! | `cursor` | `.cursor/mcp.json` | `mcpServers` | `url` | `${env:VAR}`, `${userHome}`, `${workspaceFolder}` |
//! | `claude-code` | `.mcp.json` | `mcpServers` | `url` (`type: http\|sse`) | `${VAR}`, `${VAR:-default}` |
//! | `windsurf` | `mcp_config.json` | `mcpServers` | `serverUrl` | `${env:VAR}` |
//! | `vscode` | `.vscode/mcp.json` | `servers` (`type` required) | `url` | `${env:VAR}`, `${input:id}`, `${userHome}`, `${workspaceFolder}` |
//! | `codex` | `.codex/config.toml` | `[mcp_servers.NAME]` | `url` | none; `env_http_headers` and `bearer_token_env_var` name variables |
//!
//! A variable becomes mcpmon's own `${VAR}`, so a secret stays in the
//! environment rather than in the YAML; a server whose entry needs what
//! mcpmon cannot supply (an `${input:…}` prompt, an unset variable, an
//! `envFile`) comes back with what it needs, and is not run. Pure: the
//! caller reads the file and says what the environment holds.
//!
//! Reading and telling formats apart is here; `translate` turns one
//! entry into mcpmon's, `entries` serves a file as a discovery source,
//! [`fleet_yaml`] writes the fleet `mcpmon import` prints.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::ConfigError;

mod entries;
mod fleet_yaml;
mod translate;

pub use entries::{Translated, as_entries};
pub use fleet_yaml::fleet_yaml;
use translate::Translate;

/// Which tool wrote a client config.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ClientFormat {
    /// Told by the file's name, then by its shape.
    Auto,
    /// Claude Desktop.
    Claude,
    /// Cursor.
    Cursor,
    /// Claude Code.
    ClaudeCode,
    /// Windsurf.
    Windsurf,
    /// VS Code.
    Vscode,
    /// Codex (TOML).
    Codex,
}

impl ClientFormat {
    /// Its name, as written in config and labels.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One server of a client config.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientServer {
    /// Its name in the client config.
    pub name: String,
    /// The mcpmon server entry (`id`, `transport`, …, `labels`).
    pub entry: Map<String, Value>,
    /// What it needs that mcpmon cannot supply; empty when it can run.
    pub needs: Vec<String>,
    /// The 1-based line its name is first written on.
    pub line: usize,
}

/// What a client config holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientConfig {
    /// The format it was read as.
    pub format: ClientFormat,
    /// Its servers, by name.
    pub servers: Vec<ClientServer>,
}

impl ClientConfig {
    /// The entry of the server `name` (of the file at `path`), when it can
    /// run; else why not, naming the file.
    pub fn runnable(&self, path: &Path, name: &str) -> Result<Map<String, Value>, String> {
        let Some(server) = self.servers.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "{} has no server {name:?} (it has {names:?})",
                path.display()
            ));
        };
        if !server.needs.is_empty() {
            return Err(format!(
                "{}:{}: server {name:?} needs configuration: {}",
                path.display(),
                server.line,
                server.needs.join("; ")
            ));
        }
        Ok(server.entry.clone())
    }
}

/// Read `text`, the client config at `path`, as `format`. `env` answers
/// what mcpmon's environment holds; `home` is the user's home directory.
pub fn read(
    path: &Path,
    text: &str,
    format: ClientFormat,
    env: &dyn Fn(&str) -> Option<String>,
    home: &str,
) -> Result<ClientConfig, ConfigError> {
    let error = |line, column, message| ConfigError {
        file: path.to_owned(),
        line,
        column,
        message,
    };
    let by_name = match format {
        ClientFormat::Auto => by_file_name(path),
        f => Some(f),
    };
    let root: Value = if by_name == Some(ClientFormat::Codex) {
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map_or((0, 0), |s| line_column(text, s.start));
            error(line, column, format!("not TOML: {}", e.message()))
        })?;
        serde_json::to_value(table).map_err(|e| error(0, 0, e.to_string()))?
    } else {
        if let Some((line, column)) = super::depth::too_deep(text, super::depth::MAX_DEPTH) {
            return Err(error(
                line,
                column,
                format!("nested more than {} levels deep", super::depth::MAX_DEPTH),
            ));
        }
        json5::from_str(text).map_err(|e| {
            let (line, column) = e.position().map_or((0, 0), |p| (p.line + 1, p.column + 1));
            let what = e.code().map_or_else(|| e.to_string(), |c| c.to_string());
            error(line, column, format!("not JSON: {what}"))
        })?
    };
    let format = by_name.unwrap_or_else(|| by_shape(&root));
    let key = match format {
        ClientFormat::Vscode => "servers",
        ClientFormat::Codex => "mcp_servers",
        _ => "mcpServers",
    };
    let Some(listed) = root.get(key).and_then(Value::as_object) else {
        return Err(error(
            1,
            1,
            format!("no `{key}` object: not a {} config", format.as_str()),
        ));
    };
    let workspace = workspace(path);
    let mut ids = super::ids::UniqueIds::default();
    let written = Written::new(text);
    let mut servers = Vec::with_capacity(listed.len());
    for (name, item) in listed {
        if item.get("disabled").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let id = ids.claim(&sanitise(name));
        let mut t = Translate {
            format,
            env,
            home,
            workspace: &workspace,
            needs: Vec::new(),
        };
        let mut entry = t.entry(item);
        entry.insert("id".into(), id.into());
        entry.insert(
            "labels".into(),
            json!({"client_config": path.display().to_string(), "client_format": format.as_str()}),
        );
        servers.push(ClientServer {
            name: name.clone(),
            entry,
            needs: t.needs,
            line: written.line_of(name),
        });
    }
    Ok(ClientConfig { format, servers })
}

/// The format a file's name says, when it says one.
fn by_file_name(path: &Path) -> Option<ClientFormat> {
    let name = path.file_name()?.to_string_lossy();
    let parent = path
        .parent()
        .and_then(Path::file_name)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    match (name.as_ref(), parent.as_str()) {
        ("claude_desktop_config.json", _) => Some(ClientFormat::Claude),
        (".mcp.json" | ".claude.json", _) => Some(ClientFormat::ClaudeCode),
        ("mcp_config.json", _) => Some(ClientFormat::Windsurf),
        ("mcp.json", ".vscode") => Some(ClientFormat::Vscode),
        ("mcp.json", ".cursor") => Some(ClientFormat::Cursor),
        (n, _) if n.ends_with(".toml") => Some(ClientFormat::Codex),
        _ => None,
    }
}

/// The format a parsed config's shape says.
fn by_shape(root: &Value) -> ClientFormat {
    if root.get("mcpServers").is_none() && root.get("servers").is_some() {
        return ClientFormat::Vscode;
    }
    let entries = root
        .get("mcpServers")
        .and_then(Value::as_object)
        .map(|m| m.values().collect::<Vec<_>>())
        .unwrap_or_default();
    if entries.iter().any(|e| e.get("serverUrl").is_some()) {
        ClientFormat::Windsurf
    } else if entries.iter().any(|e| e.get("type").is_some()) {
        ClientFormat::ClaudeCode
    } else {
        ClientFormat::Cursor
    }
}

/// The folder a project-level config belongs to: the parent of `.vscode`
/// or `.cursor`, else the file's own folder.
fn workspace(path: &Path) -> String {
    let dir = path.parent().unwrap_or(Path::new("."));
    let project = match dir.file_name().map(|n| n.to_string_lossy()) {
        Some(n) if n == ".vscode" || n == ".cursor" || n == ".codex" => dir.parent().unwrap_or(dir),
        _ => dir,
    };
    project.display().to_string()
}

/// An id mcpmon accepts (`[a-zA-Z0-9_.-]+`) from a client's name.
pub(super) fn sanitise(name: &str) -> String {
    let id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_matches('-');
    if id.is_empty() {
        "server".to_owned()
    } else {
        id.chars().take(64).collect()
    }
}

/// Where each name of a config is first written: every quoted word and
/// every `[mcp_servers.NAME]` table, found in one pass, so a config of
/// forty thousand servers is read once, not once per server.
struct Written<'t> {
    first: HashMap<&'t str, usize>,
    /// Where each line starts.
    lines: Vec<usize>,
}

impl<'t> Written<'t> {
    fn new(text: &'t str) -> Self {
        let bytes = text.as_bytes();
        let mut first = HashMap::new();
        let mut at = 0;
        while let Some(open) = memchr::memchr(b'"', &bytes[at..]).map(|i| at + i) {
            // The closing quote, past any escaped one.
            let mut end = open + 1;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            let Some(word) = text.get(open + 1..end.min(bytes.len())) else {
                break;
            };
            first.entry(word).or_insert(open);
            at = end + 1;
            if at >= bytes.len() {
                break;
            }
        }
        for at in memchr::memmem::find_iter(bytes, b"[mcp_servers.") {
            let rest = &text[at + 13..];
            if let Some(name) = rest.split(']').next() {
                first.entry(name).or_insert(at);
            }
        }
        let lines = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', bytes).map(|i| i + 1))
            .collect();
        Written { first, lines }
    }

    /// The 1-based line where `name` is first written (0 when not found).
    fn line_of(&self, name: &str) -> usize {
        self.first
            .get(name)
            .map_or(0, |at| self.lines.partition_point(|start| start <= at))
    }
}

/// 1-based line and column of byte `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests;
