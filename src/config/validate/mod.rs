//! Validation of the file as written into resolved specs: every problem
//! in one pass, each with file:line:column, field and value.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::positions::{Locator, Seg, check_aliases};
use super::raw::{
    ClientSdFile, FileDoc, FileSdFile, HttpSdFile, RegistrySdFile, ServerFile, TransportKind,
};
use super::sd::{FILE_SD_REFRESH, HTTP_SD_REFRESH, REGISTRY_SD_REFRESH, RegistryQuery};
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
            client_sd: doc.client_config_sd_configs,
            registry_sd: doc.registry_sd_configs,
            kubernetes_sd: doc.kubernetes_sd_configs,
            relabel: doc.relabel_configs,
            maintenance: doc.maintenance,
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
    client_sd: Vec<ClientSdFile>,
    registry_sd: Vec<RegistrySdFile>,
    kubernetes_sd: Vec<crate::config::kubernetes::KubeSdFile>,
    relabel: Vec<crate::config::relabel::RelabelFile>,
    maintenance: Vec<crate::config::maintenance::WindowFile>,
}

mod entries;
pub mod probes;
mod sd;
mod server;
mod tunables;

pub use entries::parse_entries;

/// The path of `name` under `at`.
pub(super) fn under(at: &[Seg], name: &str) -> Vec<Seg> {
    let mut p = at.to_vec();
    p.push(Seg::key(name));
    p
}

/// The path of item `i` of the list `name` under `at`.
pub(super) fn item(at: &[Seg], name: &str, i: usize) -> Vec<Seg> {
    let mut p = under(at, name);
    p.push(Seg::Index(i));
    p
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

    pub(super) fn error(&mut self, at: &[Seg], message: String) {
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
            client_sd: Vec::new(),
            registry_sd: Vec::new(),
            kubernetes_sd: Vec::new(),
            relabel: Vec::new(),
            maintenance: Vec::new(),
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
                        "client_config_sd_configs" => {
                            doc.client_sd = self.part(v, &at, "client_config_sd_configs", &mut found).unwrap_or_default()
                        }
                        "registry_sd_configs" => {
                            doc.registry_sd = self.part(v, &at, "registry_sd_configs", &mut found).unwrap_or_default()
                        }
                        "kubernetes_sd_configs" => {
                            doc.kubernetes_sd = self.part(v, &at, "kubernetes_sd_configs", &mut found).unwrap_or_default()
                        }
                        "relabel_configs" => {
                            doc.relabel = self.part(v, &at, "relabel_configs", &mut found).unwrap_or_default()
                        }
                        "maintenance" => {
                            doc.maintenance = self.part(v, &at, "maintenance", &mut found).unwrap_or_default()
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
                            format!("unknown field `{other}`, expected one of `global`, `fleet`, `servers`, `file_sd_configs`, `http_sd_configs`, `client_config_sd_configs`, `registry_sd_configs`, `kubernetes_sd_configs`, `relabel_configs`, `maintenance`"),
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
    pub(super) fn part<T: serde::de::DeserializeOwned, D>(
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
            client_sd,
            registry_sd,
            kubernetes_sd,
            relabel,
            maintenance,
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
                servers.push(Arc::new(spec));
            }
        }
        let mut file_sd: Vec<FileSd> = file_sd
            .into_iter()
            .enumerate()
            .filter_map(|(i, f)| self.file_sd(f, &[Seg::key("file_sd_configs"), Seg::Index(i)]))
            .collect();
        file_sd.extend(client_sd.into_iter().enumerate().filter_map(|(i, c)| {
            self.client_sd(c, &[Seg::key("client_config_sd_configs"), Seg::Index(i)])
        }));
        let mut http_sd: Vec<HttpSd> = http_sd
            .into_iter()
            .enumerate()
            .filter_map(|(i, h)| self.http_sd(h, &[Seg::key("http_sd_configs"), Seg::Index(i)]))
            .collect();
        http_sd.extend(registry_sd.into_iter().enumerate().filter_map(|(i, r)| {
            self.registry_sd(r, &[Seg::key("registry_sd_configs"), Seg::Index(i)])
        }));
        let kubernetes_sd = kubernetes_sd
            .into_iter()
            .enumerate()
            .filter_map(|(i, k)| {
                self.kubernetes_sd(k, &[Seg::key("kubernetes_sd_configs"), Seg::Index(i)])
            })
            .collect();
        let relabel = relabel
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| match r.check() {
                Ok(rule) => Some(rule),
                Err(e) => {
                    self.error(
                        &[Seg::key("relabel_configs"), Seg::Index(i)],
                        format!("relabel_configs[{i}]: {e}"),
                    );
                    None
                }
            })
            .collect();
        let maintenance = self.maintenance(&maintenance, &servers);
        Config {
            path: self.path.to_owned(),
            fleet: doc_fleet,
            servers,
            origins,
            global: doc_global,
            file_sd,
            http_sd,
            kubernetes_sd,
            relabel,
            maintenance,
            warnings: Vec::new(),
        }
    }

    /// The `maintenance:` windows, each error at its key; a window naming
    /// no server of the file is a warning (discovery may bring it).
    fn maintenance(
        &mut self,
        list: &[crate::config::maintenance::WindowFile],
        servers: &[Arc<ServerSpec>],
    ) -> Vec<crate::config::maintenance::Window> {
        let mut out: Vec<crate::config::maintenance::Window> = Vec::new();
        for (i, f) in list.iter().enumerate() {
            let at = [Seg::key("maintenance"), Seg::Index(i)];
            match crate::config::maintenance::window(f, i) {
                Ok(w) => {
                    let name_ok = !w.name.is_empty()
                        && w.name.len() <= 64
                        && w.name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "-_.[]".contains(c));
                    if !name_ok || out.iter().any(|o| o.name == w.name) {
                        self.error(
                            &under(&at, "name"),
                            format!(
                                "window name {:?}: unique, 1 to 64 of [A-Za-z0-9_.-]",
                                w.name
                            ),
                        );
                        continue;
                    }
                    for (j, id) in w.servers.iter().enumerate() {
                        if !servers.iter().any(|s| &s.id == id) {
                            self.warn(
                                &item(&at, "servers", j),
                                format!("window {:?}: no server {id:?} in this file", w.name),
                            );
                        }
                    }
                    out.push(w);
                }
                Err((key, message)) => self.error(&under(&at, key), message),
            }
        }
        out
    }

    /// Request headers written at `at`: valid names and values, `${VAR}`
    /// expanded, values kept as secrets.
    fn headers(&mut self, map: &BTreeMap<String, String>, at: &[Seg]) -> Vec<(String, Secret)> {
        let mut headers = Vec::new();
        for (k, v) in map {
            let p = under(at, k);
            if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                self.error(&p, format!("invalid header name {k:?}"));
                continue;
            }
            let value = self.expand(v, &p);
            if http::HeaderValue::from_str(&value).is_err() {
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
            let p = under(at, name);
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

    /// Each value of a map written at `at`, `${VAR}` expanded, as a secret.
    fn expand_values(
        &mut self,
        map: &std::collections::BTreeMap<String, String>,
        at: &[Seg],
    ) -> Vec<(String, Secret)> {
        map.iter()
            .map(|(k, v)| {
                let p = under(at, k);
                (k.clone(), Secret(self.expand(v, &p)))
            })
            .collect()
    }

    /// Expand `${VAR}` references; an unset variable is an error naming it.
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
