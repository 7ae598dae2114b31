//! The metered transport: rmcp's transport with every inbound message
//! passed through the session's [`Meter`] first, and (for a second
//! handshake on the same pipes) its request ids kept apart from the
//! first's.

use std::future::Future;
use std::sync::{Arc, Mutex};

use rmcp::RoleClient;
use rmcp::model::{
    ClientNotification, ClientRequest, GetMeta, JsonRpcMessage, NumberOrString, ProgressToken,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::time::Instant;

use super::{Admit, Meter};

/// A transport whose every inbound message passes the meter (see the
/// module's documentation).
pub struct Metered<T> {
    /// Always there until dropped (then perhaps handed back).
    inner: Option<T>,
    meter: Arc<Meter>,
    /// Where the transport goes when this is dropped, to be used again.
    back: Option<Returned<T>>,
    /// Added to the ids of mcpmon's requests on the wire, and taken off
    /// their answers ([`Metered::shifted`]); 0 for none.
    shift: i64,
}

/// How far [`Metered::shifted`] moves request ids: past any id a first
/// handshake's few requests used.
const SHIFT: i64 = 1 << 40;

/// `id` moved by `by`, when it is a number.
fn moved(id: &mut NumberOrString, by: i64) {
    if let NumberOrString::Number(n) = id {
        *n = n.saturating_add(by);
    }
}

/// Where a dropped [`Metered`] puts its transport back.
pub type Returned<T> = Arc<Mutex<Option<T>>>;

impl<T> Metered<T> {
    /// Meter `inner` with `meter`.
    pub fn new(inner: T, meter: Arc<Meter>) -> Self {
        Metered {
            inner: Some(inner),
            meter,
            back: None,
            shift: 0,
        }
    }

    /// The same, with its requests numbered apart from those sent on the
    /// pipes before: `initialize` after a `server/discover` that had no
    /// answer in time goes on the same pipes, and rmcp numbers both from
    /// 0, so a late answer to the discover would be read as initialize's
    /// (a FastMCP server slow to start answers it `-32602`). Answers to ids
    /// below the shift are such late answers, and are dropped.
    pub fn shifted(mut self) -> Self {
        self.shift = SHIFT;
        self
    }

    /// Meter `inner`, and put it into `back` when dropped: a handshake
    /// that rmcp gave up on (a `server/discover` a legacy server did not
    /// answer as modern) can go on with `initialize` over the same pipes.
    pub fn returning(inner: T, meter: Arc<Meter>, back: Returned<T>) -> Self {
        Metered {
            inner: Some(inner),
            meter,
            back: Some(back),
            shift: 0,
        }
    }

    /// Take the shift off an answer's id; whether it answers a request
    /// sent through this transport (not one sent on the pipes before).
    fn unshift(&self, msg: &mut RxJsonRpcMessage<RoleClient>) -> bool {
        let id = match msg {
            JsonRpcMessage::Response(r) => Some(&mut r.id),
            JsonRpcMessage::Error(e) => e.id.as_mut(),
            _ => return true,
        };
        match id {
            Some(NumberOrString::Number(n)) if *n < self.shift => false,
            Some(id) => {
                moved(id, -self.shift);
                true
            }
            None => true,
        }
    }

    fn inner(&mut self) -> &mut T {
        // Taken only in `drop`.
        self.inner
            .as_mut()
            .expect("a metered transport holds its transport until dropped")
    }
}

impl<T> Drop for Metered<T> {
    fn drop(&mut self) {
        if let (Some(back), Some(inner)) = (&self.back, self.inner.take()) {
            *back.lock().unwrap_or_else(|p| p.into_inner()) = Some(inner);
        }
    }
}

/// The progress token a request of mcpmon's carries, if any.
fn progress_token(request: &ClientRequest) -> Option<ProgressToken> {
    request.get_meta().get_progress_token()
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Metered<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let reply = matches!(item, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_));
        let mut item = item;
        // The meter keeps ids as they are on the wire, as the raw listing
        // reader sees them.
        if let JsonRpcMessage::Request(r) = &mut item {
            moved(&mut r.id, self.shift);
            if let Some(token) = progress_token(&r.request) {
                self.meter.expect_progress(r.id.clone(), token);
            }
            if matches!(r.request, ClientRequest::ListToolsRequest(_)) {
                self.meter.expect_listing(r.id.clone());
            }
        }
        if let JsonRpcMessage::Notification(n) = &mut item
            && let ClientNotification::CancelledNotification(c) = &mut n.notification
            && let Some(id) = &mut c.params.request_id
        {
            moved(id, self.shift);
        }
        let meter = self.meter.clone();
        let sent = self.inner().send(item);
        async move {
            let r = sent.await;
            if reply {
                meter.answered();
            }
            r
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if self.meter.breach().is_some() {
                return None;
            }
            let mut msg = self.inner().receive().await?;
            match self.meter.admit(&msg, Instant::now()) {
                Admit::Pass if self.shift != 0 && !self.unshift(&mut msg) => continue,
                Admit::Pass => return Some(msg),
                Admit::Drop => continue,
                Admit::End => return None,
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner().close()
    }
}
