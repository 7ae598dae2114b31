//! Validation of the file as written into resolved specs: every problem
//! in one pass, each with file:line:column, field and value.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::discovery::{FILE_SD_REFRESH, HTTP_SD_REFRESH};
use super::positions::{Locator, Seg, check_aliases};
use super::raw::{FileDoc, FileSdFile, HttpSdFile, ServerFile, TransportKind};
use super::*;

/// See [`super::parse`].
pub(super) fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut v = Validator::new(path, text, env, Trust::Local);
    if let Err(e) = check_aliases(text) {
        return Err(ConfigErrors(vec![ConfigError {
            file: path.to_owned(),
            line: e.line,
            column: e.column,
            message: e.message,
        }]));
    }
    let mut config = match yaml_serde::from_str::<FileDoc>(text) {
        Ok(doc) => v.check(Doc {
            global: doc.global,
            fleet: doc.fleet,
            servers: doc.servers.into_iter().enumerate().collect(),
            file_sd: doc.file_sd_configs,
            http_sd: doc.http_sd_configs,
        }),
        Err(e) => {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            let first = ConfigError {
                file: path.to_owned(),
                line,
                column,
                message: strip_position(&e.to_string()),
            };
            // A syntax error stops everything; a type error or an unknown
            // key stops only the part it is in: the rest is still checked.
            let Ok(value) = yaml_serde::from_str::<yaml_serde::Value>(text) else {
                return Err(ConfigErrors(vec![first]));
            };
            v.check_leniently(value, first)
        }
    };
    if v.errors.is_empty() {
        v.warnings.sort_by_key(|e| (e.line, e.column));
        config.warnings = v.warnings;
        Ok(config)
    } else {
        v.errors.sort_by_key(|e| (e.line, e.column));
        Err(ConfigErrors(v.errors))
    }
}

/// A message without its leading path (`servers[0].transport: `), to tell
/// whether two errors are about the same problem.
pub(super) fn problem(message: &str) -> &str {
    match message.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') => rest,
        _ => message,
    }
}

/// yaml_serde puts " at line L column C" into messages; the position is
/// reported separately, so drop it from the text.
pub(super) fn strip_position(message: &str) -> String {
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

/// The main file's parts, each deserialized (or left at its default when
/// it failed, with the error recorded).
struct Doc {
    global: TunablesFile,
    fleet: FleetPolicy,
    servers: Vec<(usize, ServerFile)>,
    file_sd: Vec<FileSdFile>,
    http_sd: Vec<HttpSdFile>,
}

/// See [`super::parse_entries`].
pub(super) fn parse_entries(
    origin: &Path,
    text: &str,
    global: &TunablesFile,
    source: &super::EntrySource,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<super::Entries, ConfigError> {
    let whole = |line, column, message: &str| ConfigError {
        file: origin.to_owned(),
        line,
        column,
        message: defuse(message, 500),
    };
    let list: Vec<Entry<'_>> = match source.format {
        // Each entry stays text until its turn comes: a source that lists
        // sixty thousand costs their text, not their trees.
        super::Format::Json => {
            match serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text) {
                Ok(list) => list.into_iter().map(Entry::Json).collect(),
                // JSON, but not a list.
                Err(_) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                    return Err(whole(1, 1, "expected a JSON list of server entries"));
                }
                Err(e) => {
                    return Err(whole(e.line(), e.column(), &format!("not JSON: {e}")));
                }
            }
        }
        super::Format::Yaml => {
            // Aliases are counted before any value is built.
            if let Err(e) = check_aliases(text) {
                return Err(whole(e.line, e.column, &e.message));
            }
            match yaml_serde::from_str::<yaml_serde::Value>(text) {
                Ok(yaml_serde::Value::Sequence(list)) => {
                    list.into_iter().map(Entry::Yaml).collect()
                }
                Ok(yaml_serde::Value::Null) => Vec::new(),
                Ok(_) => return Err(whole(1, 1, "expected a list of server entries")),
                Err(e) => {
                    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
                    return Err(whole(line, column, &strip_position(&e.to_string())));
                }
            }
        }
    };
    let mut v = Validator::new(origin, text, env, source.trust);
    v.base = source.base.to_owned();
    let mut out = super::Entries::default();
    let mut seen = HashSet::new();
    let total = list.len();
    for (i, entry) in list.into_iter().enumerate() {
        if i == source.max_servers {
            if let Entry::Json(raw) = &entry {
                v.positions.enter(i, raw.get());
            }
            let e = v.at(
                &[Seg::Index(i)],
                format!(
                    "{} of {total} entries left out: this source may add at most {} servers (max_servers)",
                    total - i,
                    source.max_servers
                ),
            );
            out.rejected.push(super::Rejected {
                reason: super::Rejection::OverLimit,
                count: total - i,
                errors: vec![e],
            });
            break;
        }
        if let Some(rejected) = v.entry(entry, i, global, source, &mut seen, &mut out.servers) {
            out.rejected.push(rejected);
        }
    }
    out.warnings = v.warnings;
    // What a source wrote is shown in logs and on terminals: no control
    // characters, bounded, whatever key or value it chose.
    for e in out
        .rejected
        .iter_mut()
        .flat_map(|r| r.errors.iter_mut())
        .chain(out.warnings.iter_mut())
    {
        e.message = defuse(&e.message, 500);
    }
    Ok(out)
}

/// One entry of a discovery document, as its format parsed it.
enum Entry<'t> {
    Yaml(yaml_serde::Value),
    Json(&'t serde_json::value::RawValue),
}

/// Whether `url` reaches one of `own` (mcpmon's listen addresses): the same
/// port on a loopback or matching address, or on any address when mcpmon
/// listens on all of them. Names other than `localhost` are not resolved.
fn aims_at(url: &reqwest::Url, own: &[std::net::SocketAddr]) -> bool {
    let Some(port) = url.port_or_known_default() else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            let d = host.trim_end_matches('.').to_ascii_lowercase();
            if d != "localhost" && !d.ends_with(".localhost") {
                return false;
            }
            None
        }
    };
    own.iter().any(|a| {
        a.port() == port
            && match ip {
                None => true,
                Some(ip) => {
                    ip.is_loopback()
                        || ip.is_unspecified()
                        || ip == a.ip()
                        || a.ip().is_unspecified()
                }
            }
    })
}

pub(super) struct Validator<'a> {
    /// Values `${VAR}` expanded to, in order.
    expanded: Vec<String>,
    path: &'a Path,
    /// Relative commands, cwds and files are resolved against this.
    base: PathBuf,
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Who wrote the text.
    trust: Trust,
    /// Where each node of `text` is, found at the first error.
    positions: Locator<'a>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl<'a> Validator<'a> {
    fn new(
        path: &'a Path,
        text: &'a str,
        env: &'a dyn Fn(&str) -> Option<String>,
        trust: Trust,
    ) -> Validator<'a> {
        Validator {
            expanded: Vec::new(),
            path,
            base: path.parent().unwrap_or(Path::new(".")).to_owned(),
            env,
            trust,
            positions: Locator::new(text),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Check one discovered entry and keep it in `servers`; or why not.
    fn entry(
        &mut self,
        entry: Entry<'a>,
        i: usize,
        global: &TunablesFile,
        source: &super::EntrySource,
        seen: &mut HashSet<String>,
        servers: &mut Vec<(ServerSpec, String)>,
    ) -> Option<super::Rejected> {
        let at = [Seg::Index(i)];
        let rejected = |reason, errors| {
            Some(super::Rejected {
                reason,
                count: 1,
                errors,
            })
        };
        let mut found = Vec::new();
        let name = format!("[{i}]");
        let parsed = match entry {
            Entry::Yaml(value) => self.part::<ServerFile, _>(value, &at, &name, &mut found),
            Entry::Json(raw) => {
                self.positions.enter(i, raw.get());
                match serde_json::from_str::<serde_json::Value>(raw.get()) {
                    Ok(value) => self.part::<ServerFile, _>(value, &at, &name, &mut found),
                    Err(e) => {
                        found.push(self.at(&at, format!("{name}: {e}")));
                        None
                    }
                }
            }
        };
        let Some(mut s) = parsed else {
            return rejected(super::Rejection::Invalid, found);
        };
        if source.trust == (Trust::Remote { allow_stdio: false })
            && matches!(s.transport, TransportKind::Stdio)
        {
            let e = self.at(
                &[Seg::Index(i), Seg::key("transport")],
                format!(
                    "server {:?}: an http_sd entry may not start a process (transport: stdio); \
                     set allow_stdio: true on this http_sd config to allow it",
                    s.id
                ),
            );
            return rejected(super::Rejection::StdioRefused, vec![e]);
        }
        if let Some(url) = s.url.as_deref().and_then(|u| reqwest::Url::parse(u).ok())
            && aims_at(&url, source.own_addresses)
        {
            let e = self.at(
                &[Seg::Index(i), Seg::key("url")],
                format!(
                    "server {:?}: its url points at mcpmon's own listen address",
                    s.id
                ),
            );
            return rejected(super::Rejection::OwnAddress, vec![e]);
        }
        for (k, value) in source.labels {
            s.labels.entry(k.clone()).or_insert_with(|| value.clone());
        }
        let spec = self.check_server(s, global, &at, seen);
        let errors = std::mem::take(&mut self.errors);
        match spec {
            Some(spec) if errors.is_empty() => {
                servers.push((spec, format!("{} [{i}]", self.path.display())));
                None
            }
            _ => rejected(super::Rejection::Invalid, errors),
        }
    }

    /// Refuse a key that reads mcpmon's environment or files in an entry
    /// an HTTP endpoint wrote.
    fn local_only(&mut self, at: &[Seg], key: &str) -> bool {
        if matches!(self.trust, Trust::Remote { .. }) {
            self.error(
                at,
                format!("`{key}` reads mcpmon's own environment or files; an http_sd entry may not use it"),
            );
            return false;
        }
        true
    }

    fn at(&self, at: &[Seg], message: String) -> ConfigError {
        let (line, column) = self.positions.find(at).unwrap_or((0, 0));
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

    /// Deserialize each part of a document that failed as a whole on its
    /// own, report every part that fails (with `first`, the whole
    /// document's error, where it is one of them), and check the rest.
    fn check_leniently(&mut self, value: yaml_serde::Value, first: ConfigError) -> Config {
        let mut doc = Doc {
            global: TunablesFile::default(),
            fleet: FleetPolicy::default(),
            servers: Vec::new(),
            file_sd: Vec::new(),
            http_sd: Vec::new(),
        };
        let mut found = Vec::new();
        match value {
            yaml_serde::Value::Mapping(m) => {
                for (k, v) in m {
                    let key = k.as_str().unwrap_or("").to_owned();
                    let at = vec![Seg::key(&key)];
                    match key.as_str() {
                        "global" => doc.global = self.part(v, &at, "global", &mut found).unwrap_or_default(),
                        "fleet" => doc.fleet = self.part(v, &at, "fleet", &mut found).unwrap_or_default(),
                        "file_sd_configs" => {
                            doc.file_sd = self.part(v, &at, "file_sd_configs", &mut found).unwrap_or_default()
                        }
                        "http_sd_configs" => {
                            doc.http_sd = self.part(v, &at, "http_sd_configs", &mut found).unwrap_or_default()
                        }
                        "servers" => match v {
                            yaml_serde::Value::Sequence(list) => {
                                for (i, entry) in list.into_iter().enumerate() {
                                    let at = vec![Seg::key("servers"), Seg::Index(i)];
                                    let name = format!("servers[{i}]");
                                    if let Some(s) = self.part(entry, &at, &name, &mut found) {
                                        doc.servers.push((i, s));
                                    }
                                }
                            }
                            yaml_serde::Value::Null => {}
                            _ => found.push(self.at(&at, "servers: expected a list of servers".to_owned())),
                        },
                        other => found.push(self.at(
                            &at,
                            format!("unknown field `{other}`, expected one of `global`, `fleet`, `servers`, `file_sd_configs`, `http_sd_configs`"),
                        )),
                    }
                }
            }
            yaml_serde::Value::Null => {}
            _ => found.push(self.at(
                &[],
                "expected a mapping with `global`, `fleet` and `servers`".to_owned(),
            )),
        }
        // The whole document's error has the exact position: it stands for
        // its twin found here, and the rest are located by path.
        found.retain(|e| problem(&e.message) != problem(&first.message));
        self.errors.push(first);
        self.errors.extend(found);
        self.check(doc)
    }

    /// One part of the document, or its error (prefixed with `name`).
    fn part<T: serde::de::DeserializeOwned, D>(
        &self,
        value: D,
        at: &[Seg],
        name: &str,
        found: &mut Vec<ConfigError>,
    ) -> Option<T>
    where
        D: for<'de> serde::Deserializer<'de>,
    {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(t) => Some(t),
            Err(e) => {
                let mut path = at.to_vec();
                let mut shown = name.to_owned();
                for seg in e.path().iter() {
                    match seg {
                        serde_path_to_error::Segment::Seq { index } => {
                            path.push(Seg::Index(*index));
                            shown.push_str(&format!("[{index}]"));
                        }
                        serde_path_to_error::Segment::Map { key } => {
                            path.push(Seg::key(key));
                            shown.push('.');
                            shown.push_str(key);
                        }
                        _ => {}
                    }
                }
                let msg = strip_position(&e.into_inner().to_string());
                found.push(self.at(&path, format!("{shown}: {msg}")));
                None
            }
        }
    }

    fn check(&mut self, doc: Doc) -> Config {
        let Doc {
            global: doc_global,
            fleet: doc_fleet,
            servers: doc_servers,
            file_sd,
            http_sd,
        } = doc;
        let g = [Seg::key("global")];
        self.check_tunables(&doc_global, &g);
        let global = Settings::resolve(&doc_global, &TunablesFile::default());
        let written = written_keys(&doc_global);
        self.check_timers(&global, &g, "", &|k| written.contains(&k));
        let f = [Seg::key("fleet"), Seg::key("min_available_percentage")];
        if !(0.0..=100.0).contains(&doc_fleet.min_available_percentage) {
            self.error(
                &f,
                format!(
                    "fleet.min_available_percentage must be between 0 and 100, got {}",
                    doc_fleet.min_available_percentage
                ),
            );
        }
        let mut seen = HashSet::new();
        let mut servers = Vec::new();
        let mut origins = BTreeMap::new();
        for (i, server) in doc_servers {
            let at = [Seg::key("servers"), Seg::Index(i)];
            if let Some(spec) = self.check_server(server, &doc_global, &at, &mut seen) {
                origins.insert(
                    spec.id.clone(),
                    format!("{} servers[{i}]", self.path.display()),
                );
                servers.push(spec);
            }
        }
        let file_sd = file_sd
            .into_iter()
            .enumerate()
            .filter_map(|(i, f)| self.file_sd(f, &[Seg::key("file_sd_configs"), Seg::Index(i)]))
            .collect();
        let http_sd = http_sd
            .into_iter()
            .enumerate()
            .filter_map(|(i, h)| self.http_sd(h, &[Seg::key("http_sd_configs"), Seg::Index(i)]))
            .collect();
        Config {
            path: self.path.to_owned(),
            fleet: doc_fleet,
            servers,
            origins,
            global: doc_global,
            file_sd,
            http_sd,
            warnings: Vec::new(),
        }
    }

    /// A `file_sd_configs` entry: patterns in Prometheus's form
    /// (`^[^*]*(\*[^/]*)?\.(json|yml|yaml)$`), relative to the config file.
    fn file_sd(&mut self, f: FileSdFile, at: &[Seg]) -> Option<FileSd> {
        let sub = |name: &str| {
            let mut p = at.to_vec();
            p.push(Seg::key(name));
            p
        };
        if f.files.is_empty() {
            self.error(
                &sub("files"),
                "file_sd_configs: `files` needs at least one pattern".to_owned(),
            );
        }
        let mut files = Vec::new();
        for (i, pattern) in f.files.iter().enumerate() {
            let mut p = sub("files");
            p.push(Seg::Index(i));
            let (dir, name) = match pattern.rsplit_once('/') {
                Some((d, n)) => (d, n),
                None => ("", pattern.as_str()),
            };
            let lower = name.to_ascii_lowercase();
            let ext_ok = [".json", ".yml", ".yaml"]
                .iter()
                .any(|e| lower.ends_with(e));
            if dir.contains('*') || name.matches('*').count() > 1 || !ext_ok {
                self.error(
                    &p,
                    format!(
                        "file pattern {pattern:?}: only the file name may hold one `*`, and it must end in .json, .yml or .yaml"
                    ),
                );
                continue;
            }
            if let Err(e) = glob::Pattern::new(name) {
                self.error(&p, format!("file pattern {pattern:?}: {e}"));
                continue;
            }
            files.push(self.base.join(pattern));
        }
        let refresh_interval = f.refresh_interval.map_or(FILE_SD_REFRESH, |d| d.0);
        if refresh_interval.is_zero() {
            self.error(
                &sub("refresh_interval"),
                "refresh_interval must be greater than zero".to_owned(),
            );
        }
        self.labels(&f.labels, &sub("labels"));
        Some(FileSd {
            files,
            refresh_interval,
            labels: f.labels,
            max_servers: f.max_servers.unwrap_or(super::discovery::MAX_SERVERS),
        })
    }

    /// An `http_sd_configs` entry.
    fn http_sd(&mut self, h: HttpSdFile, at: &[Seg]) -> Option<HttpSd> {
        let sub = |name: &str| {
            let mut p = at.to_vec();
            p.push(Seg::key(name));
            p
        };
        let expanded = self.expand(&h.url, &sub("url"));
        let url = match reqwest::Url::parse(&expanded) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                self.error(
                    &sub("url"),
                    format!("http_sd url {:?} is not an http(s) URL", h.url),
                );
                return None;
            }
        };
        let refresh_interval = h.refresh_interval.map_or(HTTP_SD_REFRESH, |d| d.0);
        if refresh_interval.is_zero() {
            self.error(
                &sub("refresh_interval"),
                "refresh_interval must be greater than zero".to_owned(),
            );
        }
        let headers = self.headers(&h.headers, &sub("headers"));
        let bearer_token = h
            .bearer_token_env
            .as_deref()
            .and_then(|var| self.env_secret(var, &sub("bearer_token_env")));
        let mut file = |name: &str, value: &Option<String>| -> Option<PathBuf> {
            let path = self.base.join(value.as_deref()?);
            if let Err(e) = std::fs::metadata(&path) {
                let mut p = sub("tls");
                p.push(Seg::key(name));
                self.error(&p, format!("cannot read {}: {e}", path.display()));
            }
            Some(path)
        };
        let tls = SdTls {
            ca_file: file("ca_file", &h.tls.ca_file),
            cert_file: file("cert_file", &h.tls.cert_file),
            key_file: file("key_file", &h.tls.key_file),
            insecure_skip_verify: h.tls.insecure_skip_verify,
        };
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            self.error(
                &sub("tls"),
                "set both cert_file and key_file, or neither".to_owned(),
            );
        }
        self.labels(&h.labels, &sub("labels"));
        Some(HttpSd {
            url,
            refresh_interval,
            headers,
            bearer_token,
            tls,
            labels: h.labels,
            allow_stdio: h.allow_stdio,
            max_servers: h.max_servers.unwrap_or(super::discovery::MAX_SERVERS),
        })
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
        let expanded_from = self.expanded.len();
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
        let mut settings = Settings::resolve(global, &own);
        if matches!(self.trust, Trust::Remote { .. }) {
            self.raise_to_floors(&mut settings, at, &s.id);
        }
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
            let mut interval = tp.interval.0;
            if matches!(self.trust, Trust::Remote { .. }) && interval < REMOTE_TOOL_INTERVAL {
                interval = REMOTE_TOOL_INTERVAL;
                self.warn(
                    &p,
                    format!(
                        "tool probe {:?}: interval raised to {}, the least an http_sd entry may set",
                        tp.tool,
                        humantime::format_duration(interval)
                    ),
                );
            }
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
            if max_request_timeout > interval {
                self.warn(
                    &p,
                    format!(
                        "tool probe {:?}: max_request_timeout ({}) is longer than its interval ({}); overdue calls will be skipped",
                        tp.tool,
                        humantime::format_duration(max_request_timeout),
                        humantime::format_duration(interval)
                    ),
                );
            }
            tool_probes.push(ToolProbe {
                tool: tp.tool,
                arguments: tp.arguments,
                interval,
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
                    ("oauth2", s.oauth2.is_some()),
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
                let base = self.base.clone();
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
                let env = self.expand_values(&s.env, &field("env"));
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
                let headers = self.headers(&s.headers, &field("headers"));
                let bearer_token = s
                    .bearer_token_env
                    .as_deref()
                    .and_then(|var| self.env_secret(var, &field("bearer_token_env")));
                if s.oauth2.is_some() && s.bearer_token_env.is_some() {
                    self.error(
                        &field("oauth2"),
                        "set `oauth2` or `bearer_token_env`, not both".to_owned(),
                    );
                }
                let oauth2 = s
                    .oauth2
                    .as_ref()
                    .and_then(|o| self.oauth2(o, &field("oauth2")));
                TransportSpec::Http {
                    url,
                    headers,
                    bearer_token,
                    oauth2,
                }
            }
        };
        let labels = self.labels(&s.labels, &field("labels"));
        let expanded = self
            .expanded
            .split_off(expanded_from)
            .into_iter()
            .map(Secret::new)
            .collect();
        let mut spec = ServerSpec {
            id: s.id,
            transport,
            settings,
            protocol,
            tool_probes,
            expanded,
            expected_tools: s.expected_tools,
            labels,
            trust: self.trust,
            scrubber: Default::default(),
        };
        spec.scrubber = std::sync::Arc::new(crate::redact::Scrubber::new(spec.secrets()));
        Some(spec)
    }

    /// Request headers written at `at`: valid names and values, `${VAR}`
    /// expanded, values kept as secrets.
    fn headers(&mut self, map: &BTreeMap<String, String>, at: &[Seg]) -> Vec<(String, Secret)> {
        let mut headers = Vec::new();
        for (k, v) in map {
            let mut p = at.to_vec();
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
        headers
    }

    /// The value of the environment variable a `*_env` key names.
    fn env_secret(&mut self, var: &str, at: &[Seg]) -> Option<Secret> {
        if !self.local_only(at, "bearer_token_env") {
            return None;
        }
        let token = (self.env)(var);
        if token.is_none() {
            self.error(
                at,
                format!("environment variable {var:?} named by bearer_token_env is not set"),
            );
        }
        token.map(Secret)
    }

    /// Operator labels written at `at`, with the names they are exported
    /// under, sorted by those (exposition order, once, so no scrape sorts).
    fn labels(&mut self, map: &BTreeMap<String, String>, at: &[Seg]) -> Vec<super::Label> {
        let mut labels: Vec<super::Label> = Vec::new();
        for (name, value) in map {
            let exported = super::exported_label_name(name);
            let mut p = at.to_vec();
            p.push(Seg::key(name));
            if name.is_empty() {
                self.error(&p, "a label needs a name".to_owned());
            } else if let Some(other) = labels.iter().find(|l| l.exported == exported) {
                self.error(
                    &p,
                    format!(
                        "labels {:?} and {name:?} are both exported as {exported}",
                        other.name
                    ),
                );
            } else {
                labels.push(super::Label {
                    name: name.clone(),
                    exported,
                    value: value.clone(),
                });
            }
        }
        labels.sort_by(|a, b| a.exported.cmp(&b.exported));
        labels
    }

    /// Raise what an untrusted (http_sd) entry set below the least it may
    /// set: a remote source chooses how hard mcpmon works for its servers,
    /// and must not choose a tight loop (200 entries with a 1 ms backoff
    /// made 6 000 reconnects a second).
    fn raise_to_floors(&mut self, s: &mut Settings, at: &[Seg], id: &str) {
        let ms = Duration::from_millis;
        let floors: [(&str, &mut Dur, Duration); 12] = [
            ("ping_interval", &mut s.ping_interval, ms(1000)),
            ("ping_timeout", &mut s.ping_timeout, ms(100)),
            ("connect_timeout", &mut s.connect_timeout, ms(1000)),
            ("request_timeout", &mut s.request_timeout, ms(1000)),
            ("max_request_timeout", &mut s.max_request_timeout, ms(1000)),
            (
                "health_check_interval",
                &mut s.health_check_interval,
                ms(1000),
            ),
            ("health_check_timeout", &mut s.health_check_timeout, ms(100)),
            ("tools_interval", &mut s.tools_interval, ms(10_000)),
            ("stuck_after", &mut s.stuck_after, ms(5000)),
            ("backoff_initial", &mut s.backoff_initial, ms(1000)),
            ("backoff_max", &mut s.backoff_max, ms(10_000)),
            (
                "backoff_reset_after",
                &mut s.backoff_reset_after,
                ms(10_000),
            ),
        ];
        let mut raised = Vec::new();
        for (name, value, floor) in floors {
            if value.0 < floor {
                value.0 = floor;
                raised.push((name, floor));
            }
        }
        s.backoff_max.0 = s.backoff_max.0.max(s.backoff_initial.0);
        if s.health_check_max_fields > REMOTE_MAX_FIELDS {
            s.health_check_max_fields = REMOTE_MAX_FIELDS;
            self.warn(
                &[at, &[Seg::key("health_check_max_fields")]].concat(),
                format!("server {id:?}: health_check_max_fields lowered to {REMOTE_MAX_FIELDS}, the most an http_sd entry may set"),
            );
        }
        for (name, floor) in raised {
            self.warn(
                &[at, &[Seg::key(name)]].concat(),
                format!(
                    "server {id:?}: {name} raised to {}, the least an http_sd entry may set",
                    humantime::format_duration(floor)
                ),
            );
        }
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
            ("tools_interval", t.tools_interval),
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
    /// An `oauth2:` block: the secret from exactly one place, an http(s)
    /// token URL, `${VAR}` expanded everywhere a secret may be written.
    fn oauth2(&mut self, o: &super::raw::OAuth2File, at: &[Seg]) -> Option<super::OAuth2Spec> {
        let sub = |name: &str| {
            let mut p = at.to_vec();
            p.push(Seg::key(name));
            p
        };
        let client_id = self.expand(&o.client_id, &sub("client_id"));
        let client_secret = match (&o.client_secret, &o.client_secret_file) {
            (Some(s), None) => self.expand(s, &sub("client_secret")),
            (None, Some(f)) => {
                if !self.local_only(&sub("client_secret_file"), "client_secret_file") {
                    return None;
                }
                match std::fs::read_to_string(self.base.join(f)) {
                    Ok(s) => s.trim().to_owned(),
                    Err(e) => {
                        self.error(
                            &sub("client_secret_file"),
                            format!("cannot read {f:?}: {e}"),
                        );
                        return None;
                    }
                }
            }
            _ => {
                self.error(
                    at,
                    "set exactly one of `client_secret` and `client_secret_file`".to_owned(),
                );
                return None;
            }
        };
        let raw = self.expand(&o.token_url, &sub("token_url"));
        let token_url = match reqwest::Url::parse(&raw) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                self.error(
                    &sub("token_url"),
                    format!("token_url {:?} is not an http(s) URL", o.token_url),
                );
                return None;
            }
        };
        let endpoint_params = self.expand_values(&o.endpoint_params, &sub("endpoint_params"));
        Some(super::OAuth2Spec {
            client_id,
            client_secret: Secret(client_secret),
            token_url,
            scopes: o.scopes.clone(),
            endpoint_params,
        })
    }

    /// Each value of a map written at `at`, `${VAR}` expanded, as a secret.
    fn expand_values(
        &mut self,
        map: &std::collections::BTreeMap<String, String>,
        at: &[Seg],
    ) -> Vec<(String, Secret)> {
        map.iter()
            .map(|(k, v)| {
                let mut p = at.to_vec();
                p.push(Seg::key(k));
                (k.clone(), Secret(self.expand(v, &p)))
            })
            .collect()
    }

    fn expand(&mut self, raw: &str, at: &[Seg]) -> String {
        // An endpoint's entry names no variable: `${VAR}` stays as written.
        if matches!(self.trust, Trust::Remote { .. }) {
            return raw.to_owned();
        }
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
                Some(v) => {
                    out.push_str(&v);
                    // Whatever field it lands in (a URL path, an argument),
                    // an expanded value is a secret.
                    self.expanded.push(v);
                }
                None => self.error(at, format!("environment variable {name:?} is not set")),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// Least interval of a tool probe an http_sd entry may set.
const REMOTE_TOOL_INTERVAL: Duration = Duration::from_secs(10);
/// Most health_check fields an http_sd entry may export.
const REMOTE_MAX_FIELDS: usize = 16;

/// Names of the timer keys written in one block.
pub(super) fn written_keys(t: &TunablesFile) -> Vec<&'static str> {
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

pub(super) fn unknown_field_name(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}
