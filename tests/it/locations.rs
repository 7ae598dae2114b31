//! Several vantage points, end to end: three real mcpmon replicas with
//! `--location eu|us|ap` watch the same two servers, a real Prometheus
//! scrapes them and runs the shipped rules. The path from one location to
//! a server is broken by giving that replica an address nobody serves. A
//! server unreachable from one location pages no one; one unreachable from
//! two pages once, for the server.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// A replica's fleet: `search` and `billing`, each at its real address or
/// at a dead one (a broken path from this location).
fn fleet(search: &str, billing: &str) -> String {
    format!(
        r#"
global:
  ping_interval: 300ms
  ping_timeout: 200ms
  health_check_interval: 1s
  backoff_initial: 200ms
  backoff_max: 1s
  window: 3s
servers:
  - {{id: search, transport: http, url: "{search}"}}
  - {{id: billing, transport: http, url: "{billing}"}}
"#
    )
}

/// Alerts of `name` in any state (pending or firing), by their labels.
async fn alerts(prom: &Prometheus, name: &str) -> Vec<Value> {
    let all = prom.api("/api/v1/alerts", &[]).await["alerts"].clone();
    all.as_array()
        .map(|a| {
            a.iter()
                .filter(|x| x["labels"]["alertname"] == name)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_from_one_location_pages_no_one_and_from_two_pages_once() {
    require!(program("prometheus"), program("promtool"));
    let search = demo_http(&["--name", "search"], 0).await;
    let billing = demo_http(&["--name", "billing"], 0).await;
    let closed = ClosedPort::bind();
    let dead = closed.mcp_url();
    let dir = tempfile::tempdir().expect("tmp");
    // eu cannot reach search; eu and us cannot reach billing.
    let views = [
        ("eu", dead.as_str(), dead.as_str()),
        ("us", search.url.as_str(), dead.as_str()),
        ("ap", search.url.as_str(), billing.url.as_str()),
    ];
    let mut replicas = Vec::new();
    for (location, s, b) in views {
        let file = dir.path().join(format!("{location}.yaml"));
        std::fs::write(&file, fleet(s, b)).expect("fleet");
        replicas.push(Binary::start(&file, &["--location", location]).await);
    }
    for (r, (location, s, b)) in replicas.iter().zip(views) {
        for (id, url) in [("search", s), ("billing", b)] {
            let want = if url == dead { "unhealthy" } else { "healthy" };
            r.wait_status(id, want, Duration::from_secs(20)).await;
        }
        let text = r.metrics().await;
        assert!(
            text.contains(&format!(
                "mcpmon_location_info{{location=\"{location}\"}} 1"
            )),
            "{text}"
        );
    }
    let targets: Vec<&str> = replicas.iter().map(|r| r.addr.as_str()).collect();
    let prom = Prometheus::start(&targets).await;

    // Prometheus sees each server from each location.
    eventually(
        "each location's view recorded",
        Duration::from_secs(60),
        async || {
            let views = prom.query("server_location:mcpmon_server_up:max").await;
            if views.len() == 6 {
                Ok(())
            } else {
                Err(format!("{} views", views.len()))
            }
        },
    )
    .await;
    let down: BTreeSet<(String, String)> = prom
        .query("server_location:mcpmon_server_up:max == 0")
        .await
        .iter()
        .map(|v| {
            (
                v["metric"]["server"].as_str().unwrap_or("").to_owned(),
                v["metric"]["location"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [("billing", "eu"), ("billing", "us"), ("search", "eu")]
        .iter()
        .map(|(s, l)| ((*s).to_owned(), (*l).to_owned()))
        .collect();
    assert_eq!(down, want);

    // billing pages once its `for` has passed: one alert, for the server.
    let paged = eventually(
        "McpServerDownFromLocations firing",
        Duration::from_secs(120),
        async || {
            let a = alerts(&prom, "McpServerDownFromLocations").await;
            if a.iter().any(|x| x["state"] == "firing") {
                Ok(a)
            } else {
                Err(a)
            }
        },
    )
    .await;
    assert_eq!(paged.len(), 1, "one page: {paged:?}");
    assert_eq!(paged[0]["labels"]["server"], "billing");
    assert_eq!(paged[0]["labels"]["severity"], "critical");
    assert_eq!(
        paged[0]["value"]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok()),
        Some(2.0),
        "two locations"
    );
    // By then a single location's verdict would have paged too (the same
    // one-minute `for`): it is silent for both servers, in every state.
    assert_eq!(
        alerts(&prom, "McpServerUnhealthy").await,
        Vec::<Value>::new()
    );
    assert_eq!(
        alerts(&prom, "McpmonLocationSilent").await,
        Vec::<Value>::new()
    );
}
