//! `kubernetes_sd_configs`, in Prometheus's shape: which objects to watch
//! (a role: Services by their MCP marks, or one operator's kind), in which
//! namespaces, selected by which labels and fields, through which API
//! server. Written and checked here; watched in `discovery::kubernetes`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::SdTls;
use super::sd::SdTlsFile;

/// What a `kubernetes_sd_configs` entry watches.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Role {
    /// Services marked as MCP servers: kagent's `kagent.dev/mcp-service`
    /// label, or a port whose `appProtocol` is `mcp` or agentgateway's.
    Service,
    /// ToolHive's `MCPServer` (`toolhive.stacklok.dev`).
    ToolhiveMcpserver,
    /// ToolHive's `MCPRemoteProxy`.
    ToolhiveMcpremoteproxy,
    /// ToolHive's `MCPServerEntry`: a remote server, not run by ToolHive.
    ToolhiveMcpserverentry,
    /// ToolHive's `VirtualMCPServer`, and each backend its status lists.
    ToolhiveVirtualmcpserver,
    /// kagent's `RemoteMCPServer` (`kagent.dev`).
    KagentRemotemcpserver,
    /// kmcp's `MCPServer` (`kagent.dev`).
    KmcpMcpserver,
    /// The Kubernetes SIG mcp-lifecycle-operator's `MCPServer`
    /// (`mcp.x-k8s.io`).
    McpLifecycleMcpserver,
    /// agentgateway's `AgentgatewayBackend` (`agentgateway.dev`): each of
    /// its static MCP targets.
    AgentgatewayBackend,
    /// Kuadrant's `MCPServerRegistration` (`mcp.kuadrant.io`): the backend
    /// of the HTTPRoute it points at.
    KuadrantMcpserverregistration,
}

impl Role {
    /// The name written in the config (and the `role` label value).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One `kubernetes_sd_configs` entry, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeSd {
    /// What it watches.
    pub role: Role,
    /// Namespaces to watch; empty for every namespace.
    pub namespaces: Vec<String>,
    /// Watch the namespace mcpmon runs in (in-cluster) or its kubeconfig
    /// context's namespace, besides `namespaces`.
    pub own_namespace: bool,
    /// Label selector (`app=search,tier!=test`), when set.
    pub label_selector: Option<String>,
    /// Field selector (`metadata.name=search`), when set.
    pub field_selector: Option<String>,
    /// A kubeconfig to read the API server and credentials from.
    pub kubeconfig_file: Option<PathBuf>,
    /// The API server, when not from a kubeconfig or in-cluster.
    pub api_server: Option<url::Url>,
    /// Certificates for `api_server`.
    pub tls: SdTls,
    /// A file holding the bearer token for `api_server`, read at start.
    pub bearer_token_file: Option<PathBuf>,
    /// Labels given to every server it finds.
    pub labels: BTreeMap<String, String>,
    /// Most servers it may add.
    pub max_servers: usize,
}

/// A selector as Prometheus writes it: for one role.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SelectorFile {
    pub(super) role: Option<Role>,
    pub(super) label: Option<String>,
    pub(super) field: Option<String>,
}

/// `namespaces:` as Prometheus writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespacesFile {
    #[serde(default)]
    pub(super) names: Vec<String>,
    #[serde(default)]
    pub(super) own_namespace: bool,
}

/// One `kubernetes_sd_configs` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KubeSdFile {
    pub(super) role: Role,
    #[serde(default)]
    pub(super) namespaces: NamespacesFile,
    #[serde(default)]
    pub(super) selectors: Vec<SelectorFile>,
    pub(super) kubeconfig_file: Option<String>,
    pub(super) api_server: Option<String>,
    #[serde(default)]
    pub(super) tls: SdTlsFile,
    pub(super) bearer_token_file: Option<String>,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) max_servers: Option<usize>,
}
