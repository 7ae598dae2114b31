//! The HTTP client of a held session's requests (pings, listings, calls):
//! hyper-util's pooled client, the one reqwest wraps, without reqwest's
//! layers.
//!
//! At a thousand servers pinged every second, reqwest's per-request work
//! (its request builder, URL and header copies, proxy and redirect layers)
//! cost more CPU than the ping itself: bench/run.py measured a bare reqwest
//! client at 1.6x the raw-socket floor and hyper-util's pooled client at
//! the floor (docs/benchmarks.md). Handshakes, OAuth and the legacy SSE
//! transport stay on reqwest: they run once per session.
//!
//! What reqwest gave and this keeps: rustls with the server's own settings
//! (the same verifier records the chain presented), HTTP/2 where ALPN
//! chooses it, proxies from `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and
//! `NO_PROXY` (HTTPS through a CONNECT tunnel, HTTP forwarded in absolute
//! form), a bounded connect, TCP keep-alive, a bounded idle pool, and no
//! redirect ever followed (hyper follows none). Bodies are read, bounded,
//! by the caller.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tower_service::Service;

/// A request body: mcpmon's requests are small and whole.
pub type Body = Full<Bytes>;

/// Why a request got no response.
pub type WireError = hyper_util::client::legacy::Error;

/// The pooled client of a server's requests, and one that keeps no idle
/// connection (for the retry after a kept-alive connection was closed under
/// a request: it must not pick another the server closed).
/// Shared, not copied: every session of a server holds one.
#[derive(Clone)]
pub struct Wire(Arc<Clients>);

struct Clients {
    pooled: Client<Tls, Body>,
    fresh: Client<Tls, Body>,
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
        let client = |idle: usize| {
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_max_idle_per_host(idle)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(tls.clone())
        };
        Wire(Arc::new(Clients {
            pooled: client(super::IDLE_CONNECTIONS_PER_HOST),
            fresh: client(0),
        }))
    }

    /// Send `request` on a kept-alive connection, or (`fresh`) on a new
    /// one. Its answer's body is the caller's to read within bounds.
    pub async fn send(
        &self,
        mut request: Request<Body>,
        fresh: bool,
    ) -> Result<Response<Incoming>, WireError> {
        // A link's route carries its own (made once, not per request).
        request
            .headers_mut()
            .entry(http::header::USER_AGENT)
            .or_insert_with(user_agent);
        if let Some(auth) = forwarded_auth(request.uri()) {
            request
                .headers_mut()
                .insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        let client = if fresh { &self.0.fresh } else { &self.0.pooled };
        client.request(request).await
    }
}

/// mcpmon's `User-Agent`.
pub fn user_agent() -> HeaderValue {
    HeaderValue::from_static(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
}

/// The proxies the environment names, read once: a proxy set after start
/// is not seen, as with reqwest. `None` when none is named, so a request
/// pays nothing for the lookup.
fn proxies() -> Option<&'static Matcher> {
    static PROXIES: OnceLock<Option<Matcher>> = OnceLock::new();
    PROXIES
        .get_or_init(|| {
            let named = ["ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY"].iter().any(|v| {
                std::env::var_os(v)
                    .or(std::env::var_os(v.to_lowercase()))
                    .is_some()
            });
            named.then(Matcher::from_env)
        })
        .as_ref()
}

/// The proxy credentials a plain-HTTP request forwarded through a proxy
/// carries (a tunnel carries its own on the CONNECT).
fn forwarded_auth(uri: &Uri) -> Option<HeaderValue> {
    if uri.scheme() != Some(&http::uri::Scheme::HTTP) {
        return None;
    }
    proxies()?.intercept(uri)?.basic_auth().cloned()
}

/// The TCP leg: straight to the server, through a CONNECT tunnel (HTTPS
/// behind a proxy), or to a proxy that forwards plain HTTP.
#[derive(Clone)]
pub struct Dial {
    tcp: HttpConnector,
}

impl Dial {
    fn new() -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(Duration::from_secs(10)));
        tcp.set_keepalive(Some(Duration::from_secs(30)));
        tcp.set_nodelay(true);
        // hyper-rustls speaks TLS over what this returns.
        tcp.enforce_http(false);
        Dial { tcp }
    }
}

/// A dialled connection; `forwarding` marks one to a forwarding proxy, so
/// that requests on it are written in absolute form.
pub struct Dialed {
    io: TokioIo<TcpStream>,
    forwarding: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Service<Uri> for Dial {
    type Response = Dialed;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Dialed, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Service::<Uri>::poll_ready(&mut self.tcp, cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        let proxy = proxies().and_then(|m| m.intercept(&dst));
        Box::pin(async move {
            let Some(proxy) = proxy else {
                let io = tcp.call(dst).await?;
                return Ok(Dialed {
                    io,
                    forwarding: false,
                });
            };
            if dst.scheme() == Some(&http::uri::Scheme::HTTPS) {
                let mut tunnel = Tunnel::new(proxy.uri().clone(), tcp);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = tunnel.call(dst).await?;
                return Ok(Dialed {
                    io,
                    forwarding: false,
                });
            }
            let io = tcp.call(proxy.uri().clone()).await?;
            Ok(Dialed {
                io,
                forwarding: true,
            })
        })
    }
}

impl Connection for Dialed {
    /// Without the addresses hyper-util's TCP connection would add: the
    /// client copies a connection's extras into every response, and for
    /// them each answer built an extensions map (three allocations a
    /// ping) that nothing here reads.
    fn connected(&self) -> Connected {
        Connected::new().proxy(self.forwarding)
    }
}

impl hyper::rt::Read for Dialed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Dialed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}
