//! The fleet file: parsing, defaults, validation and secret handling.
//!
//! Loading is pure apart from reading the file and the environment: the result
//! is either a fully resolved [`Config`] or every problem found, each naming
//! `file:line:column`. Nothing here starts tasks or touches the network.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

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

/// A duration written as `250ms`, `5s`, `2m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(text.trim())
            .map(Dur)
            .map_err(|e| {
                de::Error::custom(format!(
                    "invalid duration {text:?} ({e}); write it like 250ms, 5s or 2m"
                ))
            })
    }
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

/// Which protocol era to speak to a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Try `server/discover`, fall back to `initialize` (the spec's detection).
    Auto,
    /// Pinned to one revision.
    Pinned(String),
}

impl Protocol {
    /// True when pinned to the modern era.
    pub fn is_pinned_modern(&self) -> bool {
        matches!(self, Protocol::Pinned(v) if is_modern(v))
    }
}

// Every tunable is listed once here; the macro gives the optional form used in
// `global:` and in each server, the resolved form, and the defaults.
macro_rules! tunables {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $default:expr ;)*) => {
        /// Tunables as written in the file (`global:` or one server); all optional.
        #[derive(Clone, Debug, Default, Deserialize)]
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
    /// Healthy needs a mean liveness latency below this.
    healthy_max_latency: Dur = millis(500);
    /// Degraded needs an error ratio below this (else unhealthy).
    degraded_max_error_ratio: f64 = 0.05;
    /// Degraded needs a mean liveness latency below this (else unhealthy).
    degraded_max_latency: Dur = secs(1);
    /// First reconnect delay.
    backoff_initial: Dur = secs(1);
    /// Reconnect delay cap.
    backoff_max: Dur = secs(60);
    /// A session that stayed up this long resets the backoff.
    backoff_reset_after: Dur = secs(60);
    /// `auto`, or a protocol revision to pin.
    protocol: String = "auto".to_owned();
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    global: TunablesFile,
    #[serde(default)]
    fleet: FleetPolicy,
    #[serde(default)]
    servers: Vec<ServerFile>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum TransportKind {
    Stdio,
    Http,
}

// No `deny_unknown_fields` here: with `flatten` every unknown key lands in
// `tunables`, which is then checked strictly.
#[derive(Debug, Deserialize)]
struct ServerFile {
    id: String,
    transport: TransportKind,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Names of mcpmon's own environment variables passed through to the child.
    #[serde(default)]
    inherit_env: Vec<String>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Name of an environment variable holding a bearer token.
    bearer_token_env: Option<String>,
    #[serde(default)]
    tool_probes: Vec<ToolProbeFile>,
    #[serde(flatten)]
    tunables: FlatTunables,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolProbeFile {
    tool: String,
    #[serde(default)]
    arguments: serde_json::Map<String, serde_json::Value>,
    interval: Dur,
    request_timeout: Option<Dur>,
    max_request_timeout: Option<Dur>,
}

/// A synthetic tool call made on a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolProbe {
    /// Tool name (a config value, so safe as a label).
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// How often it is called; an overdue call is skipped, never stacked.
    pub interval: Duration,
    /// Deadline without progress; each progress notification resets it.
    pub request_timeout: Duration,
    /// Deadline that progress never extends.
    pub max_request_timeout: Duration,
}

// serde cannot combine `flatten` with `deny_unknown_fields`, so a server's
// tunables are captured as a map and checked against `TunablesFile` by hand.
#[derive(Debug, Default)]
struct FlatTunables(BTreeMap<String, yaml_serde::Value>);

impl<'de> Deserialize<'de> for FlatTunables {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(FlatTunables)
    }
}

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
    /// A Streamable HTTP endpoint.
    Http {
        /// The MCP endpoint URL.
        url: reqwest::Url,
        /// Extra request headers; values are secrets.
        headers: Vec<(String, Secret)>,
        /// `Authorization: Bearer` token.
        bearer_token: Option<Secret>,
    },
}

impl TransportSpec {
    /// `stdio` or `http`, as used in labels and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            TransportSpec::Stdio { .. } => "stdio",
            TransportSpec::Http { .. } => "http",
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
    /// Synthetic tool calls.
    pub tool_probes: Vec<ToolProbe>,
}

impl ServerSpec {
    /// Values that must never be published: header values, tokens, env
    /// values, and the URL's query and password.
    pub fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.transport {
            TransportSpec::Stdio { env, .. } => {
                out.extend(env.iter().map(|(_, v)| v.expose().to_owned()));
            }
            TransportSpec::Http {
                url,
                headers,
                bearer_token,
            } => {
                out.extend(headers.iter().map(|(_, v)| v.expose().to_owned()));
                out.extend(bearer_token.iter().map(|t| t.expose().to_owned()));
                out.extend(url.query().map(str::to_owned));
                out.extend(url.password().map(str::to_owned));
            }
        }
        // Very short values would redact ordinary words; mcpmon never logs them itself.
        out.retain(|s| s.len() >= 4);
        out
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
    pub servers: Vec<ServerSpec>,
    /// Risky but valid settings, with positions.
    pub warnings: Vec<ConfigError>,
}

impl Config {
    /// Every server's secrets.
    pub fn secrets(&self) -> Vec<String> {
        self.servers.iter().flat_map(ServerSpec::secrets).collect()
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
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_owned(),
            line: 0,
            column: 0,
            message: format!("cannot read config file: {e}"),
        }])
    })?;
    parse(path, &text, &|name| std::env::var(name).ok())
}

/// Validate config text; `env` resolves `${VAR}` and `*_env` names.
pub fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let doc: FileDoc = yaml_serde::from_str(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        ConfigErrors(vec![ConfigError {
            file: path.to_owned(),
            line,
            column,
            message: strip_position(&e.to_string()),
        }])
    })?;
    let mut v = Validator {
        path,
        text,
        env,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let mut config = v.check(doc);
    if v.errors.is_empty() {
        v.warnings.sort_by_key(|e| (e.line, e.column));
        config.warnings = v.warnings;
        Ok(config)
    } else {
        v.errors.sort_by_key(|e| (e.line, e.column));
        Err(ConfigErrors(v.errors))
    }
}

/// yaml_serde puts " at line L column C" into messages; the position is
/// reported separately, so drop it from the text.
fn strip_position(message: &str) -> String {
    let Some(start) = message.find(" at line ") else {
        return message.to_owned();
    };
    let rest = &message[start + " at line ".len()..];
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let after_line = &rest[digits(rest)..];
    let Some(col) = after_line.strip_prefix(" column ") else {
        return message.to_owned();
    };
    format!("{}{}", &message[..start], &col[digits(col)..])
}

struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl Validator<'_> {
    fn at(&self, at: &[Seg], message: String) -> ConfigError {
        let (line, column) = locate(self.text, at).unwrap_or((0, 0));
        ConfigError {
            file: self.path.to_owned(),
            line,
            column,
            message,
        }
    }

    fn error(&mut self, at: &[Seg], message: String) {
        let e = self.at(at, message);
        self.errors.push(e);
    }

    fn warn(&mut self, at: &[Seg], message: String) {
        let e = self.at(at, message);
        self.warnings.push(e);
    }

    fn check(&mut self, doc: FileDoc) -> Config {
        let g = [Seg::key("global")];
        self.check_tunables(&doc.global, &g);
        let global = Settings::resolve(&doc.global, &TunablesFile::default());
        let written = written_keys(&doc.global);
        self.check_timers(&global, &g, "", &|k| written.contains(&k));
        let f = [Seg::key("fleet"), Seg::key("min_available_percentage")];
        if !(0.0..=100.0).contains(&doc.fleet.min_available_percentage) {
            self.error(
                &f,
                format!(
                    "fleet.min_available_percentage must be between 0 and 100, got {}",
                    doc.fleet.min_available_percentage
                ),
            );
        }
        let mut seen = HashSet::new();
        let mut servers = Vec::new();
        for (i, server) in doc.servers.into_iter().enumerate() {
            let at = [Seg::key("servers"), Seg::Index(i)];
            if let Some(spec) = self.check_server(server, &doc.global, &at, &mut seen) {
                servers.push(spec);
            }
        }
        Config {
            path: self.path.to_owned(),
            fleet: doc.fleet,
            servers,
            warnings: Vec::new(),
        }
    }

    fn check_server(
        &mut self,
        s: ServerFile,
        global: &TunablesFile,
        at: &[Seg],
        seen: &mut HashSet<String>,
    ) -> Option<ServerSpec> {
        let field = |name: &str| -> Vec<Seg> {
            let mut p = at.to_vec();
            p.push(Seg::key(name));
            p
        };
        if s.id.is_empty()
            || !s
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            self.error(
                &field("id"),
                format!("server id {:?} must match [a-zA-Z0-9_.-]+", s.id),
            );
        } else if !seen.insert(s.id.clone()) {
            self.error(&field("id"), format!("duplicate server id {:?}", s.id));
        }
        // The flattened map holds both tunables and any misspelt key.
        let own: TunablesFile = match yaml_serde::to_value(&s.tunables.0)
            .and_then(yaml_serde::from_value::<TunablesFile>)
        {
            Ok(t) => t,
            Err(e) => {
                let msg = strip_position(&e.to_string());
                let key = unknown_field_name(&msg).unwrap_or_default();
                let target = if key.is_empty() {
                    at.to_vec()
                } else {
                    field(&key)
                };
                self.error(&target, format!("server {:?}: {msg}", s.id));
                TunablesFile::default()
            }
        };
        self.check_tunables(&own, at);
        let settings = Settings::resolve(global, &own);
        // Contradictions may come from mixing global and per-server values,
        // so the resolved timers are checked against the server's own keys.
        let written = written_keys(&own);
        self.check_timers(&settings, at, &format!("server {:?}: ", s.id), &|k| {
            written.contains(&k)
        });
        let mut tool_probes = Vec::new();
        for (i, tp) in s.tool_probes.into_iter().enumerate() {
            let mut p = field("tool_probes");
            p.push(Seg::Index(i));
            let request_timeout = tp.request_timeout.unwrap_or(settings.request_timeout).0;
            let max_request_timeout = tp
                .max_request_timeout
                .unwrap_or(settings.max_request_timeout)
                .0;
            if tp.interval.0.is_zero() {
                self.error(
                    &p,
                    format!(
                        "tool probe {:?}: interval must be greater than zero",
                        tp.tool
                    ),
                );
            }
            if request_timeout > max_request_timeout {
                self.error(
                    &p,
                    format!(
                        "tool probe {:?}: request_timeout ({}) is longer than max_request_timeout ({})",
                        tp.tool,
                        humantime::format_duration(request_timeout),
                        humantime::format_duration(max_request_timeout)
                    ),
                );
            }
            if max_request_timeout > tp.interval.0 {
                self.warn(
                    &p,
                    format!(
                        "tool probe {:?}: max_request_timeout ({}) is longer than its interval ({}); overdue calls will be skipped",
                        tp.tool,
                        humantime::format_duration(max_request_timeout),
                        humantime::format_duration(tp.interval.0)
                    ),
                );
            }
            tool_probes.push(ToolProbe {
                tool: tp.tool,
                arguments: tp.arguments,
                interval: tp.interval.0,
                request_timeout,
                max_request_timeout,
            });
        }
        let protocol = if settings.protocol == "auto" {
            Protocol::Auto
        } else {
            Protocol::Pinned(settings.protocol.clone())
        };

        let transport = match s.transport {
            TransportKind::Stdio => {
                for (name, present) in [
                    ("url", s.url.is_some()),
                    ("headers", !s.headers.is_empty()),
                    ("bearer_token_env", s.bearer_token_env.is_some()),
                ] {
                    if present {
                        self.error(
                            &field(name),
                            format!("`{name}` applies to http servers, not stdio"),
                        );
                    }
                }
                for (i, name) in s.inherit_env.iter().enumerate() {
                    let ok = !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !ok {
                        let mut p = field("inherit_env");
                        p.push(Seg::Index(i));
                        self.error(
                            &p,
                            format!("{name:?} is not an environment variable name ([A-Za-z0-9_]+)"),
                        );
                    }
                }
                let Some(command) = s
                    .command
                    .as_deref()
                    .map(|c| self.expand(c, &field("command")))
                else {
                    self.error(at, format!("server {:?}: stdio needs `command`", s.id));
                    return None;
                };
                let base = self.path.parent().unwrap_or(Path::new("."));
                let command = PathBuf::from(command);
                let command = if command.is_relative() && command.components().count() > 1 {
                    base.join(command)
                } else {
                    command
                };
                let args = s
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        let mut p = field("args");
                        p.push(Seg::Index(i));
                        self.expand(a, &p)
                    })
                    .collect();
                let env = s
                    .env
                    .iter()
                    .map(|(k, v)| {
                        let mut p = field("env");
                        p.push(Seg::key(k));
                        (k.clone(), Secret(self.expand(v, &p)))
                    })
                    .collect();
                let cwd = s
                    .cwd
                    .as_deref()
                    .map(|c| base.join(self.expand(c, &field("cwd"))));
                TransportSpec::Stdio {
                    command,
                    args,
                    env,
                    inherit_env: s.inherit_env.clone(),
                    cwd,
                }
            }
            TransportKind::Http => {
                for (name, present) in [
                    ("command", s.command.is_some()),
                    ("args", !s.args.is_empty()),
                    ("env", !s.env.is_empty()),
                    ("inherit_env", !s.inherit_env.is_empty()),
                    ("cwd", s.cwd.is_some()),
                ] {
                    if present {
                        self.error(
                            &field(name),
                            format!("`{name}` applies to stdio servers, not http"),
                        );
                    }
                }
                let Some(raw) = s.url.as_deref() else {
                    self.error(at, format!("server {:?}: http needs `url`", s.id));
                    return None;
                };
                let expanded = self.expand(raw, &field("url"));
                let url = match reqwest::Url::parse(&expanded) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => u,
                    Ok(u) => {
                        self.error(
                            &field("url"),
                            format!("url scheme {:?} is not http or https", u.scheme()),
                        );
                        return None;
                    }
                    Err(e) => {
                        // The raw text may hold an expanded secret: name only the written form.
                        self.error(&field("url"), format!("invalid url {raw:?}: {e}"));
                        return None;
                    }
                };
                let mut headers = Vec::new();
                for (k, v) in &s.headers {
                    let mut p = field("headers");
                    p.push(Seg::key(k));
                    if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                        self.error(&p, format!("invalid header name {k:?}"));
                        continue;
                    }
                    let value = self.expand(v, &p);
                    if reqwest::header::HeaderValue::from_str(&value).is_err() {
                        self.error(
                            &p,
                            format!("header {k:?} has a value that is not valid in HTTP"),
                        );
                        continue;
                    }
                    headers.push((k.clone(), Secret(value)));
                }
                let bearer_token = s.bearer_token_env.as_deref().and_then(|var| {
                    let token = (self.env)(var);
                    if token.is_none() {
                        self.error(
                            &field("bearer_token_env"),
                            format!(
                                "environment variable {var:?} named by bearer_token_env is not set"
                            ),
                        );
                    }
                    token.map(Secret)
                });
                TransportSpec::Http {
                    url,
                    headers,
                    bearer_token,
                }
            }
        };
        Some(ServerSpec {
            id: s.id,
            transport,
            settings,
            protocol,
            tool_probes,
        })
    }

    /// Range and consistency checks on tunables written at `at`.
    fn check_tunables(&mut self, t: &TunablesFile, at: &[Seg]) {
        let key = |name: &str| {
            let mut p = at.to_vec();
            p.push(Seg::key(name));
            p
        };
        let positive = [
            ("max_request_timeout", t.max_request_timeout),
            ("ping_interval", t.ping_interval),
            ("ping_timeout", t.ping_timeout),
            ("connect_timeout", t.connect_timeout),
            ("request_timeout", t.request_timeout),
            ("health_check_interval", t.health_check_interval),
            ("health_check_timeout", t.health_check_timeout),
            ("stuck_after", t.stuck_after),
            ("window", t.window),
            ("backoff_initial", t.backoff_initial),
            ("backoff_max", t.backoff_max),
        ];
        for (name, value) in positive {
            if value.is_some_and(|d| d.0.is_zero()) {
                self.error(&key(name), format!("{name} must be greater than zero"));
            }
        }
        if let (Some(initial), Some(max)) = (t.backoff_initial, t.backoff_max)
            && initial > max
        {
            self.error(
                &key("backoff_initial"),
                "backoff_initial is longer than backoff_max".to_owned(),
            );
        }
        for (name, v) in [("rise", t.rise), ("fall", t.fall)] {
            if v == Some(0) {
                self.error(&key(name), format!("{name} must be at least 1"));
            }
        }
        for (name, v) in [
            ("healthy_max_error_ratio", t.healthy_max_error_ratio),
            ("degraded_max_error_ratio", t.degraded_max_error_ratio),
        ] {
            if v.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                self.error(&key(name), format!("{name} must be between 0 and 1"));
            }
        }
        if let Some(p) = &t.protocol
            && p != "auto"
            && !KNOWN_VERSIONS.contains(&p.as_str())
        {
            self.error(
                &key("protocol"),
                format!(
                    "unknown protocol {p:?}; use auto or one of {}",
                    KNOWN_VERSIONS.join(", ")
                ),
            );
        }
    }

    /// The timers must not contradict each other (errors) and should leave
    /// room for judgement (warnings). `at` is where they were written; `owns`
    /// says which keys were written there, so that a server is only told
    /// about problems its own keys take part in.
    fn check_timers(&mut self, s: &Settings, at: &[Seg], who: &str, owns: &dyn Fn(&str) -> bool) {
        let f = |d: Dur| humantime::format_duration(d.0).to_string();
        let mut found: Vec<(bool, &str, &[&str], String)> = Vec::new();
        if s.ping_timeout > s.ping_interval {
            found.push((
                true,
                "ping_timeout",
                &["ping_timeout", "ping_interval"],
                format!(
                    "ping_timeout ({}) is longer than ping_interval ({}): probes would overlap",
                    f(s.ping_timeout),
                    f(s.ping_interval)
                ),
            ));
        }
        if s.request_timeout > s.max_request_timeout {
            found.push((
                true,
                "request_timeout",
                &["request_timeout", "max_request_timeout"],
                format!(
                    "request_timeout ({}) is longer than max_request_timeout ({})",
                    f(s.request_timeout),
                    f(s.max_request_timeout)
                ),
            ));
        }
        if s.stuck_after <= s.ping_timeout {
            found.push((
                true,
                "stuck_after",
                &["stuck_after", "ping_timeout"],
                format!(
                    "stuck_after ({}) must be longer than ping_timeout ({}): every late answer would be judged stuck",
                    f(s.stuck_after),
                    f(s.ping_timeout)
                ),
            ));
        } else if s.stuck_after.0 < s.ping_interval.0 * 3 {
            found.push((
                false,
                "stuck_after",
                &["stuck_after", "ping_interval"],
                format!(
                    "stuck_after ({}) allows fewer than 3 liveness probes ({} apart) before a server is judged stuck and restarted",
                    f(s.stuck_after),
                    f(s.ping_interval)
                ),
            ));
        }
        if let Some(idle) = s.session_idle_limit {
            if s.ping_interval >= idle {
                found.push((
                    true,
                    "ping_interval",
                    &["ping_interval", "session_idle_limit"],
                    format!(
                        "ping_interval ({}) must be shorter than session_idle_limit ({}): the session would be cut between probes",
                        f(s.ping_interval),
                        f(idle)
                    ),
                ));
            } else if s.ping_interval.0 * 5 > idle.0 * 4 {
                found.push((
                    false,
                    "ping_interval",
                    &["ping_interval", "session_idle_limit"],
                    format!(
                        "ping_interval ({}) is within 20% of session_idle_limit ({})",
                        f(s.ping_interval),
                        f(idle)
                    ),
                ));
            }
        }
        if s.ping_timeout.0 < Duration::from_millis(100) {
            found.push((
                false,
                "ping_timeout",
                &["ping_timeout"],
                format!(
                    "ping_timeout ({}) is shorter than 100ms: scheduling noise alone will read as lateness",
                    f(s.ping_timeout)
                ),
            ));
        }
        for (is_error, key, involved, message) in found {
            if !involved.iter().any(|k| owns(k)) {
                continue;
            }
            // Point at the key that was written here (the first one involved).
            let written = involved.iter().find(|k| owns(k)).copied().unwrap_or(key);
            let mut p = at.to_vec();
            p.push(Seg::key(written));
            let message = format!("{who}{message}");
            if is_error {
                self.error(&p, message);
            } else {
                self.warn(&p, message);
            }
        }
    }

    /// Expand `${VAR}` references; an unset variable is an error naming it.
    fn expand(&mut self, raw: &str, at: &[Seg]) -> String {
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                self.error(at, "unterminated ${ in value".to_owned());
                return out;
            };
            let name = &after[..end];
            match (self.env)(name) {
                Some(v) => out.push_str(&v),
                None => self.error(at, format!("environment variable {name:?} is not set")),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// Names of the timer keys written in one block.
fn written_keys(t: &TunablesFile) -> Vec<&'static str> {
    [
        ("ping_interval", t.ping_interval.is_some()),
        ("ping_timeout", t.ping_timeout.is_some()),
        ("request_timeout", t.request_timeout.is_some()),
        ("max_request_timeout", t.max_request_timeout.is_some()),
        ("stuck_after", t.stuck_after.is_some()),
        ("session_idle_limit", t.session_idle_limit.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect()
}

fn unknown_field_name(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// One step of a path into the YAML document.
#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

impl Seg {
    fn key(k: &str) -> Seg {
        Seg::Key(k.to_owned())
    }
}

/// Finds the line and column of the node at `path` by walking the document
/// with the YAML parser and failing on purpose at that node: the parser
/// attaches the node's position to the error. Missing nodes locate their
/// nearest existing parent.
fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    for len in (0..=path.len()).rev() {
        let seed = Locate { path: &path[..len] };
        let de = yaml_serde::Deserializer::from_str(text);
        if let Err(e) = seed.deserialize(de)
            && e.to_string().contains(HERE)
        {
            return e.location().map(|l| (l.line(), l.column()));
        }
    }
    None
}

const HERE: &str = "\u{0}here";

struct Locate<'p> {
    path: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.path.is_empty() {
            // Fails at this node, so the error carries its position.
            return d.deserialize_any(Here);
        }
        d.deserialize_any(self)
    }
}

struct Here;

impl<'de> Visitor<'de> for Here {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("anything")
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(HERE))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(HERE))
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map or a list")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Seg::Key(want) = &self.path[0] else {
            return Err(de::Error::custom("not here"));
        };
        while let Some(k) = map.next_key::<String>()? {
            if &k == want {
                return map.next_value_seed(Locate {
                    path: &self.path[1..],
                });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Err(de::Error::custom("not here"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Seg::Index(want) = self.path[0] else {
            return Err(de::Error::custom("not here"));
        };
        for _ in 0..want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Err(de::Error::custom("not here"));
            }
        }
        seq.next_element_seed(Locate {
            path: &self.path[1..],
        })?;
        Err(de::Error::custom("not here"))
    }
}
