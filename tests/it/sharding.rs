//! A sharded fleet from three sources, end to end: three real mcpmon
//! replicas with `--shard.count 3` and one config (static servers, a
//! file_sd file, an http_sd endpoint) split the servers exactly as
//! Prometheus's `hashmod` says; discovery changes (entries added to and
//! removed from the endpoint, a file added) are applied without a reload
//! signal while unchanged servers keep their sessions; an http_sd entry
//! asking to run a command runs nothing; and a real Prometheus scraping the
//! three replicas computes the fleet-wide counts with the shipped recording
//! rules, equal to the truth.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use mcpmon::discovery::shard::hashmod;
use serde_json::{Value, json};

const SHARDS: u64 = 3;
/// The endpoint's refresh_interval in the config below.
const HTTP_REFRESH: Duration = Duration::from_secs(2);

/// An http_sd endpoint whose answer the test rewrites.
async fn sd_endpoint(body: Arc<Mutex<Value>>) -> String {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/mcp-servers",
        get(move || {
            let body = body.clone();
            async move { axum::Json(body.lock().expect("body").clone()) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp-servers")
}

fn http_entry(id: &str, url: &str) -> Value {
    json!({"id": id, "transport": "http", "url": url})
}

/// Every replica's servers, by replica index.
async fn placement(replicas: &[Binary]) -> Vec<BTreeSet<String>> {
    let mut out = Vec::new();
    for r in replicas {
        let (_, body) = r.get("/health/fleet").await;
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        out.push(
            v["servers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        );
    }
    out
}

/// What hashmod says each replica must run.
fn expected(ids: &BTreeSet<String>) -> Vec<BTreeSet<String>> {
    (0..SHARDS)
        .map(|i| {
            ids.iter()
                .filter(|id| hashmod(id, SHARDS) == i)
                .cloned()
                .collect()
        })
        .collect()
}

/// Wait until the replicas run exactly what hashmod assigns them.
async fn wait_placement(replicas: &[Binary], ids: &BTreeSet<String>, within: Duration) -> Duration {
    let want = expected(ids);
    let start = Instant::now();
    eventually("the placement reached", within, async || {
        let got = placement(replicas).await;
        if got == want {
            return Ok(start.elapsed());
        }
        Err(format!(
            "placement not reached within {within:?}:\n got {got:?}\nwant {want:?}"
        ))
    })
    .await
}

/// Each server's session: when it started and how many it has had.
async fn sessions(replicas: &[Binary], ids: &BTreeSet<String>) -> BTreeMap<String, (Value, Value)> {
    let mut out = BTreeMap::new();
    for id in ids {
        let r = &replicas[hashmod(id, SHARDS) as usize];
        let (v, _) = r.wait_status(id, "healthy", SLACK).await;
        out.insert(
            id.clone(),
            (v["session_started"].clone(), v["sessions"].clone()),
        );
    }
    out
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_a_discovered_fleet_by_hashmod_and_prometheus_adds_them_up() {
    require!(
        program("prometheus"),
        installed("tests/python/.venv-modern")
    );
    // One real MCP server (the official Python SDK) behind every HTTP id;
    // each id holds its own session to it.
    let port = free_port();
    let server = third_party_http(
        &python("legacy"),
        &[
            python_server().to_str().expect("path"),
            "http",
            &port.to_string(),
        ],
        &[],
        port,
    )
    .await;
    let url = server.url.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let pwned = dir.path().join("pwned");

    // The endpoint: ten servers, and one entry asking to run a command.
    let mut remote: Vec<Value> = (0..10)
        .map(|i| http_entry(&format!("h{i:02}"), &url))
        .collect();
    remote.push(json!({
        "id": "evil", "transport": "stdio", "command": "/bin/sh",
        "args": ["-c", format!("touch {}", pwned.display())]
    }));
    let body = Arc::new(Mutex::new(Value::Array(remote.clone())));
    let sd_url = sd_endpoint(body.clone()).await;

    // A file_sd file: eight HTTP servers and two stdio children.
    std::fs::create_dir(dir.path().join("sd")).expect("mkdir");
    let mut files: Vec<Value> = (0..8)
        .map(|i| http_entry(&format!("f{i:02}"), &url))
        .collect();
    for i in 8..10 {
        files.push(json!({
            "id": format!("f{i:02}"), "transport": "stdio",
            "command": demo_server(), "args": ["--name", format!("f{i:02}")]
        }));
    }
    write_atomically(
        &dir.path().join("sd/a.yaml"),
        &serde_json::to_string(&files).expect("json"),
    );

    // The main file: ten static servers and both sources. The file source's
    // interval is long on purpose: changes must arrive by watching.
    let statics: String = (0..10)
        .map(|i| format!("  - {{ id: s{i:02}, transport: http, url: \"{url}\" }}\n"))
        .collect();
    let config = dir.path().join("fleet.yaml");
    std::fs::write(
        &config,
        format!(
            "global:\n  ping_interval: 1s\n  health_check_interval: 5s\nservers:\n{statics}\
             file_sd_configs:\n  - files: [sd/*.yaml]\n    refresh_interval: 10m\n    labels: {{ team: files }}\n\
             http_sd_configs:\n  - url: {sd_url}\n    refresh_interval: 2s\n    labels: {{ team: remote }}\n"
        ),
    )
    .expect("config");

    let mut replicas = Vec::new();
    for i in 0..SHARDS {
        replicas.push(
            Binary::start(
                &config,
                &[
                    "--shard.count",
                    &SHARDS.to_string(),
                    "--shard.index",
                    &i.to_string(),
                ],
            )
            .await,
        );
    }

    let mut ids: BTreeSet<String> = (0..10)
        .flat_map(|i| [format!("s{i:02}"), format!("f{i:02}"), format!("h{i:02}")])
        .collect();
    assert_eq!(ids.len(), 30);
    wait_placement(&replicas, &ids, SLACK).await;
    // Each on exactly one replica, and the split is not degenerate.
    let got = placement(&replicas).await;
    assert_eq!(got.iter().map(BTreeSet::len).sum::<usize>(), 30);
    assert!(got.iter().all(|s| !s.is_empty()), "{got:?}");

    // Every replica refused the endpoint's process, and ran nothing.
    for r in &replicas {
        let text = r.get("/metrics").await.1;
        let refused = metric(
            &text,
            r#"mcpmon_sd_entries_rejected_total{mechanism="http",reason="stdio_refused"}"#,
        );
        assert!(refused.is_some_and(|n| n >= 1.0), "{text}");
        assert_eq!(
            metric(&text, r#"mcpmon_sd_servers{mechanism="http"}"#),
            Some(10.0)
        );
        assert_eq!(
            metric(&text, r#"mcpmon_sd_servers{mechanism="file"}"#),
            Some(10.0)
        );
        assert!(
            text.contains(&format!("mcpmon_shard_info{{count=\"{SHARDS}\",")),
            "{text}"
        );
    }
    assert!(!pwned.exists(), "an http_sd entry started a process");
    let evil_logged = replicas.iter().all(|r| {
        r.logs.lock().expect("logs").iter().any(|l| {
            l.contains("discovered entry left out")
                && l.contains("stdio_refused")
                && l.contains("evil")
        })
    });
    assert!(evil_logged, "the refusal is logged by every replica");

    // The labels of each source reach mcpmon_server_labels.
    let f00 = &replicas[hashmod("f00", SHARDS) as usize];
    let text = f00.get("/metrics").await.1;
    assert!(
        text.contains(r#"mcpmon_server_labels{label_team="files",server="f00"} 1"#),
        "{text}"
    );

    let before = sessions(&replicas, &ids).await;

    // The changes: two entries added to the endpoint and two removed, one
    // file added. No signal, no reload.
    let changed_at = Instant::now();
    {
        let mut list = remote.clone();
        list.retain(|e| e["id"] != "h00" && e["id"] != "h01");
        list.push(http_entry("h10", &url));
        list.push(http_entry("h11", &url));
        *body.lock().expect("body") = Value::Array(list);
    }
    write_atomically(
        &dir.path().join("sd/b.yaml"),
        &format!("- {{ id: b00, transport: http, url: \"{url}\" }}\n"),
    );
    ids.remove("h00");
    ids.remove("h01");
    ids.extend(["h10".to_owned(), "h11".to_owned(), "b00".to_owned()]);
    // Applied within the endpoint's interval plus a few seconds (the file
    // source's own interval is 10 minutes: it was the watch).
    let took = wait_placement(&replicas, &ids, HTTP_REFRESH + Duration::from_secs(8)).await;
    eprintln!(
        "discovery changes applied in {:?} ({took:?} of polling)",
        changed_at.elapsed()
    );

    // Unchanged servers kept their sessions.
    let after = sessions(&replicas, &ids).await;
    for (id, was) in &before {
        if let Some(now) = after.get(id) {
            assert_eq!(now, was, "{id} lost its session across a discovery change");
        }
    }
    let reloads: Vec<usize> = replicas
        .iter()
        .map(|r| {
            r.logs
                .lock()
                .expect("logs")
                .iter()
                .filter(|l| l.contains("configuration reloaded"))
                .count()
        })
        .collect();
    assert_eq!(reloads, [0, 0, 0], "no reload took part");

    // A live Prometheus scraping the three replicas: the shipped recording
    // rules add the shards up to the truth.
    let targets: Vec<String> = replicas.iter().map(|r| r.addr.clone()).collect();
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    let prom = Prometheus::start(&targets).await;
    let truth_total = ids.len() as f64;
    eventually("Prometheus agreeing with the shards", SLACK * 2, async || {
        let total = prom.query("job:mcpmon_servers:count").await;
        let healthy = prom
            .query(r#"job_state:mcpmon_servers:count{state="healthy"}"#)
            .await;
        let shards = prom.query("job:mcpmon_shards:count").await;
        let value = |v: &[Value]| {
            v.first()
                .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
        };
        // The truth, from the replicas themselves.
        let mut truth_healthy = 0.0;
        for r in &replicas {
            let (_, body) = r.get("/health/fleet").await;
            let v: Value = serde_json::from_str(&body).expect("json");
            assert_eq!(v["shard"]["count"], SHARDS);
            truth_healthy += v["summary"]["healthy"].as_f64().unwrap_or(0.0);
        }
        if value(&total) == Some(truth_total)
            && value(&healthy) == Some(truth_healthy)
            && truth_healthy == truth_total
            && value(&shards) == Some(SHARDS as f64)
        {
            return Ok(());
        }
        Err(format!("Prometheus: total {total:?} healthy {healthy:?} shards {shards:?}; truth {truth_total} / {truth_healthy}"))
    })
    .await;
    assert!(!pwned.exists());
}
