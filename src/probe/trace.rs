//! W3C Trace Context (`traceparent`) for the calls mcpmon originates, sent
//! in `params._meta` as the MCP OpenTelemetry conventions specify (SEP-414),
//! so a server's traces can tell a probe from real traffic and an operator
//! can follow a failed probe into the server's trace by its id. The same
//! ids name the probe's own span when spans are exported
//! ([`crate::output::otlp`]), so the server's trace has the monitor's span
//! as its parent.

use std::fmt::Write as _;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// One probe's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits: the probe's own span.
    pub span_id: String,
    /// Whether this trace is sampled (its span exported, the flag sent).
    pub sampled: bool,
    /// `00-<trace id>-<span id>-<flags>`: version 0, the sampled flag.
    pub traceparent: String,
    /// When the probe started, for its span.
    pub started: SystemTime,
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
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Each RandomState has fresh keys: unpredictable enough for trace ids
    // (which are not secrets), with no random-number crate.
    let random = || {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        RandomState::new().hash_one(n).max(1)
    };
    let (hi, lo, span) = (random(), random(), random());
    // As OpenTelemetry's TraceIdRatioBased: the low bits of the trace id
    // against the ratio, so every party deciding from the id agrees.
    let ratio = f64::from_bits(SAMPLE_RATIO.load(Ordering::Relaxed));
    let sampled = ratio >= 1.0 || ((lo >> 11) as f64) < ratio * (1u64 << 53) as f64;
    let mut trace_id = String::with_capacity(32);
    let _ = write!(trace_id, "{hi:016x}{lo:016x}");
    let span_id = format!("{span:016x}");
    let traceparent = format!("00-{trace_id}-{span_id}-{:02x}", u8::from(sampled));
    Trace {
        trace_id,
        span_id,
        sampled,
        traceparent,
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
            let parts: Vec<&str> = t.traceparent.split('-').collect();
            assert_eq!(parts.len(), 4);
            assert_eq!(parts[0], "00");
            assert_eq!(parts[1], t.trace_id);
            assert_eq!(parts[1].len(), 32);
            assert_eq!(parts[2], t.span_id);
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
