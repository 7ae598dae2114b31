//! The inbound budget: everything one server sends mcpmon passes one meter
//! where it comes in, before anything is parsed further, spawned or kept.
//!
//! A server is untrusted input. Bounds added one attack at a time (a request
//! flood here, a long line there) left the kinds nobody had tried open: a
//! notification storm made rmcp spawn a task per message and took 2 GB in
//! ten seconds. So the bound is one design instead:
//!
//! - [`BUDGET`] holds every limit in one place, with defaults no real server
//!   comes near (the figures real servers do reach are in `docs/security.md`).
//! - A [`Meter`] per session counts bytes (the stdio pipe through
//!   [`MeteredRead`], HTTP bodies and SSE events as they are read) and
//!   messages of every kind, in one-second windows. Past a bound it trips:
//!   the transport reports end of stream, [`Meter::tripped`] wakes the
//!   supervisor, and the session ends as `request_flood` (requests) or
//!   `message_flood` (anything else). The supervisor rebuilds it with
//!   backoff; nothing the flood carried counts as a sign of life.
//! - [`Metered`] wraps rmcp's transports and lets through only what mcpmon
//!   uses: answers, the server's few requests (rmcp answers pings), progress
//!   for a request mcpmon has outstanding, and cancellations. Everything
//!   else (log messages, resource and prompt notifications, progress for
//!   tokens mcpmon never sent) is dropped before rmcp sees it, and
//!   `tools/list_changed` is coalesced into one stored wake-up.
//!
//! rmcp has no hook for any of this, hence the wrappers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, NumberOrString, ProgressToken, RequestId, ServerNotification};
use rmcp::service::RxJsonRpcMessage;

use super::tools::TaskSupport;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::LinkFailure;

mod metered;
mod read;

pub use metered::{Metered, Returned};

pub use read::MeteredRead;

/// What one server may send mcpmon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Largest single message (a stdio line, a JSON body, an SSE event).
    pub message_bytes: usize,
    /// Bytes in any one second, all kinds together.
    pub bytes_per_second: u64,
    /// Messages of every kind in any one second.
    pub messages_per_second: u32,
    /// The server's own requests waiting for mcpmon's reply.
    pub requests_in_flight: i64,
    /// The server's own requests in any one second.
    pub requests_per_second: u32,
    /// Schema bytes kept from one tool (larger tools are hashed by size).
    pub tool_bytes: usize,
    /// Bytes of tool definitions read in one listing; pages past it are
    /// not asked for.
    pub listing_bytes: usize,
    /// Least time between two listings a server's `list_changed` causes.
    pub relist_every: Duration,
}

/// The budget every session runs under.
pub const BUDGET: Budget = Budget {
    message_bytes: 4 << 20,
    bytes_per_second: 32 << 20,
    messages_per_second: 2000,
    requests_in_flight: 32,
    requests_per_second: 100,
    tool_bytes: 256 << 10,
    listing_bytes: 8 << 20,
    relist_every: Duration::from_secs(10),
};

/// Which bound a server broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breach {
    /// Too many requests of its own, unanswered or in one second.
    Requests,
    /// Too many messages in one second.
    Messages,
    /// Too many bytes in one second.
    Bytes,
    /// One message larger than the budget allows.
    Size,
}

impl Breach {
    /// How the session's end is reported.
    pub fn failure(self) -> LinkFailure {
        match self {
            Breach::Requests => LinkFailure::RequestFlood,
            Breach::Messages | Breach::Bytes | Breach::Size => LinkFailure::MessageFlood,
        }
    }

    /// The detail a user reads.
    pub fn describe(self, budget: &Budget) -> String {
        match self {
            Breach::Requests => format!(
                "the server sent more requests than mcpmon serves (over {} unanswered or {} in one second)",
                budget.requests_in_flight, budget.requests_per_second
            ),
            Breach::Messages => format!(
                "the server sent over {} messages in one second",
                budget.messages_per_second
            ),
            Breach::Bytes => format!(
                "the server sent over {} MiB in one second",
                budget.bytes_per_second >> 20
            ),
            Breach::Size => format!(
                "the server sent a message over {} MiB",
                budget.message_bytes >> 20
            ),
        }
    }
}

/// Counts of the current one-second window.
#[derive(Debug, Default)]
struct Window {
    start: Option<Instant>,
    bytes: u64,
    messages: u32,
    requests: u32,
}

impl Window {
    /// The window `now` falls in, reset when a new second began.
    fn at(&mut self, now: Instant) -> &mut Self {
        match self.start {
            Some(s) if now.saturating_duration_since(s) < Duration::from_secs(1) => {}
            _ => {
                *self = Window {
                    start: Some(now),
                    ..Window::default()
                }
            }
        }
        self
    }
}

/// Most tools whose task support is kept: as many as a listing reads.
const TASK_SUPPORT_KEPT: usize = 1024;
/// Most `tools/list` requests remembered at once (a session has one
/// listing outstanding at a time).
const LISTINGS_KEPT: usize = 8;
/// Most progress tokens of mcpmon's own requests remembered at once (it has
/// a handful outstanding per session).
const TOKENS_KEPT: usize = 64;

/// One session's meter. Shared by its transport wrappers and the session.
#[derive(Debug)]
pub struct Meter {
    budget: Budget,
    requests_in_flight: AtomicI64,
    window: Mutex<Window>,
    breach: OnceLock<Breach>,
    tripped: Notify,
    /// Progress tokens of the requests mcpmon has outstanding, by request id.
    tokens: Mutex<Vec<(RequestId, ProgressToken)>>,
    /// Woken (and stored) by `notifications/tools/list_changed`.
    tools_changed: Notify,
    /// Tools a stdio listing said may run as tasks, read off the raw line
    /// ([`MeteredRead`]): rmcp's `Tool` drops `execution`.
    task_support: Mutex<HashMap<String, TaskSupport>>,
    /// mcpmon's `tools/list` requests not answered yet: only their answers
    /// are read for task support, and no line is kept while there are none.
    listings: Mutex<Vec<RequestId>>,
    listings_open: AtomicUsize,
}

impl Default for Meter {
    fn default() -> Self {
        Meter::new(BUDGET)
    }
}

impl Meter {
    /// A meter for `budget`.
    pub fn new(budget: Budget) -> Self {
        Meter {
            budget,
            requests_in_flight: AtomicI64::new(0),
            window: Mutex::new(Window::default()),
            breach: OnceLock::new(),
            tripped: Notify::new(),
            tokens: Mutex::new(Vec::new()),
            tools_changed: Notify::new(),
            task_support: Mutex::new(HashMap::new()),
            listings: Mutex::new(Vec::new()),
            listings_open: AtomicUsize::new(0),
        }
    }

    /// mcpmon sent `tools/list` request `id`.
    fn expect_listing(&self, id: RequestId) {
        let mut l = self.listings.lock().unwrap_or_else(|p| p.into_inner());
        if l.len() == LISTINGS_KEPT {
            l.remove(0);
        }
        l.push(id);
        self.listings_open.store(l.len(), Ordering::Release);
    }

    /// Whether a `tools/list` of mcpmon's awaits its answer.
    fn awaits_listing(&self) -> bool {
        self.listings_open.load(Ordering::Acquire) > 0
    }

    /// What the raw line `message` says of its tools' task support, if it
    /// answers a listing mcpmon asked for (each name replaces its tool's
    /// last word), kept for at most [`TASK_SUPPORT_KEPT`] tools.
    fn note_task_support(&self, message: &[u8]) {
        let Some((id, said)) = super::tools::task_support_in(message) else {
            return;
        };
        let asked = self
            .listings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id);
        if !asked {
            return;
        }
        let mut kept = self.task_support.lock().unwrap_or_else(|p| p.into_inner());
        for (name, support) in said {
            if kept.len() < TASK_SUPPORT_KEPT || kept.contains_key(&name) {
                kept.insert(name, support);
            }
        }
    }

    /// What the raw listing said of tool `name`'s task support, if it was read.
    pub fn task_support(&self, name: &str) -> Option<TaskSupport> {
        let kept = self.task_support.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(name).copied()
    }

    /// The budget it meters against.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The bound broken, once one was.
    pub fn breach(&self) -> Option<Breach> {
        self.breach.get().copied()
    }

    /// Resolves once a bound is broken.
    pub async fn tripped(&self) -> Breach {
        loop {
            let woken = self.tripped.notified();
            if let Some(b) = self.breach() {
                return b;
            }
            woken.await;
        }
    }

    fn trip(&self, b: Breach) -> bool {
        if self.breach.set(b).is_ok() {
            tracing::warn!(budget = ?b, "{}; ending the session", b.describe(&self.budget));
            self.tripped.notify_waiters();
        }
        false
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count `n` bytes read at `now`; false (tripped) past the budget.
    pub fn bytes(&self, n: usize, now: Instant) -> bool {
        if self.breach().is_some() {
            return false;
        }
        let over = {
            let mut w = self.window();
            let w = w.at(now);
            w.bytes = w.bytes.saturating_add(n as u64);
            w.bytes > self.budget.bytes_per_second
        };
        !over || self.trip(Breach::Bytes)
    }

    /// Count one message of any kind at `now`; false (tripped) past the budget.
    pub fn message(&self, now: Instant) -> bool {
        if self.breach().is_some() {
            return false;
        }
        let over = {
            let mut w = self.window();
            let w = w.at(now);
            w.messages = w.messages.saturating_add(1);
            w.messages > self.budget.messages_per_second
        };
        !over || self.trip(Breach::Messages)
    }

    /// Count one request of the server's own, which mcpmon will answer;
    /// false (tripped) past either request bound. [`Meter::answered`] when
    /// the reply is written.
    pub fn request(&self, now: Instant) -> bool {
        if !self.message(now) {
            return false;
        }
        let in_flight = self.requests_in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let count = {
            let mut w = self.window();
            let w = w.at(now);
            w.requests = w.requests.saturating_add(1);
            w.requests
        };
        (in_flight <= self.budget.requests_in_flight && count <= self.budget.requests_per_second)
            || self.trip(Breach::Requests)
    }

    /// A message grew past the budget's size while being read: tripped.
    pub fn oversized(&self) {
        self.trip(Breach::Size);
    }

    /// A reply to one of the server's requests was written.
    pub fn answered(&self) {
        self.requests_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Count a request read and dropped unanswered (a lean session offers
    /// no capabilities); false (tripped) past a bound.
    pub fn dropped_request(&self, now: Instant) -> bool {
        let ok = self.request(now);
        self.answered();
        ok
    }

    /// mcpmon sent request `id` carrying progress `token`.
    fn expect_progress(&self, id: RequestId, token: ProgressToken) {
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == TOKENS_KEPT {
            t.remove(0);
        }
        t.push((id, token));
    }

    /// Request `id` was answered: its progress is no longer news, and its
    /// line no longer a listing to read.
    fn settled(&self, id: &RequestId) {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| i != id);
        if self.awaits_listing() {
            let mut l = self.listings.lock().unwrap_or_else(|p| p.into_inner());
            l.retain(|i| i != id);
            self.listings_open.store(l.len(), Ordering::Release);
        }
    }

    fn awaits_progress(&self, token: &ProgressToken) -> bool {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|(_, t)| t == token)
    }

    /// The server said its tool list changed: one stored wake-up, however
    /// many times it says so.
    pub fn note_tools_changed(&self) {
        self.tools_changed.notify_one();
    }

    /// Resolves when the server said its tool list changed since the last
    /// wait returned.
    pub async fn tools_changed(&self) {
        self.tools_changed.notified().await;
    }
}

/// What mcpmon does with one message from a server.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Hand it to rmcp.
    Pass,
    /// Drop it here: mcpmon has no use for it.
    Drop,
    /// A bound broke: end the session.
    End,
}

impl Meter {
    fn admit(&self, msg: &RxJsonRpcMessage<RoleClient>, now: Instant) -> Admit {
        let counted = match msg {
            JsonRpcMessage::Request(_) => self.request(now),
            _ => self.message(now),
        };
        if !counted {
            return Admit::End;
        }
        match msg {
            JsonRpcMessage::Request(_) => Admit::Pass,
            JsonRpcMessage::Response(r) => {
                self.settled(&r.id);
                Admit::Pass
            }
            JsonRpcMessage::Error(e) => {
                if let Some(id) = &e.id {
                    self.settled(id);
                }
                Admit::Pass
            }
            JsonRpcMessage::Notification(n) => match &n.notification {
                ServerNotification::ProgressNotification(p)
                    if self.awaits_progress(&p.params.progress_token) =>
                {
                    Admit::Pass
                }
                ServerNotification::CancelledNotification(_) => Admit::Pass,
                ServerNotification::ToolListChangedNotification(_) => {
                    self.note_tools_changed();
                    Admit::Drop
                }
                _ => Admit::Drop,
            },
        }
    }
}

/// A progress token as a legacy link numbers them.
pub fn numbered(n: u64) -> ProgressToken {
    ProgressToken(NumberOrString::Number(i64::try_from(n).unwrap_or(i64::MAX)))
}

#[cfg(test)]
mod tests;
