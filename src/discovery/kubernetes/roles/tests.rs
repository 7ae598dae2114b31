use serde_json::json;

use super::*;

fn one(role: Role, object: Value) -> Target {
    let mut t = targets(role, &object);
    assert_eq!(t.len(), 1, "{t:?}");
    t.remove(0)
}

fn meta(name: &str) -> Value {
    json!({"namespace": "team-a", "name": name, "labels": {"app.kubernetes.io/name": name}})
}

#[test]
fn a_toolhive_server_is_reached_at_its_status_url_or_its_proxy_service() {
    let published = one(
        Role::ToolhiveMcpserver,
        json!({"metadata": meta("fetch"), "spec": {"transport": "stdio"},
               "status": {"url": "http://mcp-fetch-proxy.team-a.svc.cluster.local:8080/mcp", "phase": "Ready",
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(published.id, "team-a_fetch");
    assert_eq!(
        published.url,
        "http://mcp-fetch-proxy.team-a.svc.cluster.local:8080/mcp"
    );
    assert_eq!(published.transport, "http");
    assert_eq!(published.labels["__meta_kubernetes_phase"], "Ready");
    assert_eq!(published.labels["__meta_kubernetes_ready"], "True");
    assert_eq!(published.labels["app.kubernetes.io/name"], "fetch");
    assert_eq!(
        published.labels["__meta_kubernetes_label_app_kubernetes_io_name"],
        "fetch"
    );
    assert_eq!(published.labels["namespace"], "team-a");
    let built = one(
        Role::ToolhiveMcpserver,
        json!({"metadata": meta("x"), "spec": {"transport": "stdio", "proxyMode": "sse", "proxyPort": 9000}}),
    );
    assert_eq!(
        built.url,
        "http://mcp-x-proxy.team-a.svc.cluster.local:9000/sse"
    );
    assert_eq!(built.transport, "sse");
}

#[test]
fn a_virtual_server_stands_for_itself_and_each_backend_it_lists() {
    let all = targets(
        Role::ToolhiveVirtualmcpserver,
        &json!({"metadata": meta("front"),
               "status": {"url": "http://vmcp-front.team-a.svc:4483/mcp", "phase": "Degraded",
                          "discoveredBackends": [
                              {"name": "github", "url": "http://github.team-a.svc:8080/mcp", "status": "ready"},
                              {"name": "old one", "url": "http://old.team-a.svc:8080/sse", "status": "unavailable"},
                              {"name": "no-url"}]}}),
    );
    let ids: Vec<&str> = all.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "team-a_front",
            "team-a_front_github",
            "team-a_front_old_one"
        ]
    );
    assert_eq!(all[1].labels["virtual_server"], "front");
    assert_eq!(all[2].transport, "sse");
    assert_eq!(
        all[2].labels["__meta_kubernetes_backend_status"],
        "unavailable"
    );
    assert!(!all[0].labels.contains_key("virtual_server"));
}

#[test]
fn kagent_lifecycle_kmcp_and_entries_read_their_own_fields() {
    let kagent = one(
        Role::KagentRemotemcpserver,
        json!({"metadata": meta("r"), "spec": {"url": "https://mcp.example/sse", "protocol": "SSE"}}),
    );
    assert_eq!(
        (kagent.url.as_str(), kagent.transport),
        ("https://mcp.example/sse", "sse")
    );
    let lifecycle = one(
        Role::McpLifecycleMcpserver,
        json!({"metadata": meta("l"), "spec": {"config": {"port": 8081}}}),
    );
    assert_eq!(lifecycle.url, "http://l.team-a.svc.cluster.local:8081/mcp");
    let addressed = one(
        Role::McpLifecycleMcpserver,
        json!({"metadata": meta("l"), "spec": {"config": {"port": 8081}},
               "status": {"address": {"url": "http://l.team-a.svc.cluster.local:8081/custom"}}}),
    );
    assert_eq!(
        addressed.url,
        "http://l.team-a.svc.cluster.local:8081/custom"
    );
    let kmcp = one(
        Role::KmcpMcpserver,
        json!({"metadata": meta("k"), "spec": {"deployment": {"port": 3001}, "transportType": "stdio"}}),
    );
    assert_eq!(kmcp.url, "http://k.team-a:3001/mcp");
    let entry = one(
        Role::ToolhiveMcpserverentry,
        json!({"metadata": meta("e"), "spec": {"remoteUrl": "https://e.example/mcp", "transport": "streamable-http"}}),
    );
    assert_eq!(
        (entry.url.as_str(), entry.transport),
        ("https://e.example/mcp", "http")
    );
    // Nothing to reach yet: no server.
    assert!(
        targets(
            Role::ToolhiveMcpremoteproxy,
            &json!({"metadata": meta("p"), "spec": {}})
        )
        .is_empty()
    );
}

#[test]
fn an_agentgateway_backend_stands_for_each_static_target() {
    let all = targets(
        Role::AgentgatewayBackend,
        &json!({"metadata": meta("gw"),
                "spec": {"mcp": {"targets": [
                    {"name": "github", "static": {"host": "github.tools.svc", "port": 8080, "protocol": "StreamableHTTP"}},
                    {"name": "old", "static": {"backendRef": {"name": "legacy"}, "port": 9000, "protocol": "SSE"}},
                    {"name": "picked", "selector": {"services": {"matchLabels": {"a": "b"}}}}]}}}),
    );
    let seen: Vec<(&str, &str, &str)> = all
        .iter()
        .map(|t| (t.id.as_str(), t.url.as_str(), t.transport))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "team-a_gw_github",
                "http://github.tools.svc:8080/mcp",
                "http"
            ),
            ("team-a_gw_old", "http://legacy.team-a.svc:9000/sse", "sse"),
        ]
    );
}

#[test]
fn a_kuadrant_registration_is_the_backend_of_the_route_it_names() {
    let registration = json!({"metadata": meta("reg"), "spec": {"targetRef": {"name": "route"}, "path": "/v1/mcp"}});
    // No route (yet): no server.
    assert!(targets(Role::KuadrantMcpserverregistration, &registration).is_empty());
    let mut routes = Joined::new();
    routes.insert(
        "team-a/route".into(),
        json!({"spec": {"rules": [{"backendRefs": [{"name": "search", "port": 8080}]}]}}),
    );
    let t = targets_with(Role::KuadrantMcpserverregistration, &registration, &routes);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].url, "http://search.team-a.svc:8080/v1/mcp");
    assert_eq!(t[0].labels["__meta_kubernetes_httproute_name"], "route");
}

#[test]
fn services_are_read_by_their_marks_and_only_those() {
    let kagent = one(
        Role::Service,
        json!({"metadata": {"namespace": "ns", "name": "s", "labels": {"kagent.dev/mcp-service": "true"},
                            "annotations": {"kagent.dev/mcp-service-port": "9000", "kagent.dev/mcp-service-path": "/v1/mcp"}},
               "spec": {"ports": [{"port": 80}, {"port": 9000, "name": "mcp"}]}}),
    );
    assert_eq!(kagent.url, "http://s.ns.svc:9000/v1/mcp");
    assert_eq!(kagent.labels["__meta_kubernetes_service_port_name"], "mcp");
    let by_port = targets(
        Role::Service,
        &json!({"metadata": {"namespace": "ns", "name": "gw", "annotations": {"agentgateway.dev/mcp-path": "/x"}},
                "spec": {"ports": [{"port": 80, "name": "web"},
                                   {"port": 81, "name": "a", "appProtocol": "mcp"},
                                   {"port": 82, "name": "b", "appProtocol": "agentgateway.dev/mcp-sse"}]}}),
    );
    let seen: Vec<(&str, &str, &str)> = by_port
        .iter()
        .map(|t| (t.id.as_str(), t.url.as_str(), t.transport))
        .collect();
    assert_eq!(
        seen,
        [
            ("ns_gw_a", "http://gw.ns.svc:81/x", "http"),
            ("ns_gw_b", "http://gw.ns.svc:82/x", "sse")
        ]
    );
    let unmarked =
        json!({"metadata": {"namespace": "ns", "name": "web"}, "spec": {"ports": [{"port": 80}]}});
    assert!(targets(Role::Service, &unmarked).is_empty());
}

#[test]
fn an_objects_text_cannot_forge_a_line_or_grow_a_label_without_bound() {
    let t = one(
        Role::KagentRemotemcpserver,
        json!({"metadata": {"namespace": "ns", "name": "n",
                            "labels": {"evil": "a\nlevel=error msg=forged"},
                            "annotations": {"big": "x".repeat(100_000)}},
               "spec": {"url": "http://h/mcp"}}),
    );
    assert!(!t.labels["evil"].contains('\n'));
    assert!(t.labels["__meta_kubernetes_annotation_big"].len() <= MAX_VALUE + 4);
}
