//! The fleet-wide samples, from the same snapshot as the servers': counts
//! per state, availability under the policy, the generation, and what
//! discovery found.

use strum::VariantArray;

use super::text::{Float, Writer};
use crate::config::Rejection;
use crate::discovery::Mechanism;
use crate::output::families::Family;
use crate::state::Snapshot;

/// Write the fleet's samples of `snap`.
pub fn render(snap: &Snapshot, w: &mut Writer) {
    let s = snap.summary();
    for (state, n) in [
        ("healthy", s.healthy),
        ("degraded", s.degraded),
        ("unhealthy", s.unhealthy),
        ("unknown", s.unknown),
    ] {
        w.sample(Family::FleetServers, &[("state", state)], n);
    }
    w.sample(Family::FleetMaintenanceServers, &[], s.maintenance);
    w.sample(
        Family::FleetAvailableRatio,
        &[],
        Float(snap.available_ratio_of(&s)),
    );
    w.sample(Family::FleetAvailableServers, &[], snap.available_of(&s));
    w.sample(
        Family::FleetPolicyMinAvailableRatio,
        &[],
        Float(snap.policy.min_available_percentage / 100.0),
    );
    w.sample(Family::SnapshotGeneration, &[], snap.generation);
    // Every mechanism and reason from the start, so `rate()` sees the first.
    let d = &snap.discovery;
    for &m in Mechanism::VARIANTS {
        let mechanism = ("mechanism", m.as_str());
        let servers = d.servers.get(&m).copied().unwrap_or(0);
        w.sample(Family::SdServers, &[mechanism], servers);
        let failures = d.failures.get(&m).copied().unwrap_or(0);
        w.sample(Family::SdRefreshFailures, &[mechanism], failures);
        for &r in Rejection::VARIANTS {
            let n = d.rejected.get(&(m, r)).copied().unwrap_or(0);
            w.sample(
                Family::SdEntriesRejected,
                &[mechanism, ("reason", r.as_str())],
                n,
            );
        }
    }
}
