//! `registry_sd_configs` against a local endpoint that serves pages in the
//! MCP Registry's response shape (`GET /v0.1/servers`): the registry itself
//! is a Go service over PostgreSQL that cannot run here, so its answers are
//! served as its OpenAPI document writes them. The servers it points at are
//! real: the demo server over HTTP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use serde_json::{Value, json};

use crate::support::*;

type Pages = Arc<Mutex<Registry>>;

/// What the registry holds, and every query it was asked.
#[derive(Default)]
struct Registry {
    /// The first walk's two pages.
    full: Vec<Value>,
    /// What changed, for a request with `updated_since`.
    changed: Value,
    asked: Vec<std::collections::HashMap<String, String>>,
}

async fn servers(
    State(pages): State<Pages>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> axum::Json<Value> {
    let mut r = pages.lock().expect("lock");
    r.asked.push(q.clone());
    let page = if q.contains_key("updated_since") {
        r.changed.clone()
    } else if q.get("cursor").map(String::as_str) == Some("page-2") {
        r.full[1].clone()
    } else {
        r.full[0].clone()
    };
    axum::Json(page)
}

fn official(status: &str, latest: bool) -> Value {
    json!({"io.modelcontextprotocol.registry/official": {
        "status": status, "isLatest": latest,
        "publishedAt": "2026-11-01T00:00:00Z", "updatedAt": "2026-11-01T00:00:00Z"}})
}

fn server(name: &str, remotes: Value, status: &str, latest: bool) -> Value {
    json!({
        "server": {
            "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
            "name": name, "description": "a server", "version": "1.2.0",
            "repository": {"url": "https://github.com/example/x", "source": "github"},
            "remotes": remotes,
            "packages": [{"registryType": "npm", "identifier": "@example/x", "version": "1.2.0",
                          "transport": {"type": "stdio"}}]
        },
        "_meta": official(status, latest)
    })
}

fn remote(kind: &str, url: &str) -> Value {
    json!([{"type": kind, "url": url}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_is_walked_page_by_page_and_then_only_for_what_changed() {
    let billing = demo_http(&["--name", "billing"], 0).await;
    let search = demo_http(&["--name", "search"], 0).await;
    let added = demo_http(&["--name", "added"], 0).await;
    let pages: Pages = Arc::default();
    {
        let mut r = pages.lock().expect("lock");
        r.full = vec![
            json!({
                "servers": [
                    server("io.example/billing", remote("streamable-http", &billing.url), "active", true),
                    server("io.example/old", remote("streamable-http", &search.url), "deprecated", true),
                    server("io.example/tenant", remote("streamable-http", "https://{tenant}.example.com/mcp"), "active", true),
                    server("io.example/events", remote("sse", "http://127.0.0.1:9/sse"), "active", true),
                ],
                "metadata": {"nextCursor": "page-2", "count": 4}
            }),
            // The second page spells its cursor as the generic API's document does.
            json!({
                "servers": [
                    server("io.example/search", remote("streamable-http", &search.url), "active", true),
                    server("io.example/older-search", remote("streamable-http", &search.url), "active", false),
                    server("io.example/keyed", json!([{"type": "streamable-http", "url": search.url,
                        "headers": [{"name": "X-Api-Key", "isRequired": true, "isSecret": true}]}]), "active", true),
                    server("io.example/package-only", json!([]), "active", true),
                ],
                "metadata": {"next_cursor": null, "count": 4}
            }),
        ];
        r.changed = json!({
            "servers": [
                server("io.example/billing", remote("streamable-http", &billing.url), "deleted", true),
                server("io.example/added", remote("streamable-http", &added.url), "active", true),
            ],
            "metadata": {"count": 2}
        });
    }
    let app = axum::Router::new()
        .route("/v0.1/servers", axum::routing::get(servers))
        .with_state(pages.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let registry = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "registry_sd_configs:\n  - url: {registry}\n    search: example\n    refresh_interval: 2s\n    labels: {{source: registry}}\n"
        ),
    )
    .expect("write");
    let mon = Binary::start(&cfg, &[]).await;
    for id in ["io.example-billing", "io.example-search"] {
        mon.wait_status(id, "healthy", Duration::from_secs(30))
            .await;
    }
    let (_, v) = mon.server("io.example-search").await;
    assert_eq!(v["labels"]["registry_name"], "io.example/search", "{v}");
    assert_eq!(v["labels"]["registry_version"], "1.2.0", "{v}");
    assert_eq!(v["labels"]["source"], "registry", "{v}");
    let (_, events) = mon.server("io.example-events").await;
    assert_eq!(
        events["transport"], "sse",
        "an sse remote is an sse server: {events}"
    );
    for gone in [
        "io.example-old",
        "io.example-older-search",
        "io.example-package-only",
        "io.example-tenant",
        "io.example-keyed",
    ] {
        let (code, _) = mon.server(gone).await;
        assert_eq!(code, 404, "{gone} runs");
    }
    let (_, m) = mon.get("/metrics").await;
    assert!(
        m.contains(r#"mcpmon_sd_entries_rejected_total{mechanism="registry",reason="needs_configuration"} 2"#),
        "the templated URL and the required header: {m}"
    );
    {
        let r = pages.lock().expect("lock");
        let first = &r.asked[0];
        assert_eq!(first.get("search").map(String::as_str), Some("example"));
        assert_eq!(first.get("version").map(String::as_str), Some("latest"));
        assert_eq!(r.asked[1].get("cursor").map(String::as_str), Some("page-2"));
    }

    // The next walk asks for what changed: one server deleted, one added.
    mon.wait_status("io.example-added", "healthy", Duration::from_secs(30))
        .await;
    eventually(
        "the deleted server gone",
        Duration::from_secs(30),
        async || {
            if mon.server("io.example-billing").await.0 != 404 {
                Err("not yet")
            } else {
                Ok(())
            }
        },
    )
    .await;
    let (_, v) = mon.server("io.example-search").await;
    assert_eq!(
        v["sessions"], 1,
        "an unchanged server kept its session: {v}"
    );
    let r = pages.lock().expect("lock");
    assert!(
        r.asked
            .iter()
            .any(|q| q.get("updated_since").is_some_and(|s| s.ends_with('Z'))),
        "no incremental walk: {:?}",
        r.asked
    );
}
