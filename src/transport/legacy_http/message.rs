//! What a message read from an answer means to the request waiting on it:
//! its answer, a progress notification for it, a request of the server's
//! own, or something to drop.
//!
//! Every ping's answer passes through here, so a message is read into the
//! five members the judgment looks at, not into a map of every member: the
//! `jsonrpc` member and anything unknown are skipped without allocating.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::transport::sse_events::SseBuffer;
use crate::transport::{RequestError, truncate};

/// What one message read from an answer is, to the request `id`.
#[derive(Debug, PartialEq)]
pub enum Seen {
    /// The answer: its `result`, or its JSON-RPC error.
    Answer(Result<Value, RequestError>),
    /// A progress notification for the request's token.
    Progress,
    /// A request of the server's own.
    Request,
    /// `notifications/tools/list_changed`.
    ToolsChanged,
    /// Anything else (other notifications, other answers, not JSON).
    Other,
}

/// The members of a JSON-RPC message a monitor reads. Each is `Some`
/// whenever the member is there, `null` included: `"result": null` is an
/// answer, and `"id": null` is an id.
#[derive(Default)]
struct Message {
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

/// The member names a monitor reads; any other is skipped unread.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Member {
    Id,
    Method,
    Params,
    Result,
    Error,
    #[serde(other)]
    Unread,
}

/// Read by hand rather than derived, for two rules of JSON as servers
/// write it: a member given twice keeps its last copy (as `JSON.parse` and
/// a `Value` do, where a derived reader rejects the message), and only an
/// object is a message (a derived reader also takes an array, by position).
impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Message;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON-RPC message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
                let mut m = Message::default();
                while let Some(member) = map.next_key::<Member>()? {
                    let slot = match member {
                        Member::Id => &mut m.id,
                        Member::Method => &mut m.method,
                        Member::Params => &mut m.params,
                        Member::Result => &mut m.result,
                        Member::Error => &mut m.error,
                        Member::Unread => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(m)
            }
        }
        d.deserialize_map(Members)
    }
}

/// Read one JSON-RPC message (or a batch, for the answer in it).
pub fn seen(data: &[u8], id: &str, progress: Option<u64>) -> Seen {
    let batch = data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    if batch {
        // Rare (the 2025-03-26 era only): each member read on its own, so
        // one that is not a message does not hide the answer beside it.
        let Ok(batch) = serde_json::from_slice::<Vec<&RawValue>>(data) else {
            return Seen::Other;
        };
        return batch
            .into_iter()
            .filter_map(|m| serde_json::from_str::<Message>(m.get()).ok())
            .map(|m| message(m, id, progress))
            .find(|s| matches!(s, Seen::Answer(_)))
            .unwrap_or(Seen::Other);
    }
    match serde_json::from_slice::<Message>(data) {
        Ok(m) => message(m, id, progress),
        Err(_) => Seen::Other,
    }
}

fn message(m: Message, id: &str, progress: Option<u64>) -> Seen {
    if m.id.as_ref().is_some_and(|got| got == id) {
        if let Some(result) = m.result {
            return Seen::Answer(Ok(result));
        }
        if let Some(e) = m.error {
            return Seen::Answer(Err(RequestError::Rpc {
                code: e["code"]
                    .as_i64()
                    .and_then(|c| i32::try_from(c).ok())
                    .unwrap_or(0),
                message: truncate(e["message"].as_str().unwrap_or(""), 200),
            }));
        }
    }
    match (&m.method, &m.id) {
        (Some(method), None)
            if method == "notifications/progress"
                && progress.is_some_and(|p| {
                    m.params
                        .as_ref()
                        .is_some_and(|params| params["progressToken"] == p)
                }) =>
        {
            Seen::Progress
        }
        (Some(method), None) if method == "notifications/tools/list_changed" => Seen::ToolsChanged,
        (Some(_), Some(_)) => Seen::Request,
        _ => Seen::Other,
    }
}

/// The whole SSE events at the start of `buf`, read, and the bytes they
/// took; a partial event is left for the next chunk.
pub fn events(buf: &[u8], id: &str, progress: Option<u64>) -> (Vec<Seen>, usize) {
    let mut stream = SseBuffer::default();
    stream.push(buf);
    let mut out = Vec::new();
    while let Some(data) = stream.next_event() {
        if !data.is_empty() {
            out.push(seen(&data, id, progress));
        }
    }
    (out, buf.len() - stream.pending())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_errors_progress_and_requests_are_told_apart() {
        let read = |m: &str| seen(m.as_bytes(), "mcpmon-3", Some(3));
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"mcpmon-3","result":{"x":1}}"#),
            Seen::Answer(Ok(json!({"x": 1})))
        );
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"mcpmon-3","error":{"code":-32601,"message":"no"}}"#),
            Seen::Answer(Err(RequestError::Rpc {
                code: -32601,
                message: "no".into()
            }))
        );
        // Another request's answer, or a numeric id, is not this one's.
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"mcpmon-4","result":{}}"#),
            Seen::Other
        );
        assert_eq!(read(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#), Seen::Other);
        assert_eq!(
            read(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#
            ),
            Seen::Progress
        );
        assert_eq!(
            read(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":4,"progress":1}}"#
            ),
            Seen::Other
        );
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage"}"#),
            Seen::Request
        );
        assert_eq!(
            read(
                r#"[{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","id":"mcpmon-3","result":{}}]"#
            ),
            Seen::Answer(Ok(json!({})))
        );
        assert_eq!(read("not json"), Seen::Other);
        // A member that is there as `null` is there: a null result is an
        // answer, and a request with a null id is still a request.
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"mcpmon-3","result":null}"#),
            Seen::Answer(Ok(Value::Null))
        );
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":null,"method":"roots/list"}"#),
            Seen::Request
        );
        // Members a monitor does not read are skipped, whatever they hold.
        assert_eq!(
            read(r#" {"extra":[1,{"a":null}],"id":"mcpmon-3","jsonrpc":"2.0","result":{}}"#),
            Seen::Answer(Ok(json!({})))
        );
        assert_eq!(read("[1, 2]"), Seen::Other);
        // A member given twice keeps its last copy, as `JSON.parse` does.
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"mcpmon-9","id":"mcpmon-3","result":1,"result":2}"#),
            Seen::Answer(Ok(json!(2)))
        );
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"mcpmon-3","id":"mcpmon-9","result":1}"#),
            Seen::Other
        );
        // Only an object is a message: an array is not read by position.
        assert_eq!(read(r#"[["mcpmon-3", null, null, {}, null]]"#), Seen::Other);
        assert_eq!(
            read(r#"[1, {"jsonrpc":"2.0","id":"mcpmon-3","result":{}}]"#),
            Seen::Answer(Ok(json!({})))
        );
    }

    #[test]
    fn sse_events_are_read_whole_across_line_endings() {
        let stream = b": comment\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n\
id: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"p\",\r\ndata: \"result\":{}}\r\n\r\n";
        let (seen_all, used) = events(stream, "p", None);
        assert_eq!(used, stream.len());
        assert_eq!(seen_all, [Seen::Other, Seen::Answer(Ok(json!({})))]);
        // An event cut in the middle is left for the next chunk.
        let (first, used) = events(&stream[..40], "p", None);
        assert_eq!((first, used), (vec![], 11));
    }
}
