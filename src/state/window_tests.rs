//! The rolling window against the plain reading of it: bounds, ageing,
//! the latency ring, and the kept counts replayed against a scan.

use super::*;

#[test]
fn window_drops_old_samples_and_bounds_memory() {
    let start = Instant::now();
    let mut w = Window::new(Duration::from_secs(10));
    w.record(start, true, Outcome::Error);
    w.record(
        start + Duration::from_secs(5),
        true,
        Outcome::Ok(Duration::from_millis(4)),
    );
    let s = w.stats(start + Duration::from_secs(5));
    assert_eq!((s.samples, s.errors), (2, 1));
    let s = w.stats(start + Duration::from_secs(11));
    assert_eq!((s.samples, s.errors), (1, 0));
    assert_eq!(s.latest_latency, Some(Duration::from_millis(4)));
    for i in 0..(MAX_SAMPLES as u64 * 2) {
        w.record(
            start + Duration::from_millis(i),
            false,
            Outcome::Ok(Duration::ZERO),
        );
    }
    assert!(w.samples.len() <= MAX_SAMPLES);
}

#[test]
fn window_latency_counts_only_answered_liveness_probes() {
    let now = Instant::now();
    let mut w = Window::new(Duration::from_secs(60));
    w.record(now, true, Outcome::Ok(Duration::from_millis(20)));
    w.record(now, true, Outcome::Ok(Duration::from_millis(10)));
    w.record(now, true, Outcome::Ok(Duration::from_millis(30)));
    w.record(now, false, Outcome::Ok(Duration::from_secs(5)));
    w.record(now, true, Outcome::Timeout);
    let s = w.stats(now);
    assert_eq!(s.median_latency, Some(Duration::from_millis(20)));
    assert_eq!(s.latest_latency, Some(Duration::from_millis(30)));
    assert_eq!((s.samples, s.timeouts, s.errors), (5, 1, 0));
    assert_eq!((s.episodes, s.failing), (1, true));
}

#[test]
fn the_window_forgets_what_is_older_than_its_span_and_keeps_the_boundary() {
    let t0 = Instant::now();
    let span = Duration::from_secs(10);
    let mut w = Window::new(span);
    w.record(t0, true, Outcome::Error);
    // Exactly one span old: still in.
    w.record(t0 + span, true, Outcome::Ok(Duration::from_millis(1)));
    assert_eq!(w.samples.len(), 2);
    assert_eq!(w.stats(t0 + span).errors, 1);
    // Older than the span: out, and out of memory too.
    w.record(
        t0 + span + Duration::from_millis(1),
        true,
        Outcome::Ok(Duration::ZERO),
    );
    assert_eq!(w.samples.len(), 2);
    assert_eq!(w.stats(t0 + span + Duration::from_millis(1)).errors, 0);
    w.clear();
    assert_eq!(w.stats(t0 + span).samples, 0);
}

#[test]
fn the_latency_ring_keeps_the_last_answers_whatever_how_many_came() {
    // Against the plain reading: the last five latencies, their median
    // once there are three. Values chosen so order matters to "last".
    for n in 0..=13u64 {
        let latencies: Vec<Duration> = (0..n)
            .map(|i| Duration::from_millis((i * 37) % 11 + i))
            .collect();
        let ring = Recent::newest_first(latencies.iter().rev().copied());
        let last: Vec<Duration> = latencies
            .iter()
            .skip(latencies.len().saturating_sub(LATENCY_SAMPLES))
            .copied()
            .collect();
        let mut sorted = last.clone();
        sorted.sort_unstable();
        let median = (sorted.len() >= 3).then(|| sorted[sorted.len() / 2]);
        assert_eq!(ring.latest(), last.last().copied(), "{n} answers");
        assert_eq!(ring.median(), median, "{n} answers");
    }
}

/// The window's summary read the plain way: every sample in the span
/// scanned from the oldest, an episode opened by a failure and closed by
/// an answer or a recovery.
fn stats_by_scan(w: &Window, now: Instant) -> WindowStats {
    let cutoff = now.checked_sub(w.span);
    let mut st = WindowStats::default();
    let mut answered = Vec::new();
    let mut in_episode = false;
    for s in w
        .samples
        .iter()
        .filter(|s| cutoff.is_none_or(|c| s.at >= c))
    {
        let Entry::Probe { liveness, outcome } = s.entry else {
            in_episode = false;
            continue;
        };
        st.samples += 1;
        match outcome {
            Outcome::Ok(d) if liveness => answered.push(d),
            Outcome::Ok(_) => {}
            Outcome::Timeout => st.timeouts += 1,
            Outcome::Error => st.errors += 1,
        }
        if outcome.failed() && !in_episode {
            st.episodes += 1;
        }
        in_episode = outcome.failed();
    }
    st.failing = in_episode;
    let last = &answered[answered.len().saturating_sub(LATENCY_SAMPLES)..];
    st.latest_latency = last.last().copied();
    let mut sorted = last.to_vec();
    sorted.sort_unstable();
    st.median_latency = (sorted.len() >= LATENCY_MIN_ANSWERS).then(|| sorted[sorted.len() / 2]);
    st
}

#[test]
fn the_kept_counts_agree_with_a_scan_of_the_window_whatever_came() {
    // A fixed pseudo-random run (so a failure replays) of probes, recoveries
    // and the odd clear, at steps that let samples age out one by one, in
    // bursts, and past the sample cap; read at, and after, each step.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let start = Instant::now();
    for (span_ms, step_ms) in [(10_000, 3_000), (2_000, 100), (60_000, 1), (500, 700)] {
        let mut w = Window::new(Duration::from_millis(span_ms));
        let mut now = start;
        for i in 0..2_000 {
            now += Duration::from_millis(next(step_ms + 1));
            match next(20) {
                0 => w.recovered(now),
                1 if next(10) == 0 => w.clear(),
                k => {
                    let outcome = match k % 4 {
                        0 => Outcome::Timeout,
                        1 => Outcome::Error,
                        _ => Outcome::Ok(Duration::from_millis(next(50))),
                    };
                    w.record(now, next(3) > 0, outcome);
                }
            }
            let later = now + Duration::from_millis(next(span_ms * 2));
            for at in [now, later] {
                assert_eq!(
                    w.stats(at),
                    stats_by_scan(&w, at),
                    "span {span_ms} ms, step {i}"
                );
            }
        }
        assert!(w.samples.len() <= MAX_SAMPLES);
    }
}
