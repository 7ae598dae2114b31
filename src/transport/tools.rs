//! A server's tool surface as a monitor sees it: every tool's name, input
//! and output schema and annotations in a canonical form (sorted keys, tools
//! sorted by name), hashed, so a deploy that silently drops or changes a
//! tool shows up as a different hash and a named difference. Names and
//! input schemas are checked against the spec's rules on the way in.
//!
//! Each tool is reduced to its name and digest as its page arrives
//! ([`Digested::of`]); schemas are never kept. A tool over the budget's
//! size is hashed all the same but flagged, and a listing stops asking for
//! pages once its tools add up to the listing budget.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::truncate;

/// One tool, as compared between listings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolInfo {
    /// Its name (truncated and defused like every server string).
    pub name: String,
    /// SHA-256 of its canonical form, hex.
    pub digest: String,
    /// Why it breaks the spec's rules, if it does.
    pub problem: Option<String>,
    /// Its title (truncated and defused), for conditions on the list.
    pub title: Option<String>,
    /// Its annotations, kept when small ([`MAX_ANNOTATIONS`] as JSON),
    /// for conditions on the list.
    pub annotations: Option<Value>,
    /// Whether it may be called as a task (`execution.taskSupport`).
    pub task_support: TaskSupport,
}

/// What a tool's listing says of calling it as a task
/// (`execution.taskSupport`, 2025-11-25).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskSupport {
    /// Not as a task (the default when the field is absent).
    #[default]
    Forbidden,
    /// Either way.
    Optional,
    /// Only as a task.
    Required,
}

/// Longest tool name whose task support is kept, in bytes: the spec asks
/// for at most 128 characters.
pub const MAX_TOOL_NAME: usize = 512;

/// A raw `tools/list` answer, as much of it as task support needs; every
/// other field is skipped unread, and names are borrowed from the line.
#[derive(serde::Deserialize)]
struct ListingAnswer<'a> {
    id: rmcp::model::RequestId,
    #[serde(borrow)]
    result: ListingResult<'a>,
}

#[derive(serde::Deserialize)]
struct ListingResult<'a> {
    #[serde(borrow, default)]
    tools: Vec<ListedTool<'a>>,
}

#[derive(serde::Deserialize)]
struct ListedTool<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    execution: Option<Execution<'a>>,
}

#[derive(serde::Deserialize)]
struct Execution<'a> {
    #[serde(borrow, default, rename = "taskSupport")]
    task_support: Option<std::borrow::Cow<'a, str>>,
}

/// The id of a raw `tools/list` answer (one JSON-RPC message) and the task
/// support of each of its tools named in at most [`MAX_TOOL_NAME`] bytes,
/// for a listing read through rmcp, whose `Tool` keeps no `execution`.
pub fn task_support_in(
    message: &[u8],
) -> Option<(rmcp::model::RequestId, Vec<(String, TaskSupport)>)> {
    let answer: ListingAnswer<'_> = serde_json::from_slice(message).ok()?;
    let said = answer
        .result
        .tools
        .into_iter()
        .filter(|t| t.name.len() <= MAX_TOOL_NAME)
        .map(|t| {
            let word = t.execution.and_then(|e| e.task_support);
            (t.name.into_owned(), TaskSupport::from_word(word.as_deref()))
        })
        .collect();
    Some((answer.id, said))
}

impl TaskSupport {
    fn of(tool: &Value) -> TaskSupport {
        TaskSupport::from_word(tool["execution"]["taskSupport"].as_str())
    }

    fn from_word(word: Option<&str>) -> TaskSupport {
        match word {
            Some("optional") => TaskSupport::Optional,
            Some("required") => TaskSupport::Required,
            _ => TaskSupport::Forbidden,
        }
    }
}

/// Largest annotations object kept per tool, as JSON bytes.
pub const MAX_ANNOTATIONS: usize = 1024;

/// Every tool a server lists, sorted by name, and the hash of them all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolSurface {
    /// The tools, sorted by name.
    pub tools: Vec<ToolInfo>,
    /// `sha256:` and the hex SHA-256 of the canonical list.
    pub hash: String,
    /// How long the server said the listing stays fresh (`ttlMs`, 2026-07-28).
    pub ttl: Option<std::time::Duration>,
    /// Whether the listing stopped at the budget, with pages left unread.
    pub truncated: bool,
}

/// One tool reduced to what a surface keeps, plus what sorts it.
#[derive(Clone, Debug)]
pub struct Digested {
    /// The name as the server sent it (sorting uses it untruncated).
    raw_name: String,
    info: ToolInfo,
    /// Bytes of its canonical form, counted against the listing budget.
    pub bytes: usize,
}

impl Digested {
    /// Reduce one tool as the server sent it (`name`, `inputSchema`,
    /// `outputSchema`, `annotations`; other fields, such as descriptions,
    /// do not count). A tool whose canonical form exceeds `max_bytes` is
    /// flagged as breaking the budget.
    pub fn of(t: &Value, max_bytes: usize) -> Digested {
        let raw_name = t["name"].as_str().unwrap_or_default().to_owned();
        let mut canonical_tool = String::new();
        let mut part = serde_json::Map::new();
        for key in ["name", "inputSchema", "outputSchema", "annotations"] {
            if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
                part.insert(key.to_owned(), v.clone());
            }
        }
        canonical(&Value::Object(part), &mut canonical_tool);
        let bytes = canonical_tool.len();
        let problem = if bytes > max_bytes {
            Some(format!(
                "definition is {} KiB, over the {} KiB a tool may take",
                bytes >> 10,
                max_bytes >> 10
            ))
        } else {
            problem(&raw_name, t.get("inputSchema"))
        };
        Digested {
            info: ToolInfo {
                name: truncate(&raw_name, 128),
                digest: hex(&Sha256::digest(canonical_tool.as_bytes())),
                problem,
                title: t["title"].as_str().map(|x| truncate(x, 128)),
                annotations: t
                    .get("annotations")
                    .filter(|a| a.is_object())
                    .filter(|a| serde_json::to_vec(a).is_ok_and(|b| b.len() <= MAX_ANNOTATIONS))
                    .cloned(),
                task_support: TaskSupport::of(t),
            },
            raw_name,
            bytes,
        }
    }
}

/// How a surface differs from the one before.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolDiff {
    /// Listed now, not before.
    pub added: Vec<String>,
    /// Listed before, not now.
    pub removed: Vec<String>,
    /// Listed in both, with another schema or annotations.
    pub changed: Vec<String>,
}

impl ToolDiff {
    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl std::fmt::Display for ToolDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (what, names) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
        ] {
            if names.is_empty() {
                continue;
            }
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{what}: {}", names.join(", "))?;
        }
        Ok(())
    }
}

impl ToolSurface {
    /// The surface of tools given as the JSON the server sent, with no
    /// size budget (see [`Digested::of`]).
    pub fn from_json(tools: impl IntoIterator<Item = Value>) -> ToolSurface {
        Self::from_digests(tools.into_iter().map(|t| Digested::of(&t, usize::MAX)))
    }

    /// The surface of tools already reduced, in any order.
    pub fn from_digests(tools: impl IntoIterator<Item = Digested>) -> ToolSurface {
        let mut all: Vec<Digested> = tools.into_iter().collect();
        all.sort_by(|a, b| {
            a.raw_name
                .cmp(&b.raw_name)
                .then_with(|| a.info.digest.cmp(&b.info.digest))
        });
        let mut hasher = Sha256::new();
        for t in &all {
            hasher.update(t.info.digest.as_bytes());
            hasher.update(b"\n");
        }
        ToolSurface {
            hash: format!("sha256:{}", hex(&hasher.finalize())),
            tools: all.into_iter().map(|t| t.info).collect(),
            ttl: None,
            truncated: false,
        }
    }

    /// The tool names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name.as_str())
    }

    /// What changed from `before` to this one.
    pub fn diff(&self, before: &ToolSurface) -> ToolDiff {
        let find = |s: &ToolSurface, name: &str| s.tools.iter().find(|t| t.name == name).cloned();
        let mut d = ToolDiff::default();
        for t in &self.tools {
            match find(before, &t.name) {
                None => d.added.push(t.name.clone()),
                Some(old) if old.digest != t.digest => d.changed.push(t.name.clone()),
                Some(_) => {}
            }
        }
        for t in &before.tools {
            if find(self, &t.name).is_none() {
                d.removed.push(t.name.clone());
            }
        }
        d
    }
}

/// JSON with object keys sorted at every level: the same tool always
/// hashes the same, whatever order the server wrote its keys in.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Why a tool breaks the spec's rules: a name of 1 to 128 characters from
/// `A-Za-z0-9_.-`, and an input schema that is a JSON Schema object
/// (`type: object`, `properties` an object, `required` a list of names).
fn problem(name: &str, input_schema: Option<&Value>) -> Option<String> {
    let name_ok = (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !name_ok {
        return Some("name is not 1-128 characters of A-Za-z0-9_.-".to_owned());
    }
    let Some(Value::Object(schema)) = input_schema else {
        return Some("inputSchema is not a JSON object".to_owned());
    };
    if schema.get("type") != Some(&Value::String("object".into())) {
        return Some("inputSchema type is not \"object\"".to_owned());
    }
    if schema.get("properties").is_some_and(|p| !p.is_object()) {
        return Some("inputSchema properties is not an object".to_owned());
    }
    if let Some(r) = schema.get("required") {
        let names = r.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if !names {
            return Some("inputSchema required is not a list of names".to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, props: Value) -> Value {
        json!({"name": name, "description": "d", "inputSchema": {"type": "object", "properties": props}})
    }

    #[test]
    fn the_hash_ignores_order_and_descriptions_but_not_schemas() {
        let a = ToolSurface::from_json([
            tool("a", json!({"x": {"type": "string"}})),
            tool("b", json!({})),
        ]);
        let reordered = ToolSurface::from_json([
            json!({"inputSchema": {"properties": {}, "type": "object"}, "name": "b"}),
            json!({"name": "a", "description": "other words", "inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"}}),
        ]);
        assert_eq!(a.hash, reordered.hash);
        assert!(a.hash.starts_with("sha256:") && a.hash.len() == 7 + 64);
        let changed = ToolSurface::from_json([
            tool("a", json!({"x": {"type": "integer"}})),
            tool("b", json!({})),
        ]);
        assert_ne!(a.hash, changed.hash);
        assert_eq!(a.names().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn differences_are_named() {
        let before = ToolSurface::from_json([
            tool("keep", json!({})),
            tool("gone", json!({})),
            tool("edit", json!({})),
        ]);
        let after = ToolSurface::from_json([
            tool("keep", json!({})),
            tool("edit", json!({"y": {}})),
            tool("new", json!({})),
        ]);
        let d = after.diff(&before);
        assert_eq!(d.added, ["new"]);
        assert_eq!(d.removed, ["gone"]);
        assert_eq!(d.changed, ["edit"]);
        assert_eq!(d.to_string(), "added: new; removed: gone; changed: edit");
        assert!(after.diff(&after).is_empty());
    }

    #[test]
    fn names_and_input_schemas_are_checked() {
        let s = ToolSurface::from_json([
            tool("ok.tool-1_a", json!({})),
            tool("has space", json!({})),
            tool("", json!({})),
            json!({"name": "untyped", "inputSchema": {"properties": {}}}),
            json!({"name": "badprops", "inputSchema": {"type": "object", "properties": []}}),
            json!({"name": "badreq", "inputSchema": {"type": "object", "required": [1]}}),
            json!({"name": "noschema"}),
        ]);
        let bad: Vec<&str> = s
            .tools
            .iter()
            .filter(|t| t.problem.is_some())
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(
            bad,
            ["", "badprops", "badreq", "has space", "noschema", "untyped"]
        );
        assert!(
            s.tools
                .iter()
                .any(|t| t.name == "ok.tool-1_a" && t.problem.is_none())
        );
        let long = "x".repeat(129);
        assert!(problem(&long, Some(&json!({"type": "object"}))).is_some());
    }
}
