//! One page of a registry's `GET /v0.1/servers`, read with every field
//! bounded: items are handed on one at a time as they are parsed (a page
//! is never held as a tree), strings are borrowed from the page's text and
//! never copied past [`MAX_FIELD`] bytes, lists are cut where the record
//! has no use for more. A page is the registry's text; what it may make
//! mcpmon keep is decided here, before anything is kept.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::{Header, Listed, Remote, Standing};

/// Longest `server.name`, as the registry's schema bounds it.
pub const MAX_NAME: usize = 200;
/// Longest `server.version`, as the registry's schema bounds it.
pub const MAX_VERSION: usize = 255;
/// Longest remote URL.
pub const MAX_URL: usize = 2048;
/// Longest header name.
pub const MAX_HEADER_NAME: usize = 256;
/// Longest header value or default (a token may be long).
pub const MAX_HEADER_VALUE: usize = 8192;
/// Longest string read at all: the largest bound above.
const MAX_FIELD: usize = MAX_HEADER_VALUE;
/// Remotes kept per server; more are not read.
pub const MAX_REMOTES: usize = 8;
/// Headers a remote may take.
pub const MAX_HEADERS: usize = 32;

/// One `servers[]` item of a page.
#[derive(Debug, PartialEq)]
pub enum Item {
    /// A server's record and what the registry says of it.
    Listed(Listed, Standing),
    /// A server with a field past its bound: skipped, and said why.
    TooLarge {
        /// Its name, defused and cut for a log line.
        name: String,
        /// Which field, and its bound.
        why: String,
    },
}

/// Read one page, handing each item with a name to `each` as it is parsed;
/// the cursor to the next page, if any. An item that is not a server
/// record is passed over; a page that is not an object with a `servers`
/// list is an error.
pub fn read(text: &str, each: &mut dyn FnMut(Item)) -> Result<Option<String>, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let cursor = de
        .deserialize_map(PageVisitor { each })
        .map_err(|e| format!("a page is not a registry page: {e}"))?;
    de.end()
        .map_err(|e| format!("a page is not a registry page: {e}"))?;
    cursor.ok_or_else(|| "a page has no `servers` list".to_owned())
}

/// A string as the page wrote it: borrowed where it has no escapes, and
/// never copied when longer than [`MAX_FIELD`].
enum Text<'a> {
    Kept(Cow<'a, str>),
    Over(usize),
}

impl<'a> Text<'a> {
    /// The text if it is at most `max` bytes, else how long it is.
    fn within(self, max: usize) -> Result<String, usize> {
        match self {
            Text::Kept(t) if t.len() <= max => Ok(t.into_owned()),
            Text::Kept(t) => Err(t.len()),
            Text::Over(n) => Err(n),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(match s.len() {
                    n if n > MAX_FIELD => Text::Over(n),
                    _ => Text::Kept(Cow::Borrowed(s)),
                })
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(match s.len() {
                    n if n > MAX_FIELD => Text::Over(n),
                    _ => Text::Kept(Cow::Owned(s.to_owned())),
                })
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// The first `N` items of a list, and whether it had more (never read).
struct Capped<T, const N: usize> {
    items: Vec<T>,
    more: bool,
}

impl<T, const N: usize> Default for Capped<T, N> {
    fn default() -> Self {
        Capped {
            items: Vec::new(),
            more: false,
        }
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Capped<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Capped<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Capped::default();
                while out.items.len() < N {
                    match seq.next_element()? {
                        Some(item) => out.items.push(item),
                        None => return Ok(out),
                    }
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    out.more = true;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct RawItem<'a> {
    #[serde(borrow, default)]
    server: Option<RawServer<'a>>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<RawMeta<'a>>,
}

#[derive(Deserialize)]
struct RawMeta<'a> {
    #[serde(borrow, default, rename = "io.modelcontextprotocol.registry/official")]
    official: Option<RawOfficial<'a>>,
}

#[derive(Deserialize)]
struct RawOfficial<'a> {
    #[serde(borrow, default)]
    status: Option<Text<'a>>,
    #[serde(default, rename = "isLatest")]
    is_latest: Option<bool>,
}

#[derive(Deserialize)]
struct RawServer<'a> {
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    version: Option<Text<'a>>,
    #[serde(borrow, default)]
    remotes: Capped<RawRemote<'a>, MAX_REMOTES>,
}

#[derive(Deserialize)]
struct RawRemote<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    url: Option<Text<'a>>,
    #[serde(borrow, default)]
    headers: Capped<RawHeader<'a>, MAX_HEADERS>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawHeader<'a> {
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    value: Option<Text<'a>>,
    #[serde(borrow, default)]
    default: Option<Text<'a>>,
    #[serde(default)]
    is_required: bool,
}

#[derive(Deserialize)]
struct RawPageMeta<'a> {
    #[serde(borrow, default, rename = "nextCursor")]
    next: Option<Text<'a>>,
    #[serde(borrow, default)]
    next_cursor: Option<Text<'a>>,
}

/// The page object: `servers` handed on item by item, `metadata` read for
/// the cursor. Its value: `Some(cursor)` once `servers` was seen.
struct PageVisitor<'f> {
    each: &'f mut dyn FnMut(Item),
}

impl<'de> Visitor<'de> for PageVisitor<'_> {
    type Value = Option<Option<String>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a page object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut servers, mut cursor) = (false, None);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.within(16).as_deref() {
                Ok("servers") => {
                    map.next_value_seed(Items { each: self.each })?;
                    servers = true;
                }
                Ok("metadata") => {
                    let meta: Option<RawPageMeta<'de>> = map.next_value()?;
                    let next = meta.and_then(|m| m.next.or(m.next_cursor));
                    cursor = match next.map(|t| t.within(MAX_FIELD)) {
                        Some(Ok(c)) if !c.is_empty() => Some(c),
                        Some(Err(n)) => {
                            return Err(de::Error::custom(format!("a cursor of {n} bytes")));
                        }
                        _ => None,
                    };
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(servers.then_some(cursor))
    }
}

/// The `servers` list, each item read on its own: one that is not a
/// server record is passed over, not the page.
struct Items<'f> {
    each: &'f mut dyn FnMut(Item),
}

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of servers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            if let Some(item) = serde_json::from_str::<RawItem<'_>>(raw.get())
                .ok()
                .and_then(item)
            {
                (self.each)(item);
            }
        }
        Ok(())
    }
}

/// What a parsed item stands for; `None` without a server or a name.
fn item(raw: RawItem<'_>) -> Option<Item> {
    let server = raw.server?;
    let name = match server.name?.within(MAX_NAME) {
        Ok(n) if n.is_empty() => return None,
        Ok(n) => n,
        Err(len) => {
            return Some(Item::TooLarge {
                name: format!("(a name of {len} bytes)"),
                why: format!("its name is over {MAX_NAME} bytes"),
            });
        }
    };
    let too_large = |why: String| {
        Some(Item::TooLarge {
            name: crate::config::defuse(&name, 100),
            why,
        })
    };
    let version = match server.version.map(|v| v.within(MAX_VERSION)) {
        None => String::new(),
        Some(Ok(v)) => v,
        Some(Err(len)) => {
            return too_large(format!("its version is {len} bytes, over {MAX_VERSION}"));
        }
    };
    let mut remotes = Vec::with_capacity(server.remotes.items.len());
    for r in server.remotes.items {
        if r.headers.more {
            return too_large(format!("a remote takes over {MAX_HEADERS} headers"));
        }
        let field = |t: Option<Text<'_>>, max: usize, what: &str| {
            t.map(|t| t.within(max))
                .transpose()
                .map_err(|len| format!("a remote's {what} is {len} bytes, over {max}"))
        };
        let checked = (|| {
            let mut headers = Vec::with_capacity(r.headers.items.len());
            for h in r.headers.items {
                headers.push(Header {
                    name: field(h.name, MAX_HEADER_NAME, "header name")?.unwrap_or_default(),
                    value: field(h.value, MAX_HEADER_VALUE, "header value")?,
                    default: field(h.default, MAX_HEADER_VALUE, "header default")?,
                    is_required: h.is_required,
                });
            }
            Ok::<_, String>(Remote {
                kind: field(r.kind, 64, "type")?.unwrap_or_default(),
                url: field(r.url, MAX_URL, "URL")?.unwrap_or_default(),
                headers,
            })
        })();
        match checked {
            Ok(remote) => remotes.push(remote),
            Err(why) => return too_large(why),
        }
    }
    let official = raw.meta.and_then(|m| m.official);
    let (status, latest) = match official {
        Some(o) => (o.status.map(|s| s.within(32)), o.is_latest),
        None => (None, None),
    };
    let standing = match (status, latest) {
        (Some(Ok(s)), Some(true) | None) if s == "active" => Standing::Current,
        (None, Some(true) | None) => Standing::Current,
        _ => Standing::Gone,
    };
    let record = Listed {
        name,
        version,
        remotes,
    };
    Some(Item::Listed(record, standing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items(page: &serde_json::Value) -> (Vec<Item>, Result<Option<String>, String>) {
        let mut got = Vec::new();
        let cursor = read(&page.to_string(), &mut |i| got.push(i));
        (got, cursor)
    }

    #[test]
    fn records_standing_and_cursors_are_read_both_ways() {
        let official = |status: &str, latest: bool| json!({"io.modelcontextprotocol.registry/official": {"status": status, "isLatest": latest}});
        let page = json!({
            "servers": [
                {"server": {"name": "io.a/x", "version": "1", "description": "d", "icons": [{"src": "x"}],
                            "remotes": [{"type": "sse", "url": "https://a/sse",
                                         "headers": [{"name": "X-K", "value": "v", "isRequired": true}]}]},
                 "_meta": official("active", true)},
                {"server": {"name": "io.a/y"}, "_meta": official("deprecated", true)},
                {"server": {"name": "io.a/z"}, "_meta": official("active", false)},
                {"server": {"name": "p/q"}},
                {"server": {}},
                {"server": {"name": 7}},
                "not an item"
            ],
            "metadata": {"nextCursor": "c1", "count": 7}
        });
        let (got, cursor) = items(&page);
        assert_eq!(cursor, Ok(Some("c1".into())));
        let standing: Vec<(&str, Standing)> = got
            .iter()
            .map(|i| match i {
                Item::Listed(r, s) => (r.name.as_str(), *s),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            standing,
            [
                ("io.a/x", Standing::Current),
                ("io.a/y", Standing::Gone),
                ("io.a/z", Standing::Gone),
                ("p/q", Standing::Current)
            ]
        );
        let Item::Listed(x, _) = &got[0] else {
            unreachable!()
        };
        assert_eq!(x.remotes[0].headers[0].value.as_deref(), Some("v"));
        let (_, cursor) = items(&json!({"servers": [], "metadata": {"next_cursor": "c2"}}));
        assert_eq!(cursor, Ok(Some("c2".into())));
        let (_, cursor) = items(&json!({"servers": [], "metadata": {"nextCursor": ""}}));
        assert_eq!(cursor, Ok(None));
        assert!(items(&json!({"metadata": {}})).1.is_err());
        assert!(read("[1]", &mut |_| {}).is_err());
    }

    #[test]
    fn a_field_past_its_bound_skips_the_record_and_says_which() {
        let server = |s: serde_json::Value| json!({"servers": [{"server": s}]});
        let huge = "v".repeat(15 << 20);
        let cases = [
            (
                json!({"name": "io.a/x", "version": huge}),
                "version is 15728640 bytes",
            ),
            (
                json!({"name": "n".repeat(MAX_NAME + 1)}),
                "name is over 200",
            ),
            (
                json!({"name": "io.a/x", "remotes": [{"type": "sse", "url": format!("https://{}", "u".repeat(MAX_URL))}]}),
                "URL is",
            ),
            (
                json!({"name": "io.a/x", "remotes": [{"type": "sse", "url": "https://a",
                        "headers": (0..=MAX_HEADERS).map(|i| json!({"name": format!("h{i}")})).collect::<Vec<_>>()}]}),
                "over 32 headers",
            ),
            (
                json!({"name": "io.a/x", "remotes": [{"type": "sse", "url": "https://a",
                        "headers": [{"name": "X", "value": "\u{e9}".repeat(MAX_HEADER_VALUE)}]}]}),
                "header value is",
            ),
        ];
        for (s, why) in cases {
            let (got, _) = items(&server(s));
            match &got[..] {
                [Item::TooLarge { why: w, .. }] => assert!(w.contains(why), "{w:?} lacks {why:?}"),
                other => panic!("{other:?}"),
            }
        }
        // Remotes past the eighth are not read.
        let many: Vec<_> = (0..20)
            .map(|i| json!({"type": "sse", "url": format!("https://a/{i}")}))
            .collect();
        let (got, _) = items(&server(json!({"name": "io.a/x", "remotes": many})));
        let [Item::Listed(r, _)] = &got[..] else {
            panic!("{got:?}")
        };
        assert_eq!(r.remotes.len(), MAX_REMOTES);
    }

    #[test]
    fn escaped_strings_are_read_and_a_huge_cursor_fails_the_page() {
        let text =
            r#"{"servers":[{"server":{"name":"io.a\/\u00e9"}}],"metadata":{"nextCursor":"x"}}"#;
        let mut got = Vec::new();
        assert_eq!(read(text, &mut |i| got.push(i)), Ok(Some("x".into())));
        let [Item::Listed(r, _)] = &got[..] else {
            panic!("{got:?}")
        };
        assert_eq!(r.name, "io.a/\u{e9}");
        let page = json!({"servers": [], "metadata": {"nextCursor": "c".repeat(MAX_FIELD + 1)}});
        assert!(items(&page).1.is_err());
    }
}
