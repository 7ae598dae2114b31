//! A maintenance window that opens and closes while the binary runs: the
//! server reads `maintenance` with its verdict beside it, leaves the
//! fleet's counts, exports its series, and comes back when it closes.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

async fn server_until(mon: &Binary, id: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    eventually(
        &format!("{id}: {what}"),
        Duration::from_secs(30),
        async || {
            let (_, v) = mon.server(id).await;
            if ok(&v) {
                return Ok(v);
            }
            Err(format!("{id}: never {what}: {v}"))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_opens_and_closes_and_the_server_leaves_the_counts_meanwhile() {
    let demo = demo_server();
    let fleet = |window: &str| {
        format!(
            "{FAST_GLOBAL}fleet:\n  min_available_percentage: 100\nservers:\n  \
             - {{id: billing, transport: stdio, command: {demo:?}, args: [--name, billing, --status, unhealthy]}}\n  \
             - {{id: search, transport: stdio, command: {demo:?}, args: [--name, search]}}\n{window}"
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, fleet("")).expect("write");
    let mon = Binary::start(&cfg, &[]).await;
    // Before the window: unhealthy, and the fleet misses its policy.
    server_until(&mon, "billing", "unhealthy", |v| v["status"] == "unhealthy").await;
    let (code, _) = mon.get("/health/fleet").await;
    assert_eq!(
        code, 503,
        "billing counts against a 100% policy before the window"
    );

    // A window from 2 s from now, for 10 s, by a reload.
    let now = chrono::Utc::now();
    let at = |secs: i64| {
        (now + chrono::Duration::seconds(secs)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let (start, end) = (at(2), at(12));
    let window = format!(
        "maintenance:\n  - {{name: upgrade, servers: [billing], start: '{start}', end: '{end}'}}\n"
    );
    std::fs::write(&cfg, fleet(&window)).expect("write");
    // check-config says when the window opens.
    let (code, out, err) = outcome(mcpmon().arg("check-config").arg(&cfg));
    assert_eq!(code, 0, "{err}");
    let next = format!(
        "maintenance \"upgrade\" (servers billing): next opens {}",
        start.replace('Z', "+00:00")
    );
    assert!(out.contains(&next), "{out}");
    mon.signal(libc::SIGHUP);

    // Inside it: `maintenance`, the verdict beside, out of the counts.
    let v = server_until(&mon, "billing", "in maintenance", |v| {
        v["status"] == "maintenance"
    })
    .await;
    assert_eq!(v["verdict"], "unhealthy", "{v}");
    assert_eq!(v["maintenance"]["window"], "upgrade", "{v}");
    assert_eq!(v["maintenance"]["until"], end.replace('Z', ".000Z"), "{v}");
    let (code, body) = mon.get("/health/fleet").await;
    let fleet: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        code, 200,
        "billing counts neither for nor against the policy: {body}"
    );
    assert_eq!(fleet["summary"]["maintenance"], 1, "{body}");
    assert_eq!(fleet["summary"]["total"], 1, "{body}");
    let (_, m) = mon.get("/metrics").await;
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_server_maintenance{server="billing",window="upgrade"}"#
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "mcpmon_fleet_maintenance_servers"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_server_state{server="billing",state="unhealthy"}"#
        ),
        Some(1.0),
        "its verdict stays: {m}"
    );
    let (_, page) = mon.get("/").await;
    assert!(
        page.contains("maintenance window upgrade"),
        "the status page marks it"
    );
    // Its probes go on.
    let probes = |m: &str| {
        metric(
            m,
            r#"mcpmon_probes_total{probe="health_check",server="billing"}"#,
        )
        .unwrap_or(0.0)
    };
    let before = probes(&m);
    eventually(
        "a probe during the window",
        Duration::from_secs(10),
        async || {
            if probes(&mon.get("/metrics").await.1) <= before {
                Err("not yet")
            } else {
                Ok(())
            }
        },
    )
    .await;

    // After it: back to its verdict, and to the counts.
    let v = server_until(&mon, "billing", "out of maintenance", |v| {
        v["status"] == "unhealthy"
    })
    .await;
    assert!(v.get("maintenance").is_none(), "{v}");
    let (code, _) = mon.get("/health/fleet").await;
    assert_eq!(code, 503);
    let (_, m) = mon.get("/metrics").await;
    assert!(!m.contains("mcpmon_server_maintenance{"), "{m}");
    assert_eq!(
        metric(&m, "mcpmon_fleet_maintenance_servers"),
        Some(0.0),
        "{m}"
    );
}
