//! Serving: the accept loop with its connection caps, TLS handshakes
//! (refusals logged at a bounded rate), hyper's HTTP/1.1 with a header
//! deadline, and [`WriteDeadline`] on every response.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, Web, lock};

/// At most one line about refused TLS clients this often; the rest are
/// counted into the next line.
const TLS_REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Clients whose TLS handshake failed, told in the log at a bounded rate:
/// a client whose certificate is refused (a version 1 certificate, an
/// unknown CA) must be able to learn why, and a scanner must not fill the
/// log.
#[derive(Default)]
pub(super) struct TlsRefusals {
    /// When the last line was written, and the refusals since.
    last: Mutex<(Option<Instant>, u64)>,
}

impl TlsRefusals {
    pub(super) fn refused(&self, client: IpAddr, error: &std::io::Error) {
        let mut last = lock(&self.last);
        let now = Instant::now();
        if last
            .0
            .is_some_and(|t| now.duration_since(t) < TLS_REFUSAL_LOG_EVERY)
        {
            last.1 += 1;
            return;
        }
        let suppressed = std::mem::take(&mut last.1);
        last.0 = Some(now);
        drop(last);
        tracing::warn!(
            client = %client,
            error = %crate::config::defuse(&error.to_string(), 300),
            also_refused = suppressed,
            "TLS handshake refused"
        );
    }
}

impl Web {
    /// Serve until `cancel`, then let open requests finish.
    pub async fn serve(
        &self,
        listener: TcpListener,
        router: Router,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let permit = tokio::select! {
                _ = cancel.cancelled() => break,
                p = permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let (stream, peer) = tokio::select! {
                _ = cancel.cancelled() => break,
                r = listener.accept() => match r {
                    Ok(s) => s,
                    // Out of descriptors and the like: back off briefly, keep serving.
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Some(slot) = self.admit(peer.ip()) else {
                tracing::debug!(client = %peer.ip(), "per-client connection cap reached");
                continue; // Dropping the stream closes it.
            };
            self.refresh_if_changed();
            let stream = WriteDeadline::new(stream, self.shared.write_timeout);
            let service = TowerToHyperService::new(router.clone());
            let tls = self.current().tls.clone();
            let cancel = cancel.clone();
            let refusals = self.shared.tls_refusals.clone();
            connections.spawn(async move {
                let _held = (permit, slot);
                match tls {
                    Some(acceptor) => {
                        let accepted =
                            tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream))
                                .await;
                        match accepted {
                            Ok(Ok(tls_stream)) => {
                                serve_connection(TokioIo::new(tls_stream), service, cancel).await;
                            }
                            Ok(Err(e)) => refusals.refused(peer.ip(), &e),
                            Err(_) => {}
                        }
                    }
                    None => serve_connection(TokioIo::new(stream), service, cancel).await,
                }
            });
        }
        connections.close();
        // Open requests get a moment to finish; idle keep-alive connections close.
        let _ = tokio::time::timeout(Duration::from_secs(5), connections.wait()).await;
        Ok(())
    }
}

async fn serve_connection<I, S>(io: I, service: S, cancel: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<hyper::Request<hyper::body::Incoming>, Response = Response>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// A stream whose output must drain within a deadline: the clock starts at
/// the first write after everything was flushed and stops when a flush
/// completes, so it bounds each response (or burst of pipelined ones), not
/// the connection. Past it, writes fail and the connection ends.
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    /// Wrap `inner`, allowing `limit` per response.
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            timer: None,
        }
    }

    fn start(&mut self) {
        if self.timer.is_none() {
            self.timer = Some(Box::pin(tokio::time::sleep(self.limit)));
        }
    }

    /// Called when the inner stream is not ready: fail if time is up.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        match self.timer.as_mut().map(|t| t.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "response write deadline passed",
            ))),
            _ => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.start();
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            done => done,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.start();
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            Poll::Ready(r) => {
                self.timer = None;
                Poll::Ready(r)
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(Pin::new(&mut self.inner).poll_shutdown(cx))?;
        Poll::Ready(Ok(()))
    }
}
