//! One server, resolved: how it is reached (transport, TLS, OAuth), what
//! it is called and labelled, and what its operator says of it. What the
//! supervisors run and the state reports on; made by `validate`.

use std::path::PathBuf;

use super::{Protocol, Secret, Settings, Trust, condition, probes};

/// How to reach one server.
#[derive(Clone, Debug, PartialEq)]
pub enum TransportSpec {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio {
        /// Program to run (resolved against the config file's directory if relative with a `/`).
        command: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment; values are secrets.
        env: Vec<(String, Secret)>,
        /// Variables of mcpmon's own environment passed through, beyond
        /// [`crate::transport::child::ENV_ALLOWLIST`].
        inherit_env: Vec<String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint, or (`sse`) a legacy HTTP+SSE one.
    Http {
        /// The MCP endpoint URL (for `sse`, the URL of the event stream).
        url: url::Url,
        /// The legacy HTTP+SSE transport of 2024-11-05: a GET opens an
        /// event stream whose first event names the URL to POST to.
        sse: bool,
        /// Extra request headers; values are secrets.
        headers: Vec<(String, Secret)>,
        /// `Authorization: Bearer` token.
        bearer_token: Option<Secret>,
        /// OAuth 2.0 client credentials: tokens fetched and refreshed
        /// (boxed: rare, and larger than the rest of the variant).
        oauth2: Option<Box<OAuth2Spec>>,
        /// TLS settings beyond the defaults (boxed, as rare).
        tls: Option<Box<TlsSpec>>,
    },
}

/// TLS to an HTTPS server, in Prometheus's `tls_config` shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsSpec {
    /// CA certificates (PEM) to verify the server with, instead of the
    /// system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// Client key (PEM), with `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The name to ask for (SNI) and verify, instead of the URL's host.
    pub server_name: Option<String>,
    /// Accept any certificate (its expiry is still reported).
    pub insecure_skip_verify: bool,
    /// The least TLS version.
    pub min_version: Option<TlsVersion>,
}

/// A TLS version, as `min_version` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    /// `TLS12`.
    Tls12,
    /// `TLS13`.
    Tls13,
}

/// OAuth 2.0 client credentials (RFC 6749 §4.4), as Prometheus's `oauth2:`.
#[derive(Clone, Debug, PartialEq)]
pub struct OAuth2Spec {
    /// The client id.
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
    /// Where tokens are asked for.
    pub token_url: url::Url,
    /// Scopes asked for.
    pub scopes: Vec<String>,
    /// Extra form parameters of the token request; values are secrets.
    pub endpoint_params: Vec<(String, Secret)>,
}

impl TransportSpec {
    /// `stdio`, `http` or `sse`, as used in labels and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            TransportSpec::Stdio { .. } => "stdio",
            TransportSpec::Http { sse: false, .. } => "http",
            TransportSpec::Http { sse: true, .. } => "sse",
        }
    }
}

/// One server, fully resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSpec {
    /// Unique id, used as the `server` label.
    pub id: String,
    /// How to reach it.
    pub transport: TransportSpec,
    /// Its timers and thresholds.
    pub settings: Settings,
    /// Which era to speak.
    pub protocol: Protocol,
    /// Its synthetic probes, by kind.
    pub probes: probes::Probes,
    /// Every value a `${VAR}` in this server's entry expanded to: secrets,
    /// whatever field they landed in (a URL path, an argument).
    pub expanded: Vec<Secret>,
    /// Tools the server must list (`tools_missing` otherwise).
    pub expected_tools: Vec<String>,
    /// Conditions on the health report and on the tool list.
    pub conditions: Vec<condition::Condition>,
    /// The operator's labels, as written, with the Prometheus label name
    /// each is exported under (`label_` and the name sanitised), sorted by
    /// that name.
    pub labels: Vec<Label>,
    /// Who wrote the entry: the operator (the main file, a local file), or
    /// an http_sd endpoint.
    pub trust: Trust,
    /// This server's secrets, scrubbed from its own texts.
    pub scrubber: std::sync::Arc<crate::redact::Scrubber>,
    /// What the operator that runs it says of it (a Kubernetes operator's
    /// phase and Ready condition), shown beside mcpmon's own verdict. Not
    /// part of how the server is reached: a change never restarts its
    /// session (see [`ServerSpec::same_session`]).
    pub operator: Option<OperatorWord>,
}

/// What the operator that runs a server says of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OperatorWord {
    /// Who says it (the object's kind: `MCPServer`, `VirtualMCPServer`…).
    pub kind: String,
    /// Its phase (`Ready`, `Pending`, `Failed`, `Degraded`…), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Whether it says the server is ready, when it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}

/// One operator label of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The name as written in the config.
    pub name: String,
    /// `label_<name>` with everything outside `[a-zA-Z0-9_]` as `_`.
    pub exported: String,
    /// The value.
    pub value: String,
}

/// The Prometheus label name an operator label is exported under, the way
/// kube-state-metrics exports Kubernetes labels.
pub fn exported_label_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("label_{clean}")
}

impl ServerSpec {
    /// Whether a session opened for `self` serves `other` as well: every
    /// field but what the operator says. Each field is named, so a new one
    /// must be placed on one side or the other.
    pub fn same_session(&self, other: &ServerSpec) -> bool {
        let ServerSpec {
            id,
            transport,
            settings,
            protocol,
            probes,
            expanded,
            expected_tools,
            conditions,
            labels,
            trust,
            scrubber,
            operator: _,
        } = self;
        *id == other.id
            && *transport == other.transport
            && *settings == other.settings
            && *protocol == other.protocol
            && *probes == other.probes
            && *expanded == other.expanded
            && *expected_tools == other.expected_tools
            && *conditions == other.conditions
            && *labels == other.labels
            && *trust == other.trust
            && *scrubber == other.scrubber
    }

    /// What the operator marked secret: header values, tokens, OAuth
    /// credentials, the URL's credentials and query, and every value a
    /// `${VAR}` expanded to. A literal `env:` value is configuration.
    pub fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.transport {
            TransportSpec::Stdio { .. } => {}
            TransportSpec::Http {
                url,
                headers,
                bearer_token,
                oauth2,
                ..
            } => {
                out.extend(headers.iter().map(|(_, v)| v.expose().to_owned()));
                out.extend(bearer_token.iter().map(|t| t.expose().to_owned()));
                if let Some(o) = oauth2 {
                    out.push(o.client_secret.expose().to_owned());
                    out.extend(o.endpoint_params.iter().map(|(_, v)| v.expose().to_owned()));
                }
                out.extend(url.query().map(str::to_owned));
                out.extend(url.password().map(str::to_owned));
                out.extend((!url.username().is_empty()).then(|| url.username().to_owned()));
            }
        }
        out.extend(self.expanded.iter().map(|s| s.expose().to_owned()));
        // Very short values would redact ordinary words; mcpmon never logs them itself.
        out.retain(|s| s.len() >= 4);
        out
    }
}
