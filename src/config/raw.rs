//! The fleet file as written: serde shapes, before validation. Unknown
//! keys are refused here (or, where serde cannot, by the validator).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::sd::SdTlsFile;
use super::{Dur, FleetPolicy, TunablesFile};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileDoc {
    #[serde(default)]
    pub(super) global: TunablesFile,
    #[serde(default)]
    pub(super) fleet: FleetPolicy,
    #[serde(default)]
    pub(super) servers: Vec<ServerFile>,
    #[serde(default)]
    pub(super) file_sd_configs: Vec<FileSdFile>,
    #[serde(default)]
    pub(super) http_sd_configs: Vec<HttpSdFile>,
    #[serde(default)]
    pub(super) client_config_sd_configs: Vec<ClientSdFile>,
    #[serde(default)]
    pub(super) registry_sd_configs: Vec<RegistrySdFile>,
    #[serde(default)]
    pub(super) kubernetes_sd_configs: Vec<super::kubernetes::KubeSdFile>,
    #[serde(default)]
    pub(super) relabel_configs: Vec<super::relabel::RelabelFile>,
    #[serde(default)]
    pub(super) maintenance: Vec<super::maintenance::WindowFile>,
}

/// One `registry_sd_configs` entry: an MCP Registry's base URL, asked as an
/// http_sd endpoint is (and as little trusted).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RegistrySdFile {
    pub(super) url: String,
    pub(super) search: Option<String>,
    pub(super) refresh_interval: Option<Dur>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) bearer_token_env: Option<String>,
    #[serde(default)]
    pub(super) tls: SdTlsFile,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) max_servers: Option<usize>,
}

impl RegistrySdFile {
    /// The http_sd entry it is validated as, and its search.
    pub(super) fn split(self) -> (HttpSdFile, Option<String>) {
        let http = HttpSdFile {
            url: self.url,
            refresh_interval: self.refresh_interval,
            headers: self.headers,
            bearer_token_env: self.bearer_token_env,
            tls: self.tls,
            labels: self.labels,
            allow_stdio: false,
            max_servers: self.max_servers,
        };
        (http, self.search)
    }
}

/// One `client_config_sd_configs` entry: client configs, watched as
/// file_sd files are.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClientSdFile {
    pub(super) files: Vec<String>,
    #[serde(default = "auto")]
    pub(super) format: super::clients::ClientFormat,
    pub(super) refresh_interval: Option<Dur>,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) max_servers: Option<usize>,
}

fn auto() -> super::clients::ClientFormat {
    super::clients::ClientFormat::Auto
}

/// One `file_sd_configs` entry, as Prometheus writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSdFile {
    pub(super) files: Vec<String>,
    pub(super) refresh_interval: Option<Dur>,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) max_servers: Option<usize>,
}

/// One `http_sd_configs` entry, as Prometheus writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpSdFile {
    pub(super) url: String,
    pub(super) refresh_interval: Option<Dur>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) bearer_token_env: Option<String>,
    #[serde(default)]
    pub(super) tls: SdTlsFile,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    /// The endpoint's entries may start processes (`transport: stdio`).
    #[serde(default)]
    pub(super) allow_stdio: bool,
    pub(super) max_servers: Option<usize>,
}

/// `operator:` of a server entry (Kubernetes discovery writes it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OperatorFile {
    pub(super) kind: String,
    pub(super) phase: Option<String>,
    pub(super) ready: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum TransportKind {
    Stdio,
    Http,
    Sse,
}

// No `deny_unknown_fields` here: with `flatten` every unknown key lands in
// `tunables`, which is then checked strictly.
#[derive(Debug, Deserialize)]
pub(super) struct ServerFile {
    pub(super) id: String,
    pub(super) transport: TransportKind,
    pub(super) command: Option<String>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
    /// Names of mcpmon's own environment variables passed through to the child.
    #[serde(default)]
    pub(super) inherit_env: Vec<String>,
    pub(super) cwd: Option<String>,
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    /// Name of an environment variable holding a bearer token.
    pub(super) bearer_token_env: Option<String>,
    /// OAuth 2.0 client credentials, in Prometheus's `oauth2:` shape.
    pub(super) oauth2: Option<OAuth2File>,
    /// TLS, in Prometheus's `tls_config` shape.
    pub(super) tls: Option<TlsFile>,
    /// Tools the server must list; any missing makes it degraded.
    #[serde(default)]
    pub(super) expected_tools: Vec<String>,
    /// Conditions on the health check's report.
    #[serde(default)]
    pub(super) health_check_conditions: Vec<ConditionFile>,
    /// Conditions on the tool list.
    #[serde(default)]
    pub(super) tools_conditions: Vec<ConditionFile>,
    /// Labels of the operator's (team, env…), exported on `mcpmon_server_labels`.
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    /// What the operator that runs the server says of it.
    pub(super) operator: Option<OperatorFile>,
    #[serde(flatten)]
    pub(super) tunables: FlatTunables,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsFile {
    pub(super) ca_file: Option<String>,
    pub(super) cert_file: Option<String>,
    pub(super) key_file: Option<String>,
    pub(super) server_name: Option<String>,
    #[serde(default)]
    pub(super) insecure_skip_verify: bool,
    pub(super) min_version: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OAuth2File {
    pub(super) client_id: String,
    pub(super) client_secret: Option<String>,
    pub(super) client_secret_file: Option<String>,
    pub(super) token_url: String,
    #[serde(default)]
    pub(super) scopes: Vec<String>,
    #[serde(default)]
    pub(super) endpoint_params: BTreeMap<String, String>,
}

/// One condition as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConditionFile {
    pub(super) name: String,
    pub(super) expr: String,
    #[serde(default)]
    pub(super) severity: super::condition::Severity,
}

// serde cannot combine `flatten` with `deny_unknown_fields`, so a server's
// tunables are captured as a map and checked against `TunablesFile` by hand.
#[derive(Debug, Default)]
pub(super) struct FlatTunables(pub(super) BTreeMap<String, yaml_serde::Value>);

impl<'de> Deserialize<'de> for FlatTunables {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(FlatTunables)
    }
}
