//! The fleet file `mcpmon import` prints for client configs: one
//! `servers:` list a person starts from.

use serde_json::{Map, Value};

use super::ClientConfig;

/// The fleet YAML for client configs, for a person to start from: one
/// `servers:` list, ids kept distinct across files, and every server that
/// needs configuration written out commented, with what it needs.
pub fn fleet_yaml(configs: &[(std::path::PathBuf, ClientConfig)]) -> String {
    let mut out = String::from("servers:\n");
    let mut ids = crate::config::ids::UniqueIds::default();
    for (path, config) in configs {
        out.push_str(&format!(
            "  # {} ({})\n",
            path.display(),
            config.format.as_str()
        ));
        for s in &config.servers {
            let mut entry = s.entry.clone();
            let base = entry.get("id").and_then(Value::as_str).unwrap_or("server");
            let id = ids.claim(base);
            entry.insert("id".into(), id.into());
            let yaml = yaml_serde::to_string(&vec![in_order(&entry)]).unwrap_or_default();
            let indented: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
            if s.needs.is_empty() {
                out.push_str(&indented);
                continue;
            }
            out.push_str(&format!(
                "  # {:?} needs configuration: {}\n",
                s.name,
                s.needs.join("; ")
            ));
            out.extend(
                indented
                    .lines()
                    .map(|l| format!("  # {}\n", l.strip_prefix("  ").unwrap_or(l))),
            );
        }
    }
    out
}

/// An entry's keys in the order docs/configuration.md writes them.
fn in_order(entry: &Map<String, Value>) -> yaml_serde::Value {
    const ORDER: [&str; 10] = [
        "id",
        "transport",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "bearer_token_env",
        "labels",
    ];
    let mut m = yaml_serde::Mapping::new();
    for key in ORDER {
        if let Some(v) = entry.get(key)
            && let Ok(v) = yaml_serde::to_value(v)
        {
            m.insert(key.into(), v);
        }
    }
    yaml_serde::Value::Mapping(m)
}
