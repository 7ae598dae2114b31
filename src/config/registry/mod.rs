//! Servers of an MCP Registry (`GET /v0.1/servers`), as mcpmon entries:
//! one server per remote, its transport from `remotes[].type`, labelled
//! with its registry name and version. Pure: the discovery task walks the
//! pages (`page` reads each, bounded) into a [`Kept`] store of slim
//! records ([`Listed`]) that holds at most [`MAX_KEPT_BYTES`], and this
//! turns them into entries.
//!
//! A registry is untrusted, like an http_sd endpoint: its entries are
//! validated as one (never a process, never mcpmon's environment). A remote
//! whose URL is a template (`https://{tenant}.example.com/mcp`), or that
//! requires a header without giving its value, needs configuration: it is
//! counted, never guessed at. Packages are never started.

mod page;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::clients::{Translated, sanitise};
use super::{ConfigError, Rejected, Rejection};
pub use page::{Item, read as read_page};

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
    /// Deprecated, deleted or not the latest: that version is not run.
    Gone,
}

impl Listed {
    /// What keeping it costs, in bytes: its text (the name twice, as the
    /// store's key too) and what the allocator and the map take for each
    /// piece, measured high.
    fn bytes(&self) -> usize {
        let header = |h: &Header| {
            h.name.len()
                + h.value.as_ref().map_or(0, String::len)
                + h.default.as_ref().map_or(0, String::len)
                + 160
        };
        let remote = |r: &Remote| {
            r.kind.len() + r.url.len() + r.headers.iter().map(header).sum::<usize>() + 160
        };
        2 * self.name.len()
            + self.version.len()
            + self.remotes.iter().map(remote).sum::<usize>()
            + 256
    }
}

/// Most bytes of records a registry source keeps (`Listed::bytes`):
/// some ten thousand servers with one remote each, several times the
/// official registry's. The records are written out and read back once
/// more for validation, so what a walk holds at its peak is a few times
/// this.
pub const MAX_KEPT_BYTES: usize = 4 << 20;
/// Most records kept, whatever their size.
pub const MAX_RECORDS: usize = 100_000;
/// Most skipped records named (the rest are only counted).
const NAMED_SKIPS: usize = 100;

/// What a registry source keeps between pages and walks: one record per
/// server name, within [`MAX_KEPT_BYTES`] and [`MAX_RECORDS`], and the
/// servers it skipped, with why.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Kept {
    records: BTreeMap<String, Listed>,
    /// Skipped servers by name (at most [`NAMED_SKIPS`]), with why.
    skipped: BTreeMap<String, String>,
    /// How many skipped servers there are past those named.
    #[serde(default)]
    unnamed_skips: usize,
    /// Those servers, by a hash of their names: a walk that lists them
    /// again must not count them again (at most [`MAX_RECORDS`]).
    #[serde(skip)]
    unnamed: std::collections::HashSet<u64>,
    #[serde(skip)]
    bytes: usize,
}

impl Kept {
    /// Take one item of a page. A current record replaces its server's;
    /// a version that is not current removes only that version, so what
    /// is kept does not depend on the order a registry lists versions in.
    pub fn take(&mut self, item: Item) {
        match item {
            Item::Listed(record, Standing::Current) => {
                let name = record.name.clone();
                if let Some(old) = self.records.remove(&name) {
                    self.bytes -= old.bytes();
                }
                let size = record.bytes();
                if self.bytes + size > MAX_KEPT_BYTES {
                    self.skip(
                        name,
                        format!(
                            "over the {} MiB a registry source may keep",
                            MAX_KEPT_BYTES >> 20
                        ),
                    );
                } else if self.records.len() >= MAX_RECORDS {
                    self.skip(
                        name,
                        format!("over the {MAX_RECORDS} records a registry source may keep"),
                    );
                } else {
                    self.unskip(&name);
                    self.bytes += size;
                    self.records.insert(name, record);
                }
            }
            Item::Listed(record, Standing::Gone) => {
                if self
                    .records
                    .get(&record.name)
                    .is_some_and(|kept| kept.version == record.version)
                    && let Some(old) = self.records.remove(&record.name)
                {
                    self.bytes -= old.bytes();
                }
            }
            Item::TooLarge { name, why } => {
                if let Some(old) = self.records.remove(&name) {
                    self.bytes -= old.bytes();
                }
                self.skip(name, why);
            }
        }
    }

    fn skip(&mut self, name: String, why: String) {
        if self.skipped.len() < NAMED_SKIPS || self.skipped.contains_key(&name) {
            self.skipped.insert(name, why);
        } else if self.unnamed.len() < MAX_RECORDS {
            self.unnamed.insert(name_hash(&name));
            self.unnamed_skips = self.unnamed.len();
        }
    }

    /// `name` is kept now: no longer a skip.
    fn unskip(&mut self, name: &str) {
        if self.skipped.remove(name).is_none() && self.unnamed.remove(&name_hash(name)) {
            self.unnamed_skips = self.unnamed.len();
        }
    }

    /// How many records are kept.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The kept records as the text a source hands on for validation
    /// ([`as_entries`] reads it).
    pub fn to_text(&self) -> Result<String, String> {
        serde_json::to_string(self).map_err(|e| e.to_string())
    }
}

/// A name's fingerprint, for skips past those named.
fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// The kept records (a [`Kept`] as JSON) as entries, with the servers
/// that need configuration or were skipped as too large.
pub fn as_entries(origin: &Path, text: &str) -> Result<Translated, ConfigError> {
    let at = |message: String| ConfigError::whole_file(origin, message);
    let kept: Kept =
        serde_json::from_str(text).map_err(|e| at(format!("registry records: {e}")))?;
    let mut json = String::from("[\n");
    let mut lines = Vec::new();
    let mut needs = Vec::new();
    let mut ids = super::ids::UniqueIds::default();
    for r in kept.records.values() {
        for (i, remote) in r.remotes.iter().enumerate() {
            let base = match (r.remotes.len(), i) {
                (1, _) => sanitise(&r.name),
                (_, i) => format!("{}-{}", sanitise(&r.name), i + 1),
            };
            let id = ids.claim(&base);
            match entry(r, remote, &id) {
                Ok(e) => {
                    if !lines.is_empty() {
                        json.push_str(",\n");
                    }
                    json.push_str(&Value::Object(e).to_string());
                    lines.push(0);
                }
                Err(why) => needs.push(at(format!(
                    "server {:?} (remote {}) needs configuration: {why}",
                    super::defuse(&r.name, 200),
                    i + 1
                ))),
            }
        }
    }
    json.push_str("\n]\n");
    let mut large: Vec<ConfigError> = kept
        .skipped
        .iter()
        .map(|(name, why)| {
            at(format!(
                "server {:?} skipped: {why}",
                super::defuse(name, 100)
            ))
        })
        .collect();
    if kept.unnamed_skips > 0 {
        large.push(at(format!(
            "{} more servers skipped as too large",
            kept.unnamed_skips
        )));
    }
    let count = kept.skipped.len() + kept.unnamed_skips;
    let left_out = [
        (Rejection::NeedsConfiguration, needs.len(), needs),
        (Rejection::TooLarge, count, large),
    ];
    let left_out = left_out
        .into_iter()
        .filter(|(_, count, _)| *count > 0)
        .map(|(reason, count, errors)| Rejected {
            reason,
            count,
            errors,
        })
        .collect();
    Ok(Translated::new(json, lines, left_out))
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

    fn record(name: &str, version: &str) -> Listed {
        Listed {
            name: name.into(),
            version: version.into(),
            remotes: vec![Remote {
                kind: "streamable-http".into(),
                url: format!("https://{}.example/mcp", version.replace('.', "-")),
                headers: vec![],
            }],
        }
    }

    fn kept(items: Vec<Item>) -> Kept {
        let mut k = Kept::default();
        items.into_iter().for_each(|i| k.take(i));
        k
    }

    #[test]
    fn an_older_version_removes_only_itself_whatever_the_order() {
        let latest = || Item::Listed(record("io.a/x", "2.0.0"), Standing::Current);
        let older = || Item::Listed(record("io.a/x", "1.0.0"), Standing::Gone);
        for items in [vec![latest(), older()], vec![older(), latest()]] {
            let k = kept(items);
            assert_eq!(k.records["io.a/x"].version, "2.0.0");
        }
        // The latest version deprecated removes the server.
        let k = kept(vec![
            latest(),
            Item::Listed(record("io.a/x", "2.0.0"), Standing::Gone),
        ]);
        assert!(k.is_empty());
    }

    #[test]
    fn kept_records_stay_within_their_byte_budget_and_skips_are_counted() {
        let mut k = Kept::default();
        let big = |i: usize| {
            let mut r = record(&format!("io.a/s{i}"), "1");
            r.remotes[0].url = format!("https://a.example/{}", "p".repeat(2000));
            Item::Listed(r, Standing::Current)
        };
        for i in 0..10_000 {
            k.take(big(i));
        }
        assert!(k.bytes <= MAX_KEPT_BYTES);
        let recomputed: usize = k.records.values().map(Listed::bytes).sum();
        assert_eq!(k.bytes, recomputed, "the running count is exact");
        let skipped = 10_000 - k.len();
        assert!(skipped > 0);
        assert_eq!(k.skipped.len() + k.unnamed_skips, skipped);
        assert!(k.skipped.len() <= NAMED_SKIPS);
        // The same listing again (an incremental walk) skips the same.
        let before = k.to_text().expect("text");
        for i in 0..10_000 {
            k.take(big(i));
        }
        assert_eq!(
            k.to_text().expect("text"),
            before,
            "walked again, nothing changes"
        );
        k.take(Item::TooLarge {
            name: "io.a/s0".into(),
            why: "its version is 9 bytes, over 8".into(),
        });
        assert!(!k.records.contains_key("io.a/s0"));
        let t = as_entries(Path::new("https://r.example/"), &k.to_text().expect("text"))
            .expect("entries");
        let mut out = crate::config::Entries::default();
        t.place(&mut out);
        let [r] = &out.rejected[..] else {
            panic!("{out:?}")
        };
        assert_eq!(r.reason, Rejection::TooLarge);
        assert_eq!(r.count, skipped + 1);
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
        let text = kept(
            records
                .into_iter()
                .map(|r| Item::Listed(r, Standing::Current))
                .collect(),
        )
        .to_text()
        .expect("text");
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
        // Records are kept by name: keyed comes before tenant.
        assert!(
            r.errors[0].message.contains("\"X-Api-Key\" is required"),
            "{:?}",
            r.errors
        );
        assert!(
            r.errors[1].message.contains("is a template"),
            "{:?}",
            r.errors
        );
    }
}
