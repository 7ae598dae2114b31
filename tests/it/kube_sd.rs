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
async fn six_kinds_of_objects_become_servers_that_follow_them_through_an_api_server_restart() {
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
    for name in ["svc", "th", "vmcp", "be1", "kagent", "life", "late", "kq"] {
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
        "kuadrant_mcpserverregistration",
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
    // Kuadrant: a registration names an HTTPRoute, whose backend is the
    // server (the real Gateway API CRD validates the route).
    cluster
        .create(
            &format!("/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes"),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "kq-route", "namespace": NS},
                   "spec": {"parentRefs": [{"name": "mcp-gateway"}],
                            "rules": [{"backendRefs": [{"name": "kq", "port": 8080}]}]}}),
        )
        .await;
    cluster
        .create(
            &format!("/apis/mcp.kuadrant.io/v1alpha1/namespaces/{NS}/mcpserverregistrations"),
            json!({"apiVersion": "mcp.kuadrant.io/v1alpha1", "kind": "MCPServerRegistration",
                   "metadata": meta("kq", port(7), json!({})),
                   "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "kq-route"}}}),
        )
        .await;
    let all = [
        "mcp-test_kq",
        "mcp-test_svc",
        "mcp-test_th",
        "mcp-test_vmcp",
        "mcp-test_vmcp_be1",
        "mcp-test_kagent",
        "mcp-test_life",
    ];
    wait_ids(&mon, "every object is a server", &all).await;
    for id in all {
        let (v, _) = mon.wait_status(id, "healthy", SOON).await;
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

    // The operator's word beside mcpmon's: ToolHive says Ready, and then
    // Failed, which reaches the JSON and the series without a new session.
    let (_, v) = mon.server("mcp-test_th").await;
    assert_eq!(
        v["operator"],
        json!({"kind": "MCPServer", "phase": "Ready", "ready": true}),
        "{v}"
    );
    let sessions = v["sessions"].clone();
    let ready_series = async |want: &str| {
        let line = format!(
            "mcpmon_server_operator_ready{{kind=\"MCPServer\",server=\"mcp-test_th\"}} {want}"
        );
        eventually(&line, SOON, async || {
            let (_, text) = mon.get("/metrics").await;
            if text.lines().any(|l| l == line) {
                Ok(())
            } else {
                Err(line.clone())
            }
        })
        .await;
    };
    ready_series("1").await;
    cluster
        .patch(
            &format!("{th}/th/status"),
            json!({"status": {"phase": "Failed"}}),
        )
        .await;
    ready_series("0").await;
    let (_, v) = mon.server("mcp-test_th").await;
    assert_eq!(v["operator"]["phase"], "Failed", "{v}");
    assert_eq!(v["status"], "healthy", "mcpmon's own verdict stands: {v}");
    assert_eq!(
        v["sessions"], sessions,
        "the operator's word restarts nothing: {v}"
    );

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
        "mcp-test_kq",
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
        "mcp-test_kq",
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
        "mcp-test_kq",
        "mcp-test_th",
        "mcp-test_vmcp",
        "mcp-test_vmcp_be1",
        "mcp-test_kagent",
        "mcp-test_late",
    ];
    wait_ids(&mon, "the watch resumes, nothing duplicated", &resumed).await;
    mon.wait_status("mcp-test_late", "healthy", SOON).await;
}

/// The chart's RBAC, live: its ServiceAccount, Role and RoleBinding
/// rendered for two roles and applied to the API server, and mcpmon
/// running with that account's token. The two granted kinds are found; a
/// third source, for a kind the chart was not asked to grant, is refused
/// by the API server (a failed refresh, counted) and finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_lets_discovery_read_what_it_grants_and_nothing_more() {
    require!(
        installed("tests/kube/bin/kube-apiserver"),
        installed("tests/kube/bin/etcd"),
        installed("tests/kube/bin/crds"),
        program("openssl"),
        program("helm"),
    );
    let _turn = turn().await;
    let cluster = Cluster::start().await;
    cluster.install_crds(&operator_crds()).await;
    cluster
        .create("/api/v1/namespaces", json!({"metadata": {"name": NS}}))
        .await;
    let rendered = stdout_ok(
        std::process::Command::new(which("helm"))
            .args(["template", "mcpmon"])
            .arg(repo().join("deploy/helm/mcpmon"))
            .args([
                "--namespace",
                NS,
                "--set",
                "kubernetesDiscovery.roles={service,toolhive_mcpserver}",
            ]),
    );
    let mut account = String::new();
    for doc in rendered.split("\n---\n") {
        let Ok(object) = yaml_serde::from_str::<Value>(doc) else {
            continue;
        };
        let path = match object["kind"].as_str() {
            Some("ServiceAccount") => {
                account = object["metadata"]["name"]
                    .as_str()
                    .expect("name")
                    .to_owned();
                format!("/api/v1/namespaces/{NS}/serviceaccounts")
            }
            Some("Role") => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
            Some("RoleBinding") => {
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings")
            }
            _ => continue,
        };
        cluster.create(&path, object).await;
    }
    assert!(!account.is_empty(), "the chart renders a ServiceAccount");
    let token = cluster
        .create(
            &format!("/api/v1/namespaces/{NS}/serviceaccounts/{account}/token"),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 3600}}),
        )
        .await;
    let token = token["status"]["token"].as_str().expect("token").to_owned();
    let kubeconfig = cluster.kubeconfig_with("chart", &token);

    let a = demo_http(&["--name", "a"], 0).await;
    let b = demo_http(&["--name", "b"], 0).await;
    let base = format!("/api/v1/namespaces/{NS}");
    cluster
        .create(
            &format!("{base}/services"),
            json!({"metadata": meta("svc", a.port, json!({"labels": {"kagent.dev/mcp-service": "true"}})),
                   "spec": {"ports": [{"port": 8080}]}}),
        )
        .await;
    let th = format!("/apis/toolhive.stacklok.dev/v1beta1/namespaces/{NS}/mcpservers");
    cluster
        .create(
            &th,
            json!({"apiVersion": "toolhive.stacklok.dev/v1beta1", "kind": "MCPServer",
                   "metadata": meta("th", b.port, json!({})),
                   "spec": {"image": "ghcr.io/example/fetch:1", "transport": "streamable-http"}}),
        )
        .await;
    cluster
        .create(
            &format!("/apis/kagent.dev/v1alpha2/namespaces/{NS}/remotemcpservers"),
            json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                   "metadata": meta("kagent", a.port, json!({})),
                   "spec": {"url": "http://remote.example/mcp"}}),
        )
        .await;

    let dir = tempfile::tempdir().expect("tmp");
    let sd: String = ["service", "toolhive_mcpserver", "kagent_remotemcpserver"]
        .iter()
        .map(|r| {
            format!(
                "  - role: {r}\n    kubeconfig_file: {}\n    namespaces: {{own_namespace: true}}\n",
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
             \x20 - {{source_labels: [__meta_kubernetes_annotation_test_mcpmon_dev_port], regex: '(.+)', target_label: __address__, replacement: '127.0.0.1:$1'}}\n"
        ),
    )
    .expect("config");
    let mon = Binary::start(&config, &[]).await;
    wait_ids(
        &mon,
        "what the chart grants is found",
        &["mcp-test_svc", "mcp-test_th"],
    )
    .await;
    mon.wait_status("mcp-test_svc", "healthy", SOON).await;
    mon.wait_status("mcp-test_th", "healthy", SOON).await;
    eventually(
        "the ungranted kind is refused and counted",
        SOON,
        async || {
            let (_, text) = mon.get("/metrics").await;
            match exposition::value(
                &text,
                "mcpmon_sd_refresh_failures_total",
                &[("mechanism", "kubernetes")],
            ) {
                Some(n) if n > 0.0 => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;
    assert!(
        mon.log_text().to_lowercase().contains("forbidden"),
        "the refusal is the API server's: {}",
        mon.log_text()
    );
    assert_eq!(fleet(&mon).await.len(), 2, "the kagent object is not read");
}

/// A `/proc/PID/status` figure in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"))
}

/// mcpmon on `namespace`, every entry but `server-00000` dropped by a rule
/// (one session: listing, translating and checking are what is measured);
/// the time until the source reported `want` dropped and one kept, and the
/// RSS and peak RSS then.
async fn list_with_mcpmon(cluster: &Cluster, namespace: &str, want: f64) -> (Duration, u64, u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("mcpmon.yaml");
    std::fs::write(
        &config,
        format!(
            "kubernetes_sd_configs:\n  - role: kagent_remotemcpserver\n    kubeconfig_file: {}\n    namespaces: {{names: [{namespace}]}}\n    max_servers: 10000\n\
             relabel_configs:\n  - {{source_labels: [__meta_kubernetes_name], regex: 'server-00000', action: keep}}\n",
            cluster.kubeconfig().display()
        ),
    )
    .expect("config");
    let started = std::time::Instant::now();
    let mon = Binary::start(&config, &[]).await;
    eventually(
        "the list is reported",
        Duration::from_secs(120),
        async || {
            let (_, text) = mon.get("/metrics").await;
            let dropped = exposition::value(
                &text,
                "mcpmon_sd_entries_rejected_total",
                &[("mechanism", "kubernetes"), ("reason", "dropped")],
            );
            let listed =
                exposition::value(&text, "mcpmon_sd_servers", &[("mechanism", "kubernetes")])
                    == Some(1.0);
            match dropped.unwrap_or(0.0) {
                n if n == want && listed => Ok(()),
                n => Err((
                    n,
                    text.lines()
                        .filter(|l| l.starts_with("mcpmon_sd_"))
                        .map(str::to_owned)
                        .collect::<Vec<_>>(),
                )),
            }
        },
    )
    .await;
    let took = started.elapsed();
    (
        took,
        status_kib(mon.pid(), "VmRSS:"),
        status_kib(mon.pid(), "VmHWM:"),
    )
}

/// Benchmark, not a test of speed: 5 000 objects listed by mcpmon, beside
/// the same API server's raw list of them and mcpmon on an empty namespace
/// (its floor), measured in the same run. Figures in docs/benchmarks.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test --release --test it -- --ignored --nocapture kube_sd::five_thousand"]
async fn five_thousand_objects_listed() {
    require!(
        installed("tests/kube/bin/kube-apiserver"),
        installed("tests/kube/bin/etcd"),
        program("openssl"),
    );
    const N: usize = 5000;
    let _turn = turn().await;
    let cluster = Cluster::start().await;
    cluster.install_crds(&operator_crds()).await;
    for ns in ["many", "none"] {
        cluster
            .create("/api/v1/namespaces", json!({"metadata": {"name": ns}}))
            .await;
    }
    cluster
        .create(
            "/apis/kagent.dev/v1alpha2/namespaces/none/remotemcpservers",
            json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                   "metadata": {"name": "server-00000", "namespace": "none"},
                   "spec": {"url": "http://server-00000.none.svc:8080/mcp"}}),
        )
        .await;
    let path = "/apis/kagent.dev/v1alpha2/namespaces/many/remotemcpservers";
    let made = std::time::Instant::now();
    let cluster = std::sync::Arc::new(cluster);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let cluster = cluster.clone();
        tasks.spawn(async move {
            for i in (worker..N).step_by(16) {
                cluster
                    .create(
                        path,
                        json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                               "metadata": {"name": format!("server-{i:05}"), "namespace": "many",
                                            "labels": {"team": format!("team-{}", i % 40), "app.kubernetes.io/name": "mcp"}},
                               "spec": {"url": format!("http://server-{i:05}.many.svc:8080/mcp"), "protocol": "STREAMABLE_HTTP"}}),
                    )
                    .await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("creator");
    }
    eprintln!(
        "created {N} objects in {:.1} s",
        made.elapsed().as_secs_f64()
    );
    let raw = std::time::Instant::now();
    let (code, list) = cluster.get(path).await;
    let raw = raw.elapsed();
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(N));
    let (floor_time, floor_rss, floor_peak) = list_with_mcpmon(&cluster, "none", 0.0).await;
    let (time, rss, peak) = list_with_mcpmon(&cluster, "many", (N - 1) as f64).await;
    println!(
        "raw list of {N} objects (one GET, JSON parsed): {:.3} s",
        raw.as_secs_f64()
    );
    println!(
        "mcpmon, a namespace of one: start to listed {:.3} s, RSS {floor_rss} KiB, peak {floor_peak} KiB",
        floor_time.as_secs_f64()
    );
    println!(
        "mcpmon, {N} objects: start to listed {:.3} s, RSS {rss} KiB, peak {peak} KiB",
        time.as_secs_f64()
    );
    println!(
        "ratios: time over the one-object floor {:.2}x; extra time per object over the raw list {:.2}x; RSS {:.2}x, peak {:.2}x the one-object floor; {:.2} KiB RSS per object",
        time.as_secs_f64() / floor_time.as_secs_f64(),
        (time - floor_time).as_secs_f64() / raw.as_secs_f64(),
        rss as f64 / floor_rss as f64,
        peak as f64 / floor_peak as f64,
        (rss.saturating_sub(floor_rss)) as f64 / N as f64,
    );
}
