//! What each role reads from its objects: which kind it watches, and how
//! one object becomes the servers it stands for (its URL and transport,
//! its id, its labels and its `__meta_kubernetes_*` labels). Pure: the
//! watching is in `super`.
//!
//! Schemas read (group, versions served, fields), and where:
//! - ToolHive `toolhive.stacklok.dev` v1beta1 (v1alpha1 still served), from
//!   `deploy/charts/operator-crds` of stacklok/toolhive v0.63.0:
//!   `MCPServer` (`spec.transport`, `spec.proxyMode`, `spec.proxyPort`;
//!   `status.url`, `status.phase`), `MCPRemoteProxy` (`spec.transport`;
//!   `status.url`), `MCPServerEntry` (`spec.remoteUrl`, `spec.transport`),
//!   `VirtualMCPServer` (`status.url`, `status.phase`,
//!   `status.discoveredBackends[{name, url, status}]`).
//! - kagent `kagent.dev` `RemoteMCPServer` v1alpha2 stored, v1alpha3
//!   served (`spec.url`, `spec.protocol` SSE|STREAMABLE_HTTP), from
//!   kagent-dev/kagent `go/api/config/crd/bases` (2026-08-22).
//! - kmcp `kagent.dev/v1alpha1` `MCPServer` (`spec.deployment.port`,
//!   `spec.transportType`, `spec.httpTransport.{targetPort,path}`); kagent
//!   reaches it at `http://NAME.NAMESPACE:PORT/mcp`.
//! - mcp-lifecycle-operator `mcp.x-k8s.io` `MCPServer` v1alpha1 and
//!   v1beta1 (`spec.config.{port,path}`, path `/mcp` by default;
//!   `status.address.url`), from kubernetes-sigs/mcp-lifecycle-operator
//!   `config/crd/bases`.
//! - agentgateway `agentgateway.dev/v1alpha1` `AgentgatewayBackend`, from
//!   agentgateway/agentgateway `controller/install/helm/agentgateway-crds`
//!   (2026-08-21): `spec.mcp.targets[{name, static{host | backendRef{name},
//!   port, path, protocol SSE|StreamableHTTP}}]`, path `/sse` or `/mcp` by
//!   protocol. Targets by `selector` pick Services: the `service` role reads
//!   those by their `appProtocol`.
//! - Kuadrant `mcp.kuadrant.io/v1alpha1` `MCPServerRegistration`, from
//!   Kuadrant/mcp-gateway `config/crd`: `spec.targetRef` (an HTTPRoute,
//!   `namespace` defaulting to its own), `spec.path` (`/mcp`), a Ready
//!   condition; the server is the route's one backend Service
//!   (`gateway.networking.k8s.io/v1` HTTPRoute `spec.rules[0].backendRefs[0]`).
//! - Services by convention: kagent's `kagent.dev/mcp-service=true` label
//!   with `kagent.dev/mcp-service-{path,port,protocol}` annotations; a port
//!   whose `appProtocol` is `mcp`, `agentgateway.dev/mcp` or
//!   `agentgateway.dev/mcp-sse`, with `agentgateway.dev/mcp-path`.
//!
//! Every string taken from an object is bounded and stripped of control
//! characters before it becomes a label: an object's text must not forge a
//! log line or a label.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::kubernetes::Role;
use crate::config::{defuse, exported_label_name};

/// Longest value taken from an object into a label.
const MAX_VALUE: usize = 1024;
/// Most backends read from one virtual server's status.
const MAX_BACKENDS: usize = 256;

/// The kind a role watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// The resource's name in URLs and RBAC rules.
    pub plural: &'static str,
}

impl Role {
    /// The kind its objects are.
    pub fn kind(self) -> Kind {
        let (group, kind, plural) = match self {
            Role::Service => ("", "Service", "services"),
            Role::ToolhiveMcpserver => ("toolhive.stacklok.dev", "MCPServer", "mcpservers"),
            Role::ToolhiveMcpremoteproxy => (
                "toolhive.stacklok.dev",
                "MCPRemoteProxy",
                "mcpremoteproxies",
            ),
            Role::ToolhiveMcpserverentry => (
                "toolhive.stacklok.dev",
                "MCPServerEntry",
                "mcpserverentries",
            ),
            Role::ToolhiveVirtualmcpserver => (
                "toolhive.stacklok.dev",
                "VirtualMCPServer",
                "virtualmcpservers",
            ),
            Role::KagentRemotemcpserver => ("kagent.dev", "RemoteMCPServer", "remotemcpservers"),
            Role::KmcpMcpserver => ("kagent.dev", "MCPServer", "mcpservers"),
            Role::McpLifecycleMcpserver => ("mcp.x-k8s.io", "MCPServer", "mcpservers"),
            Role::AgentgatewayBackend => (
                "agentgateway.dev",
                "AgentgatewayBackend",
                "agentgatewaybackends",
            ),
            Role::KuadrantMcpserverregistration => (
                "mcp.kuadrant.io",
                "MCPServerRegistration",
                "mcpserverregistrations",
            ),
        };
        Kind {
            group,
            kind,
            plural,
        }
    }
}

impl Role {
    /// The kind its objects point at and are read together with, if any:
    /// Kuadrant's registrations name an HTTPRoute, whose backend is the
    /// server.
    pub fn joins(self) -> Option<Kind> {
        (self == Role::KuadrantMcpserverregistration).then_some(Kind {
            group: "gateway.networking.k8s.io",
            kind: "HTTPRoute",
            plural: "httproutes",
        })
    }
}

/// The objects of a role's joined kind, by `namespace/name`.
pub type Joined = std::collections::HashMap<String, Value>;

/// One server an object stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// `namespace_name`, and more for a port or a backend.
    pub id: String,
    /// Where it answers.
    pub url: String,
    /// `http` (Streamable HTTP) or `sse` (the legacy transport).
    pub transport: &'static str,
    /// Its labels, `__meta_kubernetes_*` among them.
    pub labels: BTreeMap<String, String>,
    /// What its operator says of it (`{kind, phase, ready}`), if anything.
    pub operator: Option<Value>,
}

impl Target {
    /// As a server entry.
    pub fn entry(&self) -> Value {
        let mut entry = json!({
            "id": self.id,
            "transport": self.transport,
            "url": self.url,
            "labels": self.labels,
        });
        if let Some(said) = &self.operator {
            entry["operator"] = said.clone();
        }
        entry
    }
}

/// The servers `object` (as the API server returns it) stands for under
/// `role`; none when it names no reachable address yet.
pub fn targets(role: Role, object: &Value) -> Vec<Target> {
    targets_with(role, object, &Joined::new())
}

/// [`targets`], for a role that reads the objects it points at too
/// ([`Role::joins`]).
pub fn targets_with(role: Role, object: &Value, joined: &Joined) -> Vec<Target> {
    let meta = &object["metadata"];
    let (Some(namespace), Some(name)) = (text(&meta["namespace"]), text(&meta["name"])) else {
        return Vec::new();
    };
    let base = Base::new(role, &namespace, &name, object);
    let spec = &object["spec"];
    let status = &object["status"];
    let host = format!("{name}.{namespace}.svc");
    match role {
        Role::Service => services(&base, object, &host),
        Role::ToolhiveMcpserver => {
            // A stdio server is proxied as `proxyMode` says.
            let mode = match text(&spec["transport"]).as_deref() {
                Some("sse") => "sse",
                Some("streamable-http") => "streamable-http",
                _ => text(&spec["proxyMode"]).map_or("streamable-http", |m| {
                    if m == "sse" { "sse" } else { "streamable-http" }
                }),
            };
            let transport = if mode == "sse" { "sse" } else { "http" };
            let url = text(&status["url"]).unwrap_or_else(|| {
                let port = number(&spec["proxyPort"]).unwrap_or(8080);
                let path = if transport == "sse" { "/sse" } else { "/mcp" };
                format!("http://mcp-{name}-proxy.{namespace}.svc.cluster.local:{port}{path}")
            });
            vec![base.target(url, transport)]
        }
        Role::ToolhiveMcpremoteproxy => text(&status["url"])
            .map(|url| base.target(url, toolhive_transport(&spec["transport"])))
            .into_iter()
            .collect(),
        Role::ToolhiveMcpserverentry => text(&spec["remoteUrl"])
            .map(|url| base.target(url, toolhive_transport(&spec["transport"])))
            .into_iter()
            .collect(),
        Role::ToolhiveVirtualmcpserver => virtual_server(&base, status),
        Role::KagentRemotemcpserver => text(&spec["url"])
            .map(|url| {
                let sse = text(&spec["protocol"]).is_some_and(|p| p.eq_ignore_ascii_case("sse"));
                base.target(url, if sse { "sse" } else { "http" })
            })
            .into_iter()
            .collect(),
        Role::KmcpMcpserver => {
            let port = number(&spec["httpTransport"]["targetPort"])
                .or_else(|| number(&spec["deployment"]["port"]))
                .unwrap_or(3000);
            let path = text(&spec["httpTransport"]["path"]).unwrap_or_else(|| "/mcp".to_owned());
            let url = format!("http://{name}.{namespace}:{port}{}", slash(&path));
            vec![base.target(url, "http")]
        }
        Role::McpLifecycleMcpserver => {
            let url = text(&status["address"]["url"]).or_else(|| {
                let port = number(&spec["config"]["port"])?;
                let path = text(&spec["config"]["path"]).unwrap_or_else(|| "/mcp".to_owned());
                Some(format!(
                    "http://{name}.{namespace}.svc.cluster.local:{port}{}",
                    slash(&path)
                ))
            });
            url.map(|url| base.target(url, "http"))
                .into_iter()
                .collect()
        }
        Role::AgentgatewayBackend => gateway_targets(&base, spec, &namespace),
        Role::KuadrantMcpserverregistration => registration(&base, spec, &namespace, joined)
            .into_iter()
            .collect(),
    }
}

/// A Kuadrant registration's server: the one backend of the HTTPRoute it
/// names (the MCP gateway supports routes of one backend), at its path.
fn registration(base: &Base, spec: &Value, namespace: &str, routes: &Joined) -> Option<Target> {
    let route_ns = text(&spec["targetRef"]["namespace"]).unwrap_or_else(|| namespace.to_owned());
    let route_name = text(&spec["targetRef"]["name"])?;
    let route = routes.get(&format!("{route_ns}/{route_name}"))?;
    let backend = &route["spec"]["rules"][0]["backendRefs"][0];
    if text(&backend["kind"]).is_some_and(|k| k != "Service") {
        return None;
    }
    let service = text(&backend["name"])?;
    let service_ns = text(&backend["namespace"]).unwrap_or(route_ns);
    let port = number(&backend["port"])?;
    let path = text(&spec["path"]).unwrap_or_else(|| "/mcp".to_owned());
    let mut t = base.target(
        format!("http://{service}.{service_ns}.svc:{port}{}", slash(&path)),
        "http",
    );
    t.labels.insert(
        "__meta_kubernetes_httproute_name".to_owned(),
        defuse(&route_name, MAX_VALUE),
    );
    Some(t)
}

/// An agentgateway backend's static MCP targets, each a server of its own.
fn gateway_targets(base: &Base, spec: &Value, namespace: &str) -> Vec<Target> {
    let targets = spec["mcp"]["targets"].as_array().map_or(&[][..], |t| t);
    targets
        .iter()
        .take(MAX_BACKENDS)
        .filter_map(|target| {
            let name = text(&target["name"])?;
            let s = &target["static"];
            let host = text(&s["host"]).or_else(|| {
                Some(format!(
                    "{}.{namespace}.svc",
                    text(&s["backendRef"]["name"])?
                ))
            })?;
            let port = number(&s["port"])?;
            let sse = text(&s["protocol"]).as_deref() == Some("SSE");
            let path =
                text(&s["path"]).unwrap_or_else(|| if sse { "/sse" } else { "/mcp" }.to_owned());
            let mut t = base.target(
                format!("http://{host}:{port}{}", slash(&path)),
                if sse { "sse" } else { "http" },
            );
            t.id = format!("{}_{}", base.id, id_part(&name));
            t.labels.insert(
                "__meta_kubernetes_target_name".to_owned(),
                defuse(&name, MAX_VALUE),
            );
            Some(t)
        })
        .collect()
}

/// What every server of one object shares.
struct Base {
    id: String,
    labels: BTreeMap<String, String>,
    operator: Option<Value>,
}

impl Base {
    fn new(role: Role, namespace: &str, name: &str, object: &Value) -> Base {
        let meta = &object["metadata"];
        let mut labels = BTreeMap::new();
        let mut meta_label = |k: &str, v: &str| {
            labels.insert(format!("__meta_kubernetes_{k}"), defuse(v, MAX_VALUE));
        };
        meta_label("namespace", namespace);
        meta_label("name", name);
        meta_label("kind", role.kind().kind);
        meta_label("role", role.as_str());
        for (k, v) in strings(&meta["labels"]) {
            let clean = sanitized(&k);
            meta_label(&format!("label_{clean}"), &v);
            meta_label(&format!("labelpresent_{clean}"), "true");
        }
        for (k, v) in strings(&meta["annotations"]) {
            // kubectl's copy of the whole object: large, and nothing new.
            if k == "kubectl.kubernetes.io/last-applied-configuration" {
                continue;
            }
            let clean = sanitized(&k);
            meta_label(&format!("annotation_{clean}"), &v);
            meta_label(&format!("annotationpresent_{clean}"), "true");
        }
        let status = &object["status"];
        let phase = text(&status["phase"]);
        let ready = condition(status, "Ready");
        if let Some(phase) = &phase {
            meta_label("phase", phase);
        }
        if let Some(ready) = &ready {
            meta_label("ready", ready);
        }
        let operator = said(role, phase.as_deref(), ready.as_deref());
        // The object's own labels, as plain labels, and its namespace.
        for (k, v) in strings(&meta["labels"]) {
            labels.insert(defuse(&k, 317), defuse(&v, MAX_VALUE));
        }
        labels.insert("namespace".to_owned(), namespace.to_owned());
        Base {
            id: format!("{namespace}_{name}"),
            labels,
            operator,
        }
    }

    fn target(&self, url: String, transport: &'static str) -> Target {
        Target {
            id: self.id.clone(),
            url: defuse(&url, 2048),
            transport,
            labels: self.labels.clone(),
            operator: self.operator.clone(),
        }
    }
}

/// What an operator says of its object: its phase, and whether it is ready
/// (its `Ready` condition when it has one, else its phase). Services have
/// no operator.
fn said(role: Role, phase: Option<&str>, ready: Option<&str>) -> Option<Value> {
    if role == Role::Service || (phase.is_none() && ready.is_none()) {
        return None;
    }
    let ready = match ready {
        Some("True") => Some(true),
        Some("False") => Some(false),
        _ => phase.map(|p| matches!(p, "Ready" | "Running")),
    };
    let mut word = json!({"kind": role.kind().kind});
    if let Some(p) = phase {
        word["phase"] = json!(defuse(p, 64));
    }
    if let Some(r) = ready {
        word["ready"] = json!(r);
    }
    Some(word)
}

/// A Service's marked ports: kagent's label picks one port (its
/// annotation's, or the first), an `appProtocol` marks each of its own.
fn services(base: &Base, object: &Value, host: &str) -> Vec<Target> {
    let meta = &object["metadata"];
    let annotation = |k: &str| text(&meta["annotations"][k]);
    let ports: Vec<&Value> = object["spec"]["ports"]
        .as_array()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let kagent = text(&meta["labels"]["kagent.dev/mcp-service"]).as_deref() == Some("true");
    let mut marked: Vec<(&Value, &'static str, String)> = Vec::new();
    if kagent {
        let wanted = annotation("kagent.dev/mcp-service-port").and_then(|p| p.parse::<u64>().ok());
        let port = match wanted {
            Some(n) => ports
                .iter()
                .find(|p| number(&p["port"]) == Some(n))
                .copied(),
            None => ports.first().copied(),
        };
        if let Some(port) = port {
            let sse = annotation("kagent.dev/mcp-service-protocol")
                .is_some_and(|p| p.eq_ignore_ascii_case("sse"));
            let path = annotation("kagent.dev/mcp-service-path")
                .unwrap_or_else(|| if sse { "/sse" } else { "/mcp" }.to_owned());
            marked.push((port, if sse { "sse" } else { "http" }, path));
        }
    } else {
        for port in &ports {
            let transport = match text(&port["appProtocol"]).as_deref() {
                Some("mcp" | "agentgateway.dev/mcp") => "http",
                Some("agentgateway.dev/mcp-sse") => "sse",
                _ => continue,
            };
            let path = annotation("agentgateway.dev/mcp-path")
                .unwrap_or_else(|| if transport == "sse" { "/sse" } else { "/mcp" }.to_owned());
            marked.push((port, transport, path));
        }
    }
    let several = marked.len() > 1;
    marked
        .into_iter()
        .filter_map(|(port, transport, path)| {
            let number = number(&port["port"])?;
            let port_name = text(&port["name"]);
            let url = format!("http://{host}:{number}{}", slash(&path));
            let mut t = base.target(url, transport);
            if several {
                t.id = format!(
                    "{}_{}",
                    t.id,
                    port_name.clone().unwrap_or(number.to_string())
                );
            }
            let mut meta = |k: &str, v: &str| {
                t.labels.insert(
                    format!("__meta_kubernetes_service_port_{k}"),
                    defuse(v, MAX_VALUE),
                );
            };
            meta("number", &number.to_string());
            if let Some(n) = &port_name {
                meta("name", n);
            }
            if let Some(p) = text(&port["appProtocol"]) {
                meta("app_protocol", &p);
            }
            Some(t)
        })
        .collect()
}

/// A virtual server, and each backend its status lists as a server of its
/// own, labelled with the virtual server it belongs to.
fn virtual_server(base: &Base, status: &Value) -> Vec<Target> {
    let mut out: Vec<Target> = text(&status["url"])
        .map(|url| base.target(url, "http"))
        .into_iter()
        .collect();
    let vmcp = base.labels["__meta_kubernetes_name"].clone();
    let backends = status["discoveredBackends"]
        .as_array()
        .map_or(&[][..], |b| b);
    for backend in backends.iter().take(MAX_BACKENDS) {
        let (Some(name), Some(url)) = (text(&backend["name"]), text(&backend["url"])) else {
            continue;
        };
        let transport = if url.trim_end_matches('/').ends_with("/sse") {
            "sse"
        } else {
            "http"
        };
        let mut t = base.target(url, transport);
        t.id = format!("{}_{}", base.id, id_part(&name));
        t.labels.insert("virtual_server".to_owned(), vmcp.clone());
        t.labels
            .insert("__meta_kubernetes_virtual_server".to_owned(), vmcp.clone());
        t.labels.insert(
            "__meta_kubernetes_backend_name".to_owned(),
            defuse(&name, MAX_VALUE),
        );
        // The virtual server's word on a backend is the backend's status.
        t.operator = text(&backend["status"]).map(|s| {
            json!({"kind": "VirtualMCPServer", "phase": defuse(&s, 64), "ready": s.eq_ignore_ascii_case("ready")})
        });
        if let Some(s) = text(&backend["status"]) {
            t.labels.insert(
                "__meta_kubernetes_backend_status".to_owned(),
                defuse(&s, MAX_VALUE),
            );
        }
        out.push(t);
    }
    out
}

/// ToolHive's transport names, as mcpmon's.
fn toolhive_transport(value: &Value) -> &'static str {
    if text(value).as_deref() == Some("sse") {
        "sse"
    } else {
        "http"
    }
}

/// The status of condition `kind` in `status.conditions`.
fn condition(status: &Value, kind: &str) -> Option<String> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(kind))
        .and_then(|c| text(&c["status"]))
}

fn text(v: &Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn number(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

fn strings(v: &Value) -> Vec<(String, String)> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// A label or annotation name as Prometheus puts it in a meta label name.
fn sanitized(name: &str) -> String {
    let exported = exported_label_name(&defuse(name, 317));
    exported
        .strip_prefix("label_")
        .unwrap_or(&exported)
        .to_owned()
}

/// A name as part of a server id (`[a-zA-Z0-9_.-]`).
fn id_part(name: &str) -> String {
    name.chars()
        .take(128)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn slash(path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

#[cfg(test)]
mod tests;
