//! Discovered documents: each entry validated on its own, at most
//! `max_servers` of them, none aimed at mcpmon itself.

use super::*;

/// Validate a list of server entries (YAML or JSON) read from `origin`,
/// resolving their tunables against the main file's `global:`. `Err` means
/// the document itself is unusable (not YAML, not a list); the source then
/// keeps its last good list.
pub fn parse_entries(
    origin: &Path,
    text: &str,
    global: &TunablesFile,
    source: &super::EntrySource<'_>,
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
fn aims_at(url: &url::Url, own: &[std::net::SocketAddr]) -> bool {
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

impl<'a> Validator<'a> {
    /// Check one discovered entry and keep it in `servers`; or why not.
    fn entry(
        &mut self,
        entry: Entry<'a>,
        i: usize,
        global: &TunablesFile,
        source: &super::EntrySource<'_>,
        seen: &mut HashSet<String>,
        servers: &mut Vec<(Arc<ServerSpec>, String)>,
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
        if !super::relabel::entry(source.relabel, &mut s.id, &mut s.url, &mut s.labels) {
            return rejected(super::Rejection::Dropped, Vec::new());
        }
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
        if let Some(url) = s.url.as_deref().and_then(|u| url::Url::parse(u).ok())
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
                servers.push((Arc::new(spec), format!("{} [{i}]", self.path.display())));
                None
            }
            _ => rejected(super::Rejection::Invalid, errors),
        }
    }
}
