//! Service level objectives, per server (`slo:` in `global:` or in a
//! server, like every tunable): what `mcpmon slo` writes as Sloth, Pyrra
//! and OpenSLO documents. The monitor itself judges nothing by them; they
//! name the targets its series are held to.

use std::time::Duration;

use serde::Deserialize;

use super::Dur;

/// The latency thresholds an objective may name, in seconds: bounds of
/// the liveness histogram that every exposition keeps, a bound at the
/// 0.5 s alert's threshold and one above it among them.
pub const LATENCY_THRESHOLDS: &[&str] = &["0.01", "0.1", "0.5", "2.5"];

/// A server's objectives. A server's `slo:` replaces `global:`'s whole:
/// keys it leaves out take the defaults below.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Slo {
    /// Percent of observed time (a verdict, outside maintenance) the
    /// server is up.
    pub availability: f64,
    /// Percent of liveness probes answered within `latency_threshold`.
    pub latency: f64,
    /// A bound of the liveness histogram's buckets that every exposition
    /// keeps (only a bound can be counted below exactly).
    pub latency_threshold: Dur,
    /// The rolling window the objectives hold over.
    pub window: Dur,
}

impl Default for Slo {
    fn default() -> Self {
        Slo {
            availability: 99.9,
            latency: 99.0,
            latency_threshold: Dur(Duration::from_millis(500)),
            window: Dur(Duration::from_secs(30 * 86_400)),
        }
    }
}

impl Slo {
    /// What is wrong with it, if anything: each problem with the key it is at.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (key, pct) in [
            ("availability", self.availability),
            ("latency", self.latency),
        ] {
            if !(pct > 0.0 && pct < 100.0) {
                out.push((
                    key,
                    format!("slo.{key} is a percentage above 0 and below 100, got {pct}"),
                ));
            }
        }
        let bound = self.latency_threshold.0.as_secs_f64();
        if Self::threshold_le(bound).is_none() {
            out.push((
                "latency_threshold",
                format!(
                    "slo.latency_threshold must be a bound every exposition keeps of the liveness histogram, in seconds one of {}",
                    LATENCY_THRESHOLDS.join(", ")
                ),
            ));
        }
        let w = self.window.0;
        if w < Duration::from_secs(86_400) || !w.as_secs().is_multiple_of(3600) {
            out.push((
                "window",
                "slo.window is whole hours, at least 1d (the burn-rate alerts look back up to 3d)"
                    .to_owned(),
            ));
        }
        out
    }

    /// The `le` label value of the kept liveness bucket at `seconds`, if
    /// it is one.
    pub fn threshold_le(seconds: f64) -> Option<&'static str> {
        LATENCY_THRESHOLDS
            .iter()
            .copied()
            .find(|le| le.parse::<f64>().is_ok_and(|b| (b - seconds).abs() < 1e-9))
    }
}
