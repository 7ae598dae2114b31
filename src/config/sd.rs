//! Discovery in Prometheus's shape: `file_sd_configs` and `http_sd_configs`
//! as written in the main file, and the lists of server entries they
//! return, validated entry by entry so that a bad entry never stops the rest.
//!
//! What a source may ask for depends on who wrote it. Files on the local
//! disk are the operator's, like the main file. An HTTP endpoint is not:
//! its entries may not start processes unless the main file allows it for
//! that endpoint, and may never read mcpmon's environment or files (no
//! `${VAR}`, no `bearer_token_env`, no `client_secret_file`), since whatever
//! they read would be sent to a URL the endpoint chose.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Secret, ServerSpec};

/// Prometheus's file_sd default.
pub(super) const FILE_SD_REFRESH: Duration = Duration::from_secs(300);
/// Prometheus's http_sd default.
pub(super) const HTTP_SD_REFRESH: Duration = Duration::from_secs(60);
/// Most servers one source may add, unless its config says otherwise: a
/// source that returns more is misbehaving (or hostile) sooner than it is
/// describing a real fleet behind one endpoint.
pub const MAX_SERVERS: usize = 1000;

/// One `file_sd_configs` entry, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct FileSd {
    /// Patterns, absolute or relative to the config file; only the last
    /// path component may hold a `*` (Prometheus's rule).
    pub files: Vec<PathBuf>,
    /// Files are read again this often, besides on every change seen.
    pub refresh_interval: Duration,
    /// Labels given to every entry (an entry's own label wins).
    pub labels: BTreeMap<String, String>,
    /// Most servers its files may add together.
    pub max_servers: usize,
    /// For `client_config_sd_configs`: the files are client configs, read
    /// as this format.
    pub client: Option<super::clients::ClientFormat>,
}

/// A discovery source's `tls:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct SdTlsFile {
    pub(in crate::config) ca_file: Option<String>,
    pub(in crate::config) cert_file: Option<String>,
    pub(in crate::config) key_file: Option<String>,
    #[serde(default)]
    pub(in crate::config) insecure_skip_verify: bool,
}

/// TLS for an http_sd endpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SdTls {
    /// CA bundle to verify the endpoint with, instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// Client key (PEM).
    pub key_file: Option<PathBuf>,
    /// Accept any certificate (testing only).
    pub insecure_skip_verify: bool,
}

/// One `http_sd_configs` entry, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpSd {
    /// The endpoint returning a JSON list of server entries.
    pub url: url::Url,
    /// How often it is asked.
    pub refresh_interval: Duration,
    /// Extra request headers; values are secrets.
    pub headers: Vec<(String, Secret)>,
    /// `Authorization: Bearer` token.
    pub bearer_token: Option<Secret>,
    /// Certificates.
    pub tls: SdTls,
    /// Labels given to every entry (an entry's own label wins).
    pub labels: BTreeMap<String, String>,
    /// Whether its entries may start processes.
    pub allow_stdio: bool,
    /// Most servers it may add.
    pub max_servers: usize,
    /// For `registry_sd_configs`: `url` is an MCP Registry's base URL,
    /// walked page by page, with this search.
    pub registry: Option<RegistryQuery>,
}

/// What a `registry_sd_configs` entry asks its registry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RegistryQuery {
    /// The registry's `search` (a substring of names), when set.
    pub search: Option<String>,
}

/// A registry is walked less often than an http_sd endpoint is asked.
pub(super) const REGISTRY_SD_REFRESH: Duration = Duration::from_secs(600);

impl HttpSd {
    /// Values that must never be published.
    pub fn secrets(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .headers
            .iter()
            .map(|(_, v)| v.expose().to_owned())
            .collect();
        out.extend(self.bearer_token.iter().map(|t| t.expose().to_owned()));
        out.extend(self.url.query().map(str::to_owned));
        out.extend(self.url.password().map(str::to_owned));
        out.retain(|s| s.len() >= 4);
        out
    }
}

/// Who wrote a list of entries, which decides what they may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// A file on the local disk: as trusted as the main file.
    Local,
    /// An HTTP endpoint.
    Remote {
        /// The main file allows its entries to start processes.
        allow_stdio: bool,
    },
}

/// How a document is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// YAML (or JSON, which YAML reads), as files are.
    Yaml,
    /// JSON only, as http_sd answers are: no aliases, no YAML surprises.
    Json,
}

/// Where a list of entries came from.
#[derive(Clone, Copy, Debug)]
pub struct EntrySource<'a> {
    /// What its entries may ask for.
    pub trust: Trust,
    /// How its documents are written.
    pub format: Format,
    /// Labels added to every entry that does not set them itself.
    pub labels: &'a BTreeMap<String, String>,
    /// Relative commands, cwds and files are resolved against this.
    pub base: &'a Path,
    /// Most entries read from one document; the rest are left out.
    pub max_servers: usize,
    /// mcpmon's own listen addresses: an entry aimed at them is refused.
    pub own_addresses: &'a [SocketAddr],
    /// `relabel_configs`, applied to each entry before it is checked.
    pub relabel: &'a [super::relabel::Relabel],
}

/// Why an entry was left out.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "snake_case")]
pub enum Rejection {
    /// It does not validate.
    Invalid,
    /// An untrusted source asked to start a process.
    StdioRefused,
    /// Past the source's `max_servers`.
    OverLimit,
    /// Its URL points at mcpmon itself.
    OwnAddress,
    /// Its id is taken by an earlier source.
    Duplicate,
    /// A client config's entry needs what mcpmon cannot supply (a
    /// person's input, an unset variable).
    NeedsConfiguration,
    /// A record with a field past its size bound, or past what the source
    /// may keep in bytes.
    TooLarge,
    /// A `relabel_configs` rule dropped it (as asked: no error).
    Dropped,
}

impl Rejection {
    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Entries left out for one reason: one, with every problem it has, or
/// (past the limit) all the rest, with one error that counts them.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejected {
    /// Why.
    pub reason: Rejection,
    /// How many entries.
    pub count: usize,
    /// Each problem, with its position in the source.
    pub errors: Vec<ConfigError>,
}

/// The entries of one source: the valid ones, each with its origin, and
/// the rest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entries {
    /// Valid servers and where each was written (`source [i]`).
    pub servers: Vec<(Arc<ServerSpec>, String)>,
    /// Entries left out.
    pub rejected: Vec<Rejected>,
    /// Risky but valid settings.
    pub warnings: Vec<ConfigError>,
}
