//! W3C Trace Context (`traceparent`) for the calls mcpmon originates, sent
//! in `params._meta` as the MCP OpenTelemetry conventions specify (SEP-414),
//! so a server's traces can tell a probe from real traffic and an operator
//! can follow a failed probe into the server's trace by its id. The same
//! ids name the probe's own span when spans are exported
//! ([`crate::output::otlp`]), so the server's trace has the monitor's span
//! as its parent.

use std::cell::RefCell;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// One probe's trace. The ids are kept as numbers and spelled in hex only
/// where they are sent or shown: every probe has a trace, including each
/// liveness ping, whose trace is never sent and is spelled only when a
/// span is exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The trace id, never 0.
    pub trace_id: u128,
    /// The probe's own span id, never 0.
    pub span_id: u64,
    /// Whether this trace is sampled (its span exported, the flag sent).
    pub sampled: bool,
    /// When the probe started, for its span.
    pub started: SystemTime,
}

impl Trace {
    /// The trace id: 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The span id: 16 lowercase hex digits.
    pub fn span_hex(&self) -> String {
        format!("{:016x}", self.span_id)
    }

    /// `00-<trace id>-<span id>-<flags>`: version 0, the sampled flag.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.span_id,
            u8::from(self.sampled)
        )
    }
}

/// The share of traces sampled, as f64 bits; 1.0 until told otherwise, so
/// a server that traces sees every probe unless the operator samples.
static SAMPLE_RATIO: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000);

/// Sample this share of probe traces (clamped to 0..=1) from now on.
pub fn set_sample_ratio(ratio: f64) {
    SAMPLE_RATIO.store(ratio.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
}

/// A new trace with random, non-zero ids.
pub fn new() -> Trace {
    // A generator per thread, seeded from the operating system's
    // randomness (through `RandomState`'s keys): unpredictable enough for
    // ids that are not secrets. A `RandomState` per id, as before, cost
    // three SipHashes a ping.
    thread_local! {
        static IDS: RefCell<fastrand::Rng> = RefCell::new(fastrand::Rng::with_seed(
            RandomState::new().hash_one(std::thread::current().id()),
        ));
    }
    let (hi, lo, span) = IDS.with_borrow_mut(|r| (r.u64(1..), r.u64(1..), r.u64(1..)));
    // As OpenTelemetry's TraceIdRatioBased: the low bits of the trace id
    // against the ratio, so every party deciding from the id agrees.
    let ratio = f64::from_bits(SAMPLE_RATIO.load(Ordering::Relaxed));
    let sampled = ratio >= 1.0 || ((lo >> 11) as f64) < ratio * (1u64 << 53) as f64;
    Trace {
        trace_id: (u128::from(hi) << 64) | u128::from(lo),
        span_id: span,
        sampled,
        started: SystemTime::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_well_formed_and_distinct() {
        let a = new();
        let b = new();
        assert_ne!(a.trace_id, b.trace_id);
        for t in [&a, &b] {
            let traceparent = t.traceparent();
            let parts: Vec<&str> = traceparent.split('-').collect();
            assert_eq!(parts.len(), 4);
            assert_eq!(parts[0], "00");
            assert_eq!(parts[1], t.trace_hex());
            assert_eq!(parts[1].len(), 32);
            assert_eq!(parts[2], t.span_hex());
            assert_eq!(parts[2].len(), 16);
            assert_eq!(parts[3], if t.sampled { "01" } else { "00" });
            assert!(
                parts[1]
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            assert_ne!(parts[1], "0".repeat(32));
            assert_ne!(parts[2], "0".repeat(16));
        }
    }

    /// Each thread has its own generator: threads seeded alike would
    /// give every probe on a worker the same ids as on the next.
    #[test]
    fn threads_draw_different_ids() {
        let ids: std::collections::HashSet<u128> = (0..8)
            .map(|_| std::thread::spawn(|| new().trace_id))
            .map(|t| t.join().expect("thread"))
            .collect();
        assert_eq!(ids.len(), 8);
    }

    /// One test owns the global ratio, so no other test sees it move.
    #[test]
    fn the_sample_ratio_samples_about_that_share() {
        set_sample_ratio(1.0);
        assert!((0..100).all(|_| new().sampled));
        set_sample_ratio(0.0);
        assert!((0..100).all(|_| !new().sampled));
        set_sample_ratio(0.25);
        let n = (0..4000).filter(|_| new().sampled).count();
        set_sample_ratio(1.0);
        assert!((800..1200).contains(&n), "{n} of 4000 sampled at 0.25");
    }
}
