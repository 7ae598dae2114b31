//! Servers of an MCP Registry (`GET /v0.1/servers`), as mcpmon entries:
//! one server per remote, its transport from `remotes[].type`, labelled
//! with its registry name and version. Pure: the discovery task walks the
//! pages and keeps, per server name, the slim record [`Listed`] that this
//! reads.
//!
//! A registry is untrusted, like an http_sd endpoint: its entries are
//! validated as one (never a process, never mcpmon's environment). A remote
//! whose URL is a template (`https://{tenant}.example.com/mcp`), or that
//! requires a header without giving its value, needs configuration: it is
//! counted, never guessed at. Packages are never started.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ConfigError;
use super::clients::{Translated, sanitise};

/// What mcpmon keeps of one registry server: its name, version and
/// remotes (descriptions, icons and packages are dropped as pages arrive).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    /// `server.name`, reverse-DNS with one `/`.
    pub name: String,
    /// `server.version`.
    #[serde(default)]
    pub version: String,
    /// `server.remotes`.
    #[serde(default)]
    pub remotes: Vec<Remote>,
}

/// One `remotes[]` item.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Remote {
    /// `streamable-http` or `sse`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Its URL, possibly templated.
    #[serde(default)]
    pub url: String,
    /// Headers it takes.
    #[serde(default)]
    pub headers: Vec<Header>,
}

/// One header a remote takes (a registry `KeyValueInput`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// The header's name.
    #[serde(default)]
    pub name: String,
    /// Its value, when the registry gives one.
    pub value: Option<String>,
    /// Its default, when it has one.
    pub default: Option<String>,
    /// Whether a session needs it.
    #[serde(default)]
    pub is_required: bool,
}

/// What a registry says of a server beside its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Active and the latest version: run it.
    Current,
    /// Deprecated, deleted or not the latest: drop it.
    Gone,
}

/// One `servers[]` item of a page: its record and standing, or `None` when
/// it has no name. A registry that omits the official `_meta` (a private
/// one) lists only what is current.
pub fn listed(item: &Value) -> Option<(Listed, Standing)> {
    let server = item.get("server")?;
    let mut record: Listed = serde_json::from_value(server.clone()).ok()?;
    if record.name.is_empty() {
        return None;
    }
    record.remotes.truncate(8);
    let meta = item
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol.registry/official"));
    let status = meta.and_then(|m| m.get("status")).and_then(Value::as_str);
    let latest = meta
        .and_then(|m| m.get("isLatest"))
        .and_then(Value::as_bool);
    let standing = match (status, latest) {
        (Some("active") | None, Some(true) | None) => Standing::Current,
        _ => Standing::Gone,
    };
    Some((record, standing))
}

/// A page's cursor to the next one: `metadata.nextCursor`, or the
/// `next_cursor` some documents print.
pub fn next_cursor(page: &Value) -> Option<String> {
    let meta = page.get("metadata")?;
    meta.get("nextCursor")
        .or_else(|| meta.get("next_cursor"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
}

/// The kept records (a JSON list of [`Listed`]) as entries.
pub fn as_entries(origin: &Path, text: &str) -> Result<Translated, ConfigError> {
    let records: Vec<Listed> = serde_json::from_str(text).map_err(|e| ConfigError {
        file: origin.to_owned(),
        line: 0,
        column: 0,
        message: format!("registry records: {e}"),
    })?;
    let mut json = String::from("[\n");
    let mut lines = Vec::new();
    let mut needs = Vec::new();
    let mut taken = std::collections::HashSet::new();
    for r in &records {
        for (i, remote) in r.remotes.iter().enumerate() {
            let base = match (r.remotes.len(), i) {
                (1, _) => sanitise(&r.name),
                (_, i) => format!("{}-{}", sanitise(&r.name), i + 1),
            };
            let mut id = base.clone();
            let mut n = 2;
            while !taken.insert(id.clone()) {
                id = format!("{base}-{n}");
                n += 1;
            }
            match entry(r, remote, &id) {
                Ok(e) => {
                    if !lines.is_empty() {
                        json.push_str(",\n");
                    }
                    json.push_str(&Value::Object(e).to_string());
                    lines.push(0);
                }
                Err(why) => needs.push(ConfigError {
                    file: origin.to_owned(),
                    line: 0,
                    column: 0,
                    message: format!(
                        "server {:?} (remote {}) needs configuration: {why}",
                        super::defuse(&r.name, 200),
                        i + 1
                    ),
                }),
            }
        }
    }
    json.push_str("\n]\n");
    Ok(Translated::new(json, lines, needs))
}

/// One remote as an entry, or what it needs.
fn entry(r: &Listed, remote: &Remote, id: &str) -> Result<Map<String, Value>, String> {
    let transport = match remote.kind.as_str() {
        "streamable-http" => "http",
        "sse" => "sse",
        other => return Err(format!("remote type {:?}", super::defuse(other, 40))),
    };
    if remote.url.contains('{') {
        return Err(format!(
            "its URL {:?} is a template; write it out in the main file",
            super::defuse(&remote.url, 200)
        ));
    }
    let mut headers = Map::new();
    for h in &remote.headers {
        match h.value.as_ref().or(h.default.as_ref()) {
            Some(v) => {
                headers.insert(h.name.clone(), v.clone().into());
            }
            None if h.is_required => {
                return Err(format!(
                    "the header {:?} is required and has no value",
                    super::defuse(&h.name, 80)
                ));
            }
            None => {}
        }
    }
    let mut e = Map::new();
    e.insert("id".into(), id.into());
    e.insert("transport".into(), transport.into());
    e.insert("url".into(), remote.url.clone().into());
    if !headers.is_empty() {
        e.insert("headers".into(), headers.into());
    }
    e.insert(
        "labels".into(),
        json!({"registry_name": r.name, "registry_version": r.version}),
    );
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, status: &str, latest: bool, remotes: Value) -> Value {
        json!({
            "server": {"name": name, "version": "1.0.0", "description": "x", "remotes": remotes,
                       "packages": [{"registryType": "npm", "identifier": "x"}]},
            "_meta": {"io.modelcontextprotocol.registry/official": {"status": status, "isLatest": latest}}
        })
    }

    #[test]
    fn only_current_servers_stand_and_cursors_are_read_both_ways() {
        let remotes = json!([{"type": "streamable-http", "url": "https://a.example/mcp"}]);
        let standing = |v: &Value| listed(v).map(|(_, s)| s);
        assert_eq!(
            standing(&item("io.a/x", "active", true, remotes.clone())),
            Some(Standing::Current)
        );
        assert_eq!(
            standing(&item("io.a/x", "deprecated", true, remotes.clone())),
            Some(Standing::Gone)
        );
        assert_eq!(
            standing(&item("io.a/x", "active", false, remotes.clone())),
            Some(Standing::Gone)
        );
        assert_eq!(
            standing(&json!({"server": {"name": "p/q"}})),
            Some(Standing::Current)
        );
        assert_eq!(standing(&json!({"server": {}})), None);
        assert_eq!(
            next_cursor(&json!({"metadata": {"nextCursor": "c1"}})).as_deref(),
            Some("c1")
        );
        assert_eq!(
            next_cursor(&json!({"metadata": {"next_cursor": "c2"}})).as_deref(),
            Some("c2")
        );
        assert_eq!(next_cursor(&json!({"metadata": {"nextCursor": ""}})), None);
    }

    #[test]
    fn remotes_become_entries_and_templates_need_configuration() {
        let records = vec![
            Listed {
                name: "io.github.acme/search".into(),
                version: "2.1.0".into(),
                remotes: vec![
                    Remote {
                        kind: "streamable-http".into(),
                        url: "https://s.example/mcp".into(),
                        headers: vec![],
                    },
                    Remote {
                        kind: "sse".into(),
                        url: "https://s.example/sse".into(),
                        headers: vec![Header {
                            name: "X-Tier".into(),
                            default: Some("free".into()),
                            ..Default::default()
                        }],
                    },
                ],
            },
            Listed {
                name: "com.example/tenant".into(),
                version: "1".into(),
                remotes: vec![Remote {
                    kind: "streamable-http".into(),
                    url: "https://{tenant}.example.com/mcp".into(),
                    headers: vec![],
                }],
            },
            Listed {
                name: "com.example/keyed".into(),
                version: "1".into(),
                remotes: vec![Remote {
                    kind: "streamable-http".into(),
                    url: "https://k.example/mcp".into(),
                    headers: vec![Header {
                        name: "X-Api-Key".into(),
                        is_required: true,
                        ..Default::default()
                    }],
                }],
            },
        ];
        let text = serde_json::to_string(&records).expect("json");
        let t = as_entries(Path::new("https://r.example/"), &text).expect("entries");
        let entries: Vec<Value> = serde_json::from_str(&t.json).expect("a JSON list");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["id"], "io.github.acme-search-1");
        assert_eq!(entries[0]["transport"], "http");
        assert_eq!(entries[1]["transport"], "sse");
        assert_eq!(entries[1]["headers"]["X-Tier"], "free");
        assert_eq!(entries[1]["labels"]["registry_version"], "2.1.0");
        let mut out = crate::config::Entries::default();
        t.place(&mut out);
        let [r] = &out.rejected[..] else {
            panic!("{out:?}")
        };
        assert_eq!(r.reason, crate::config::Rejection::NeedsConfiguration);
        assert_eq!(r.count, 2);
        assert!(
            r.errors[0].message.contains("is a template"),
            "{:?}",
            r.errors
        );
        assert!(
            r.errors[1].message.contains("\"X-Api-Key\" is required"),
            "{:?}",
            r.errors
        );
    }
}
