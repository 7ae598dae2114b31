//! The fleet file: parsing, defaults, validation and secret handling.
//!
//! Loading is pure apart from reading the file and the environment: the result
//! is either a fully resolved [`Config`] or every problem found, each naming
//! `file:line:column`. Nothing here starts tasks or touches the network.

pub mod clients;
pub mod condition;
mod depth;
mod diff;
mod duration;
pub mod ids;
pub mod kubernetes;
pub mod maintenance;
mod positions;
mod raw;
pub mod registry;
pub mod relabel;
mod sd;
pub mod slo;
mod spec;
mod validate;
pub mod watch;

pub use validate::probes;

pub use diff::Diff;
pub use duration::{Dur, MAX_DURATION, parse_duration};
pub use sd::{
    Entries, EntrySource, FileSd, Format, HttpSd, MAX_SERVERS, RegistryQuery, Rejected, Rejection,
    SdTls, Trust,
};
pub use spec::{
    Label, OAuth2Spec, OperatorWord, ServerSpec, TlsSpec, TlsVersion, TransportSpec,
    exported_label_name,
};
pub use validate::parse_entries;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

/// Protocol revisions mcpmon knows how to speak.
pub const KNOWN_VERSIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// The first revision of the modern (handshake-less) era.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The known revisions of the modern era.
const MODERN_VERSIONS: &[&str] = &[MODERN_VERSION];

/// Whether `version` is a known modern-era revision. Eras are told by
/// membership, never by comparing strings: a server may say anything.
pub fn is_modern(version: &str) -> bool {
    MODERN_VERSIONS.contains(&version)
}

/// At most `max` bytes of `s`, cut on a char boundary, with control
/// characters (newlines, ESC) replaced: text from outside (a server, a
/// discovery source) may reach logs and terminals, and is defused where it
/// comes in.
pub fn defuse(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = s[..end]
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if end < s.len() {
        out.push('…');
    }
    out
}

/// A string that must never be printed: header values, tokens, env values.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value that must never be printed.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The real value, for handing to a transport. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The level a stdio server's stderr lines are logged at.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Not logged (still kept as the child's last words).
    Off,
    /// At debug: the default, since SDKs log every request to stderr and
    /// the spec says stderr is no sign of error.
    #[default]
    Debug,
    /// At info.
    Info,
    /// At warn.
    Warn,
}

/// Which protocol era to speak to a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Try `server/discover`, fall back to `initialize` (the spec's detection).
    Auto,
    /// Pinned to one revision.
    Pinned(String),
}

// Every tunable is listed once here; the macro gives the optional form used in
// `global:` and in each server, the resolved form, and the defaults.
macro_rules! tunables {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $default:expr ;)*) => {
        /// Tunables as written in the file (`global:` or one server); all optional.
        #[derive(Clone, Debug, Default, Deserialize, PartialEq)]
        #[serde(deny_unknown_fields)]
        pub struct TunablesFile {
            $( $(#[doc = $doc])* #[serde(default)] pub $name: Option<$ty>, )*
        }

        /// Tunables resolved for one server: its own value, else global, else default.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Settings {
            $( $(#[doc = $doc])* pub $name: $ty, )*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings { $( $name: $default, )* }
            }
        }

        impl Settings {
            fn resolve(global: &TunablesFile, own: &TunablesFile) -> Settings {
                let d = Settings::default();
                let mut s = Settings {
                    $( $name: own.$name.clone().or_else(|| global.$name.clone()).unwrap_or(d.$name), )*
                };
                // Like Prometheus' scrape_timeout: an unset timeout never
                // exceeds the interval it belongs to.
                if own.ping_timeout.is_none() && global.ping_timeout.is_none() {
                    s.ping_timeout = s.ping_timeout.min(s.ping_interval);
                }
                if own.health_check_timeout.is_none() && global.health_check_timeout.is_none() {
                    s.health_check_timeout = s.health_check_timeout.min(s.health_check_interval);
                }
                s
            }
        }
    };
}

const fn secs(s: u64) -> Dur {
    Dur(Duration::from_secs(s))
}
const fn millis(ms: u64) -> Dur {
    Dur(Duration::from_millis(ms))
}

tunables! {
    /// How often the liveness probe (`ping` or `server/discover`) runs.
    ping_interval: Dur = secs(10);
    /// How long one liveness probe may take.
    ping_timeout: Dur = secs(5);
    /// Spawning or connecting plus the handshake, as one deadline.
    connect_timeout: Dur = secs(15);
    /// Deadline for other requests (`tools/list`, synthetic tool calls); a
    /// tool call's deadline is pushed back by each of its progress notifications.
    request_timeout: Dur = secs(30);
    /// No amount of progress extends a tool call past this.
    max_request_timeout: Dur = secs(300);
    /// Idle timeout of whatever sits between mcpmon and the server (proxy,
    /// load balancer); liveness probes must come more often.
    session_idle_limit: Option<Dur> = None;
    /// How often the `health_check` tool is called, when the server has one.
    health_check_interval: Dur = secs(30);
    /// How long one `health_check` call may take.
    health_check_timeout: Dur = secs(10);
    /// Name of the health tool to call when the server lists it.
    health_check_tool: String = "health_check".to_owned();
    /// Arguments passed to the health tool.
    health_check_arguments: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    /// Most numeric health_check fields exported per server.
    health_check_max_fields: usize = 16;
    /// How often the tool list is read again to catch a changed tool
    /// surface (also on every new session and on `list_changed`).
    tools_interval: Dur = secs(300);
    /// A live transport with no answer for this long is judged stuck and rebuilt.
    stuck_after: Dur = secs(60);
    /// How far back the verdict looks at probe outcomes.
    window: Dur = secs(300);
    /// Consecutive better judgements needed to improve the state.
    rise: u32 = 2;
    /// Consecutive worse judgements needed to worsen the state.
    fall: u32 = 3;
    /// Healthy needs an error ratio below this.
    healthy_max_error_ratio: f64 = 0.01;
    /// Healthy needs a median liveness latency below this.
    healthy_max_latency: Dur = millis(500);
    /// Degraded needs an error ratio below this (else unhealthy).
    degraded_max_error_ratio: f64 = 0.05;
    /// Degraded needs a median liveness latency below this (else unhealthy).
    degraded_max_latency: Dur = secs(1);
    /// First reconnect delay.
    backoff_initial: Dur = secs(1);
    /// Reconnect delay cap.
    backoff_max: Dur = secs(60);
    /// A session that stayed up this long resets the backoff.
    backoff_reset_after: Dur = secs(60);
    /// `auto`, or a protocol revision to pin.
    protocol: String = "auto".to_owned();
    /// The level a stdio server's stderr is logged at: off, debug, info, warn.
    stderr_log_level: LogLevel = LogLevel::Debug;
    /// The objectives `mcpmon slo` writes for the server.
    slo: slo::Slo = slo::Slo::default();
}

/// When `/health/fleet` answers 200.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FleetPolicy {
    /// Least share of servers (percent) that must be available.
    pub min_available_percentage: f64,
    /// Whether degraded servers count as available.
    pub degraded_is_available: bool,
}

impl Default for FleetPolicy {
    fn default() -> Self {
        FleetPolicy {
            min_available_percentage: 100.0,
            degraded_is_available: true,
        }
    }
}

/// A loaded, valid configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Where it was read from.
    pub path: PathBuf,
    /// Fleet-level `/health/fleet` policy.
    pub fleet: FleetPolicy,
    /// Servers in file order.
    pub servers: Vec<Arc<ServerSpec>>,
    /// Where each server was written (`file servers[i]`), by id, to name
    /// both origins of a duplicate id.
    pub origins: BTreeMap<String, String>,
    /// `global:` as written, which discovered entries resolve against too.
    pub global: TunablesFile,
    /// Files of server entries, watched.
    pub file_sd: Vec<FileSd>,
    /// Endpoints returning server entries, polled.
    pub http_sd: Vec<HttpSd>,
    /// Kubernetes objects watched for servers.
    pub kubernetes_sd: Vec<kubernetes::KubeSd>,
    /// Rules every discovered entry passes through, in order.
    pub relabel: Vec<relabel::Relabel>,
    /// Maintenance windows.
    pub maintenance: Vec<maintenance::Window>,
    /// Risky but valid settings, with positions.
    pub warnings: Vec<ConfigError>,
}

impl Config {
    /// Every server's secrets, and those of the discovery endpoints.
    pub fn secrets(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .servers
            .iter()
            .filter(|s| s.trust == Trust::Local)
            .flat_map(|s| s.secrets())
            .collect();
        for sd in &self.http_sd {
            out.extend(sd.secrets());
        }
        out
    }
}

/// One problem in a config file, with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: usize,
    /// 1-based column, when known.
    pub column: usize,
    /// What is wrong, naming the field and value.
    pub message: String,
}

impl ConfigError {
    /// A problem of `file` as a whole, at no position in it.
    pub fn whole_file(file: &Path, message: String) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: 0,
            column: 0,
            message,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}: {}", self.file.display(), self.message);
        }
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

/// Every problem found in one config file.
#[derive(Debug, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The file at `path` could not be read.
    pub fn unreadable(path: &Path, e: &std::io::Error) -> ConfigErrors {
        let message = format!("cannot read config file: {e}");
        ConfigErrors(vec![ConfigError::whole_file(path, message)])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Read and validate a config file, expanding `${VAR}` from the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors::unreadable(path, &e))?;
    parse(path, &text, &|name| std::env::var(name).ok())
}

/// Validate config text; `env` resolves `${VAR}` and `*_env` names.
pub fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    validate::parse(path, text, env)
}
