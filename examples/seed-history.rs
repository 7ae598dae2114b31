//! A generated past for the demo fleet, so its status page shows what 90
//! days of history look like before the demo has lived 90 days (the
//! README's picture is taken on it). Every transition it writes says
//! "generated" in its detail.
//!
//!     cargo run --example seed-history -- FILE
//!
//! The servers of `examples/demo-fleet.yaml`, each with a past of its own:
//! billing nearly spotless, inventory degraded some hours a day, payments
//! down a little most days (it crashes), search with one bad day, reports
//! unreachable for the last 20 days.

use std::time::{Duration, SystemTime};

use mcpmon::output::history::rows::{Row, Transition};
use mcpmon::output::history::store::Store;
use mcpmon::state::series::Spent;

const DAYS: i64 = 90;
const DAY: i64 = 86_400;

/// A server's hour: seconds (degraded, down) and, on a change, why.
type Profile = fn(day: i64, hour: i64) -> (f64, f64, &'static str);

const FLEET: [(&str, Profile); 5] = [
    ("billing", |day, hour| {
        let blip = day == 61 && hour == 3;
        (0.0, if blip { 90.0 } else { 0.0 }, "unresponsive")
    }),
    ("inventory", |day, hour| {
        let busy = (9..12).contains(&hour) && day % 3 != 0;
        (
            if busy { 3600.0 } else { 0.0 },
            0.0,
            "health_check_degraded",
        )
    }),
    ("payments", |day, hour| {
        let crash = hour == (day * 7) % 24 && day % 4 != 1;
        (
            0.0,
            if crash {
                40.0 + (day % 5) as f64 * 60.0
            } else {
                0.0
            },
            "exited",
        )
    }),
    ("search", |day, hour| {
        let bad = day == DAYS - 41 && (13..16).contains(&hour);
        (0.0, if bad { 3600.0 } else { 0.0 }, "unreachable")
    }),
    ("reports", |day, _| {
        let gone = day >= DAYS - 20;
        (0.0, if gone { 3600.0 } else { 0.0 }, "unreachable")
    }),
];

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: seed-history FILE (the --storage.path mcpmon will use)");
    let (mut store, _) = Store::open(std::path::Path::new(&path)).expect("open the history");
    let now = unix(SystemTime::now());
    // Whole hours up to the one before now; mcpmon writes from there.
    let end = now - now.rem_euclid(3600) - 3600;
    let first = end - DAYS * DAY;
    let mut down_before = [false; FLEET.len()];
    let mut degraded_before = [false; FLEET.len()];
    for h in 0..DAYS * 24 {
        let t = first + h * 3600;
        let (day, hour) = (h / 24, h % 24);
        let mut rows = Vec::new();
        let mut transitions = Vec::new();
        for (i, (id, profile)) in FLEET.iter().enumerate() {
            let (degraded, down, reason) = profile(day, hour);
            let secs = 3600.0;
            let healthy = secs - degraded - down;
            let probes = (secs / 2.0) as u64;
            let failures = (down / 2.0) as u64;
            rows.push((
                id.to_string(),
                t,
                Row {
                    spent: Spent {
                        healthy,
                        degraded,
                        down,
                        maintenance: 0.0,
                    },
                    probes,
                    failures,
                    latency_count: probes - failures,
                    latency_p50_ms: 1.5 + (i as f64) * 0.4 + ((h % 24) as f64) * 0.05,
                    latency_p95_ms: 6.0 + (i as f64) + ((h * 13) % 17) as f64 * 0.3,
                },
            ));
            let mut change = |state: &str, why: &str, at: i64| {
                transitions.push((
                    id.to_string(),
                    Transition {
                        at: at as f64,
                        state: state.into(),
                        reason: why.into(),
                        detail: "generated".into(),
                    },
                ))
            };
            let (is_down, is_degraded) = (down > 0.0, degraded > 0.0);
            if is_down && !down_before[i] {
                change("unhealthy", reason, t + 600);
            } else if is_degraded && !degraded_before[i] {
                change("degraded", reason, t + 60);
            } else if (down_before[i] || degraded_before[i]) && !is_down && !is_degraded {
                change("healthy", "ok", t);
            }
            // A short fall is over within its hour.
            if is_down && down < secs {
                change("healthy", "ok", t + 600 + down as i64);
                down_before[i] = false;
            } else {
                down_before[i] = is_down;
            }
            degraded_before[i] = is_degraded;
        }
        store.flush(&rows, &transitions).expect("write the history");
    }
    store
        .prune(SystemTime::now(), Duration::from_secs(400 * DAY as u64))
        .expect("prune");
    println!("{path}: {DAYS} days of {} servers", FLEET.len());
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
