//! What a new configuration changes in the running one: servers added,
//! removed, changed (restarted with new settings) and kept (untouched,
//! sessions and all). A pure comparison of specs; applying it is the
//! supervisors' job.

use std::borrow::Borrow;
use std::collections::HashMap;

use serde::Serialize;

use super::ServerSpec;

/// What a reload changed, as `POST /-/reload` answers it and the log says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Diff {
    /// Servers started.
    pub added: Vec<String>,
    /// Servers stopped.
    pub removed: Vec<String>,
    /// Servers restarted with new settings.
    pub changed: Vec<String>,
    /// Servers left running as they were.
    pub kept: usize,
}

impl Diff {
    /// From the specs `running` now to those `wanted`; every list sorted.
    pub fn between<'a, S: Borrow<ServerSpec>>(
        running: impl IntoIterator<Item = &'a ServerSpec>,
        wanted: &[S],
    ) -> Diff {
        let wanted = || wanted.iter().map(Borrow::borrow);
        let wanted_by_id: HashMap<&str, &ServerSpec> =
            wanted().map(|s: &ServerSpec| (s.id.as_str(), s)).collect();
        let mut diff = Diff::default();
        let mut running_ids = std::collections::HashSet::new();
        for spec in running {
            running_ids.insert(spec.id.as_str());
            match wanted_by_id.get(spec.id.as_str()) {
                Some(new) if new.same_session(spec) => diff.kept += 1,
                Some(_) => diff.changed.push(spec.id.clone()),
                None => diff.removed.push(spec.id.clone()),
            }
        }
        diff.added = wanted()
            .filter(|s| !running_ids.contains(s.id.as_str()))
            .map(|s| s.id.clone())
            .collect();
        diff.added.sort();
        diff.removed.sort();
        diff.changed.sort();
        diff
    }

    /// Whether nothing started, stopped or restarted.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// Log what changed, under `message`.
    pub fn log(&self, message: &str) {
        tracing::info!(
            added = ?self.added,
            removed = ?self.removed,
            changed = ?self.changed,
            kept = self.kept,
            "{message}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, command: &str) -> ServerSpec {
        let text =
            format!("servers:\n  - id: {id}\n    transport: stdio\n    command: {command}\n");
        let config =
            crate::config::parse(std::path::Path::new("/x.yaml"), &text, &|_| None).expect("valid");
        (*config.servers[0]).clone()
    }

    #[test]
    fn each_server_is_added_removed_changed_or_kept() {
        let running = [
            spec("a", "/bin/a"),
            spec("b", "/bin/b"),
            spec("c", "/bin/c"),
        ];
        let wanted = [
            spec("d", "/bin/d"),
            spec("b", "/bin/b2"),
            spec("a", "/bin/a"),
        ];
        let diff = Diff::between(&running, &wanted);
        assert_eq!(
            diff,
            Diff {
                added: vec!["d".into()],
                removed: vec!["c".into()],
                changed: vec!["b".into()],
                kept: 1,
            }
        );
        assert!(!diff.is_empty());
        assert!(Diff::between(&running, &running).is_empty());
        assert_eq!(Diff::between(&running, &running).kept, 3);
    }

    #[test]
    fn what_the_operator_says_never_restarts_a_server_but_a_label_does() {
        let running = [spec("a", "/bin/a")];
        let mut said = spec("a", "/bin/a");
        said.operator = Some(crate::config::OperatorWord {
            kind: "MCPServer".into(),
            phase: Some("Failed".into()),
            ready: Some(false),
        });
        assert_eq!(Diff::between(&running, std::slice::from_ref(&said)).kept, 1);
        said.labels.push(crate::config::Label {
            name: "team".into(),
            exported: "label_team".into(),
            value: "a".into(),
        });
        assert_eq!(Diff::between(&running, &[said]).changed, ["a"]);
    }
}
