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

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::ConfigError;

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

/// One entry being translated, and what it turned out to need.
struct Translate<'a> {
    format: ClientFormat,
    env: &'a dyn Fn(&str) -> Option<String>,
    home: &'a str,
    workspace: &'a str,
    needs: Vec<String>,
}

impl Translate<'_> {
    fn entry(&mut self, item: &Value) -> Map<String, Value> {
        let mut out = Map::new();
        let s = |k: &str| item.get(k).and_then(Value::as_str);
        let url_key = if self.format == ClientFormat::Windsurf {
            "serverUrl"
        } else {
            "url"
        };
        let kind = s("type");
        if self.format == ClientFormat::Vscode && kind.is_none() {
            self.needs.push("a VS Code entry needs `type`".to_owned());
        }
        if self.format == ClientFormat::Windsurf && s("url").is_some() && s("serverUrl").is_none() {
            self.needs
                .push("Windsurf reads `serverUrl`; this entry's `url` is not used".to_owned());
        }
        if item.get("envFile").is_some() {
            self.needs
                .push("`envFile` is not read: put its variables in `env`".to_owned());
        }
        if let Some(command) = s("command") {
            out.insert("transport".into(), "stdio".into());
            out.insert("command".into(), self.text(command).into());
            let args: Vec<Value> = item
                .get("args")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|v| self.text(&scalar(v)).into()).collect())
                .unwrap_or_default();
            out.insert("args".into(), args.into());
            if let Some(env) = self.map(item.get("env")) {
                out.insert("env".into(), env.into());
            }
            if let Some(cwd) = s("cwd") {
                out.insert("cwd".into(), self.text(cwd).into());
            }
        } else if let Some(url) = s(url_key) {
            let url = self.text(url);
            let sse = kind == Some("sse")
                || (kind.is_none() && url.trim_end_matches('/').ends_with("/sse"));
            out.insert("transport".into(), if sse { "sse" } else { "http" }.into());
            out.insert("url".into(), url.into());
            let key = if self.format == ClientFormat::Codex {
                "http_headers"
            } else {
                "headers"
            };
            let mut headers = self.map(item.get(key)).unwrap_or_default();
            if let Some(named) = item.get("env_http_headers").and_then(Value::as_object) {
                for (header, var) in named {
                    let var = scalar(var);
                    self.variable(&var);
                    headers.insert(header.clone(), format!("${{{var}}}").into());
                }
            }
            if !headers.is_empty() {
                out.insert("headers".into(), headers.into());
            }
            if let Some(var) = s("bearer_token_env_var") {
                self.variable(var);
                out.insert("bearer_token_env".into(), var.into());
            }
        } else {
            self.needs
                .push(format!("neither `command` nor `{url_key}`"));
        }
        out
    }

    /// A map of strings, each translated.
    fn map(&mut self, v: Option<&Value>) -> Option<Map<String, Value>> {
        let m = v?.as_object()?;
        Some(
            m.iter()
                .map(|(k, v)| (k.clone(), self.text(&scalar(v)).into()))
                .collect(),
        )
    }

    /// Note that `var` must be set.
    fn variable(&mut self, var: &str) {
        if (self.env)(var).is_none() {
            self.needs
                .push(format!("environment variable {var} is not set"));
        }
    }

    /// A value in mcpmon's own syntax: the tool's references become
    /// `${VAR}` (or the value they stand for), and what cannot become
    /// anything is noted.
    fn text(&mut self, raw: &str) -> String {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                self.needs.push("an unterminated `${`".to_owned());
                return out;
            };
            let reference = &after[..end];
            match self.reference(reference) {
                Some(v) => out.push_str(&v),
                None => out.push_str(&format!("${{{reference}}}")),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// What one `${…}` stands for in mcpmon's syntax; `None` (noted) when
    /// it cannot stand for anything.
    fn reference(&mut self, r: &str) -> Option<String> {
        let variable = |t: &mut Self, var: &str| {
            t.variable(var);
            Some(format!("${{{var}}}"))
        };
        match self.format {
            ClientFormat::ClaudeCode => match r.split_once(":-") {
                Some((var, default)) if (self.env)(var).is_none() => Some(default.to_owned()),
                Some((var, _)) => variable(self, var),
                None => variable(self, r),
            },
            ClientFormat::Cursor | ClientFormat::Windsurf | ClientFormat::Vscode => {
                if let Some(var) = r.strip_prefix("env:") {
                    return variable(self, var);
                }
                match r {
                    "userHome" => Some(self.home.to_owned()),
                    "workspaceFolder" => Some(self.workspace.to_owned()),
                    _ => {
                        let why = match r.strip_prefix("input:") {
                            Some(id) => format!("the input {id:?} is asked of a person"),
                            None => format!("`${{{r}}}` is not known"),
                        };
                        self.needs.push(why);
                        None
                    }
                }
            }
            _ => {
                self.needs
                    .push(format!("a literal `${{{r}}}`, which mcpmon would expand"));
                None
            }
        }
    }
}

/// A client config as a discovery source reads it: mcpmon entries as a
/// JSON list, and the entries that need configuration.
#[derive(Debug)]
pub struct Translated {
    /// The runnable servers' entries, entry `i` on line `i + 2`.
    pub json: String,
    /// The client config's line of each entry in `json`.
    lines: Vec<usize>,
    /// The entries left out before validation, by why.
    left_out: Vec<super::Rejected>,
}

impl Translated {
    /// Entries written elsewhere (a registry), with the source's line of
    /// each and those left out.
    pub(super) fn new(json: String, lines: Vec<usize>, left_out: Vec<super::Rejected>) -> Self {
        Translated {
            json,
            lines,
            left_out,
        }
    }

    /// Put what validating `json` found back where the client config
    /// wrote it, and add the entries that need configuration.
    pub fn place(self, entries: &mut super::Entries) {
        let errors = entries
            .rejected
            .iter_mut()
            .flat_map(|r| r.errors.iter_mut())
            .chain(entries.warnings.iter_mut());
        for e in errors {
            if let Some(line) = e.line.checked_sub(2).and_then(|i| self.lines.get(i)) {
                (e.line, e.column) = (*line, 1);
            }
        }
        entries.rejected.extend(self.left_out);
    }
}

/// Read a client config as [`Translated`] entries.
pub fn as_entries(
    path: &Path,
    text: &str,
    format: ClientFormat,
    env: &dyn Fn(&str) -> Option<String>,
    home: &str,
) -> Result<Translated, ConfigError> {
    let config = read(path, text, format, env, home)?;
    let mut json = String::from("[\n");
    let mut lines = Vec::new();
    let mut needs = Vec::new();
    for s in config.servers {
        if !s.needs.is_empty() {
            needs.push(ConfigError {
                file: path.to_owned(),
                line: s.line,
                column: 1,
                // A name is the file's own text: bounded, no control
                // characters, before it reaches a log.
                message: super::defuse(
                    &format!(
                        "server {:?} needs configuration: {}",
                        super::defuse(&s.name, 200),
                        s.needs.join("; ")
                    ),
                    500,
                ),
            });
            continue;
        }
        if !lines.is_empty() {
            json.push_str(",\n");
        }
        json.push_str(&Value::Object(s.entry).to_string());
        lines.push(s.line);
    }
    json.push_str("\n]\n");
    let left_out = (!needs.is_empty())
        .then_some(super::Rejected {
            reason: super::Rejection::NeedsConfiguration,
            count: needs.len(),
            errors: needs,
        })
        .into_iter()
        .collect();
    Ok(Translated::new(json, lines, left_out))
}

/// The fleet YAML for client configs, for a person to start from: one
/// `servers:` list, ids kept distinct across files, and every server that
/// needs configuration written out commented, with what it needs.
pub fn fleet_yaml(configs: &[(std::path::PathBuf, ClientConfig)]) -> String {
    let mut out = String::from("servers:\n");
    let mut ids = super::ids::UniqueIds::default();
    for (path, config) in configs {
        out.push_str(&format!(
            "  # {} ({})\n",
            path.display(),
            config.format.as_str()
        ));
        for s in &config.servers {
            let mut entry = s.entry.clone();
            let base = entry.get("id").and_then(Value::as_str).unwrap_or("server");
            let id = ids.claim(base);
            entry.insert("id".into(), id.into());
            let yaml = yaml_serde::to_string(&vec![in_order(&entry)]).unwrap_or_default();
            let indented: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
            if s.needs.is_empty() {
                out.push_str(&indented);
                continue;
            }
            out.push_str(&format!(
                "  # {:?} needs configuration: {}\n",
                s.name,
                s.needs.join("; ")
            ));
            out.extend(
                indented
                    .lines()
                    .map(|l| format!("  # {}\n", l.strip_prefix("  ").unwrap_or(l))),
            );
        }
    }
    out
}

/// An entry's keys in the order the README writes them.
fn in_order(entry: &Map<String, Value>) -> yaml_serde::Value {
    const ORDER: [&str; 10] = [
        "id",
        "transport",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "bearer_token_env",
        "labels",
    ];
    let mut m = yaml_serde::Mapping::new();
    for key in ORDER {
        if let Some(v) = entry.get(key)
            && let Ok(v) = yaml_serde::to_value(v)
        {
            m.insert(key.into(), v);
        }
    }
    yaml_serde::Value::Mapping(m)
}

/// A JSON scalar as text (a number or bool in `args` or `env`).
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[path = "clients_tests.rs"]
mod tests;
