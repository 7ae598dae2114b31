//! The HTTP client of a held session's requests (pings, listings, calls):
//! hyper's connections, kept per origin by mcpmon itself, without
//! reqwest's layers or hyper-util's pool.
//!
//! At a thousand servers pinged every second, reqwest's per-request work
//! (its request builder, URL and header copies, proxy and redirect layers)
//! cost more CPU than the ping itself, and hyper-util's pool two fifths
//! of what was left above a bare hyper connection: a task spawned per request
//! to put its connection back, the origin hashed twice, a connect future
//! built and raced against the checkout (docs/benchmarks.md). Handshakes,
//! OAuth and the legacy SSE transport stay on reqwest: they run once per
//! session.
//!
//! What reqwest gave and this keeps: rustls with the server's own settings
//! (the same verifier records the chain presented), HTTP/2 where ALPN
//! chooses it, proxies from `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and
//! `NO_PROXY` (HTTPS through a CONNECT tunnel, HTTP forwarded in absolute
//! form), a bounded connect, TCP keep-alive, a bounded idle pool shared by
//! the servers behind one origin, and no redirect ever followed (hyper
//! follows none). Bodies are read, bounded, by the caller.

mod dial;
mod origin;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use http::{HeaderValue, Uri};
use http_body_util::Full;

pub use dial::BoxError;
use dial::Dial;
pub use origin::{AnswerBody, Origin, host_header};

/// A request body: mcpmon's requests are small and whole.
pub type Body = Full<Bytes>;

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The URL names no scheme and authority to connect to.
    #[error("a request URL without a scheme and host")]
    NoOrigin,
    /// TCP, the proxy's tunnel or TLS failed.
    #[error("could not connect")]
    Connect(#[source] BoxError),
    /// The HTTP handshake on a new connection failed.
    #[error("HTTP handshake")]
    Handshake(#[source] hyper::Error),
    /// The request was sent, or half sent, and no answer's head came.
    #[error("error sending request")]
    Send(#[source] hyper::Error),
}

/// Builds the connections of every server that shares these TLS settings,
/// and keeps one [`Origin`] per scheme and authority, so that the servers
/// behind one gateway share its idle connections. Shared, not copied.
#[derive(Clone)]
pub struct Wire(Arc<Shared>);

struct Shared {
    tls: Tls,
    /// Weak: an origin lives while a session holds it, and its idle
    /// connections close with it.
    origins: Mutex<HashMap<(http::uri::Scheme, http::uri::Authority), Weak<origin::Shared>>>,
}

type Tls = hyper_rustls::HttpsConnector<Dial>;

impl Wire {
    /// A client speaking TLS with `config` to `https` URLs (its ALPN list
    /// is set here) and plain HTTP to the rest.
    pub fn new(config: &rustls::ClientConfig) -> Wire {
        let mut config = config.clone();
        config.alpn_protocols.clear();
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(Dial::new());
        Wire(Arc::new(Shared {
            tls,
            origins: Mutex::new(HashMap::new()),
        }))
    }

    /// The connections to `uri`'s origin, looked up once per session so
    /// that a request finds its connection without hashing anything.
    pub fn origin(&self, uri: &Uri) -> Result<Origin, WireError> {
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(WireError::NoOrigin);
        };
        let key = (scheme.clone(), authority.clone());
        let mut origins = self.0.origins.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(shared) = origins.get(&key).and_then(Weak::upgrade) {
            return Ok(Origin::from(shared));
        }
        // Forget the origins no session holds any more.
        origins.retain(|_, o| o.strong_count() > 0);
        let dst = Uri::builder()
            .scheme(key.0.clone())
            .authority(key.1.clone())
            .path_and_query("/")
            .build()
            .map_err(|_| WireError::NoOrigin)?;
        let origin = Origin::new(self.0.tls.clone(), dst);
        origins.insert(key, origin.downgrade());
        Ok(origin)
    }
}

/// mcpmon's `User-Agent`.
pub fn user_agent() -> HeaderValue {
    HeaderValue::from_static(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
}

#[cfg(test)]
mod tests;
