//! Entry points shared by the `cargo fuzz` targets (`fuzz/`) and the
//! regression test that replays their corpus and every crash they found
//! (`tests/it/fuzz_regressions.rs`). Each checks the invariants, not just
//! "no panic".

use std::path::Path;

/// Parse arbitrary config text: a config, or errors that each carry a
/// message; never a panic.
pub fn config(text: &str) {
    match crate::config::parse(Path::new("fuzz.yaml"), text, &|name| {
        (name == "SET").then(|| "value".to_owned())
    }) {
        Ok(cfg) => {
            let mut ids = std::collections::HashSet::new();
            for s in &cfg.servers {
                assert!(ids.insert(s.id.clone()), "duplicate id accepted: {}", s.id);
                assert!(s.settings.ping_timeout <= s.settings.ping_interval);
            }
        }
        Err(errors) => {
            assert!(!errors.0.is_empty());
            assert!(errors.0.iter().all(|e| !e.message.is_empty()));
        }
    }
}

/// Read arbitrary bytes as a health_check result, both as a text block and
/// (when it parses) as structured content: fields stay bounded and finite.
pub fn health_check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let structured: Option<serde_json::Value> = serde_json::from_slice(data).ok();
    for is_error in [false, true] {
        let r = crate::probe::health_check::interpret(structured.as_ref(), &[&text], is_error, 8);
        assert!(r.fields.len() <= 8);
        assert!(
            r.fields
                .iter()
                .all(|(k, v)| v.is_finite() && !k.is_empty() && k.len() <= 64)
        );
        if is_error {
            assert_eq!(r.status, crate::probe::health_check::Reported::Unhealthy);
        }
    }
}

/// Render a one-server fleet whose server-chosen strings come from `data`
/// (name, version, health_check result, separated by `\x1f`), the way a
/// session and a probe would hand them over, then parse the exposition back
/// strictly: every line is a comment or a well-formed sample, every sample's
/// family was declared, and the server's name survives escaping unchanged.
pub fn metrics(data: &[u8]) {
    use crate::probe::{Answer, ProbeKind, ProbeOutcome};
    use crate::state::owner::Owner;
    use crate::state::{Msg, Observation};
    use crate::transport::{Era, ServerInfo, truncate};

    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\u{1f}');
    let mut next = || parts.next().unwrap_or_default().to_owned();
    let (name, version, health) = (next(), next(), next());
    let fleet = "servers:\n  - id: fuzz\n    transport: stdio\n    command: x\n    \
                 health_check_tool: health\n";
    let cfg = match crate::config::parse(Path::new("fuzz.yaml"), fleet, &|_| None) {
        Ok(cfg) => cfg,
        Err(e) => panic!("the fixed fleet is valid: {e}"),
    };
    let now = tokio::time::Instant::now();
    let mut owner = Owner::new(cfg.fleet.clone(), 1);
    let (stuck, _) = tokio::sync::watch::channel(0);
    let spec = cfg.servers[0].clone();
    owner.apply(Msg::Add { spec, stuck }, now);
    let id: std::sync::Arc<str> = std::sync::Arc::from("fuzz");
    let name = truncate(&name, 128);
    let info = ServerInfo {
        protocol_version: "unknown".into(),
        name: name.clone(),
        version: truncate(&version, 64),
    };
    let opened = Observation::Opened {
        era: Era::Legacy,
        info,
        tools: Some(crate::transport::tools::ToolSurface::from_json([
            serde_json::json!({
                "name": "health", "inputSchema": {"type": "object"}
            }),
        ])),
        handshake: std::time::Duration::ZERO,
        health_check: true,
    };
    owner.apply(Msg::Server(id.clone(), opened), now);
    let structured: Option<serde_json::Value> = serde_json::from_str(&health).ok();
    let report = crate::probe::health_check::interpret(structured.as_ref(), &[&health], false, 8);
    let outcome = ProbeOutcome {
        kind: ProbeKind::HealthCheck,
        tool: None,
        duration: std::time::Duration::from_millis(3),
        result: Ok(Answer::Health(report)),
        trace: None,
        conditions: Vec::new(),
    };
    let probe = Observation::Probe {
        outcome,
        was_late: false,
    };
    owner.apply(Msg::Server(id, probe), now);
    let Ok(metrics) =
        crate::output::metrics::Metrics::new("fuzz", crate::output::metrics::Exposition::FULL)
    else {
        panic!("the registry builds");
    };
    let exposition = metrics.render(&owner.publish());
    let samples = match parse_exposition(&exposition) {
        Ok(s) => s,
        Err(e) => panic!("unparseable exposition: {e}\n{exposition}"),
    };
    let info = samples
        .iter()
        .find(|s| s.name == "mcpmon_server_info")
        .unwrap_or_else(|| panic!("no mcpmon_server_info\n{exposition}"));
    assert!(
        info.labels
            .contains(&("server_name".to_owned(), name.clone())),
        "name {name:?} did not survive: {:?}",
        info.labels
    );
}

/// One sample of a text exposition.
#[derive(Debug)]
pub struct Sample {
    /// Metric name (with `_bucket`, `_sum`, `_count` suffixes).
    pub name: String,
    /// Label pairs, unescaped.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// A strict parser of the Prometheus text format (0.0.4) as mcpmon writes
/// it: the oracle the renderer's output is checked against.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut typed = std::collections::HashSet::new();
    let mut out = Vec::new();
    let is_name = |s: &str, colon: bool| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    };
    for (n, line) in text.lines().enumerate() {
        let at = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').ok_or_else(|| at("TYPE"))?;
            if !is_name(family, true)
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
            {
                return Err(at("TYPE"));
            }
            typed.insert(family.to_owned());
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => return Err(at("no value")),
        };
        if !is_name(name, true) {
            return Err(at("metric name"));
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        if !typed.contains(family) {
            return Err(at("sample before its TYPE"));
        }
        let mut labels = Vec::new();
        let mut rest = rest;
        if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = r.strip_prefix('}') {
                    rest = after;
                    break;
                }
                let (label, after) = r.split_once("=\"").ok_or_else(|| at("label"))?;
                if !is_name(label, false) {
                    return Err(at("label name"));
                }
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((i, '"')) => break i,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => return Err(at("escape")),
                        },
                        Some((_, c)) => value.push(c),
                        None => return Err(at("unterminated label value")),
                    }
                };
                labels.push((label.to_owned(), value));
                r = &after[end + 1..];
                r = r.strip_prefix(',').unwrap_or(r);
            }
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("space before value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse::<f64>().map_err(|_| at("value"))?,
        };
        out.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    Ok(out)
}

/// The legacy link's readers on an arbitrary answer body: reading it whole
/// or in two chunks (as it arrives) finds the same messages, and error text
/// is bounded.
pub fn lean_ping(data: &[u8]) {
    use crate::transport::legacy_http::{Seen, events, seen};
    let id = "mcpmon-ping-1";
    if let Seen::Answer(Err(e)) = seen(data, id, Some(1)) {
        assert!(e.to_string().len() <= 400, "unbounded error text");
    }
    let (whole, used) = events(data, id, Some(1));
    assert!(used <= data.len());
    let cut = data
        .first()
        .map_or(0, |b| usize::from(*b) % (data.len() + 1));
    let (mut chunked, used_first) = events(&data[..cut], id, Some(1));
    chunked.extend(events(&data[used_first..], id, Some(1)).0);
    assert_eq!(
        whole, chunked,
        "the messages depend on where the body was cut"
    );
}

/// The basic-auth header parser on an arbitrary value: what it accepts
/// encodes back to itself.
pub fn basic_auth(data: &[u8]) {
    use base64::Engine;
    let text = String::from_utf8_lossy(data);
    if let Some((user, password)) = crate::output::web::parse_basic(&text) {
        assert!(!user.contains(':'));
        let again = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        assert_eq!(
            crate::output::web::parse_basic(&again),
            Some((user, password))
        );
    }
}

/// The redactor on arbitrary secrets and text (`\x1f`-separated; the last
/// part is the text): no secret survives, raw or inside a JSON string, and
/// a JSON log line stays JSON. Secrets that could be spelled by the
/// `<redacted>` marker itself are left out: replacing one secret must not
/// be able to write another.
pub fn redact(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts: Vec<&str> = text.split('\u{1f}').collect();
    let plain = parts.pop().unwrap_or_default();
    let secrets: Vec<String> = parts
        .into_iter()
        .filter(|s| s.chars().count() >= 4 && !s.contains(['<', '>']))
        .filter(|s| !"<redacted>".contains(*s))
        .take(8)
        .map(str::to_owned)
        .collect();
    let scrubber = crate::redact::Scrubber::new(secrets.clone());
    let json = serde_json::to_string(plain).unwrap_or_default();
    let out = scrubber.scrub(plain);
    let out_json = scrubber.scrub(&json);
    for s in &secrets {
        assert!(!out.contains(s.as_str()), "{s:?} survived in {out:?}");
        let escaped = serde_json::to_string(s).unwrap_or_default();
        let escaped = &escaped[1..escaped.len() - 1];
        assert!(
            !out_json.contains(escaped),
            "{escaped:?} survived in {out_json:?}"
        );
    }
    // The log writer's safety net keeps a JSON line JSON.
    crate::redact::set_secrets(secrets.clone());
    let line = serde_json::json!({"fields": {"message": plain}}).to_string();
    let clean = crate::redact::redact_line(&line);
    let parsed: serde_json::Value = serde_json::from_str(&clean).expect("a JSON line stays JSON");
    let message = parsed["fields"]["message"].as_str().unwrap_or_default();
    for s in &secrets {
        assert!(
            !message.contains(s.as_str()),
            "{s:?} survived in {message:?}"
        );
    }
    crate::redact::set_secrets(Vec::new());
}

/// A discovery document of arbitrary text, read as an http_sd answer
/// (JSON, untrusted) and as a file (YAML, local): entries or an error,
/// never a panic, within a bounded time; untrusted entries never start a
/// process, aim at mcpmon, exceed the cap or set a tight loop; every
/// message is free of control characters. (The fuzz target bounds the
/// memory each input may take.)
pub fn discovery(data: &[u8]) {
    use crate::config::{EntrySource, Format, Trust, TunablesFile};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let own: std::net::SocketAddr = ([127, 0, 0, 1], 9850).into();
    let labels = std::collections::BTreeMap::new();
    let clean = |m: &str| !m.chars().any(char::is_control);
    let started = std::time::Instant::now();
    for (trust, format) in [
        (Trust::Remote { allow_stdio: false }, Format::Json),
        (Trust::Local, Format::Yaml),
    ] {
        let source = EntrySource {
            trust,
            format,
            labels: &labels,
            base: Path::new("/nonexistent"),
            max_servers: 50,
            own_addresses: &[own],
            relabel: &[],
        };
        let parsed = crate::config::parse_entries(
            Path::new("sd.json"),
            text,
            &TunablesFile::default(),
            &source,
            &|_| None,
        );
        let entries = match parsed {
            Ok(e) => e,
            Err(e) => {
                assert!(clean(&e.message), "{:?}", e.message);
                continue;
            }
        };
        assert!(entries.servers.len() <= 50, "past the cap");
        for e in entries
            .rejected
            .iter()
            .flat_map(|r| &r.errors)
            .chain(&entries.warnings)
        {
            assert!(clean(&e.message), "{:?}", e.message);
        }
        if format == Format::Json {
            for (spec, _) in &entries.servers {
                let s = &spec.settings;
                assert!(
                    matches!(spec.transport, crate::config::TransportSpec::Http { .. }),
                    "an http_sd entry starts a process"
                );
                assert!(s.ping_interval.0 >= std::time::Duration::from_secs(1));
                assert!(s.backoff_initial.0 >= std::time::Duration::from_secs(1));
                if let crate::config::TransportSpec::Http { url, .. } = &spec.transport {
                    assert!(
                        !(url.port_or_known_default() == Some(9850)
                            && url.host_str() == Some("127.0.0.1")),
                        "an entry aimed at mcpmon"
                    );
                }
            }
        }
    }
    // Linear work: a few milliseconds per kilobyte at worst, in a debug build.
    let allowed = std::time::Duration::from_secs(2)
        + std::time::Duration::from_millis(data.len() as u64 / 64);
    assert!(
        started.elapsed() < allowed,
        "{} bytes took {:?}",
        data.len(),
        started.elapsed()
    );
}
