//! W3C Trace Context (`traceparent`) for the calls mcpmon originates, sent
//! in `params._meta` as the MCP OpenTelemetry conventions specify (SEP-414),
//! so a server's traces can tell a probe from real traffic and an operator
//! can follow a failed probe into the server's trace by its id.

use std::fmt::Write as _;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

/// One probe's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// `00-<trace id>-<span id>-01`: version 0, sampled.
    pub traceparent: String,
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
    let mut trace_id = String::with_capacity(32);
    let _ = write!(trace_id, "{hi:016x}{lo:016x}");
    let traceparent = format!("00-{trace_id}-{span:016x}-01");
    Trace {
        trace_id,
        traceparent,
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
            assert_eq!(parts[2].len(), 16);
            assert_eq!(parts[3], "01");
            assert!(
                parts[1]
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            assert_ne!(parts[1], "0".repeat(32));
            assert_ne!(parts[2], "0".repeat(16));
        }
    }
}
