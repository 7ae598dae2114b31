//! `kubernetes_sd_configs` against a real kube-apiserver with etcd, the
//! operators' CRDs installed: objects of five kinds created, changed and
//! deleted become real MCP servers added, changed and removed; relabel
//! rules drop and rewrite; the API server stopped and started again keeps
//! the last list and resumes the watch. The servers are the demo server on
//! loopback ports, reached through a relabelled `__address__` (each object
//! carries its port in an annotation), never a cluster address.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::kube::{Cluster, operator_crds};
use crate::support::*;

const NS: &str = "mcp-test";
/// A watch event reaching mcpmon and its first verdict, on a busy machine.
const SOON: Duration = Duration::from_secs(30);

fn meta(name: &str, port: u16, extra: Value) -> Value {
    let mut m = json!({
        "name": name,
        "namespace": NS,
        "labels": {"team": "search"},
        "annotations": {"test.mcpmon.dev/port": port.to_string()},
    });
    if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    m
}

/// The ids mcpmon monitors now, with each one's labels.
async fn fleet(mon: &Binary) -> BTreeMap<String, Value> {
    let (_, body) = mon.get("/health/fleet").await;
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["servers"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|s| Some((s["id"].as_str()?.to_owned(), s.clone())))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_ids(mon: &Binary, what: &str, want: &[&str]) -> BTreeMap<String, Value> {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    eventually(what, SOON, async || {
        let ids = fleet(mon).await;
        let seen: Vec<String> = ids.keys().cloned().collect();
        if seen == want { Ok(ids) } else { Err(seen) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kinds_of_objects_become_servers_that_follow_them_through_an_api_server_restart() {
    require!(
        installed("tests/kube/bin/kube-apiserver"),
        installed("tests/kube/bin/etcd"),
        installed("tests/kube/bin/crds"),
        program("openssl"),
    );
    let _turn = turn().await;
    let mut cluster = Cluster::start().await;
    cluster.install_crds(&operator_crds()).await;
    cluster
        .create("/api/v1/namespaces", json!({"metadata": {"name": NS}}))
        .await;
    let mut servers = Vec::new();
    for name in ["svc", "th", "vmcp", "be1", "kagent", "life", "late"] {
        servers.push(demo_http(&["--name", name], 0).await);
    }
    let port = |i: usize| servers[i].port;

    let dir = tempfile::tempdir().expect("tmp");
    let kubeconfig = cluster.kubeconfig();
    let roles = [
        "service",
        "toolhive_mcpserver",
        "toolhive_virtualmcpserver",
        "kagent_remotemcpserver",
        "mcp_lifecycle_mcpserver",
    ];
    let sd: String = roles
        .iter()
        .map(|r| {
            format!(
                "  - role: {r}\n    kubeconfig_file: {}\n    namespaces: {{names: [{NS}]}}\n",
                kubeconfig.display()
            )
        })
        .collect();
    let config = dir.path().join("mcpmon.yaml");
    std::fs::write(
        &config,
        format!(
            "global: {{ping_interval: 1s, ping_timeout: 1s}}\n\
             kubernetes_sd_configs:\n{sd}\
             relabel_configs:\n\
             \x20 - {{source_labels: [__meta_kubernetes_label_monitor], regex: 'off', action: drop}}\n\
             \x20 - {{source_labels: [__meta_kubernetes_annotation_test_mcpmon_dev_port], regex: '(.+)', target_label: __address__, replacement: '127.0.0.1:$1'}}\n\
             \x20 - {{source_labels: [__meta_kubernetes_backend_name], regex: '(.+)', target_label: backend}}\n"
        ),
    )
    .expect("config");
    let mon = Binary::start(&config, &[]).await;

    // Create: one object of each kind (a Service with kagent's mark, the
    // rest with their URLs where each operator publishes them).
    let base = format!("/api/v1/namespaces/{NS}");
    cluster
        .create(
            &format!("{base}/services"),
            json!({"metadata": meta("svc", port(0), json!({"labels": {"team": "search", "kagent.dev/mcp-service": "true"}})),
                   "spec": {"ports": [{"port": 8080, "name": "mcp"}]}}),
        )
        .await;
    let th = format!("/apis/toolhive.stacklok.dev/v1beta1/namespaces/{NS}/mcpservers");
    cluster
        .create(
            &th,
            json!({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
                   "metadata": meta("th", port(1), json!({})),
                   "spec": {"image": "ghcr.io/example/fetch:1", "transport": "streamable-http", "mcpPort": 8080}}),
        )
        .await;
    cluster
        .patch(
            &format!("{th}/th/status"),
            json!({"status": {"url": format!("http://mcp-th-proxy.{NS}.svc.cluster.local:8080/mcp"), "phase": "Ready"}}),
        )
        .await;
    let vmcp = format!("/apis/toolhive.stacklok.dev/v1beta1/namespaces/{NS}/virtualmcpservers");
    cluster
        .create(
            &vmcp,
            json!({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "VirtualMCPServer",
                   "metadata": meta("vmcp", port(2), json!({})),
                   "spec": {"groupRef": {"name": "g"}, "incomingAuth": {"type": "anonymous"}}}),
        )
        .await;
    cluster
        .patch(
            &format!("{vmcp}/vmcp/status"),
            json!({"status": {"url": format!("http://vmcp-vmcp.{NS}.svc:4483/mcp"), "phase": "Degraded",
                              "discoveredBackends": [{"name": "be1", "url": format!("http://127.0.0.1:{}/mcp", port(3)), "status": "ready"}]}}),
        )
        .await;
    let kagent = format!("/apis/kagent.dev/v1alpha2/namespaces/{NS}/remotemcpservers");
    cluster
        .create(
            &kagent,
            json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                   "metadata": meta("kagent", port(4), json!({})),
                   "spec": {"url": "http://remote.example:9000/mcp", "protocol": "STREAMABLE_HTTP"}}),
        )
        .await;
    let life = format!("/apis/mcp.x-k8s.io/v1beta1/namespaces/{NS}/mcpservers");
    cluster
        .create(
            &life,
            json!({"apiVersion": "mcp.x-k8s.io/v1beta1", "kind": "MCPServer",
                   "metadata": meta("life", port(5), json!({})),
                   "spec": {"config": {"port": 8080}, "source": {"type": "ContainerImage"}}}),
        )
        .await;
    let all = [
        "mcp-test_svc",
        "mcp-test_th",
        "mcp-test_vmcp",
        "mcp-test_vmcp_be1",
        "mcp-test_kagent",
        "mcp-test_life",
    ];
    wait_ids(&mon, "every object is a server", &all).await;
    for id in all {
        let v = mon.wait_status(id, "healthy", SOON).await;
        assert_eq!(v["labels"]["team"], "search", "{id}: {v}");
        assert_eq!(v["labels"]["namespace"], NS, "{id}: {v}");
        assert!(
            !v["labels"]
                .as_object()
                .is_some_and(|l| l.keys().any(|k| k.starts_with("__"))),
            "{id}: no __ label survives relabelling: {v}"
        );
    }
    // The backend behind the virtual server, labelled with it, and a
    // relabel rule that copied a meta label.
    let (_, be) = mon.server("mcp-test_vmcp_be1").await;
    assert_eq!(be["labels"]["virtual_server"], "vmcp", "{be}");
    assert_eq!(be["labels"]["backend"], "be1", "{be}");

    // Change: a new label on one object reaches its server; a label the
    // drop rule reads removes another.
    cluster
        .patch(
            &format!("{kagent}/kagent"),
            json!({"metadata": {"labels": {"tier": "gold"}}}),
        )
        .await;
    cluster
        .patch(
            &format!("{life}/life"),
            json!({"metadata": {"labels": {"monitor": "off"}}}),
        )
        .await;
    let after_change = [
        "mcp-test_svc",
        "mcp-test_th",
        "mcp-test_vmcp",
        "mcp-test_vmcp_be1",
        "mcp-test_kagent",
    ];
    wait_ids(&mon, "the dropped object's server is gone", &after_change).await;
    eventually("the new label reaches the server", SOON, async || {
        let (_, v) = mon.server("mcp-test_kagent").await;
        if v["labels"]["tier"] == "gold" {
            Ok(())
        } else {
            Err(v)
        }
    })
    .await;
    // Delete: the Service goes, and its server with it.
    cluster.delete(&format!("{base}/services/svc")).await;
    let after_delete = [
        "mcp-test_th",
        "mcp-test_vmcp",
        "mcp-test_vmcp_be1",
        "mcp-test_kagent",
    ];
    wait_ids(&mon, "the deleted object's server is gone", &after_delete).await;

    // The API server stops: the last good list stays, and the failure is
    // counted like any source's.
    cluster.stop_apiserver().await;
    eventually("the failed refresh is counted", SOON, async || {
        let (_, text) = mon.get("/metrics").await;
        let failed = text.lines().any(|l| {
            l.starts_with("mcpmon_sd_refresh_failures_total{")
                && l.contains("mechanism=\"kubernetes\"")
                && !l.ends_with(" 0")
        });
        if failed {
            Ok(())
        } else {
            Err(text
                .lines()
                .filter(|l| l.contains("mcpmon_sd_"))
                .map(str::to_owned)
                .collect::<Vec<_>>())
        }
    })
    .await;
    let mut kept = after_delete.map(str::to_owned).to_vec();
    kept.sort();
    assert_eq!(
        fleet(&mon).await.keys().cloned().collect::<Vec<_>>(),
        kept,
        "the last good list stays while the API server is down"
    );
    // Back again: the watch resumes and sees an object made after it.
    cluster.start_apiserver().await;
    cluster
        .create(
            &kagent,
            json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                   "metadata": meta("late", port(6), json!({})),
                   "spec": {"url": "http://late.example/mcp"}}),
        )
        .await;
    let resumed = [
        "mcp-test_th",
        "mcp-test_vmcp",
        "mcp-test_vmcp_be1",
        "mcp-test_kagent",
        "mcp-test_late",
    ];
    wait_ids(&mon, "the watch resumes, nothing duplicated", &resumed).await;
    mon.wait_status("mcp-test_late", "healthy", SOON).await;
}
