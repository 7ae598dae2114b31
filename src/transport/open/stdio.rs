//! Opening a stdio session: spawn the child, then the handshake on its
//! pipes, detection and `initialize` on the same process; when a child
//! fails, its exit and last words are the detail.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::starting::{Clock, Life, SAMPLE_EVERY, within};
use super::{
    Opened, Plan, Started, discover_mode, discover_share, finish, flooded, latest_legacy, shown,
};
use crate::config::ServerSpec;
use crate::transport::budget::{Meter, Metered, MeteredRead};
use crate::transport::child::{self, Child};
use crate::transport::procstat;
use crate::transport::progress::Activity;
use crate::transport::session::{MAX_LINE_BYTES, McpSession, Monitor};
use crate::transport::{LinkFailure, OpenError, truncate};

/// How a handshake ended, when it did not.
#[derive(Debug)]
pub(super) struct Failed {
    /// What the last attempt said; `None` when it ran out of time.
    pub error: Option<ClientInitializeError>,
    /// Which request failed: `server/discover` or `initialize`.
    pub request: &'static str,
    /// What detection tried before, when the failure is `initialize`'s.
    pub tried: Option<String>,
    /// The silence the whole handshake allowed.
    pub within: Duration,
    /// How long it ran, when the child's life stretched it past `within`.
    pub stretched: Option<Duration>,
}

impl Failed {
    /// One line: what failed and, when detection came first, what it found.
    pub fn describe(&self) -> String {
        let what = match &self.error {
            Some(e) => format!(
                "{}: {}",
                self.request,
                crate::transport::error::error_chain(e)
            ),
            None => match self.stretched {
                Some(ran) => format!(
                    "no answer to {} in {} (the process was busy starting for part of it; {} of silence allowed)",
                    self.request,
                    shown(ran),
                    shown(self.within)
                ),
                None => format!(
                    "no answer to {} within {}",
                    self.request,
                    shown(self.within)
                ),
            },
        };
        match &self.tried {
            Some(t) => format!("{what} (server/discover was tried first: {t})"),
            None => what,
        }
    }

    /// Whether the peer closed the transport (a stdio server that exited).
    /// Whether the server refused `initialize` because the connection
    /// already speaks 2026-07-28 (`-32022`): it read a `server/discover`
    /// whose answer came too late, and only a fresh process can say so in
    /// time.
    fn modern_only(&self) -> bool {
        matches!(&self.error, Some(ClientInitializeError::JsonRpcError(e)) if e.code.0 == -32022)
    }

    fn closed(&self) -> bool {
        matches!(
            self.error,
            Some(ClientInitializeError::ConnectionClosed(_))
                | Some(ClientInitializeError::TransportError { .. })
        )
    }
}

/// A handshake's clock, and how to read the life of the child it waits
/// for (see `starting`).
pub(super) struct Start {
    clock: Clock,
    life: Box<dyn FnMut() -> Life + Send>,
    began: Instant,
}

impl Start {
    /// A fixed deadline `within` from now: no child to read, so no
    /// evidence moves it.
    #[cfg(test)]
    pub(super) fn fixed(within: Duration) -> Start {
        let now = Instant::now();
        Start {
            clock: Clock::new(within, within, now, Life::default()),
            life: Box::new(Life::default),
            began: now,
        }
    }

    /// `child`'s start: `budget` of silence, stretched while it uses CPU
    /// or writes to stderr, up to the stated cap.
    fn of(child: &Child, budget: Duration) -> Start {
        let (pid, said) = (child.pid(), child.said());
        let life = move || Life {
            cpu: procstat::sample(pid).map_or(Duration::ZERO, |s| s.cpu),
            said: said.load(std::sync::atomic::Ordering::Relaxed),
        };
        let now = Instant::now();
        Start {
            clock: Clock::capped(budget, now, life()),
            life: Box::new(life),
            began: now,
        }
    }

    /// Run `work` until it ends or the child has been silent for `limit`
    /// of the clock (all of its budget when `None`).
    async fn run<T>(
        &mut self,
        work: impl Future<Output = T>,
        limit: Option<Duration>,
    ) -> Option<T> {
        let limit = limit.unwrap_or(self.clock.budget());
        within(work, &mut self.clock, limit, &mut self.life).await
    }

    /// What a failure says of the time: the silence allowed, and how long
    /// it ran when the child's life stretched it past that.
    fn spent(&self) -> (Duration, Option<Duration>) {
        let ran = self.began.elapsed();
        let stretched = self.clock.stretched() && ran > self.clock.budget() + SAMPLE_EVERY;
        (self.clock.budget(), stretched.then_some(ran))
    }
}

/// The handshake over one pair of pipes, `plan` followed on `start`'s
/// clock.
pub(super) async fn handshake<R, W>(
    handler: &Monitor,
    read: R,
    write: W,
    meter: &Arc<Meter>,
    plan: &Plan,
    start: Start,
) -> Result<Opened, Failed>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let mut pipes = Pipes {
        handler,
        meter,
        start,
    };
    let transport = AsyncRwTransport::new_client(MeteredRead::new(read, meter.clone()), write)
        .with_max_line_length(MAX_LINE_BYTES);
    let settled = |service| Opened {
        service,
        conclusive: true,
    };
    match plan {
        Plan::Initialize(_) => pipes
            .serve(
                transport,
                ClientLifecycleMode::Initialize,
                "initialize",
                None,
            )
            .await
            .map(settled),
        Plan::Discover => pipes
            .serve(transport, discover_mode(), "server/discover", None)
            .await
            .map(settled),
        Plan::Detect => pipes.detect(transport).await,
    }
}

/// What a handshake over one pair of pipes works with.
struct Pipes<'a> {
    handler: &'a Monitor,
    meter: &'a Arc<Meter>,
    start: Start,
}

impl Pipes<'_> {
    /// Serve `transport` in `mode` until the deadline.
    async fn serve<T>(
        &mut self,
        transport: T,
        mode: ClientLifecycleMode,
        request: &'static str,
        tried: Option<String>,
    ) -> Result<RunningService<RoleClient, Monitor>, Failed>
    where
        T: rmcp::transport::Transport<RoleClient> + Send + 'static,
    {
        let mut metered = Metered::new(transport, self.meter.clone());
        // After a discover with no answer in time, that answer may still come.
        if tried.is_some() {
            metered = metered.shifted();
        }
        let served = self
            .start
            .run(
                self.handler.clone().serve_with_lifecycle(metered, mode),
                None,
            )
            .await;
        let error = match served {
            Some(Ok(service)) => return Ok(service),
            Some(Err(e)) => Some(e),
            None => None,
        };
        let (within, stretched) = self.start.spent();
        Err(Failed {
            error,
            request,
            tried,
            within,
            stretched,
        })
    }

    /// `server/discover`, then `initialize` on the same pipes if the answer
    /// was not modern (or there was none while the process showed life
    /// for its share of the silence: a process still starting has said
    /// nothing of its era).
    async fn detect<T>(&mut self, transport: T) -> Result<Opened, Failed>
    where
        T: rmcp::transport::Transport<RoleClient> + Send + 'static,
    {
        let share = discover_share(self.start.clock.budget());
        let slot = Arc::new(Mutex::new(None));
        let discover = self.handler.clone().serve_with_lifecycle(
            Metered::returning(transport, self.meter.clone(), slot.clone()),
            discover_mode(),
        );
        let first = self.start.run(discover, Some(share)).await;
        let (within, stretched) = self.start.spent();
        let (tried, conclusive) = match first {
            Some(Ok(service)) => {
                return Ok(Opened {
                    service,
                    conclusive: true,
                });
            }
            Some(Err(e)) => {
                let text = truncate(&crate::transport::error::error_chain(&e), 300);
                let failed = Failed {
                    error: Some(e),
                    request: "server/discover",
                    tried: None,
                    within,
                    stretched,
                };
                if failed.closed() {
                    return Err(failed);
                }
                (text, true)
            }
            None => (
                format!("no answer within {} of silence", shown(share)),
                false,
            ),
        };
        let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(transport) = taken else {
            return Err(Failed {
                error: None,
                request: "server/discover",
                tried: None,
                within,
                stretched,
            });
        };
        tracing::debug!(tried = %tried, "server/discover was not answered as modern; initialize follows");
        self.serve(
            transport,
            ClientLifecycleMode::Initialize,
            "initialize",
            Some(tried),
        )
        .await
        .map(|service| Opened {
            service,
            conclusive,
        })
    }
}

pub(super) async fn open_stdio(
    spec: &ServerSpec,
    plan: &Plan,
    until: Instant,
) -> Result<McpSession, OpenError> {
    let (failed, exited) = match stdio_attempt(spec, plan.clone(), until).await? {
        Ok(started) => return Ok(finish(spec, None, started, None, plan).await),
        Err(f) => f,
    };
    // A legacy server may exit on a method it does not know: the exchange
    // cannot go on with that process, so a fresh one speaks legacy from the
    // start. A modern one slow to start may read the discover, answer it
    // too late, and refuse the initialize after it: a fresh one is asked
    // server/discover alone. Either way the fresh process gets a
    // connect_timeout of its own: the first one's went on learning the era
    // (a busy start may have stretched it), and a fresh one starts as
    // slowly. Two processes at the most, and the era is remembered for the
    // next session.
    let fresh = || Instant::now() + spec.settings.connect_timeout.0;
    let (failed, exited) = match (&exited, plan, failed.request) {
        (Some(child), Plan::Detect, "server/discover") => {
            let first = child.epitaph().await;
            tracing::debug!(server = %spec.id, exit = %first, "the server exited on server/discover; starting it again for initialize");
            match stdio_attempt(spec, Plan::Initialize(latest_legacy()), fresh()).await? {
                Ok(mut started) => {
                    started.opened.conclusive = true;
                    return Ok(finish(spec, None, started, None, plan).await);
                }
                Err((mut again, exited)) => {
                    again.tried = Some(format!("the process {first}"));
                    (again, exited)
                }
            }
        }
        (_, Plan::Detect, "initialize") if failed.modern_only() => {
            tracing::debug!(server = %spec.id, "initialize refused by a 2026-07-28 server slow to answer server/discover; starting it again for server/discover");
            drop(exited);
            match stdio_attempt(spec, Plan::Discover, fresh()).await? {
                Ok(mut started) => {
                    started.opened.conclusive = true;
                    return Ok(finish(spec, None, started, None, plan).await);
                }
                Err((mut again, exited)) => {
                    again.tried = Some("initialize was refused as 2026-07-28 only".to_owned());
                    (again, exited)
                }
            }
        }
        _ => (failed, exited),
    };
    Err(stdio_failure(failed, exited).await)
}

/// One process, one handshake: the session's parts, or why not (with the
/// child, when it exited).
async fn stdio_attempt(
    spec: &ServerSpec,
    plan: Plan,
    until: Instant,
) -> Result<Result<Started, (Failed, Option<Child>)>, OpenError> {
    let spawned = child::spawn(spec)
        .map_err(|e| OpenError::new(LinkFailure::ConnectFailed, "spawn", e.to_string()))?;
    let activity = Arc::new(Activity::default());
    let handler = Monitor::new(activity.clone(), plan.legacy_version());
    let meter = Arc::new(Meter::default());
    let child = spawned.child;
    let start = Start::of(&child, until.saturating_duration_since(Instant::now()));
    let shook = handshake(
        &handler,
        spawned.stdout,
        spawned.stdin,
        &meter,
        &plan,
        start,
    )
    .await;
    let failed = match shook {
        Ok(opened) => {
            return Ok(Ok(Started {
                opened,
                child: Some(child),
                stream: None,
                meter,
                activity,
            }));
        }
        Err(failed) => failed,
    };
    if let Some(e) = flooded(&meter) {
        child.shutdown(Duration::from_millis(500)).await;
        return Err(e);
    }
    // A handshake that failed (not one that ran out of time, whose closing
    // pipes may kill the child) may be a child that died: give it a moment
    // to be reaped so the reason is right.
    let exited = match failed.error {
        None => false,
        Some(_) => tokio::time::timeout(Duration::from_millis(200), child.exited())
            .await
            .is_ok(),
    };
    if !exited {
        child.shutdown(Duration::from_millis(500)).await;
    }
    Ok(Err((failed, exited.then_some(child))))
}

/// What a failed stdio handshake reads as: the child's exit and last
/// words, or what the handshake tried.
async fn stdio_failure(failed: Failed, exited: Option<Child>) -> OpenError {
    let Some(child) = exited else {
        return OpenError::new(
            LinkFailure::HandshakeFailed,
            "handshake",
            truncate(&failed.describe(), 900),
        );
    };
    let epitaph = child.epitaph().await;
    let tried = match &failed.tried {
        // A server that dies at start dies the same way twice.
        Some(t) if *t == format!("the process {epitaph}") => {
            " (and the same when started again for initialize)".to_owned()
        }
        Some(t) => format!(" (server/discover was tried first: {t})"),
        None => String::new(),
    };
    OpenError {
        said_why: child.last_words().await.is_some(),
        failure: LinkFailure::Exited,
        phase: "handshake",
        detail: truncate(
            &format!("process {epitaph} during the handshake{tried}"),
            900,
        ),
    }
}
