//! The tracker on sequences of observations: what each kind of evidence
//! does to the published status.

use super::*;
use crate::probe::health_check::HealthReport;
use crate::probe::{Failure, ProbeKind};
use crate::state::snapshot::rfc3339;
use crate::state::testing::{answered, failed, spec};
use crate::transport::procstat::RunState;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn open(t: &mut Tracker, now: Instant) -> Option<Transition> {
    let info = ServerInfo {
        protocol_version: "2025-06-18".into(),
        name: "demo".into(),
        version: "1".into(),
    };
    t.tools_listed(ToolSurface::from_json(["a", "b", "c"].map(
        |n| serde_json::json!({"name": n, "inputSchema": {"type": "object"}}),
    )));
    assert_eq!(
        t.session_opened(Era::Legacy, info, Duration::from_millis(2), now),
        None,
        "no verdict before the first liveness answer"
    );
    t.probe(&answered(ProbeKind::Ping, 2), false, now)
}

/// A tracker whose session opened at `t0` and answered one ping.
fn answering(t0: Instant) -> Tracker {
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.probe(&answered(ProbeKind::Ping, 1), false, t0);
    t
}

fn kinds(t: &Tracker) -> Vec<&'static str> {
    t.status().events.iter().map(|e| e.kind.as_str()).collect()
}

fn sample(cpu_ms: u64, state: RunState) -> ProcessSample {
    ProcessSample {
        state,
        cpu: Duration::from_millis(cpu_ms),
        rss_bytes: 0,
    }
}

fn throttle(retry: u64) -> ProbeOutcome {
    let mut o = failed(ProbeKind::Ping, FailureReason::Throttled);
    if let Err(f) = &mut o.result {
        f.retry_after = Some(secs(retry));
    }
    o
}

#[test]
fn a_throttle_is_not_a_failure_and_the_silence_it_asks_for_is_not_stuck() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.probe(&throttle(60), false, t0);
    let e = t.evidence(t0 + secs(50));
    assert!(e.throttled);
    assert_eq!(e.window.errors + e.window.timeouts, 0, "not in the window");
    assert_eq!(e.silent_for, Duration::ZERO, "asked-for silence");
    // Answered again: over.
    t.probe(&answered(ProbeKind::Ping, 3), false, t0 + secs(61));
    assert!(!t.evidence(t0 + secs(61)).throttled);
    // Throttled, then unanswered: the throttle is old news, silence counts.
    t.probe(&throttle(1), false, t0 + secs(62));
    t.liveness_late(secs(1), t0 + secs(64));
    let e = t.evidence(t0 + secs(64));
    assert!(!e.throttled);
    assert_eq!(e.silent_for, secs(2));
}

fn surface(names: &[&str]) -> ToolSurface {
    ToolSurface::from_json(
        names
            .iter()
            .map(|n| serde_json::json!({"name": n, "inputSchema": {"type": "object"}})),
    )
}

#[test]
fn tool_listings_are_compared_across_sessions_and_expected_ones_checked() {
    let t0 = Instant::now();
    let mut s = spec("a");
    s.expected_tools = vec!["search".into()];
    let mut t = Tracker::new(&s, t0);
    assert_eq!(
        t.tools_listed(surface(&["echo"])),
        None,
        "nothing to compare"
    );
    assert!(t.evidence(t0).tools_missing);
    let seen = t.status().tools.clone().expect("listed");
    assert_eq!(seen.missing, ["search"]);
    let d = t
        .tools_listed(surface(&["echo", "search"]))
        .expect("a change");
    assert_eq!(d.added, ["search"]);
    assert!(!t.evidence(t0).tools_missing);
    assert!(kinds(&t).contains(&"tools_changed"));
    assert_eq!(
        t.tools_listed(surface(&["echo", "search"])),
        None,
        "same again"
    );
}

/// The listing is kept once, in the status: a published copy shares it,
/// and what the outputs show of it (count, hash, missing, invalid) is read
/// from that one copy.
#[test]
fn a_listing_is_kept_once_and_read_whole_from_the_status() {
    let t0 = Instant::now();
    let mut s = spec("a");
    s.expected_tools = vec!["search".into(), "echo".into()];
    let mut t = Tracker::new(&s, t0);
    let listing = ToolSurface::from_json([
        serde_json::json!({"name": "echo", "inputSchema": {"type": "object"}}),
        serde_json::json!({"name": "bad name!", "inputSchema": {"type": "object"}}),
    ]);
    let hash = listing.hash.clone();
    t.tools_listed(listing);
    let published = t.status().clone();
    let seen = published.tools.as_ref().expect("listed");
    assert!(std::ptr::eq(
        &**seen,
        &**t.status().tools.as_ref().expect("listed")
    ));
    assert_eq!(seen.surface.tools.len(), 2);
    assert_eq!(seen.surface.hash, hash);
    assert_eq!(seen.missing, ["search"]);
    let invalid: Vec<_> = seen.invalid().map(|(name, _)| name).collect();
    assert_eq!(invalid, ["bad name!"]);
}

#[test]
fn sessions_are_counted_and_their_ends_named() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    let tr = t.link_down(Reason::ConnectFailed, "refused", true, t0);
    assert_eq!(tr.map(|x| x.to), Some(State::Unhealthy));
    assert_eq!(kinds(&t), ["connect_failed", "state_changed"]);
    open(&mut t, t0);
    open(&mut t, t0);
    assert_eq!(t.status().sessions, 2);
    let listed = t.status().tools.as_ref().map(|t| t.surface.tools.len());
    assert_eq!(listed, Some(3));
    assert_eq!(t.status().era, Some(Era::Legacy));
    t.link_down(Reason::Exited, "gone", true, t0);
    assert_eq!(
        t.status().events.back().map(|e| e.kind),
        Some(EventKind::StateChanged)
    );
    assert!(kinds(&t).contains(&"session_closed"));
    // The lost session's fields stay, marked as the last known.
    assert_eq!(t.status().era, Some(Era::Legacy));
    assert!(!t.status().session_open);
    assert!(t.status().session_ended.is_some());
    assert_eq!(
        (t.status().status, t.status().reason),
        (State::Unhealthy, Reason::Exited)
    );
    assert_eq!(t.status().detail, "gone");
    let last = t.status().last_transition.expect("a transition");
    assert_eq!(
        (last.from, last.to, last.reason),
        (State::Healthy, State::Unhealthy, Reason::Exited)
    );
}

#[test]
fn a_slow_handshake_is_no_liveness_answer() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    let info = ServerInfo::default();
    // Three seconds to start (npx, Python imports): far past the
    // thresholds, and no verdict of its own.
    assert_eq!(t.session_opened(Era::Legacy, info, secs(3), t0), None);
    assert_eq!(t.status().status, State::Unknown);
    assert_eq!(t.status().handshake_ms, Some(3000.0));
    assert_eq!(t.status().response_time_ms, None);
    let tr = t.probe(&answered(ProbeKind::Ping, 4), false, t0 + secs(3));
    assert_eq!(
        tr.map(|x| (x.from, x.to)),
        Some((State::Unknown, State::Healthy))
    );
    assert_eq!(t.status().response_time_ms, Some(4.0));
    assert_eq!(
        t.status()
            .events
            .iter()
            .filter(|e| e.kind == EventKind::StateChanged)
            .count(),
        1,
        "unknown, then healthy, and nothing between"
    );
}

#[test]
fn the_reason_a_server_is_down_for_is_known_only_while_it_is_down() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    assert_eq!(t.down_reason(), None, "starting");
    t.link_down(Reason::HandshakeFailed, "no answer", false, t0);
    assert_eq!(t.down_reason(), None, "a first failure waits for a second");
    t.link_down(Reason::ConnectFailed, "refused", true, t0);
    assert_eq!(t.down_reason(), Some(Reason::ConnectFailed));
    open(&mut t, t0);
    assert_eq!(t.down_reason(), None, "up");
    t.link_down(Reason::Exited, "exited", true, t0);
    assert_eq!(t.down_reason(), Some(Reason::Exited));
}

#[test]
fn failed_connects_count_as_failures_until_an_answer() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    for _ in 0..7 {
        t.link_down(Reason::ConnectFailed, "refused", true, t0);
    }
    assert_eq!(t.status().consecutive_failures, 7);
    t.session_opened(Era::Legacy, ServerInfo::default(), secs(1), t0);
    assert_eq!(
        t.status().consecutive_failures,
        7,
        "a handshake is no answer"
    );
    // Until then the old verdict stands, and says a session is open again.
    assert_eq!(t.status().reason, Reason::ConnectFailed);
    assert!(
        t.status()
            .detail
            .starts_with("refused; a new session is open"),
        "{}",
        t.status().detail
    );
    t.probe(&answered(ProbeKind::Ping, 1), false, t0);
    assert_eq!(t.status().consecutive_failures, 0);
}

#[test]
fn the_detail_explains_the_reason_published() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.process(&sample(0, RunState::Stopped), t0 + secs(1));
    assert_eq!(t.status().reason, Reason::Stopped);
    // A ping goes late while it is stopped: still stopped, and said so.
    t.liveness_late(secs(2), t0 + secs(3));
    assert_eq!(t.status().reason, Reason::Stopped);
    assert_eq!(t.status().detail, "process is stopped (SIGSTOP or traced)");
}

#[test]
fn a_late_ping_answered_ends_its_episode_and_resets_the_failure_count() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.liveness_late(secs(5), t0 + secs(5));
    assert_eq!(t.status().consecutive_failures, 1);
    assert_eq!(
        t.status().reason,
        Reason::Ok,
        "one late ping is one judgement of three"
    );
    assert_eq!(t.judgement(t0 + secs(5)).reason, Reason::Unresponsive);
    t.probe(&answered(ProbeKind::Ping, 7000), true, t0 + secs(7));
    assert_eq!(t.status().consecutive_failures, 0);
    assert_eq!(t.status().response_time_ms, Some(7000.0));
    assert_eq!(t.judgement(t0 + secs(7)).state, State::Healthy);
}

#[test]
fn errors_count_but_prove_the_server_is_there() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    let stuck = Settings::default().stuck_after.0;
    for i in 1..=3 {
        let at = t0 + stuck / 2 * i;
        t.probe(&failed(ProbeKind::Ping, FailureReason::RpcError), false, at);
        assert!(!t.is_stuck(at), "an error answer is an answer");
    }
    assert_eq!(t.status().consecutive_failures, 3);
    assert_eq!(
        (t.status().status, t.status().reason),
        (State::Unhealthy, Reason::Errors)
    );
    // Timeouts are not answers: silence grows.
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.probe(
        &failed(ProbeKind::Ping, FailureReason::Timeout),
        false,
        t0 + stuck,
    );
    assert!(t.is_stuck(t0 + stuck));
}

#[test]
fn cpu_counts_as_life_only_above_a_share_of_a_core() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.liveness_late(secs(5), t0 + secs(5));
    t.process(&sample(0, RunState::Alive), t0 + secs(5));
    // 10 % of a core over a second: housekeeping, not work.
    t.process(&sample(100, RunState::Alive), t0 + secs(6));
    assert_eq!(t.judgement(t0 + secs(6)).reason, Reason::Unresponsive);
    // 20 % is work.
    t.process(&sample(300, RunState::Alive), t0 + secs(7));
    assert_eq!(t.judgement(t0 + secs(7)).reason, Reason::Busy);
    // Work pushes silence back: not stuck at stuck_after from the last answer.
    let stuck = Settings::default().stuck_after.0;
    assert!(!t.is_stuck(t0 + stuck));
    assert!(t.is_stuck(t0 + secs(7) + stuck));
    // Progress notifications count the same way.
    t.activity(t0 + stuck);
    assert!(!t.is_stuck(t0 + stuck + secs(1)));
}

#[test]
fn a_stopped_process_is_unhealthy_at_once_but_never_stuck() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    let tr = t.process(&sample(0, RunState::Stopped), t0 + secs(1));
    assert_eq!(
        tr.map(|x| (x.to, x.reason)),
        Some((State::Unhealthy, Reason::Stopped))
    );
    assert!(!t.is_stuck(t0 + secs(3600)));
    assert_eq!(t.process(&sample(0, RunState::Stopped), t0 + secs(2)), None);
    t.process(&sample(0, RunState::Alive), t0 + secs(3));
    assert_eq!(t.judgement(t0 + secs(3)).state, State::Healthy);
}

#[test]
fn health_reports_failures_and_timeouts_are_told_apart() {
    let t0 = Instant::now();
    let hc = |status| ProbeOutcome {
        kind: ProbeKind::HealthCheck,
        tool: None,
        duration: Duration::from_millis(3),
        result: Ok(Answer::Health(HealthReport {
            status,
            fields: vec![("queue".into(), 2.0)],
            is_error: false,
        })),
        trace: None,
        conditions: Vec::new(),
    };
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.probe(&hc(Reported::Degraded), false, t0);
    assert_eq!(t.judgement(t0).reason, Reason::HealthCheckDegraded);
    let last = t.status().health_check.clone().expect("kept");
    assert_eq!(
        (last.status, last.failed),
        (Some(Reported::Degraded), false)
    );
    assert_eq!(last.fields, vec![("queue".to_owned(), 2.0)]);
    for _ in 0..3 {
        t.probe(&hc(Reported::Unreadable), false, t0);
    }
    assert_eq!(
        (t.status().status, t.status().reason),
        (State::Degraded, Reason::HealthCheckUnreadable)
    );
    assert!(
        t.status().detail.contains("no status"),
        "{}",
        t.status().detail
    );
    let error = ProbeOutcome {
        result: Err(Failure {
            reason: FailureReason::RpcError,
            detail: "boom".into(),
            link_lost: false,
            cancelled: None,
            retry_after: None,
            code: None,
        }),
        ..hc(Reported::Healthy)
    };
    for _ in 0..3 {
        t.probe(&error, false, t0);
    }
    assert_eq!(t.status().reason, Reason::HealthCheckFailed);
    assert_eq!(t.status().detail, "health_check: boom");
    // A timeout says nothing about what the server thinks of itself.
    let timeout = ProbeOutcome {
        result: Err(Failure {
            reason: FailureReason::Timeout,
            detail: "no answer".into(),
            link_lost: false,
            cancelled: None,
            retry_after: None,
            code: None,
        }),
        ..hc(Reported::Healthy)
    };
    t.probe(&timeout, false, t0);
    let last = t.status().health_check.clone().expect("kept");
    assert_eq!((last.status, last.failed), (None, false));
}

#[test]
fn answers_of_other_probes_keep_the_server_from_looking_silent() {
    let t0 = Instant::now();
    let stuck = Settings::default().stuck_after.0;
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.probe(&answered(ProbeKind::Tool, 50), false, t0 + stuck - secs(1));
    assert!(!t.is_stuck(t0 + stuck));
    assert!(t.status().last_check.is_some());
}

#[test]
fn tool_timeouts_and_tool_errors_are_told_apart() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    for _ in 0..3 {
        t.probe(&failed(ProbeKind::Tool, FailureReason::Timeout), false, t0);
    }
    // Lateness alone never makes a live server unhealthy.
    assert_eq!(t.judgement(t0).state, State::Degraded);
    assert_eq!(t.judgement(t0).reason, Reason::Unresponsive);
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    for _ in 0..3 {
        t.probe(
            &failed(ProbeKind::Tool, FailureReason::ToolError),
            false,
            t0,
        );
    }
    assert_eq!(
        (t.judgement(t0).state, t.judgement(t0).reason),
        (State::Unhealthy, Reason::Errors)
    );
}

#[test]
fn a_new_session_starts_with_a_clean_window() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    for _ in 0..3 {
        t.probe(&failed(ProbeKind::Ping, FailureReason::RpcError), false, t0);
    }
    assert_eq!(t.judgement(t0).state, State::Unhealthy);
    open(&mut t, t0 + secs(1));
    assert_eq!(t.judgement(t0 + secs(1)).state, State::Healthy);
}

#[test]
fn the_cpu_share_is_of_the_time_between_samples() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.liveness_late(secs(5), t0 + secs(5));
    t.process(&sample(0, RunState::Alive), t0 + secs(5));
    // 300 ms over 2 s is 15 %: under the 20 % that counts as work.
    t.process(&sample(300, RunState::Alive), t0 + secs(7));
    assert_eq!(t.judgement(t0 + secs(7)).reason, Reason::Unresponsive);
    // 500 ms over the next 2 s is 25 %.
    t.process(&sample(800, RunState::Alive), t0 + secs(9));
    assert_eq!(t.judgement(t0 + secs(9)).reason, Reason::Busy);
}

#[test]
fn silence_counts_from_the_later_of_answer_and_activity() {
    let t0 = Instant::now();
    let stuck = Settings::default().stuck_after.0;
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    t.activity(t0 + secs(1));
    t.probe(&answered(ProbeKind::Ping, 1), false, t0 + secs(5));
    assert!(!t.is_stuck(t0 + secs(5) + stuck - secs(1)));
    assert!(t.is_stuck(t0 + secs(5) + stuck));
}

#[test]
fn times_are_rfc3339_utc_with_milliseconds() {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
    assert_eq!(rfc3339(t), "1970-01-01T00:00:01.500Z");
}

#[test]
fn the_detail_of_a_problem_survives_the_fall_count() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    let err = |d: &str| ProbeOutcome {
        kind: ProbeKind::HealthCheck,
        tool: None,
        duration: Duration::from_millis(1),
        result: Err(Failure {
            reason: FailureReason::Transport,
            detail: d.into(),
            link_lost: false,
            cancelled: None,
            retry_after: None,
            code: None,
        }),
        trace: None,
        conditions: Vec::new(),
    };
    t.probe(&err("HTTP 502"), false, t0);
    assert_eq!(t.status().detail, "", "still published ok");
    // Judgements that carry no text of their own.
    t.tick(t0);
    t.tick(t0);
    assert_eq!(t.status().status, State::Unhealthy);
    assert_eq!(t.status().detail, "health_check: HTTP 502");
    let last = t.status().events.back().expect("event");
    assert!(
        last.detail.ends_with("health_check: HTTP 502"),
        "{}",
        last.detail
    );
    assert_eq!(t.problem(t0), "health_check: HTTP 502");
    // Judged again with nothing new: the detail stays while the state does.
    t.tick(t0);
    assert_eq!(t.status().detail, "health_check: HTTP 502");
}

#[test]
fn a_recovery_forgets_the_old_problem() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    for _ in 0..3 {
        t.probe(&failed(ProbeKind::Ping, FailureReason::RpcError), false, t0);
    }
    assert_eq!(t.status().detail, "ping failed");
    open(&mut t, t0 + secs(1));
    t.probe(&answered(ProbeKind::Ping, 1), false, t0 + secs(1));
    t.probe(&answered(ProbeKind::Ping, 1), false, t0 + secs(1));
    assert_eq!(t.status().status, State::Healthy);
    assert_eq!(t.problem(t0 + secs(1)), "", "a new story starts");
    // Slow now: the detail is the latency's, never the old failure's.
    for _ in 0..5 {
        t.probe(&answered(ProbeKind::Ping, 2000), false, t0 + secs(2));
    }
    assert_eq!(t.status().status, State::Unhealthy);
    assert_eq!(
        t.status().detail,
        "liveness answers take 2000 ms (median of the last 5; 2000 ms the latest)"
    );
}

#[test]
fn text_from_outside_is_bounded() {
    let t = Tracker::new(&spec("a"), Instant::now());
    let long = "x".repeat(10_000);
    assert!(t.scrub(&long).len() <= 504);
}

#[test]
fn only_link_reasons_are_told_by_the_links_words() {
    let mut t = Tracker::new(&spec("a"), Instant::now());
    t.problems.link = "LINK".to_owned();
    for &r in Reason::ALL {
        let told = t.detail_for(r, Instant::now());
        // A server still starting tells what its failed first attempt said.
        if r.link_failure().is_some() || r == Reason::Starting {
            assert_eq!(told, "LINK", "{r:?}");
        } else {
            assert_ne!(told, "LINK", "{r:?} needs an arm of its own in detail_for");
        }
    }
}

#[test]
fn a_first_start_failing_without_words_waits_for_a_second_before_the_verdict() {
    let t0 = Instant::now();
    for reason in [Reason::HandshakeFailed, Reason::Exited] {
        let mut t = Tracker::new(&spec("a"), t0);
        assert_eq!(t.link_down(reason, "no answer", false, t0), None);
        assert_eq!(t.status().status, State::Unknown, "{reason:?}");
        assert_eq!(t.status().reason, Reason::Starting, "{reason:?}");
        assert_eq!(
            t.status().detail,
            "the first attempt failed, trying again: no answer"
        );
        assert_eq!(t.status().consecutive_failures, 1);
        let tr = t.link_down(reason, "no answer", false, t0 + secs(2));
        assert_eq!(tr.map(|tr| tr.to), Some(State::Unhealthy), "{reason:?}");
        assert_eq!(t.status().reason, reason);
    }
}

#[test]
fn a_start_that_says_why_or_a_refused_connection_is_judged_at_once() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    let tr = t.link_down(
        Reason::Exited,
        "exited with code 1; stderr: «no key»",
        true,
        t0,
    );
    assert_eq!(tr.map(|tr| tr.to), Some(State::Unhealthy));
    let mut t = Tracker::new(&spec("a"), t0);
    let tr = t.link_down(Reason::ConnectFailed, "refused", false, t0);
    assert_eq!(tr.map(|tr| tr.to), Some(State::Unhealthy));
}

#[test]
fn only_the_very_first_start_waits_for_a_second() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    t.session_opened(Era::Legacy, ServerInfo::default(), secs(1), t0);
    t.probe(&answered(ProbeKind::Ping, 1), false, t0);
    let tr = t.link_down(Reason::Exited, "gone", false, t0 + secs(1));
    assert_eq!(tr.map(|tr| tr.to), Some(State::Unhealthy));
}

#[test]
fn what_a_process_sample_or_a_condition_changes_is_returned_as_the_transition() {
    use crate::config::condition::{Severity, Subject};
    use crate::probe::conditions::Checked;
    let t0 = Instant::now();
    let mut t = answering(t0);
    assert_eq!(t.status().status, State::Healthy);
    let failing = |failure: Option<&str>| Checked {
        name: "tools-hold".into(),
        subject: Subject::Tools,
        severity: Severity::Degraded,
        failure: failure.map(str::to_owned),
    };
    let to = |tr: Option<Transition>| tr.map(|tr| (tr.from, tr.to));
    // However many readings the hysteresis wants, the one that changes the
    // state returns the change.
    let until_changed = |t: &mut Tracker, checked: &[Checked]| {
        (0..10).find_map(|_| t.conditions_checked(checked, t0))
    };
    let tr = until_changed(&mut t, &[failing(Some("no tool named x"))]);
    assert_eq!(to(tr), Some((State::Healthy, State::Degraded)));
    assert_eq!(t.status().status, State::Degraded);
    let tr = until_changed(&mut t, &[failing(None)]);
    assert_eq!(to(tr), Some((State::Degraded, State::Healthy)));
    let tr = t.process(&sample(0, RunState::Stopped), t0 + secs(1));
    assert_eq!(to(tr), Some((State::Healthy, State::Unhealthy)));
}

#[test]
fn a_busy_task_is_published_and_counts_as_a_sign_of_life() {
    use crate::probe::task::{TaskSeen, TaskStatus};
    let t0 = Instant::now();
    let mut t = answering(t0);
    let stuck = Settings::default().stuck_after.0;
    let seen = |busy: bool| TaskSeen {
        tool: "research".into(),
        task_id: "t1".into(),
        status: TaskStatus::Working,
        status_message: None,
        last_updated_at: "u1".into(),
        polls: 1,
        busy,
    };
    t.task(seen(false), t0 + stuck);
    assert_eq!(t.status().tasks.len(), 1, "published");
    assert!(
        t.is_stuck(t0 + stuck + secs(1)),
        "an idle task is no sign of life"
    );
    t.task(seen(true), t0 + stuck);
    assert!(!t.is_stuck(t0 + stuck + secs(1)), "a busy one is");
}

#[test]
fn the_hour_of_history_keeps_at_most_its_bound_of_changes() {
    let t0 = Instant::now();
    let mut t = Tracker::new(&spec("a"), t0);
    open(&mut t, t0);
    // A stopped process is unhealthy at once; answers bring it back.
    // Flap far more often than the bound, within a few minutes.
    let mut at = t0;
    for _ in 0..(2 * HISTORY_MAX) {
        at += Duration::from_millis(100);
        t.process(&sample(0, RunState::Stopped), at);
        t.process(&sample(0, RunState::Alive), at);
        for _ in 0..10 {
            at += Duration::from_millis(100);
            t.probe(&answered(ProbeKind::Ping, 1), false, at);
            if t.status().status == State::Healthy {
                break;
            }
        }
    }
    assert!(at < t0 + HISTORY, "all within the hour");
    let history = &t.status().history;
    assert!(history.len() > 2, "it flapped: {}", history.len());
    assert_eq!(history.len(), HISTORY_MAX, "held to its bound");
}
