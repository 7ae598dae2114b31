//! A client config as a discovery source reads it: its runnable servers as
//! a JSON list of mcpmon entries, each traced back to its line, and the
//! ones that need configuration left out, said why.

use std::path::Path;

use serde_json::Value;

use super::{ClientFormat, read};
use crate::config::ConfigError;

/// A client config as a discovery source reads it: mcpmon entries as a
/// JSON list, and the entries that need configuration.
#[derive(Debug)]
pub struct Translated {
    /// The runnable servers' entries, entry `i` on line `i + 2`.
    pub json: String,
    /// The client config's line of each entry in `json`.
    lines: Vec<usize>,
    /// The entries left out before validation, by why.
    left_out: Vec<crate::config::Rejected>,
}

impl Translated {
    /// Entries written elsewhere (a registry), with the source's line of
    /// each and those left out.
    pub fn new(json: String, lines: Vec<usize>, left_out: Vec<crate::config::Rejected>) -> Self {
        Translated {
            json,
            lines,
            left_out,
        }
    }

    /// Put what validating `json` found back where the client config
    /// wrote it, and add the entries that need configuration.
    pub fn place(self, entries: &mut crate::config::Entries) {
        let errors = entries
            .rejected
            .iter_mut()
            .flat_map(|r| r.errors.iter_mut())
            .chain(entries.warnings.iter_mut());
        for e in errors {
            if let Some(line) = e.line.checked_sub(2).and_then(|i| self.lines.get(i)) {
                (e.line, e.column) = (*line, 1);
            }
        }
        entries.rejected.extend(self.left_out);
    }
}

/// Read a client config as [`Translated`] entries.
pub fn as_entries(
    path: &Path,
    text: &str,
    format: ClientFormat,
    env: &dyn Fn(&str) -> Option<String>,
    home: &str,
) -> Result<Translated, ConfigError> {
    let config = read(path, text, format, env, home)?;
    let mut json = String::from("[\n");
    let mut lines = Vec::new();
    let mut needs = Vec::new();
    for s in config.servers {
        if !s.needs.is_empty() {
            needs.push(ConfigError {
                file: path.to_owned(),
                line: s.line,
                column: 1,
                // A name is the file's own text: bounded, no control
                // characters, before it reaches a log.
                message: crate::config::defuse(
                    &format!(
                        "server {:?} needs configuration: {}",
                        crate::config::defuse(&s.name, 200),
                        s.needs.join("; ")
                    ),
                    500,
                ),
            });
            continue;
        }
        if !lines.is_empty() {
            json.push_str(",\n");
        }
        json.push_str(&Value::Object(s.entry).to_string());
        lines.push(s.line);
    }
    json.push_str("\n]\n");
    let left_out = (!needs.is_empty())
        .then_some(crate::config::Rejected {
            reason: crate::config::Rejection::NeedsConfiguration,
            count: needs.len(),
            errors: needs,
        })
        .into_iter()
        .collect();
    Ok(Translated::new(json, lines, left_out))
}
