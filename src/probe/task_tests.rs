//! The task judgment as a pure function of readings and times, and the
//! polling loop under paused time against a scripted task server.

use std::sync::Mutex;

use super::*;
use crate::transport::{BoxFuture, ServerInfo, ToolCall, ToolCallError};

const SEC: Duration = Duration::from_secs(1);

fn snap(status: TaskStatus, updated: &str) -> Snapshot {
    Snapshot {
        id: "t1".into(),
        status,
        message: None,
        last_updated_at: updated.into(),
        ttl: Some(SEC * 10),
        poll: Some(SEC * 2),
    }
}

#[test]
fn both_eras_shapes_are_read_and_a_plain_result_is_no_task() {
    let old = json!({"task": {"taskId": "a", "status": "working", "createdAt": "c",
        "lastUpdatedAt": "u", "ttl": 300000, "pollInterval": 1000}});
    let s = Snapshot::read(&old).expect("a 2025-11-25 task");
    assert_eq!((s.ttl, s.poll), (Some(SEC * 300), Some(SEC)));
    let new = json!({"resultType": "task", "taskId": "b", "status": "input_required",
        "statusMessage": "which one?", "lastUpdatedAt": "u", "ttlMs": null, "pollIntervalMs": 500});
    let s = Snapshot::read(&new).expect("a 2026-07-28 task");
    assert_eq!(s.status, TaskStatus::InputRequired);
    assert_eq!(s.ttl, None, "null: unlimited");
    assert_eq!(s.poll, Some(Duration::from_millis(500)));
    assert_eq!(s.message.as_deref(), Some("which one?"));
    assert_eq!(Snapshot::read(&json!({"content": []})), None);
    assert_eq!(
        Snapshot::read(&json!({"taskId": "x", "status": "sleeping"})),
        None
    );
}

#[test]
fn an_advancing_task_is_busy_and_polled_at_the_server_s_pace() {
    let t0 = Instant::now();
    let first = snap(TaskStatus::Working, "u0");
    let mut t = Track::new(&first, t0);
    assert_eq!(t.observe(&first, t0), Step::Wait(SEC * 2));
    for i in 1..20u32 {
        let now = t0 + SEC * 2 * i;
        let s = snap(TaskStatus::Working, &format!("u{i}"));
        assert_eq!(t.observe(&s, now), Step::Wait(SEC * 2), "poll {i}");
        assert!(t.seen(&Arc::from("x"), &s, now).busy, "poll {i}");
    }
    // Past three polls without change it is no longer busy, not yet stuck.
    let quiet = snap(TaskStatus::Working, "u19");
    let later = t0 + SEC * 38 + SEC * 7;
    assert_eq!(t.observe(&quiet, later), Step::Wait(SEC * 2));
    assert!(!t.seen(&Arc::from("x"), &quiet, later).busy);
}

#[test]
fn a_task_unchanged_for_its_ttl_is_stuck_and_one_without_ttl_never_is() {
    let t0 = Instant::now();
    let first = snap(TaskStatus::Working, "u0");
    let mut t = Track::new(&first, t0);
    assert_eq!(t.observe(&first, t0 + SEC * 9), Step::Wait(SEC * 2));
    match t.observe(&first, t0 + SEC * 10) {
        Step::Ended(FailureReason::TaskStuck, d) => {
            assert!(d.contains("lastUpdatedAt u0 unchanged for 10s"), "{d}");
        }
        other => panic!("{other:?}"),
    }
    let mut unlimited = first.clone();
    unlimited.ttl = None;
    let mut t = Track::new(&unlimited, t0);
    // A reading that lost the ttl (rmcp's 2025-11-25 tasks/get) keeps none.
    assert_eq!(t.observe(&unlimited, t0 + SEC * 3600), Step::Wait(SEC * 2));
}

#[test]
fn ends_other_than_completion_are_named_and_readings_keep_the_last_pace() {
    let t0 = Instant::now();
    let first = snap(TaskStatus::Working, "u0");
    let mut t = Track::new(&first, t0);
    let mut lost = snap(TaskStatus::Working, "u1");
    (lost.ttl, lost.poll) = (None, None);
    assert_eq!(t.observe(&lost, t0 + SEC), Step::Wait(SEC * 2), "pace kept");
    let mut fast = snap(TaskStatus::Working, "u2");
    fast.poll = Some(Duration::ZERO);
    assert_eq!(
        t.observe(&fast, t0 + SEC * 2),
        Step::Wait(MIN_POLL),
        "floored"
    );
    for (status, reason) in [
        (TaskStatus::Failed, FailureReason::TaskFailed),
        (TaskStatus::Cancelled, FailureReason::TaskFailed),
        (TaskStatus::InputRequired, FailureReason::InputRequired),
    ] {
        let step = t.observe(&snap(status, "u3"), t0 + SEC * 3);
        assert!(
            matches!(step, Step::Ended(r, _) if r == reason),
            "{status:?}: {step:?}"
        );
    }
    assert_eq!(
        t.observe(&snap(TaskStatus::Completed, "u4"), t0),
        Step::Completed
    );
}

#[test]
fn a_required_tool_is_always_a_task_and_never_otherwise_means_never() {
    use TaskMode::*;
    use TaskSupport::*;
    let cases = [
        (Auto, Forbidden, false),
        (Auto, Optional, true),
        (Auto, Required, true),
        (Always, Forbidden, true),
        (Never, Optional, false),
        (Never, Required, true),
    ];
    for (mode, support, want) in cases {
        assert_eq!(wanted(mode, support), want, "{mode:?} {support:?}");
    }
    let legacy = create_params(Era::Legacy, "t", &Default::default(), "tp", SEC * 60);
    assert_eq!(legacy["task"]["ttl"], 60000);
    let modern = create_params(Era::Modern, "t", &Default::default(), "tp", SEC * 60);
    assert!(
        modern["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"][EXTENSION]
            .is_object()
    );
    assert_eq!(modern["_meta"]["traceparent"], "tp");
}

/// A task server: `tasks/get` at `t` (since the task was created) answers
/// `script(t)`; every request is logged with its time.
struct TaskServer {
    era: Era,
    start: Instant,
    script: Box<dyn Fn(Duration) -> Value + Send + Sync>,
    log: Mutex<Vec<(Duration, &'static str)>>,
    info: ServerInfo,
}

impl TaskServer {
    fn new(era: Era, script: impl Fn(Duration) -> Value + Send + Sync + 'static) -> Self {
        TaskServer {
            era,
            start: Instant::now(),
            script: Box::new(script),
            log: Mutex::new(Vec::new()),
            info: ServerInfo::default(),
        }
    }

    fn log(&self) -> Vec<(Duration, &'static str)> {
        self.log.lock().expect("log").clone()
    }
}

fn task(status: &str, updated: u64, ttl: u64) -> Value {
    json!({"taskId": "t1", "status": status, "createdAt": "c",
        "lastUpdatedAt": format!("u{updated}"), "ttl": ttl, "pollInterval": 2000})
}

impl Session for TaskServer {
    fn era(&self) -> Era {
        self.era
    }
    fn info(&self) -> &ServerInfo {
        &self.info
    }
    fn liveness(&self, _: Duration) -> BoxFuture<'_, Result<Duration, RequestError>> {
        Box::pin(async { Ok(Duration::ZERO) })
    }
    fn list_tools(
        &self,
        _: Duration,
    ) -> BoxFuture<'_, Result<crate::transport::tools::ToolSurface, RequestError>> {
        Box::pin(async { Err(RequestError::Unexpected) })
    }
    fn call_tool(&self, _: ToolCall) -> BoxFuture<'_, Result<CallToolResult, ToolCallError>> {
        Box::pin(async { Err(ToolCallError::Request(RequestError::Unexpected)) })
    }
    fn request_json(
        &self,
        method: &'static str,
        params: Value,
        _: Duration,
    ) -> BoxFuture<'_, Result<Value, RequestError>> {
        let t = Instant::now().saturating_duration_since(self.start);
        self.log.lock().expect("log").push((t, method));
        Box::pin(async move {
            assert!(
                method == "tools/call" || params["taskId"] == "t1",
                "{params}"
            );
            Ok(match method {
                "tools/call" if self.era == Era::Legacy => json!({"task": (self.script)(t)}),
                "tools/call" | "tasks/get" => (self.script)(t),
                "tasks/result" => json!({"content": [{"type": "text", "text": "done"}]}),
                _ => json!({}),
            })
        })
    }
    fn close(self: Box<Self>, _: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

const LIMITS: Limits = Limits {
    request: Duration::from_secs(5),
    max: Duration::from_secs(300),
};

async fn run(server: &TaskServer) -> (Called, Vec<TaskSeen>) {
    let seen = Mutex::new(Vec::new());
    let report = |s: TaskSeen| seen.lock().expect("seen").push(s);
    let tool: Arc<str> = Arc::from("research");
    let called = call(server, &tool, json!({}), LIMITS, &report).await;
    (called, seen.into_inner().expect("seen"))
}

#[tokio::test(start_paused = true)]
async fn a_working_task_is_polled_no_faster_than_asked_and_its_result_read() {
    // Advances every second for 7 s, then completes.
    let server = TaskServer::new(Era::Legacy, |t| match t.as_secs() {
        s @ 0..7 => task("working", s, 60_000),
        _ => task("completed", 7, 60_000),
    });
    let (called, seen) = run(&server).await;
    let r = called.expect("completed");
    assert_eq!(
        r.content[0].as_text().map(|t| t.text.as_str()),
        Some("done")
    );
    let log = server.log();
    let methods: Vec<&str> = log.iter().map(|(_, m)| *m).collect();
    assert_eq!(methods.first(), Some(&"tools/call"), "{log:?}");
    assert_eq!(methods.last(), Some(&"tasks/result"), "{log:?}");
    assert!(!methods.contains(&"tasks/cancel"), "{log:?}");
    let polls: Vec<Duration> = log
        .iter()
        .filter(|(_, m)| *m == "tasks/get")
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(polls.len(), 4, "{log:?}");
    assert!(
        polls.windows(2).all(|w| w[1] - w[0] >= SEC * 2),
        "{polls:?}"
    );
    assert!(
        seen.iter()
            .filter(|s| s.status == TaskStatus::Working)
            .all(|s| s.busy),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(|s| (s.status, s.polls)),
        Some((TaskStatus::Completed, 4))
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_stops_advancing_is_stuck_at_its_ttl_and_cancelled() {
    // Advances for 4 s, then never again; its ttl is 20 s.
    let server = TaskServer::new(Era::Legacy, |t| task("working", t.as_secs().min(4), 20_000));
    let started = Instant::now();
    let (called, seen) = run(&server).await;
    let f = called.expect_err("stuck");
    assert_eq!(f.reason, FailureReason::TaskStuck, "{f:?}");
    assert!(f.detail.contains("unchanged for 20s"), "{}", f.detail);
    let took = started.elapsed();
    assert!(
        took >= SEC * 24 && took <= SEC * 27,
        "stuck 20 s after its last change: {took:?}"
    );
    assert_eq!(server.log().last().map(|(_, m)| *m), Some("tasks/cancel"));
    assert!(seen.first().is_some_and(|s| s.busy), "{seen:?}");
    assert!(seen.last().is_some_and(|s| !s.busy), "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn a_task_asking_for_input_is_its_own_reason_and_cancelled() {
    let server = TaskServer::new(Era::Modern, |t| {
        let mut v = task(
            if t < SEC * 3 {
                "working"
            } else {
                "input_required"
            },
            t.as_secs(),
            60_000,
        );
        v["resultType"] = json!("task");
        v["statusMessage"] = json!("which topic?");
        v
    });
    let (called, _) = run(&server).await;
    let f = called.expect_err("input required");
    assert_eq!(f.reason, FailureReason::InputRequired, "{f:?}");
    assert!(f.detail.contains("which topic?"), "{}", f.detail);
    assert_eq!(server.log().last().map(|(_, m)| *m), Some("tasks/cancel"));
}

#[tokio::test(start_paused = true)]
async fn a_2026_task_carries_its_result_and_the_cap_cancels_one_that_never_ends() {
    let server = TaskServer::new(Era::Modern, |t| {
        if t < SEC * 4 {
            json!({"resultType": "task", "taskId": "t1", "status": "working",
                "lastUpdatedAt": format!("u{}", t.as_secs()), "ttlMs": null, "pollIntervalMs": 1000})
        } else {
            json!({"resultType": "complete", "taskId": "t1", "status": "completed",
                "lastUpdatedAt": "u4", "ttlMs": null,
                "result": {"content": [{"type": "text", "text": "inline"}]}})
        }
    });
    let (called, _) = run(&server).await;
    let r = called.expect("completed");
    assert_eq!(
        r.content[0].as_text().map(|t| t.text.as_str()),
        Some("inline")
    );
    assert!(!server.log().iter().any(|(_, m)| *m == "tasks/result"));

    // Working for ever, without a ttl: the cap ends it.
    let forever = TaskServer::new(Era::Modern, |t| {
        json!({"resultType": "task", "taskId": "t1", "status": "working",
            "lastUpdatedAt": format!("u{}", t.as_secs()), "ttlMs": null, "pollIntervalMs": 1000})
    });
    let started = Instant::now();
    let (called, _) = run(&forever).await;
    let f = called.expect_err("capped");
    assert_eq!(
        (f.reason, f.cancelled),
        (FailureReason::Timeout, Some(Deadline::MaxRequestTimeout))
    );
    assert_eq!(started.elapsed(), LIMITS.max);
    assert_eq!(forever.log().last().map(|(_, m)| *m), Some("tasks/cancel"));
}

#[test]
fn a_hostile_task_id_is_no_task_and_one_with_control_text_is_defused_in_words() {
    let long =
        json!({"taskId": "x".repeat(MAX_ID_BYTES + 1), "status": "working", "lastUpdatedAt": "u"});
    assert_eq!(
        Snapshot::read(&long),
        None,
        "no task: its id is over the bound"
    );
    let odd = json!({"taskId": "t\u{1b}[31m\nforged", "status": "failed", "lastUpdatedAt": "u"});
    let s = Snapshot::read(&odd).expect("a task");
    assert_eq!(s.id, "t\u{1b}[31m\nforged", "sent back as is");
    let mut t = Track::new(&s, Instant::now());
    let Step::Ended(_, detail) = t.observe(&s, Instant::now()) else {
        panic!("failed is an end")
    };
    assert!(
        !detail.contains('\n') && !detail.contains('\u{1b}'),
        "{detail:?}"
    );
}
