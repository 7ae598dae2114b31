//! One client entry as an mcpmon server entry: each tool's own keys and
//! interpolation (`${env:VAR}`, `${VAR:-default}`, `${input:id}`, …) turned
//! into mcpmon's, and what it needs that mcpmon cannot supply.

use serde_json::{Map, Value};

use super::ClientFormat;

/// One entry being translated, and what it turned out to need.
pub(super) struct Translate<'a> {
    pub(super) format: ClientFormat,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    pub(super) home: &'a str,
    pub(super) workspace: &'a str,
    pub(super) needs: Vec<String>,
}

impl Translate<'_> {
    /// The mcpmon entry for one client entry (without id and labels).
    pub(super) fn entry(&mut self, item: &Value) -> Map<String, Value> {
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

/// A JSON scalar as text (a number or bool in `args` or `env`).
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
