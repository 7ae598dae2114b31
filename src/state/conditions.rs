//! The latest outcome of each of a server's conditions: what makes it
//! `condition_failed`, and the words of that reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::verdict::State;
use crate::config::condition::Severity;
use crate::probe::conditions::Checked;

/// Failing conditions named in one detail, at most.
const NAMED: usize = 3;

/// Each condition's latest outcome, by name.
#[derive(Debug, Default)]
pub struct Conditions(BTreeMap<Arc<str>, Checked>);

impl Conditions {
    /// Keep these outcomes (each replaces its condition's last one).
    pub fn record(&mut self, checked: &[Checked]) {
        for c in checked {
            self.0.insert(c.name.clone(), c.clone());
        }
    }

    fn failing(&self) -> impl Iterator<Item = &Checked> {
        self.0.values().filter(|c| c.failure.is_some())
    }

    /// The state the failing conditions ask for: the worst of their
    /// severities, `None` when all hold.
    pub fn worst(&self) -> Option<State> {
        self.failing()
            .map(|c| match c.severity {
                Severity::Degraded => State::Degraded,
                Severity::Unhealthy => State::Unhealthy,
            })
            .max_by_key(|s| s.severity())
    }

    /// The failing conditions, worst first, in words.
    pub fn detail(&self) -> String {
        let mut failing: Vec<&Checked> = self.failing().collect();
        failing.sort_by_key(|c| std::cmp::Reverse(c.severity == Severity::Unhealthy));
        let mut parts: Vec<String> = failing
            .iter()
            .take(NAMED)
            .map(|c| {
                format!(
                    "condition {} failed: {}",
                    c.name,
                    c.failure.as_deref().unwrap_or_default()
                )
            })
            .collect();
        if failing.len() > NAMED {
            parts.push(format!("{} more", failing.len() - NAMED));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::condition::Subject;

    fn c(name: &str, severity: Severity, failure: Option<&str>) -> Checked {
        Checked {
            name: Arc::from(name),
            subject: Subject::ToolResult,
            severity,
            failure: failure.map(str::to_owned),
        }
    }

    #[test]
    fn the_worst_failing_condition_decides_and_a_pass_clears_it() {
        let mut all = Conditions::default();
        assert_eq!(all.worst(), None);
        all.record(&[
            c("a", Severity::Degraded, Some("a is false")),
            c("b", Severity::Unhealthy, None),
        ]);
        assert_eq!(all.worst(), Some(State::Degraded));
        assert_eq!(all.detail(), "condition a failed: a is false");
        all.record(&[c("b", Severity::Unhealthy, Some("b is false"))]);
        assert_eq!(all.worst(), Some(State::Unhealthy));
        assert_eq!(
            all.detail(),
            "condition b failed: b is false; condition a failed: a is false"
        );
        all.record(&[
            c("a", Severity::Degraded, None),
            c("b", Severity::Unhealthy, None),
        ]);
        assert_eq!(all.worst(), None);
        assert_eq!(all.detail(), "");
    }

    #[test]
    fn a_detail_names_a_few_and_counts_the_rest() {
        let mut all = Conditions::default();
        let many: Vec<Checked> = (0..5)
            .map(|i| c(&format!("c{i}"), Severity::Degraded, Some("false")))
            .collect();
        all.record(&many);
        let d = all.detail();
        assert!(d.ends_with("; 2 more"), "{d}");
        assert_eq!(d.matches("condition c").count(), 3, "{d}");
    }
}
