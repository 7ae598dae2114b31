//! A request that fails because its kept-alive connection was closed under
//! it is asked again once, on a fresh connection, before the failure
//! counts.
//!
//! A server that closes idle connections (most HTTP stacks do after a few
//! seconds) races the next request on them: after a pause (a SIGSTOP and
//! SIGCONT, a garbage-collection stall, a laptop's sleep) the first request
//! on the old connection met "Connection reset by peer", and a server that
//! had just come back read unreachable for two seconds and was reconnected.
//! Only requests that are safe to send twice are retried (liveness,
//! listings): a tool call never is, since running work twice is what a
//! monitor exists to prevent.

use std::sync::OnceLock;
use std::time::Duration;

/// Whether `err` says the connection was closed before an answer came: a
/// reset, a broken pipe, or hyper's "connection closed before message
/// completed". A refused connection is not one: nobody is there.
pub fn stale_connection(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted) {
                return true;
            }
        }
        source = e.source();
    }
    false
}

/// Whether a JSON-RPC method may be sent twice.
pub fn idempotent(method: &str) -> bool {
    method != "tools/call"
}

/// A client that keeps no idle connection, so each request opens a fresh
/// one: the retry must not pick another connection the server closed.
/// `None` if it cannot be built (no TLS roots), and the retry is skipped.
pub fn fresh_client() -> Option<&'static reqwest::Client> {
    static FRESH: OnceLock<Option<reqwest::Client>> = OnceLock::new();
    FRESH
        .get_or_init(|| {
            reqwest::Client::builder()
                .user_agent(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(Duration::from_secs(10))
                .pool_max_idle_per_host(0)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .ok()
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_are_stale_connections_and_refusals_are_not() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(stale_connection(&reset));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!stale_connection(&refused));
        assert!(idempotent("ping") && idempotent("tools/list") && idempotent("server/discover"));
        assert!(!idempotent("tools/call"));
    }
}
