//! Fleet state: one task owns it, supervisors send it their status, readers
//! (HTTP handlers) get immutable snapshots through a `watch` channel and never
//! hold a lock across I/O. Snapshots are rebuilt at most every
//! [`PUBLISH_EVERY`], so a large fleet does not rebuild per probe.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::FleetPolicy;
use crate::metrics::Metrics;
use crate::tracker::ServerStatus;
use crate::verdict::State;

/// Longest delay between a status change and its appearance in snapshots.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// A message to the fleet owner.
#[derive(Debug)]
pub enum FleetMsg {
    /// A server's latest status.
    Update(Box<ServerStatus>),
    /// A server left the fleet.
    Remove(String),
    /// A new policy (after a reload).
    Policy(FleetPolicy),
}

/// Counts per state.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Servers.
    pub total: usize,
    /// Healthy servers.
    pub healthy: usize,
    /// Degraded servers.
    pub degraded: usize,
    /// Unhealthy servers.
    pub unhealthy: usize,
    /// Servers with no verdict yet.
    pub unknown: usize,
    /// Healthy share, percent.
    pub health_percentage: f64,
}

/// An immutable picture of the fleet.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Servers by id, in id order. A persistent map: publishing a snapshot
    /// of 10 000 servers ten times a second shares structure instead of
    /// copying it, and an update copies one path of the tree.
    pub servers: imbl::OrdMap<Arc<str>, Arc<ServerStatus>>,
    /// The policy in force.
    pub policy: FleetPolicy,
    /// True once every server has a verdict or the startup grace passed (latched).
    pub ready: bool,
}

impl Snapshot {
    /// Counts per state.
    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            total: self.servers.len(),
            ..Summary::default()
        };
        for st in self.servers.values() {
            match st.status {
                State::Healthy => s.healthy += 1,
                State::Degraded => s.degraded += 1,
                State::Unhealthy => s.unhealthy += 1,
                State::Unknown => s.unknown += 1,
            }
        }
        s.health_percentage = if s.total == 0 {
            100.0
        } else {
            // Two decimals are plenty for a percentage and keep JSON tidy.
            (s.healthy as f64 * 10000.0 / s.total as f64).round() / 100.0
        };
        s
    }

    /// Share (0-1) of servers available under the policy; 1 for an empty fleet.
    pub fn available_ratio(&self) -> f64 {
        self.available_ratio_of(&self.summary())
    }

    fn available_ratio_of(&self, s: &Summary) -> f64 {
        let available = s.healthy
            + if self.policy.degraded_is_available {
                s.degraded
            } else {
                0
            };
        if s.total == 0 {
            1.0
        } else {
            available as f64 / s.total as f64
        }
    }

    /// Fleet status and whether the policy is met.
    pub fn verdict(&self) -> (State, bool) {
        let s = self.summary();
        let meets = self.available_ratio() * 100.0 + 1e-9 >= self.policy.min_available_percentage;
        let state = if s.total > 0 && s.unknown == s.total {
            State::Unknown
        } else if s.healthy == s.total {
            State::Healthy
        } else if meets {
            State::Degraded
        } else {
            State::Unhealthy
        };
        (state, meets)
    }
}

/// Run the fleet owner until cancelled. `grace` bounds how long `/-/ready`
/// waits for first verdicts.
pub async fn run(
    mut rx: mpsc::Receiver<FleetMsg>,
    tx: watch::Sender<Arc<Snapshot>>,
    policy: FleetPolicy,
    expected: usize,
    grace: Duration,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let mut snap = Snapshot {
        policy,
        ..Snapshot::default()
    };
    // Counts kept per update, so a publish does not walk the fleet.
    let mut counts = Summary::default();
    let mut dirty = true;
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            msg = rx.recv() => {
                let Some(msg) = msg else { break };
                apply(&mut snap, &mut counts, msg);
                // Drain what is queued so a burst costs one rebuild.
                while let Ok(msg) = rx.try_recv() {
                    apply(&mut snap, &mut counts, msg);
                }
                dirty = true;
            }
            _ = tick.tick() => {
                if !snap.ready {
                    let judged = counts.total >= expected && counts.unknown == 0;
                    if judged || started.elapsed() >= grace {
                        snap.ready = true;
                        dirty = true;
                        tracing::info!(after_ms = started.elapsed().as_millis() as u64, "fleet ready");
                    }
                }
                if dirty {
                    let s = &counts;
                    let ratio = snap.available_ratio_of(s);
                    metrics.fleet_servers.with_label_values(&["healthy"]).set(s.healthy as i64);
                    metrics.fleet_servers.with_label_values(&["degraded"]).set(s.degraded as i64);
                    metrics.fleet_servers.with_label_values(&["unhealthy"]).set(s.unhealthy as i64);
                    metrics.fleet_servers.with_label_values(&["unknown"]).set(s.unknown as i64);
                    metrics.fleet_available.set(ratio);
                    metrics.fleet_min_available.set(snap.policy.min_available_percentage / 100.0);
                    tx.send_replace(Arc::new(snap.clone()));
                    dirty = false;
                }
            }
        }
    }
}

fn apply(snap: &mut Snapshot, counts: &mut Summary, msg: FleetMsg) {
    match msg {
        FleetMsg::Update(s) => {
            count(counts, s.status, 1);
            let old = match snap.servers.get_mut(s.id.as_str()) {
                Some(slot) => Some(std::mem::replace(slot, Arc::from(s))),
                None => snap.servers.insert(Arc::from(s.id.as_str()), Arc::from(s)),
            };
            if let Some(old) = old {
                count(counts, old.status, -1);
            }
        }
        FleetMsg::Remove(id) => {
            if let Some(old) = snap.servers.remove(id.as_str()) {
                count(counts, old.status, -1);
            }
        }
        FleetMsg::Policy(p) => snap.policy = p,
    }
}

/// Add `delta` (±1) servers in `state` to the counts.
fn count(counts: &mut Summary, state: State, delta: isize) {
    let slot = match state {
        State::Healthy => &mut counts.healthy,
        State::Degraded => &mut counts.degraded,
        State::Unhealthy => &mut counts.unhealthy,
        State::Unknown => &mut counts.unknown,
    };
    *slot = slot.saturating_add_signed(delta);
    counts.total = counts.total.saturating_add_signed(delta);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(states: &[State], policy: FleetPolicy) -> Snapshot {
        let mut servers = imbl::OrdMap::new();
        for (i, st) in states.iter().enumerate() {
            let spec = crate::config::ServerSpec {
                id: format!("s{i}"),
                transport: crate::config::TransportSpec::Stdio {
                    command: "x".into(),
                    args: vec![],
                    env: vec![],
                    cwd: None,
                },
                settings: crate::config::Settings::default(),
                protocol: crate::config::Protocol::Auto,
                tool_probes: vec![],
            };
            let t = crate::tracker::Tracker::new(&spec, Instant::now());
            let mut status = t.status().clone();
            status.status = *st;
            servers.insert(Arc::from(status.id.as_str()), Arc::new(status));
        }
        Snapshot {
            servers,
            policy,
            ready: true,
        }
    }

    #[test]
    fn running_counts_match_a_full_walk_through_updates_and_removals() {
        use State::*;
        let source = snap(
            &[Healthy, Degraded, Unhealthy, Unknown],
            FleetPolicy::default(),
        );
        let status = |id: &str, st: State| {
            let mut s = (*source.servers[id]).clone();
            s.status = st;
            Box::new(s)
        };
        let mut live = Snapshot::default();
        let mut counts = Summary::default();
        let steps = [
            FleetMsg::Update(status("s0", Unknown)),
            FleetMsg::Update(status("s1", Unknown)),
            FleetMsg::Update(status("s0", Healthy)),
            FleetMsg::Update(status("s2", Unhealthy)),
            FleetMsg::Update(status("s1", Degraded)),
            FleetMsg::Update(status("s0", Healthy)),
            FleetMsg::Remove("s2".into()),
            FleetMsg::Remove("absent".into()),
            FleetMsg::Update(status("s3", Unhealthy)),
        ];
        for msg in steps {
            apply(&mut live, &mut counts, msg);
            let walked = live.summary();
            assert_eq!(
                (
                    counts.total,
                    counts.healthy,
                    counts.degraded,
                    counts.unhealthy,
                    counts.unknown
                ),
                (
                    walked.total,
                    walked.healthy,
                    walked.degraded,
                    walked.unhealthy,
                    walked.unknown
                )
            );
        }
        assert_eq!((counts.total, counts.unhealthy), (3, 1));
    }

    #[test]
    fn summary_counts_and_percentage() {
        use State::*;
        let s = snap(
            &[Healthy, Healthy, Degraded, Unhealthy],
            FleetPolicy::default(),
        )
        .summary();
        assert_eq!(
            (s.total, s.healthy, s.degraded, s.unhealthy, s.unknown),
            (4, 2, 1, 1, 0)
        );
        assert_eq!(s.health_percentage, 50.0);
        let s = snap(&[Healthy, Healthy, Unhealthy], FleetPolicy::default()).summary();
        assert_eq!(s.health_percentage, 66.67);
    }

    #[test]
    fn policy_decides_the_fleet_verdict() {
        use State::*;
        let strict = FleetPolicy::default();
        assert_eq!(
            snap(&[Healthy, Healthy], strict.clone()).verdict(),
            (Healthy, true)
        );
        assert_eq!(
            snap(&[Healthy, Degraded], strict.clone()).verdict(),
            (Degraded, true)
        );
        assert_eq!(
            snap(&[Healthy, Unhealthy], strict.clone()).verdict(),
            (Unhealthy, false)
        );
        assert_eq!(
            snap(&[Unknown, Unknown], strict.clone()).verdict(),
            (Unknown, false)
        );
        assert_eq!(snap(&[], strict).verdict(), (Healthy, true));
        let half = FleetPolicy {
            min_available_percentage: 50.0,
            degraded_is_available: false,
        };
        assert_eq!(
            snap(&[Healthy, Unhealthy], half.clone()).verdict(),
            (Degraded, true)
        );
        assert_eq!(
            snap(&[Degraded, Degraded, Healthy], half).verdict(),
            (Unhealthy, false)
        );
    }
}
