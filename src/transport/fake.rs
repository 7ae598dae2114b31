//! A scripted fake [`Session`] for tests under paused time. Each phase is a
//! function of the time since the script started, so a test can say "pings
//! sent between 10 s and 16 s are answered at 16 s" or "the process burns
//! CPU from 10 s on" and every failure path (ok, error, slow, never answers,
//! crash, late answer, progress, SIGSTOP-like silence) is exercised on
//! purpose.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::CallToolResult;
use tokio::time::Instant;

use super::procstat::{RunState, Sample};
use super::{
    BoxFuture, BoxStream, Connector, Era, Evidence, LinkFailure, OpenError, Progress, RequestError,
    ServerInfo, Session, SessionEvent, ToolCall, ToolCallError,
};

/// How a request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Answered after this long.
    After(Duration),
    /// Answered at this time since the script started (a server that was
    /// blocked and catches up); at once if that time has passed.
    At(Duration),
    /// An error answer after this long.
    ErrorAfter(Duration),
    /// Never answered.
    Never,
}

/// A function of the time since the script started.
pub type Phase<T> = Arc<dyn Fn(Duration) -> T + Send + Sync>;

/// How a connection attempt goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// The session opens.
    Ok,
    /// It fails this way.
    Fail(LinkFailure),
}

/// A fake server's behaviour.
#[derive(Clone)]
pub struct Script {
    /// The era it speaks.
    pub era: Era,
    /// Liveness requests sent at `t`.
    pub liveness: Phase<Reply>,
    /// Cumulative CPU time of its process at `t` (stdio only).
    pub cpu: Phase<Duration>,
    /// Whether its process is stopped at `t` (stdio only).
    pub stopped: Phase<bool>,
    /// Progress notifications sent by `t`.
    pub progress: Phase<u64>,
    /// The process running at this time (since the script started) exits.
    pub crash_at: Option<Duration>,
    /// Connection attempts, in order; the last one repeats.
    pub opens: Vec<Open>,
    /// Whether it is a stdio server (it then has a process to sample).
    pub stdio: bool,
}

impl Script {
    /// A prompt, healthy stdio server: answers in 1 ms, idle process.
    pub fn healthy() -> Script {
        Script {
            era: Era::Legacy,
            liveness: Arc::new(|_| Reply::After(Duration::from_millis(1))),
            cpu: Arc::new(|_| Duration::ZERO),
            stopped: Arc::new(|_| false),
            progress: Arc::new(|_| 0),
            crash_at: None,
            opens: vec![Open::Ok],
            stdio: true,
        }
    }
}

/// Opens [`FakeSession`]s following one [`Script`]; counts the attempts.
pub struct FakeConnector {
    script: Script,
    start: Instant,
    attempts: Arc<AtomicU64>,
}

impl FakeConnector {
    /// A connector whose script's clock starts now.
    pub fn new(script: Script) -> Self {
        FakeConnector {
            script,
            start: Instant::now(),
            attempts: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Connection attempts so far (shared).
    pub fn attempts(&self) -> Arc<AtomicU64> {
        self.attempts.clone()
    }
}

impl Connector for FakeConnector {
    fn open(&self, _hint: Option<Era>) -> BoxFuture<'_, Result<Box<dyn Session>, OpenError>> {
        Box::pin(async move {
            let n = self.attempts.fetch_add(1, Ordering::SeqCst) as usize;
            let plan = self.script.opens.get(n).or(self.script.opens.last());
            match plan.copied().unwrap_or(Open::Ok) {
                Open::Ok => Ok(Box::new(FakeSession {
                    script: self.script.clone(),
                    start: self.start,
                    opened: Instant::now().saturating_duration_since(self.start),
                    info: ServerInfo {
                        protocol_version: "2025-06-18".into(),
                        name: "fake".into(),
                        version: "1".into(),
                    },
                }) as Box<dyn Session>),
                Open::Fail(failure) => Err(OpenError::new(
                    failure,
                    "connect",
                    "scripted failure".into(),
                )),
            }
        })
    }
}

/// One session of a [`Script`].
pub struct FakeSession {
    script: Script,
    start: Instant,
    /// When it opened, since the script started.
    opened: Duration,
    info: ServerInfo,
}

impl FakeSession {
    fn t(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }

    async fn reply(&self, r: Reply, timeout: Duration) -> Result<Duration, RequestError> {
        let sent = Instant::now();
        let (wait, ok) = match r {
            Reply::After(d) => (Some(d), true),
            Reply::At(at) => (Some(at.saturating_sub(self.t())), true),
            Reply::ErrorAfter(d) => (Some(d), false),
            Reply::Never => (None, true),
        };
        let answer = async {
            match wait {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        match tokio::time::timeout(timeout, answer).await {
            Err(_) => Err(RequestError::Timeout(timeout)),
            Ok(()) if ok => Ok(sent.elapsed()),
            Ok(()) => Err(RequestError::Rpc {
                code: -32603,
                message: "scripted error".into(),
            }),
        }
    }
}

impl Session for FakeSession {
    fn era(&self) -> Era {
        self.script.era
    }

    fn info(&self) -> &ServerInfo {
        &self.info
    }

    fn liveness(&self, timeout: Duration) -> BoxFuture<'_, Result<Duration, RequestError>> {
        let r = (self.script.liveness)(self.t());
        Box::pin(self.reply(r, timeout))
    }

    fn list_tools(
        &self,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<super::tools::ToolSurface, RequestError>> {
        Box::pin(async { Ok(super::tools::ToolSurface::from_json([])) })
    }

    fn call_tool(&self, call: ToolCall) -> BoxFuture<'_, Result<CallToolResult, ToolCallError>> {
        Box::pin(async move {
            self.reply(Reply::Never, call.timeout).await?;
            Err(ToolCallError::Request(RequestError::Unexpected))
        })
    }

    fn events(&self) -> BoxStream<'_, SessionEvent> {
        let death = if self.script.stdio {
            LinkFailure::Exited
        } else {
            LinkFailure::Unreachable
        };
        Box::pin(futures::stream::once(async move {
            match self.script.crash_at {
                // Only the process that was running at that time crashes.
                Some(at) if self.opened <= at => {
                    tokio::time::sleep_until(self.start + at).await;
                    SessionEvent::Ended(death, "process exited with status 1".to_owned())
                }
                _ => std::future::pending().await,
            }
        }))
    }

    fn evidence(&self) -> Evidence {
        let t = self.t();
        let process = self.script.stdio.then(|| Sample {
            state: if (self.script.stopped)(t) {
                RunState::Stopped
            } else {
                RunState::Alive
            },
            cpu: (self.script.cpu)(t),
            rss_bytes: 1 << 20,
        });
        let progress = Progress {
            count: (self.script.progress)(t),
            intervals: Vec::new(),
        };
        Evidence { process, progress }
    }

    fn close(self: Box<Self>, _grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}
