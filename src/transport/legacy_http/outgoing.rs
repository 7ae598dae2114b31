//! What a request of a held session is written as: its JSON-RPC bytes,
//! serialized from borrowed parts, and its `Content-Length`. Every ping
//! passes here, so each is made without a JSON tree and in as few
//! allocations as the bytes need.

use bytes::Bytes;
use http::header::HeaderValue;
use serde_json::Value;

/// A request as it is written: serialized from borrowed parts, with no
/// JSON tree built for it.
#[derive(serde::Serialize)]
pub(super) struct Outgoing<'a> {
    pub(super) jsonrpc: &'static str,
    pub(super) id: &'a str,
    pub(super) method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) params: Option<&'a Value>,
}

impl Outgoing<'_> {
    /// The request's bytes in one allocation of their exact size: a
    /// serialized vector is larger than its contents, and `Bytes` takes
    /// such a vector with a second allocation for its refcount.
    pub(super) fn to_bytes(&self) -> Bytes {
        /// Past this a request's scratch is not kept for the next one.
        const KEPT: usize = 64 * 1024;
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with_borrow_mut(|out| {
            out.clear();
            // Strings and a JSON value always serialize.
            if serde_json::to_writer(&mut *out, self).is_err() {
                out.clear();
            }
            let bytes = Bytes::copy_from_slice(out);
            if out.capacity() > KEPT {
                *out = Vec::new();
            }
            bytes
        })
    }
}

/// A `Content-Length` of `length`. The sizes of pings and most requests
/// are made once and shared: a value made per request is two allocations
/// a ping.
pub(super) fn content_length(length: u64) -> HeaderValue {
    static SMALL: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    let small = SMALL.get_or_init(|| (0..1024u64).map(HeaderValue::from).collect());
    usize::try_from(length)
        .ok()
        .and_then(|n| small.get(n))
        .cloned()
        .unwrap_or_else(|| HeaderValue::from(length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_written_as_json_rpc_with_params_only_when_given() {
        let read = |o: Outgoing<'_>| serde_json::from_slice::<Value>(&o.to_bytes()).ok();
        let ping = Outgoing {
            jsonrpc: "2.0",
            id: "mcpmon-ping-1",
            method: "ping",
            params: None,
        };
        assert_eq!(
            read(ping),
            Some(json!({"jsonrpc": "2.0", "id": "mcpmon-ping-1", "method": "ping"}))
        );
        let params = json!({"name": "a \"quoted\" tool", "arguments": {}});
        let call = Outgoing {
            jsonrpc: "2.0",
            id: "c\n1",
            method: "tools/call",
            params: Some(&params),
        };
        assert_eq!(
            read(call),
            Some(json!({"jsonrpc": "2.0", "id": "c\n1", "method": "tools/call", "params": params}))
        );
        // A request larger than the scratch keeps is whole, and the one
        // after it is not written over its remains.
        let big = json!({"name": "x".repeat(100_000)});
        let large = Outgoing {
            jsonrpc: "2.0",
            id: "2",
            method: "tools/call",
            params: Some(&big),
        };
        assert_eq!(read(large).unwrap()["params"], big);
        let after = Outgoing {
            jsonrpc: "2.0",
            id: "3",
            method: "ping",
            params: None,
        };
        assert_eq!(
            read(after),
            Some(json!({"jsonrpc": "2.0", "id": "3", "method": "ping"}))
        );
    }

    #[test]
    fn a_content_length_is_the_length_shared_or_made() {
        for n in [0, 1, 63, 1023, 1024, 70_000, u64::MAX] {
            assert_eq!(content_length(n), n.to_string().as_str());
        }
    }
}
