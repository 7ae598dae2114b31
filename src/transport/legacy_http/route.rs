//! What a held session's requests carry: the route (the headers of the
//! handshake's last POST) with what every POST adds, and the bearer.

use std::sync::Arc;

use http::Uri;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};

use crate::transport::rmcp_http::Route;

/// What a POST accepts back.
const JSON_OR_STREAM: &str = "application/json, text/event-stream";

/// `route` with the headers every POST of the session sends, added once
/// here rather than per request: at a ping a second per server, inserting
/// them into each request's copy (and hyper-util formatting a `Host`) was a
/// measurable part of the link's work (docs/benchmarks.md).
pub(super) fn posting(route: Route, uri: &Uri) -> Route {
    let mut headers = Arc::unwrap_or_clone(route);
    headers.reserve(5);
    headers.insert(ACCEPT, HeaderValue::from_static(JSON_OR_STREAM));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // Each POST replaces it with its body's length, in place: left to
    // hyper, the header was inserted into each request's copy of the
    // route, one more than the copy had room for, and the map grew and
    // rehashed on every ping.
    headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    headers.insert(
        http::header::USER_AGENT,
        crate::transport::wire::user_agent(),
    );
    // Over HTTP/2 (which only TLS negotiates) the authority goes in its
    // own field, so only plain HTTP gets a `Host` of its own; one the
    // server's configured headers name (a virtual host behind an address)
    // stays, as hyper-util would keep it.
    if !headers.contains_key(http::header::HOST)
        && let Some(host) = host_header(uri)
    {
        headers.insert(http::header::HOST, host);
    }
    Arc::new(headers)
}

/// The `Host` of a plain-HTTP `uri`: its host, and its port unless it is
/// the default.
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    if uri.scheme() != Some(&http::uri::Scheme::HTTP) {
        return None;
    }
    crate::transport::wire::host_header(uri)
}

/// Put `token` on `route` as the bearer.
pub(super) fn bearer(route: &mut Route, token: &str) {
    if let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {token}")) {
        v.set_sensitive(true);
        Arc::make_mut(route).insert(AUTHORIZATION, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_carries_what_every_post_sends_and_a_host_only_over_plain_http() {
        let mut given = http::HeaderMap::new();
        given.insert("mcp-session-id", HeaderValue::from_static("s1"));
        let given: Route = Arc::new(given);
        let host = |url: &str| {
            let route = posting(given.clone(), &url.parse().unwrap());
            assert_eq!(route["mcp-session-id"], "s1");
            assert_eq!(route[ACCEPT], JSON_OR_STREAM);
            assert_eq!(route[CONTENT_TYPE], "application/json");
            assert_eq!(route[CONTENT_LENGTH], "0");
            assert!(route.contains_key(http::header::USER_AGENT));
            route.get(http::header::HOST).cloned()
        };
        assert_eq!(host("http://127.0.0.1:8080/mcp").unwrap(), "127.0.0.1:8080");
        assert_eq!(host("http://mcp.example:80/mcp").unwrap(), "mcp.example");
        assert_eq!(host("http://[::1]:9/mcp").unwrap(), "[::1]:9");
        // TLS may choose HTTP/2, whose authority is not a header.
        assert_eq!(host("https://mcp.example/mcp"), None);
        // A configured Host is the server's to choose.
        let mut named = http::HeaderMap::new();
        named.insert(
            http::header::HOST,
            HeaderValue::from_static("vhost.example"),
        );
        let route = posting(
            Arc::new(named),
            &"http://127.0.0.1:8080/mcp".parse().unwrap(),
        );
        assert_eq!(route[http::header::HOST], "vhost.example");
    }
}
