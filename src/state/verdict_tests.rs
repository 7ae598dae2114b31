//! The verdict as a pure function, boundary by boundary.

use super::*;
use crate::state::window::{LATENCY_SAMPLES, Outcome, Window};

fn t() -> Thresholds {
    Thresholds {
        healthy_max_error_ratio: 0.01,
        healthy_max_latency: Duration::from_millis(500),
        degraded_max_error_ratio: 0.05,
        degraded_max_latency: Duration::from_millis(1000),
        stuck_after: Duration::from_secs(60),
    }
}

fn healthy_evidence() -> Evidence {
    Evidence {
        link: Link::Up,
        window: WindowStats {
            samples: 100,
            median_latency: Some(Duration::from_millis(1)),
            latest_latency: Some(Duration::from_millis(1)),
            ..WindowStats::default()
        },
        liveness_late: false,
        busy: false,
        stopped: false,
        silent_for: Duration::ZERO,
        reported: None,
        health_check_failed: false,
        throttled: false,
        tools_missing: false,
        condition_failed: None,
        task: None,
    }
}

#[test]
fn a_stuck_task_is_unhealthy_and_one_asking_for_input_degraded_and_both_are_named() {
    let mut e = healthy_evidence();
    e.task = Some(Reason::InputRequired);
    assert_eq!(judged(e), (State::Degraded, Reason::InputRequired, false));
    e.task = Some(Reason::TaskStuck);
    assert_eq!(judged(e), (State::Unhealthy, Reason::TaskStuck, false));
    // The server's own word of unhealth comes first on equal severity.
    e.health_check_failed = true;
    assert_eq!(judged(e).1, Reason::HealthCheckFailed);
}

fn judged(e: Evidence) -> (State, Reason, bool) {
    let j = judge(&e, &t());
    (j.state, j.reason, j.definitive)
}

#[test]
fn a_throttle_is_degraded_never_unhealthy() {
    let mut e = healthy_evidence();
    e.throttled = true;
    assert_eq!(judged(e), (State::Degraded, Reason::Throttled, false));
    // A worse finding still wins.
    e.reported = Some(Reported::Unhealthy);
    assert_eq!(judged(e).0, State::Unhealthy);
    // A handshake refused by a throttle: there, and busy with others.
    let mut e = healthy_evidence();
    e.link = Link::Down(Reason::Throttled);
    assert_eq!(judged(e), (State::Degraded, Reason::Throttled, true));
}

#[test]
fn a_missing_expected_tool_is_degraded() {
    let mut e = healthy_evidence();
    e.tools_missing = true;
    assert_eq!(judged(e), (State::Degraded, Reason::ToolsMissing, false));
}

#[test]
fn a_failed_condition_is_as_bad_as_its_severity_and_a_dead_link_still_wins() {
    let mut e = healthy_evidence();
    e.condition_failed = Some(State::Degraded);
    assert_eq!(judged(e), (State::Degraded, Reason::ConditionFailed, false));
    e.condition_failed = Some(State::Unhealthy);
    assert_eq!(
        judged(e),
        (State::Unhealthy, Reason::ConditionFailed, false)
    );
    // The server's own word of the same severity comes first.
    e.reported = Some(Reported::Unhealthy);
    assert_eq!(judged(e).1, Reason::HealthCheckUnhealthy);
    e.link = Link::Down(Reason::Exited);
    assert_eq!(judged(e), (State::Unhealthy, Reason::Exited, true));
}

#[test]
fn clean_window_is_healthy() {
    assert_eq!(
        judged(healthy_evidence()),
        (State::Healthy, Reason::Ok, false)
    );
}

#[test]
fn empty_window_on_live_link_is_healthy() {
    let mut e = healthy_evidence();
    e.window = WindowStats::default();
    assert_eq!(judged(e).0, State::Healthy);
}

#[test]
fn transport_death_is_definitive_whatever_else() {
    for reason in [
        Reason::Exited,
        Reason::Unreachable,
        Reason::ConnectFailed,
        Reason::HandshakeFailed,
        Reason::Unauthenticated,
        Reason::Forbidden,
    ] {
        let mut e = healthy_evidence();
        e.link = Link::Down(reason);
        e.reported = Some(Reported::Healthy);
        assert_eq!(judged(e), (State::Unhealthy, reason, true));
    }
}

#[test]
fn error_ratio_boundaries_follow_the_seed_thresholds() {
    // (errors per 100, expected state): healthy below 1 %, degraded below 5 %.
    for (errors, want) in [
        (0, State::Healthy),
        (1, State::Degraded),
        (4, State::Degraded),
        (5, State::Unhealthy),
        (50, State::Unhealthy),
    ] {
        let mut e = healthy_evidence();
        e.window.errors = errors;
        e.window.failing = errors > 0;
        e.window.episodes = u32::from(errors > 0);
        let (state, reason, definitive) = judged(e);
        assert_eq!(state, want, "errors={errors}");
        assert!(!definitive);
        if errors > 0 {
            assert_eq!(reason, Reason::Errors);
        }
    }
}

#[test]
fn latency_boundaries_follow_the_seed_thresholds() {
    for (ms, want) in [
        (499, State::Healthy),
        (500, State::Degraded),
        (999, State::Degraded),
        (1000, State::Unhealthy),
    ] {
        let mut e = healthy_evidence();
        e.window.median_latency = Some(Duration::from_millis(ms));
        e.window.latest_latency = Some(Duration::from_millis(ms));
        let (state, reason, _) = judged(e);
        assert_eq!(state, want, "ms={ms}");
        if want != State::Healthy {
            assert_eq!(reason, Reason::Slow);
        }
    }
}

#[test]
fn lateness_alone_never_makes_a_live_server_unhealthy() {
    let mut e = healthy_evidence();
    e.window.timeouts = 60;
    e.window.failing = true;
    e.window.episodes = 1;
    e.liveness_late = true;
    e.silent_for = Duration::from_secs(59);
    assert_eq!(judged(e), (State::Degraded, Reason::Unresponsive, false));
}

#[test]
fn late_answers_with_signs_of_life_are_busy_never_unhealthy() {
    let mut e = healthy_evidence();
    e.liveness_late = true;
    e.busy = true;
    e.window.timeouts = 90;
    e.window.failing = true;
    e.window.episodes = 1;
    e.silent_for = Duration::from_secs(59);
    assert_eq!(judged(e), (State::Degraded, Reason::Busy, false));
}

#[test]
fn a_stopped_process_is_unhealthy_at_once_even_if_it_looked_busy() {
    let mut e = healthy_evidence();
    e.stopped = true;
    e.busy = true;
    assert_eq!(judged(e), (State::Unhealthy, Reason::Stopped, true));
}

#[test]
fn silence_past_stuck_after_is_stuck() {
    let mut e = healthy_evidence();
    e.liveness_late = true;
    e.silent_for = Duration::from_secs(60);
    assert_eq!(judged(e), (State::Unhealthy, Reason::Stuck, true));
}

#[test]
fn one_late_ping_is_degraded_unresponsive() {
    let mut e = healthy_evidence();
    e.liveness_late = true;
    assert_eq!(judged(e), (State::Degraded, Reason::Unresponsive, false));
}

#[test]
fn health_check_status_is_folded_in_worst_wins() {
    let cases = [
        (Some(Reported::Healthy), false, State::Healthy, Reason::Ok),
        (
            Some(Reported::Degraded),
            false,
            State::Degraded,
            Reason::HealthCheckDegraded,
        ),
        (
            Some(Reported::Unhealthy),
            false,
            State::Unhealthy,
            Reason::HealthCheckUnhealthy,
        ),
        (
            Some(Reported::Healthy),
            true,
            State::Unhealthy,
            Reason::HealthCheckFailed,
        ),
        (None, true, State::Unhealthy, Reason::HealthCheckFailed),
    ];
    for (reported, failed, state, reason) in cases {
        let mut e = healthy_evidence();
        e.reported = reported;
        e.health_check_failed = failed;
        assert_eq!(judged(e), (state, reason, false), "{reported:?} {failed}");
    }
    // A slow server that reports degraded stays at the worse of the two.
    let mut e = healthy_evidence();
    e.window.median_latency = Some(Duration::from_secs(2));
    e.window.latest_latency = Some(Duration::from_secs(2));
    e.reported = Some(Reported::Degraded);
    assert_eq!(judged(e), (State::Unhealthy, Reason::Slow, false));
}

#[test]
fn the_servers_own_word_names_the_reason_on_equal_severity() {
    let mut e = healthy_evidence();
    e.window.errors = 20;
    e.window.failing = true;
    e.health_check_failed = true;
    assert_eq!(
        judged(e),
        (State::Unhealthy, Reason::HealthCheckFailed, false)
    );
    let mut e = healthy_evidence();
    e.window.errors = 2;
    e.window.episodes = 2;
    e.reported = Some(Reported::Degraded);
    assert_eq!(
        judged(e),
        (State::Degraded, Reason::HealthCheckDegraded, false)
    );
}

#[test]
fn latency_is_not_judged_on_fewer_than_the_minimum_answers() {
    // The first answers after a start on a loaded host: slow, then not.
    let now = Instant::now();
    let mut w = Window::new(Duration::from_secs(300));
    let mut e = healthy_evidence();
    // Written out, not read from the constant: the median of five needs
    // three answers, and a change of that number must be seen here.
    let needed = 3;
    for n in 1..=LATENCY_SAMPLES {
        w.record(now, true, Outcome::Ok(Duration::from_millis(900)));
        e.window = w.stats(now);
        let want = if n < needed {
            State::Healthy
        } else {
            State::Degraded
        };
        assert_eq!(judged(e).0, want, "{n} answers of 900 ms");
        assert_eq!(e.window.latest_latency, Some(Duration::from_millis(900)));
        assert_eq!(e.window.median_latency.is_some(), n >= needed);
    }
}

#[test]
fn one_outlier_moves_neither_the_median_nor_the_verdict() {
    let now = Instant::now();
    let mut w = Window::new(Duration::from_secs(300));
    for ms in [2, 3, 2, 4000, 3] {
        w.record(now, true, Outcome::Ok(Duration::from_millis(ms)));
    }
    let s = w.stats(now);
    assert_eq!(s.median_latency, Some(Duration::from_millis(3)));
    let mut e = healthy_evidence();
    e.window = s;
    assert_eq!(judged(e).0, State::Healthy);
    // Only the last LATENCY_SAMPLES answers count: old slowness ages out.
    for _ in 0..LATENCY_SAMPLES {
        w.record(now, true, Outcome::Ok(Duration::from_millis(1)));
    }
    assert_eq!(w.stats(now).median_latency, Some(Duration::from_millis(1)));
}

#[test]
fn a_slow_median_with_a_prompt_latest_answer_is_not_slow() {
    let mut e = healthy_evidence();
    e.window.median_latency = Some(Duration::from_millis(800));
    e.window.latest_latency = Some(Duration::from_millis(5));
    assert_eq!(judged(e).0, State::Healthy);
    e.window.latest_latency = Some(Duration::from_millis(2000));
    assert_eq!(judged(e), (State::Degraded, Reason::Slow, false));
}

#[test]
fn an_ended_episode_no_longer_counts_but_recurring_ones_do() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let ok = Outcome::Ok(Duration::from_millis(2));
    let mut w = Window::new(Duration::from_secs(300));
    for i in 0..20 {
        w.record(at(i), true, ok);
    }
    // One episode of three timeouts, answered late, then prompt answers.
    for i in 20..23 {
        w.record(at(i), true, Outcome::Timeout);
    }
    let s = w.stats(at(23));
    assert_eq!((s.episodes, s.failing, s.timeouts), (1, true, 3));
    let mut e = healthy_evidence();
    e.window = s;
    assert_eq!(judged(e).0, State::Degraded);
    w.recovered(at(24));
    let s = w.stats(at(24));
    assert_eq!((s.episodes, s.failing), (1, false));
    e.window = s;
    assert_eq!(judged(e), (State::Healthy, Reason::Ok, false));
    // A second episode, even a single error, makes it recurring: the ratio judges.
    w.record(at(25), true, Outcome::Error);
    w.record(at(26), true, ok);
    let s = w.stats(at(26));
    assert_eq!((s.episodes, s.failing, s.errors), (2, false, 1));
    e.window = s;
    assert_eq!(judged(e), (State::Degraded, Reason::Timeouts, false));
}

#[test]
fn an_empty_window_judges_no_ratio() {
    let mut e = healthy_evidence();
    e.window = WindowStats {
        failing: true,
        episodes: 2,
        ..WindowStats::default()
    };
    assert_eq!(judged(e), (State::Healthy, Reason::Ok, false));
}

#[test]
fn the_reason_names_what_dominates_and_whether_it_is_going_on() {
    let mut e = healthy_evidence();
    e.window.timeouts = 10;
    e.window.episodes = 1;
    e.window.failing = true;
    // A timeout going on, though the late flag is not (yet) set.
    assert_eq!(judged(e).1, Reason::Unresponsive);
    e.window.failing = false;
    e.window.episodes = 2;
    assert_eq!(judged(e).1, Reason::Timeouts);
    e.liveness_late = true;
    assert_eq!(judged(e).1, Reason::Unresponsive);
    e.window.errors = 10;
    assert_eq!(judged(e).1, Reason::Errors);
}

#[test]
fn unreadable_self_report_is_degraded_never_healthy() {
    let mut e = healthy_evidence();
    e.reported = Some(Reported::Unreadable);
    assert_eq!(
        judged(e),
        (State::Degraded, Reason::HealthCheckUnreadable, false)
    );
}

fn j(state: State, reason: Reason) -> Judgement {
    Judgement::new(state, reason)
}

#[test]
fn first_judgement_is_adopted_at_once() {
    let now = Instant::now();
    let mut h = Hysteresis::new(2, 3, now);
    assert_eq!(h.state(), State::Unknown);
    let tr = h.observe(j(State::Healthy, Reason::Ok), now);
    assert_eq!(
        tr,
        Some(Transition {
            from: State::Unknown,
            to: State::Healthy,
            reason: Reason::Ok
        })
    );
}

#[test]
fn falling_needs_fall_judgements_in_a_row() {
    let t0 = Instant::now();
    let mut h = Hysteresis::new(2, 3, t0);
    h.observe(j(State::Healthy, Reason::Ok), t0);
    let bad = j(State::Degraded, Reason::Slow);
    assert_eq!(h.observe(bad, t0), None);
    assert_eq!(h.observe(bad, t0), None);
    // A good judgement in between resets the streak.
    assert_eq!(h.observe(j(State::Healthy, Reason::Ok), t0), None);
    assert_eq!(h.observe(bad, t0), None);
    assert_eq!(h.observe(bad, t0), None);
    let later = t0 + Duration::from_secs(3);
    assert!(h.observe(bad, later).is_some());
    assert_eq!((h.state(), h.reason()), (State::Degraded, Reason::Slow));
    assert_eq!(h.since(), later);
    assert_eq!(h.transitions(), 2);
}

#[test]
fn rising_needs_rise_judgements_in_a_row() {
    let t0 = Instant::now();
    let mut h = Hysteresis::new(2, 3, t0);
    h.observe(Judgement::definitive(State::Unhealthy, Reason::Exited), t0);
    assert_eq!(h.observe(j(State::Healthy, Reason::Ok), t0), None);
    assert!(h.observe(j(State::Healthy, Reason::Ok), t0).is_some());
    assert_eq!(h.state(), State::Healthy);
}

#[test]
fn definitive_judgements_skip_the_fall_count() {
    let t0 = Instant::now();
    let mut h = Hysteresis::new(2, 3, t0);
    h.observe(j(State::Healthy, Reason::Ok), t0);
    let tr = h.observe(
        Judgement::definitive(State::Unhealthy, Reason::Unreachable),
        t0,
    );
    assert_eq!(tr.map(|t| t.to), Some(State::Unhealthy));
    assert_eq!(h.reason(), Reason::Unreachable);
}

#[test]
fn same_state_new_reason_updates_the_reason_without_a_transition() {
    let t0 = Instant::now();
    let mut h = Hysteresis::new(2, 3, t0);
    h.observe(j(State::Degraded, Reason::Slow), t0);
    assert_eq!(
        h.observe(j(State::Degraded, Reason::HealthCheckDegraded), t0),
        None
    );
    assert_eq!(h.reason(), Reason::HealthCheckDegraded);
    assert_eq!(h.transitions(), 1);
}

#[test]
fn every_pair_of_states_transitions_only_after_its_count() {
    let states = [State::Healthy, State::Degraded, State::Unhealthy];
    for &from in &states {
        for &to in &states {
            if from == to {
                continue;
            }
            let t0 = Instant::now();
            let mut h = Hysteresis::new(2, 3, t0);
            h.observe(j(from, Reason::Ok), t0);
            let need = if to.severity() > from.severity() {
                3
            } else {
                2
            };
            for i in 1..need {
                assert_eq!(
                    h.observe(j(to, Reason::Errors), t0),
                    None,
                    "{from:?}->{to:?} #{i}"
                );
            }
            assert!(
                h.observe(j(to, Reason::Errors), t0).is_some(),
                "{from:?}->{to:?}"
            );
            assert_eq!(h.state(), to);
        }
    }
}
