//! A guard around rmcp's transports that bounds what a server may ask of
//! mcpmon. rmcp spawns a task for every request a server sends and queues
//! each reply behind the transport: a server that writes requests and never
//! reads its stdin grows mcpmon's memory without bound. mcpmon advertises no
//! client capabilities, so a server may legitimately send it little more
//! than an occasional `ping`; past [`MAX_IN_FLIGHT`] unanswered requests or
//! [`MAX_PER_SECOND`] in one second, the guard ends the session, and the
//! supervisor reports it as `request_flood`. rmcp has no hook for this (see
//! `docs/security.md`), hence the wrapper.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::JsonRpcMessage;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::time::Instant;

/// Most server requests waiting for mcpmon's reply to be written.
pub const MAX_IN_FLIGHT: i64 = 32;
/// Most server requests accepted in one second.
pub const MAX_PER_SECOND: u32 = 100;

/// What the guard saw; shared with the session that reports it.
#[derive(Debug, Default)]
pub struct Flood {
    in_flight: AtomicI64,
    /// Start of the current one-second window, and requests in it.
    window: Mutex<Option<(Instant, u32)>>,
    tripped: AtomicBool,
}

impl Flood {
    /// Whether the server exceeded a bound (the session was ended).
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Relaxed)
    }

    /// Count one request from the server at `now`; false past a bound.
    fn admit(&self, now: Instant) -> bool {
        let in_flight = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let count = match &mut *w {
            Some((start, n)) if now.saturating_duration_since(*start) < Duration::from_secs(1) => {
                *n += 1;
                *n
            }
            slot => {
                *slot = Some((now, 1));
                1
            }
        };
        in_flight <= MAX_IN_FLIGHT && count <= MAX_PER_SECOND
    }

    fn answered(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Count a request a lean session read and dropped unanswered (it
    /// offers no capabilities); false, and tripped, past the per-second
    /// bound.
    pub fn dropped(&self, now: Instant) -> bool {
        let ok = self.admit(now);
        self.answered();
        if !ok {
            self.tripped.store(true, Ordering::Relaxed);
        }
        ok
    }
}

/// A transport that counts the server's requests against the bounds.
pub struct Guarded<T> {
    inner: T,
    flood: Arc<Flood>,
}

impl<T> Guarded<T> {
    /// Guard `inner`, reporting into `flood`.
    pub fn new(inner: T, flood: Arc<Flood>) -> Self {
        Guarded { inner, flood }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Guarded<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let reply = matches!(item, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_));
        let sent = self.inner.send(item);
        let flood = self.flood.clone();
        async move {
            let r = sent.await;
            if reply {
                flood.answered();
            }
            r
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        if self.flood.tripped() {
            return None;
        }
        let msg = self.inner.receive().await?;
        if matches!(msg, JsonRpcMessage::Request(_)) && !self.flood.admit(Instant::now()) {
            self.flood.tripped.store(true, Ordering::Relaxed);
            tracing::warn!(
                max_in_flight = MAX_IN_FLIGHT,
                max_per_second = MAX_PER_SECOND,
                "the server floods mcpmon with requests; ending the session"
            );
            return None;
        }
        Some(msg)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_past_either_bound_are_refused() {
        let t0 = Instant::now();
        let f = Flood::default();
        for _ in 0..MAX_IN_FLIGHT {
            assert!(f.admit(t0));
        }
        assert!(!f.admit(t0), "one more unanswered request is a flood");
        let f = Flood::default();
        for i in 0..MAX_PER_SECOND {
            assert!(f.admit(t0 + Duration::from_millis(u64::from(i))), "#{i}");
            f.answered();
        }
        assert!(!f.admit(t0 + Duration::from_millis(999)));
        // A new second starts a new count.
        let f = Flood::default();
        for s in 0..5 {
            for _ in 0..MAX_PER_SECOND / 2 {
                assert!(f.admit(t0 + Duration::from_secs(s)));
                f.answered();
            }
        }
    }
}
