//! A tool probe called as a task, the way the protocol answers the
//! busy-versus-dead question itself: the call returns a task at once, and
//! the task says how its work goes. Both eras:
//!
//! - 2025-11-25 (experimental): `tools/call` with a `task` parameter
//!   answers `{task: {…}}`; `tasks/get` is polled (`pollInterval`, `ttl`);
//!   the result is read with `tasks/result`.
//! - 2026-07-28 (the `io.modelcontextprotocol/tasks` extension): the call
//!   opts in through its `_meta`, answers `resultType: "task"`, and
//!   `tasks/get` (`pollIntervalMs`, `ttlMs`) carries the result once done.
//!
//! The polling never goes faster than the server asks. A task whose
//! `lastUpdatedAt` advances is busy, and every poll is reported as it comes
//! ([`Report`]); one whose `lastUpdatedAt` stays put for its whole `ttl` is
//! stuck. A task that wants input gets none (a monitor has no one to ask):
//! it is cancelled and reported as such. Every end but completion sends
//! `tasks/cancel`. The judgment of each poll is the pure [`Track::observe`].

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Deadline, Failure, FailureReason};
use crate::config::probes::TaskMode;
use crate::transport::tools::TaskSupport;
use crate::transport::{CallToolResult, Era, RequestError, Session, truncate};

/// A task's status, as both eras name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TaskStatus {
    /// Being worked on.
    Working,
    /// Waiting for input from the client.
    InputRequired,
    /// Done; the result is there.
    Completed,
    /// Ended by an error.
    Failed,
    /// Cancelled before the end.
    Cancelled,
}

impl TaskStatus {
    fn parse(s: &str) -> Option<TaskStatus> {
        Some(match s {
            "working" => TaskStatus::Working,
            "input_required" => TaskStatus::InputRequired,
            "completed" => TaskStatus::Completed,
            "failed" => TaskStatus::Failed,
            "cancelled" => TaskStatus::Cancelled,
            _ => return None,
        })
    }
}

/// What one poll showed of a task probe's task: sent to the state owner
/// after every poll, and published on the server's status.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskSeen {
    /// The probed tool (a configured name).
    pub tool: Arc<str>,
    /// The server's id for the task (truncated, defused).
    pub task_id: String,
    /// Its status.
    pub status: TaskStatus,
    /// What the server says it is doing (truncated, defused).
    pub status_message: Option<String>,
    /// The server's `lastUpdatedAt` (truncated, defused).
    pub last_updated_at: String,
    /// `tasks/get` requests so far.
    pub polls: u32,
    /// Working, its `lastUpdatedAt` advancing.
    pub busy: bool,
}

/// Told of every poll while a task runs.
pub type Report<'a> = &'a (dyn Fn(TaskSeen) + Send + Sync);

/// One reading of a task, from either era's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The task id as sent.
    pub id: String,
    /// Its status.
    pub status: TaskStatus,
    /// What it is doing.
    pub message: Option<String>,
    /// When it last changed, as the server wrote it.
    pub last_updated_at: String,
    /// How long it may go without change (`None`: as long as it likes).
    pub ttl: Option<Duration>,
    /// How often it may be polled.
    pub poll: Option<Duration>,
}

impl Snapshot {
    /// Read a task from a create answer (`{task: {…}}` or a flat
    /// `resultType: "task"`) or a `tasks/get` answer; `None` when `v` is no
    /// task. A 2025-11-25 `ttl`/`pollInterval` and a 2026-07-28
    /// `ttlMs`/`pollIntervalMs` are both read.
    pub fn read(v: &Value) -> Option<Snapshot> {
        let t = if v["task"].is_object() { &v["task"] } else { v };
        // The id is sent back as is, and named in details and logs: a
        // longer one than any server needs is no task.
        let id = t["taskId"].as_str().filter(|id| id.len() <= MAX_ID_BYTES)?;
        let status = TaskStatus::parse(t["status"].as_str()?)?;
        let ms = |keys: [&str; 2]| {
            keys.iter()
                .find_map(|k| t[*k].as_u64())
                .map(Duration::from_millis)
        };
        Some(Snapshot {
            id: id.to_owned(),
            status,
            message: t["statusMessage"].as_str().map(|m| truncate(m, 256)),
            last_updated_at: truncate(t["lastUpdatedAt"].as_str().unwrap_or_default(), 64),
            ttl: ms(["ttl", "ttlMs"]),
            poll: ms(["pollInterval", "pollIntervalMs"]),
        })
    }
}

/// Longest task id accepted.
pub const MAX_ID_BYTES: usize = 256;

/// Fastest polling when the server names no interval, and the floor under
/// one it names (a server asking for 0 ms gets 100).
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);
const MIN_POLL: Duration = Duration::from_millis(100);

/// What to do after a poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Poll again after this long.
    Wait(Duration),
    /// Done: read the result.
    Completed,
    /// Ended without a result: how, in words.
    Ended(FailureReason, String),
}

/// The course of one task, as polled: when its `lastUpdatedAt` last
/// changed, and what the server asked of the polling.
#[derive(Clone, Debug)]
pub struct Track {
    last_updated_at: String,
    advanced_at: Instant,
    ttl: Option<Duration>,
    poll: Duration,
    /// `tasks/get` requests answered.
    pub polls: u32,
}

impl Track {
    /// A task just created (`first` is the create answer), at `now`.
    pub fn new(first: &Snapshot, now: Instant) -> Track {
        Track {
            last_updated_at: first.last_updated_at.clone(),
            advanced_at: now,
            ttl: first.ttl,
            poll: first.poll.unwrap_or(DEFAULT_POLL).max(MIN_POLL),
            polls: 0,
        }
    }

    /// Whether the task counts as busy at `now`: its `lastUpdatedAt` moved
    /// within the last three poll intervals (or it was just created).
    pub fn advancing(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.advanced_at) <= self.poll * 3
    }

    /// Judge one reading at `now`. Pure: the whole task judgment is here.
    /// A reading without `ttl` or `pollInterval` keeps the last ones (a
    /// 2025-11-25 `tasks/get` read back through rmcp loses them).
    pub fn observe(&mut self, s: &Snapshot, now: Instant) -> Step {
        if s.last_updated_at != self.last_updated_at {
            self.last_updated_at.clone_from(&s.last_updated_at);
            self.advanced_at = now;
        }
        if let Some(ttl) = s.ttl {
            self.ttl = Some(ttl);
        }
        if let Some(p) = s.poll {
            self.poll = p.max(MIN_POLL);
        }
        // The id as words go (it is sent back raw).
        let id = truncate(&s.id, 128);
        let said = || {
            s.message
                .as_deref()
                .map_or(String::new(), |m| format!(": {m}"))
        };
        match s.status {
            TaskStatus::Completed => Step::Completed,
            TaskStatus::Failed => Step::Ended(
                FailureReason::TaskFailed,
                format!("task {} failed{}", id, said()),
            ),
            TaskStatus::Cancelled => Step::Ended(
                FailureReason::TaskFailed,
                format!("task {} was cancelled by the server{}", id, said()),
            ),
            TaskStatus::InputRequired => Step::Ended(
                FailureReason::InputRequired,
                format!(
                    "task {} asks for input, which a monitor cannot give{}",
                    id,
                    said()
                ),
            ),
            TaskStatus::Working => match self.ttl {
                Some(ttl) if now.saturating_duration_since(self.advanced_at) >= ttl => Step::Ended(
                    FailureReason::TaskStuck,
                    format!(
                        "task {} stuck: lastUpdatedAt {} unchanged for {:?}, its ttl{}",
                        id,
                        self.last_updated_at,
                        ttl,
                        said()
                    ),
                ),
                _ => Step::Wait(self.poll),
            },
        }
    }

    /// What the owner is told of this reading.
    pub fn seen(&self, tool: &Arc<str>, s: &Snapshot, now: Instant) -> TaskSeen {
        TaskSeen {
            tool: tool.clone(),
            task_id: truncate(&s.id, 128),
            status: s.status,
            status_message: s.message.clone(),
            last_updated_at: s.last_updated_at.clone(),
            polls: self.polls,
            busy: s.status == TaskStatus::Working && self.advancing(now),
        }
    }
}

/// Whether a probe in `mode` calls a tool whose listing says `support`
/// as a task. A tool that requires it always is.
pub fn wanted(mode: TaskMode, support: TaskSupport) -> bool {
    match (mode, support) {
        (_, TaskSupport::Required) | (TaskMode::Always, _) => true,
        (TaskMode::Auto, TaskSupport::Optional) => true,
        (TaskMode::Never, _) | (TaskMode::Auto, TaskSupport::Forbidden) => false,
    }
}

/// The extension's identifier, as a 2026-07-28 call opts in with it.
const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The `tools/call` parameters that ask for a task in `era`.
pub fn create_params(
    era: Era,
    tool: &str,
    arguments: &serde_json::Map<String, Value>,
    traceparent: &str,
    ttl: Duration,
) -> Value {
    let mut params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {"traceparent": traceparent},
    });
    match era {
        Era::Legacy => params["task"] = json!({"ttl": ttl.as_millis() as u64}),
        Era::Modern => {
            params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
                json!({"extensions": {EXTENSION: {}}});
        }
    }
    params
}

/// How a task probe's call went.
pub type Called = Result<CallToolResult, Failure>;

/// The deadlines of one task probe.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Each request's own deadline.
    pub request: Duration,
    /// The whole task's: it is cancelled when this passes.
    pub max: Duration,
}

/// Call `tool` as a task and follow it to its end, within `limits.max`.
pub async fn call(
    session: &dyn Session,
    tool: &Arc<str>,
    params: Value,
    limits: Limits,
    report: Report<'_>,
) -> Called {
    let until = Instant::now() + limits.max;
    let created = session
        .request_json("tools/call", params, limits.request)
        .await
        .map_err(|e| Failure::from_request(&e))?;
    let Some(first) = Snapshot::read(&created) else {
        // The server answered at once, without a task: that is the result.
        return result_of(created);
    };
    let mut track = Track::new(&first, Instant::now());
    let mut step = track.observe(&first, Instant::now());
    report(track.seen(tool, &first, Instant::now()));
    let id = first.id.clone();
    loop {
        match step {
            Step::Completed => return finish(session, &id, &created, limits).await,
            Step::Ended(reason, detail) => {
                if reason != FailureReason::TaskFailed {
                    cancel(session, &id, limits.request).await;
                }
                return Err(failure(reason, detail));
            }
            Step::Wait(wait) => {
                if Instant::now() + wait >= until {
                    tokio::time::sleep_until(until).await;
                    cancel(session, &id, limits.request).await;
                    let mut f = failure(
                        FailureReason::Timeout,
                        format!(
                            "task {} still working after {:?}; cancelled",
                            truncate(&id, 128),
                            limits.max
                        ),
                    );
                    f.cancelled = Some(Deadline::MaxRequestTimeout);
                    return Err(f);
                }
                tokio::time::sleep(wait).await;
            }
        }
        let got = session
            .request_json("tasks/get", json!({"taskId": id}), limits.request)
            .await
            .map_err(|e| Failure::from_request(&e))?;
        track.polls += 1;
        let Some(now) = Snapshot::read(&got) else {
            return Err(Failure::from_request(&RequestError::Unexpected));
        };
        step = track.observe(&now, Instant::now());
        report(track.seen(tool, &now, Instant::now()));
        if step == Step::Completed && got["result"].is_object() {
            // The 2026-07-28 `tasks/get` carries the result when done.
            return result_of(got["result"].clone());
        }
    }
}

/// The result of a completed task: `tasks/result` (2025-11-25), unless
/// the create answer was already final.
async fn finish(session: &dyn Session, id: &str, created: &Value, limits: Limits) -> Called {
    if created["result"].is_object() {
        return result_of(created["result"].clone());
    }
    let r = session
        .request_json("tasks/result", json!({"taskId": id}), limits.request)
        .await
        .map_err(|e| Failure::from_request(&e))?;
    result_of(r)
}

fn result_of(v: Value) -> Called {
    serde_json::from_value::<CallToolResult>(v)
        .map_err(|_| Failure::from_request(&RequestError::Unexpected))
}

/// Ask the server to stop the task; its answer does not matter.
async fn cancel(session: &dyn Session, id: &str, timeout: Duration) {
    let _ = session
        .request_json("tasks/cancel", json!({"taskId": id}), timeout)
        .await;
}

fn failure(reason: FailureReason, detail: String) -> Failure {
    Failure {
        reason,
        detail,
        link_lost: false,
        cancelled: None,
        retry_after: None,
        code: None,
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
