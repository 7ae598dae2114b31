//! What the history keeps, and how a snapshot becomes it: per server, the
//! difference of its clocks and counters since the last flush (a row), and
//! the state changes it went through (transitions). Pure functions of
//! snapshots; the store adds rows up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::state::Snapshot;
use crate::state::series::{Histogram, Spent, unix_seconds};

/// A period's worth of one server.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Row {
    /// Where its time went.
    #[serde(flatten)]
    pub spent: Spent,
    /// Probes sent.
    pub probes: u64,
    /// Probes failed.
    pub failures: u64,
    /// Liveness answers the latencies are of.
    pub latency_count: u64,
    /// Median liveness latency (ms), from the histogram's buckets.
    pub latency_p50_ms: f64,
    /// 95th percentile liveness latency (ms).
    pub latency_p95_ms: f64,
}

/// A state change, as the history keeps it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transition {
    /// Unix time.
    pub at: f64,
    /// The state entered.
    pub state: String,
    /// Why.
    pub reason: String,
    /// In words.
    pub detail: String,
}

/// A row's period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Minutely, kept a day.
    Minute,
    /// Hourly, kept 90 days.
    Hour,
    /// Daily, kept for the retention.
    Day,
}

impl Resolution {
    /// Every resolution, finest first.
    pub const ALL: [Resolution; 3] = [Resolution::Minute, Resolution::Hour, Resolution::Day];

    /// Its period in seconds.
    pub fn seconds(self) -> i64 {
        match self {
            Resolution::Minute => 60,
            Resolution::Hour => 3600,
            Resolution::Day => 86_400,
        }
    }

    /// The start of the period that unix time `t` falls in.
    pub fn start(self, t: i64) -> i64 {
        t - t.rem_euclid(self.seconds())
    }

    /// How long its rows are kept, under a retention of `days`.
    pub fn kept(self, retention: Duration) -> Duration {
        match self {
            Resolution::Minute => Duration::from_secs(86_400).min(retention),
            Resolution::Hour => Duration::from_secs(90 * 86_400).min(retention),
            Resolution::Day => retention,
        }
    }

    /// The finest resolution that still holds `window` whole.
    pub fn for_window(window: Duration) -> Resolution {
        if window <= Duration::from_secs(86_400) {
            Resolution::Minute
        } else if window <= Duration::from_secs(90 * 86_400) {
            Resolution::Hour
        } else {
            Resolution::Day
        }
    }
}

/// What a server's counters read at the last flush.
#[derive(Clone, Debug, Default)]
struct Seen {
    spent: Spent,
    probes: u64,
    failures: u64,
    latency: Vec<u64>,
    /// The latest state change already recorded (unix time).
    changed: f64,
}

/// Turns snapshots into rows: it remembers each server's counters at the
/// last flush, and hands out the differences.
#[derive(Default)]
pub struct Sampler {
    seen: HashMap<Arc<str>, Seen>,
}

impl Sampler {
    /// A sampler that already recorded each server's transitions up to the
    /// time given (a restart picks up where the file ends).
    pub fn after(recorded: Vec<(String, f64)>) -> Sampler {
        let seen = recorded
            .into_iter()
            .map(|(id, at)| {
                (
                    Arc::from(id.as_str()),
                    Seen {
                        changed: at,
                        ..Seen::default()
                    },
                )
            })
            .collect();
        Sampler { seen }
    }

    /// Each server's row since the last call, at its clocks' `now`, and its
    /// state changes since. A server seen for the first time counts from
    /// its own start; one gone is forgotten.
    pub fn sample(&mut self, snap: &Snapshot, now: tokio::time::Instant) -> Sample {
        let mut rows = Vec::with_capacity(snap.servers.len());
        let mut transitions = Vec::new();
        self.seen.retain(|id, _| snap.servers.contains_key(id));
        for (id, r) in &snap.servers {
            let seen = self.seen.entry(id.clone()).or_default();
            let v = &r.series;
            let spent = v.uptime.at(now);
            let probes: u64 = v.probes.iter().map(|(_, n)| n).sum();
            let failures: u64 = v.probe_failures.iter().map(|(_, n)| n).sum();
            let latency: Vec<u64> = v
                .ping_duration
                .as_ref()
                .map(|h| h.counts.to_vec())
                .unwrap_or_default();
            let answered = diff(&latency, &seen.latency);
            let bounds = v
                .ping_duration
                .as_ref()
                .map(|h: &Histogram| h.buckets.bounds)
                .unwrap_or(&[]);
            rows.push((
                id.to_string(),
                Row {
                    spent: spent.since(&seen.spent),
                    probes: probes.saturating_sub(seen.probes),
                    failures: failures.saturating_sub(seen.failures),
                    latency_count: answered.iter().sum(),
                    latency_p50_ms: quantile(0.5, bounds, &answered) * 1000.0,
                    latency_p95_ms: quantile(0.95, bounds, &answered) * 1000.0,
                },
            ));
            for (at, state) in r.status.history.iter() {
                let at = unix_seconds(*at);
                // The first entry is the server's start, not a change.
                if at <= seen.changed || *state == crate::state::verdict::State::Unknown {
                    continue;
                }
                let (reason, detail) = r
                    .status
                    .events
                    .iter()
                    .rev()
                    .find(|e| {
                        e.kind == crate::state::snapshot::EventKind::StateChanged
                            && (unix_seconds(e.at) - at).abs() < 0.001
                    })
                    .map(|e| (e.reason.as_str().to_owned(), e.detail.clone()))
                    .unwrap_or_else(|| (r.status.reason.as_str().to_owned(), String::new()));
                transitions.push((
                    id.to_string(),
                    Transition {
                        at,
                        state: state.as_str().to_owned(),
                        reason,
                        detail,
                    },
                ));
                seen.changed = at;
            }
            *seen = Seen {
                spent,
                probes,
                failures,
                latency,
                changed: seen.changed,
            };
        }
        Sample { rows, transitions }
    }
}

/// What one flush adds: each server's row, and the state changes.
#[derive(Debug, Default)]
pub struct Sample {
    /// By server id.
    pub rows: Vec<(String, Row)>,
    /// By server id, oldest first.
    pub transitions: Vec<(String, Transition)>,
}

/// Days the fleet page shows per server.
pub const DAYS_SHOWN: usize = 30;

/// Each server's observed and down seconds per day, for the last
/// [`DAYS_SHOWN`] days: the fleet page's one-line history. Kept in memory
/// from the rows the writer flushes (read from the file once, at start),
/// so drawing it reads no file.
#[derive(Clone, Debug, Default)]
pub struct Daily {
    days: HashMap<String, std::collections::BTreeMap<i64, (f64, f64)>>,
    /// Bumped at each change, so a cached page is not reused across one.
    pub version: u64,
}

impl Daily {
    /// Add `observed` and `down` seconds of `server` on the day of unix time `t`.
    pub fn add(&mut self, server: &str, t: i64, observed: f64, down: f64) {
        let day = Resolution::Day.start(t);
        let cell = self
            .days
            .entry(server.to_owned())
            .or_default()
            .entry(day)
            .or_insert((0.0, 0.0));
        cell.0 += observed;
        cell.1 += down;
        self.version += 1;
    }

    /// Forget days before the shown ones, as of unix time `now`, and the
    /// servers left with none.
    pub fn trim(&mut self, now: i64) {
        let first = Resolution::Day.start(now) - (DAYS_SHOWN as i64 - 1) * 86_400;
        self.days.retain(|_, d| {
            d.retain(|day, _| *day >= first);
            !d.is_empty()
        });
    }

    /// `server`'s uptime per day, oldest first, the last cell today's.
    pub fn cells(&self, server: &str, now: i64) -> [Option<f64>; DAYS_SHOWN] {
        let mut out = [None; DAYS_SHOWN];
        let today = Resolution::Day.start(now);
        if let Some(d) = self.days.get(server) {
            for (i, cell) in out.iter_mut().enumerate() {
                let day = today - (DAYS_SHOWN - 1 - i) as i64 * 86_400;
                if let Some((observed, down)) = d.get(&day)
                    && *observed > 0.0
                {
                    *cell = Some(1.0 - down / observed);
                }
            }
        }
        out
    }
}

/// Per-bucket counts added since `before` (a histogram only grows, unless
/// its server was replaced: then all of it is new).
fn diff(now: &[u64], before: &[u64]) -> Vec<u64> {
    if before.len() != now.len() || now.iter().zip(before).any(|(n, b)| n < b) {
        return now.to_vec();
    }
    now.iter().zip(before).map(|(n, b)| n - b).collect()
}

/// The `q` quantile of observations counted per bucket (not cumulative)
/// under `bounds`, interpolated inside its bucket as Prometheus's
/// `histogram_quantile` does; 0 with no observations. Observations above
/// the last bound are not counted in any bucket and do not move it.
pub fn quantile(q: f64, bounds: &[f64], counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = q * total as f64;
    let mut below = 0.0;
    for (i, (&b, &n)) in bounds.iter().zip(counts).enumerate() {
        let n = n as f64;
        if below + n >= rank && n > 0.0 {
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            return lower + (b - lower) * ((rank - below) / n);
        }
        below += n;
    }
    bounds.last().copied().unwrap_or(0.0)
}

/// Unix seconds of `t`, whole.
pub fn unix(t: SystemTime) -> i64 {
    unix_seconds(t) as i64
}

#[cfg(test)]
#[path = "rows_tests.rs"]
mod tests;
