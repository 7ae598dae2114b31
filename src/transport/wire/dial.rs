//! The TCP leg of a held session's connections: straight to the server,
//! through a CONNECT tunnel (HTTPS behind a proxy), or to a proxy that
//! forwards plain HTTP, as the environment's proxy variables say.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

/// The proxies the environment names, read once: a proxy set after start
/// is not seen, as with reqwest. `None` when none is named, so a request
/// pays nothing for the lookup.
pub(super) fn proxies() -> Option<&'static Matcher> {
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
pub(super) fn forwarded_auth(uri: &Uri) -> Option<HeaderValue> {
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
    pub(super) fn new() -> Self {
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

/// Why a dial failed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
