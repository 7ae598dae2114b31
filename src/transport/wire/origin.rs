//! The connections to one origin (scheme and authority), shared by every
//! session behind it: HTTP/1.1 connections idle between requests, handed
//! out last in, first out, or the one HTTP/2 connection ALPN chose, which
//! carries every request at once.
//!
//! An HTTP/1.1 connection goes back to the idle list when its answer is
//! dropped, read or not: hyper reads what is left of the body if it has
//! already come (an event stream's answer is often all there, its end
//! included) and closes the connection otherwise. Its next request waits
//! for hyper to say which.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HOST, PROXY_AUTHORIZATION, USER_AGENT};
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use super::{Body, Tls, WireError, dial};

/// Idle connections kept per origin: those of thousands of servers behind
/// one gateway share them.
const MAX_IDLE: usize = crate::transport::IDLE_CONNECTIONS_PER_HOST;

const IDLE_TIMEOUT: Duration = crate::transport::IDLE_CONNECTION_TIMEOUT;

/// A session's handle on its origin's connections.
#[derive(Clone)]
pub struct Origin(Arc<Shared>);

pub(super) struct Shared {
    tls: Tls,
    /// Where a new connection dials: the origin, as a URI.
    dst: Uri,
    /// Oldest first; a request takes the newest, and the oldest are the
    /// ones that time out.
    idle: Mutex<VecDeque<Idle>>,
    /// The origin's HTTP/2 connection, once ALPN chose it.
    h2: Mutex<Option<http2::SendRequest<Body>>>,
}

struct Idle {
    since: Instant,
    conn: H1,
}

/// An HTTP/1.1 connection; `forwarding` when it goes to a proxy that
/// forwards plain HTTP, so its requests are written in absolute form.
struct H1 {
    sender: http1::SendRequest<Body>,
    forwarding: bool,
}

enum Conn {
    H1(H1),
    H2(http2::SendRequest<Body>),
}

impl From<Arc<Shared>> for Origin {
    fn from(shared: Arc<Shared>) -> Self {
        Origin(shared)
    }
}

impl Origin {
    pub(super) fn new(tls: Tls, dst: Uri) -> Origin {
        Origin(Arc::new(Shared {
            tls,
            dst,
            idle: Mutex::new(VecDeque::new()),
            h2: Mutex::new(None),
        }))
    }

    pub(super) fn downgrade(&self) -> Weak<Shared> {
        Arc::downgrade(&self.0)
    }

    /// Send `request` (its URI absolute) on an idle connection, or
    /// (`fresh`, or none idle) on a new one. Its answer's body is the
    /// caller's to read within bounds.
    pub async fn send(
        &self,
        mut request: Request<Body>,
        fresh: bool,
    ) -> Result<Response<AnswerBody>, WireError> {
        // A link's route carries its own (made once, not per request).
        request
            .headers_mut()
            .entry(USER_AGENT)
            .or_insert_with(super::user_agent);
        if let Some(auth) = dial::forwarded_auth(request.uri()) {
            request.headers_mut().insert(PROXY_AUTHORIZATION, auth);
        }
        let uri = request.uri().clone();
        let mut fresh = fresh;
        loop {
            let idle = if fresh { None } else { self.checkout().await };
            let reused = idle.is_some();
            let conn = match idle {
                Some(conn) => conn,
                // Boxed: the handshakes' futures are kilobytes, and the
                // request's future, moved into timeouts and selects on
                // every ping, would carry them.
                None => Box::pin(self.dial()).await?,
            };
            let unsent = match conn {
                Conn::H2(mut sender) => match sender.try_send_request(request).await {
                    Ok(response) => return Ok(response.map(|body| AnswerBody::new(body, None))),
                    Err(e) => e,
                },
                Conn::H1(mut conn) => {
                    written_for_h1(&mut request, &uri, conn.forwarding);
                    match conn.sender.try_send_request(request).await {
                        Ok(response) => {
                            let lease = Lease {
                                origin: self.0.clone(),
                                conn,
                            };
                            return Ok(response.map(|body| AnswerBody::new(body, Some(lease))));
                        }
                        Err(e) => e,
                    }
                }
            };
            // A request the connection never took is safe to send again,
            // once, on a new one: the idle connection had closed between
            // the check and the send.
            let mut unsent = unsent;
            match unsent.take_message() {
                Some(again) if reused => {
                    request = again;
                    *request.uri_mut() = uri.clone();
                    fresh = true;
                }
                _ => return Err(WireError::Send(unsent.into_error())),
            }
        }
    }

    /// The origin's HTTP/2 connection, or its newest idle HTTP/1.1 one that
    /// is still open; those closed meanwhile are dropped on the way.
    async fn checkout(&self) -> Option<Conn> {
        let h2 = lock(&self.0.h2).clone();
        if let Some(mut sender) = h2 {
            if sender.ready().await.is_ok() {
                return Some(Conn::H2(sender));
            }
            let mut slot = lock(&self.0.h2);
            if slot.as_ref().is_some_and(http2::SendRequest::is_closed) {
                *slot = None;
            }
        }
        loop {
            let mut conn = lock(&self.0.idle).pop_back()?.conn;
            if conn.sender.is_closed() {
                continue;
            }
            // Ready at once unless hyper's task has not yet seen the last
            // answer's end (or drained what was left of it); closed if an
            // answer was dropped with more to come, or the server hung up.
            if conn.sender.ready().await.is_ok() {
                return Some(Conn::H1(conn));
            }
        }
    }

    /// A new connection: TCP (through a proxy, if one is named), TLS for
    /// `https`, and the HTTP version ALPN chose, its task spawned.
    async fn dial(&self) -> Result<Conn, WireError> {
        let mut tls = self.0.tls.clone();
        std::future::poll_fn(|cx| tls.poll_ready(cx))
            .await
            .map_err(WireError::Connect)?;
        let io = tls
            .call(self.0.dst.clone())
            .await
            .map_err(WireError::Connect)?;
        let connected = io.connected();
        if connected.is_negotiated_h2() {
            let (sender, connection) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await
                .map_err(WireError::Handshake)?;
            // Its errors reach the requests on it.
            tokio::spawn(connection);
            tracing::debug!(origin = %self.0.dst, "connected over HTTP/2");
            *lock(&self.0.h2) = Some(sender.clone());
            return Ok(Conn::H2(sender));
        }
        let (sender, connection) = http1::handshake(io).await.map_err(WireError::Handshake)?;
        tokio::spawn(connection);
        Ok(Conn::H1(H1 {
            sender,
            forwarding: connected.is_proxied(),
        }))
    }
}

impl Shared {
    /// Keep `conn` for the next request, unless it closed or the list is
    /// full; connections idle past the timeout go first.
    fn give_back(&self, conn: H1) {
        if conn.sender.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut idle = lock(&self.idle);
        while idle
            .front()
            .is_some_and(|i| now.duration_since(i.since) > IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle { since: now, conn });
        }
    }
}

/// The request line and `Host` HTTP/1.1 wants: the path alone to the
/// server itself, the whole URL to a forwarding proxy.
fn written_for_h1(request: &mut Request<Body>, uri: &Uri, forwarding: bool) {
    if !request.headers().contains_key(HOST)
        && let Some(host) = host_header(uri)
    {
        request.headers_mut().insert(HOST, host);
    }
    if !forwarding && let Some(path) = uri.path_and_query() {
        *request.uri_mut() = Uri::from(path.clone());
    }
}

/// The `Host` of `uri`: its host, and its port unless it is the scheme's
/// default.
pub fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let value = match uri.port_u16().filter(|p| *p != default) {
        Some(port) => HeaderValue::from_str(&format!("{host}:{port}")),
        None => HeaderValue::from_str(host),
    };
    value.ok()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An HTTP/1.1 connection lent to one request.
struct Lease {
    origin: Arc<Shared>,
    conn: H1,
}

/// An answer's body, still to be read; its connection goes back to the
/// origin when it is dropped.
pub struct AnswerBody {
    body: Incoming,
    lease: Option<Lease>,
}

impl AnswerBody {
    fn new(body: Incoming, lease: Option<Lease>) -> AnswerBody {
        AnswerBody { body, lease }
    }
}

impl hyper::body::Body for AnswerBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.origin.give_back(lease.conn);
        }
    }
}
