//! The task probes' tasks as last seen: the busy evidence a server's status
//! shows while one works, and the reasons a task gives its server
//! (`task_stuck`, `input_required`) until that tool's next probe ends
//! otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::verdict::Reason;
use crate::probe::task::TaskSeen;
use crate::probe::{FailureReason, ProbeOutcome};

/// Each task-probed tool's latest task, by tool.
#[derive(Debug, Default)]
pub struct Tasks(BTreeMap<Arc<str>, Entry>);

#[derive(Debug)]
struct Entry {
    /// The latest poll (`None` until one is told).
    seen: Option<TaskSeen>,
    /// What the last ended task says of its server, in words.
    problem: Option<(Reason, String)>,
}

impl Tasks {
    /// A poll was told.
    pub fn polled(&mut self, seen: TaskSeen) {
        let entry = self.0.entry(seen.tool.clone()).or_insert(Entry {
            seen: None,
            problem: None,
        });
        entry.seen = Some(seen);
    }

    /// A tool probe ended: a stuck task or one asking for input names its
    /// reason (with `detail`, scrubbed); any other end clears it. A task
    /// that ended is no longer busy.
    pub fn ended(&mut self, o: &ProbeOutcome, detail: impl FnOnce() -> String) {
        let Some(tool) = &o.tool else { return };
        let problem = match o.failure() {
            Some(FailureReason::TaskStuck) => Some(Reason::TaskStuck),
            Some(FailureReason::InputRequired) => Some(Reason::InputRequired),
            _ => None,
        };
        let Some(entry) = self.0.get_mut(tool) else {
            if let Some(r) = problem {
                let entry = Entry {
                    seen: None,
                    problem: Some((r, detail())),
                };
                self.0.insert(tool.clone(), entry);
            }
            return;
        };
        entry.problem = problem.map(|r| (r, detail()));
        if let Some(seen) = &mut entry.seen {
            seen.busy = false;
        }
    }

    /// The reason a task gives, the worst first: stuck, then input.
    pub fn worst(&self) -> Option<Reason> {
        let reasons = || self.0.values().filter_map(|e| e.problem.as_ref());
        reasons()
            .find(|(r, _)| *r == Reason::TaskStuck)
            .or_else(|| reasons().next())
            .map(|(r, _)| *r)
    }

    /// The words of `reason`, from the first task that gives it.
    pub fn detail(&self, reason: Reason) -> String {
        self.0
            .iter()
            .find_map(|(tool, e)| match &e.problem {
                Some((r, d)) if *r == reason => Some(format!("tool {tool}: {d}")),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Each tool's latest task, by tool, as published.
    pub fn latest(&self) -> Vec<TaskSeen> {
        self.0.values().filter_map(|e| e.seen.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ProbeKind;
    use crate::probe::task::TaskStatus;
    use crate::state::testing::{answered, failed};

    fn seen(busy: bool) -> TaskSeen {
        TaskSeen {
            tool: Arc::from("research"),
            task_id: "t1".into(),
            status: TaskStatus::Working,
            status_message: None,
            last_updated_at: "2026-12-01T00:00:00Z".into(),
            polls: 1,
            busy,
        }
    }

    fn outcome(reason: Option<FailureReason>) -> ProbeOutcome {
        let mut o = match reason {
            None => answered(ProbeKind::Tool, 1),
            Some(reason) => failed(ProbeKind::Tool, reason),
        };
        o.tool = Some(Arc::from("research"));
        o
    }

    #[test]
    fn a_stuck_task_names_its_reason_until_the_next_probe_of_its_tool_ends_otherwise() {
        let mut t = Tasks::default();
        t.polled(seen(true));
        assert_eq!(t.worst(), None);
        assert!(t.latest()[0].busy);
        t.ended(&outcome(Some(FailureReason::TaskStuck)), || "stuck".into());
        assert_eq!(t.worst(), Some(Reason::TaskStuck));
        assert_eq!(t.detail(Reason::TaskStuck), "tool research: stuck");
        assert!(!t.latest()[0].busy, "an ended task is not busy");
        t.ended(&outcome(None), String::new);
        assert_eq!(t.worst(), None);
    }

    #[test]
    fn input_required_is_its_own_reason_and_stuck_is_worse() {
        let mut t = Tasks::default();
        t.ended(&outcome(Some(FailureReason::InputRequired)), || {
            "asks".into()
        });
        assert_eq!(t.worst(), Some(Reason::InputRequired));
        assert!(t.latest().is_empty(), "no poll was told");
        let mut other = outcome(Some(FailureReason::TaskStuck));
        other.tool = Some(Arc::from("other"));
        t.ended(&other, || "stuck".into());
        assert_eq!(t.worst(), Some(Reason::TaskStuck));
        // A failed task is a failed probe (the window counts it), no reason of its own.
        t.ended(&outcome(Some(FailureReason::TaskFailed)), String::new);
        t.ended(
            &{
                other.result = Ok(crate::probe::Answer::Alive);
                other
            },
            String::new,
        );
        assert_eq!(t.worst(), None);
    }
}
