//! Evaluating conditions ([`crate::config::condition`]) on what a probe
//! returned. What a server sent is bounded before CEL sees it
//! ([`MAX_INPUT`]), and evaluation runs on a blocking thread under
//! [`EVAL_TIMEOUT`], so a server's answer can slow only its own verdict.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::condition::{Condition, Severity, Subject};

/// Most bytes of a server's answer (as JSON) a condition is evaluated on.
pub const MAX_INPUT: usize = 256 * 1024;
/// Longest the conditions of one probe may take together.
pub const EVAL_TIMEOUT: Duration = Duration::from_secs(1);

/// One condition's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// The condition's name (a label value).
    pub name: Arc<str>,
    /// What it reads.
    pub subject: Subject,
    /// How bad a failure is.
    pub severity: Severity,
    /// Why it does not hold; `None` when it holds.
    pub failure: Option<String>,
}

/// The variables of one evaluation, as JSON (and the probe's duration).
#[derive(Debug, Default)]
pub struct Vars {
    /// Name and value of each JSON variable.
    pub json: Vec<(&'static str, Value)>,
    /// `duration`, when the subject has one.
    pub duration: Option<Duration>,
}

/// `result` for a tool's answer: `isError`, `content`,
/// `structuredContent`, and `json`, the first text content parsed as JSON
/// where it is JSON.
pub fn tool_result(result: &crate::transport::CallToolResult) -> Value {
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    let json = result
        .content
        .iter()
        .find_map(|c| c.as_text())
        .and_then(|t| serde_json::from_str::<Value>(&t.text).ok())
        .unwrap_or(Value::Null);
    serde_json::json!({
        "isError": result.is_error.unwrap_or(false),
        "content": content,
        "structuredContent": result.structured_content.clone().unwrap_or(Value::Null),
        "json": json,
    })
}

/// `tools` for a listing: each tool's `name`, `title` and `annotations`.
pub fn tools(surface: &crate::transport::tools::ToolSurface) -> Value {
    Value::Array(
        surface
            .tools
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "title": t.title.clone().map_or(Value::Null, Value::String),
                    "annotations": t.annotations.clone().unwrap_or(Value::Null),
                })
            })
            .collect(),
    )
}

/// Evaluate the conditions of `subject` among `conditions`; empty when
/// there are none.
pub async fn check(conditions: &[Condition], subject: Subject, vars: Vars) -> Vec<Checked> {
    let mine: Vec<Condition> = conditions
        .iter()
        .filter(|c| c.subject == subject)
        .cloned()
        .collect();
    if mine.is_empty() {
        return Vec::new();
    }
    let too_big = vars
        .json
        .iter()
        .map(|(_, v)| serde_json::to_vec(v).map_or(usize::MAX, |b| b.len()))
        .sum::<usize>()
        > MAX_INPUT;
    if too_big {
        let why = format!(
            "the answer is over {} KiB, too large to evaluate",
            MAX_INPUT / 1024
        );
        return failed_all(&mine, &why);
    }
    // One evaluation per condition at a time: an earlier one that outran
    // its deadline still holds its thread, and a hostile answer must cost
    // one bound, not one more thread at every probe.
    let (free, busy): (Vec<Condition>, Vec<Condition>) =
        mine.into_iter().partition(|c| c.expr.claim());
    let mut out = failed_all(
        &busy,
        &format!("an evaluation of an earlier answer is still running (over {EVAL_TIMEOUT:?})"),
    );
    if free.is_empty() {
        return out;
    }
    let claimed = Claimed(free);
    let names = claimed.0.clone();
    let eval = tokio::task::spawn_blocking(move || evaluate(&claimed.0, &vars));
    out.extend(match tokio::time::timeout(EVAL_TIMEOUT, eval).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(_)) => failed_all(&names, "evaluation failed"),
        Err(_) => failed_all(&names, &format!("evaluation took over {EVAL_TIMEOUT:?}")),
    });
    out
}

/// Conditions claimed for one evaluation, released when it ends (on its
/// blocking thread, however long after the probe stopped waiting).
struct Claimed(Vec<Condition>);

impl Drop for Claimed {
    fn drop(&mut self) {
        for c in &self.0 {
            c.expr.release();
        }
    }
}

fn failed_all(conditions: &[Condition], why: &str) -> Vec<Checked> {
    conditions
        .iter()
        .map(|c| checked(c, Some(why.to_owned())))
        .collect()
}

fn checked(c: &Condition, failure: Option<String>) -> Checked {
    Checked {
        name: Arc::from(c.name.as_str()),
        subject: c.subject,
        severity: c.severity,
        failure,
    }
}

/// Evaluate each condition against `vars`.
pub fn evaluate(conditions: &[Condition], vars: &Vars) -> Vec<Checked> {
    let mut ctx = cel::Context::default();
    for (name, value) in &vars.json {
        if let Err(e) = ctx.add_variable(*name, value) {
            return failed_all(conditions, &format!("{name} cannot be read: {e}"));
        }
    }
    if let Some(d) = vars.duration {
        let d = chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
        ctx.add_variable_from_value("duration", cel::Value::Duration(d));
    }
    conditions
        .iter()
        .map(|c| {
            let failure = match c.expr.program.execute(&ctx) {
                Ok(cel::Value::Bool(true)) => None,
                Ok(cel::Value::Bool(false)) => Some(format!("{} is false", c.expr.source)),
                Ok(other) => Some(format!(
                    "{} gives {}, not a bool",
                    c.expr.source,
                    other.type_of()
                )),
                Err(e) => Some(format!("{} cannot be evaluated: {e}", c.expr.source)),
            };
            checked(c, failure)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::condition::compile;

    fn cond(name: &str, src: &str, subject: Subject) -> Condition {
        Condition {
            name: name.into(),
            expr: compile(src, subject).expect("compiles"),
            severity: Severity::Degraded,
            subject,
        }
    }

    fn failures(checked: &[Checked]) -> Vec<(&str, Option<&str>)> {
        checked
            .iter()
            .map(|c| (&*c.name, c.failure.as_deref()))
            .collect()
    }

    #[tokio::test]
    async fn a_tool_result_is_read_as_json_with_its_duration() {
        let result: crate::transport::CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": r#"{"timezone": "UTC", "is_dst": false}"#}]
        }))
        .expect("a result");
        let s = Subject::ToolResult;
        let conditions = [
            cond("utc", r#"result.json.timezone == "UTC""#, s),
            cond("paris", r#"result.json.timezone == "Europe/Paris""#, s),
            cond("fast", "duration < duration('1s')", s),
            cond("text", "result.content[0].text.contains('UTC')", s),
            cond("missing", "result.json.nothere == 1", s),
            cond("number", "1 + 1", s),
        ];
        let vars = Vars {
            json: vec![("result", tool_result(&result))],
            duration: Some(Duration::from_millis(20)),
        };
        let got = check(&conditions, s, vars).await;
        let f = failures(&got);
        assert_eq!(f[0], ("utc", None));
        assert_eq!(
            f[1],
            (
                "paris",
                Some(r#"result.json.timezone == "Europe/Paris" is false"#)
            )
        );
        assert_eq!(f[2], ("fast", None));
        assert_eq!(f[3], ("text", None));
        assert!(
            f[4].1.is_some_and(|m| m.contains("cannot be evaluated")),
            "{f:?}"
        );
        assert_eq!(f[5], ("number", Some("1 + 1 gives int, not a bool")));
    }

    #[tokio::test]
    async fn only_the_subject_s_conditions_run_and_a_huge_answer_fails_them() {
        let conditions = [
            cond(
                "t",
                r#"tools.exists(t, t.name == "search")"#,
                Subject::Tools,
            ),
            cond("r", "report.ok", Subject::HealthReport),
        ];
        let big = Value::String("x".repeat(MAX_INPUT + 1));
        let vars = Vars {
            json: vec![("report", big)],
            duration: None,
        };
        let got = check(&conditions, Subject::HealthReport, vars).await;
        assert_eq!(got.len(), 1);
        assert!(
            got[0]
                .failure
                .as_deref()
                .is_some_and(|m| m.contains("too large"))
        );
        let vars = Vars {
            json: vec![("tools", serde_json::json!([{"name": "search"}]))],
            duration: None,
        };
        let got = check(&conditions, Subject::Tools, vars).await;
        assert_eq!(failures(&got), [("t", None)]);
        assert!(check(&[], Subject::Tools, Vars::default()).await.is_empty());
    }

    #[tokio::test]
    async fn a_condition_still_evaluating_an_earlier_answer_is_not_started_again() {
        let s = Subject::HealthReport;
        let conditions = [cond("slow", "report.ok", s), cond("other", "true", s)];
        let vars = || Vars {
            json: vec![("report", serde_json::json!({"ok": true}))],
            duration: None,
        };
        // As if an evaluation that outran its deadline still ran.
        assert!(conditions[0].expr.claim());
        let got = check(&conditions, s, vars()).await;
        let f = failures(&got);
        assert!(
            f.iter()
                .any(|(n, why)| *n == "slow" && why.is_some_and(|w| w.contains("still running"))),
            "{f:?}"
        );
        assert!(f.contains(&("other", None)), "{f:?}");
        assert!(
            conditions[1].expr.claim(),
            "an evaluation gives its claim back when it ends"
        );
        conditions[1].expr.release();
        // Once it ends, the next answer is evaluated again.
        conditions[0].expr.release();
        let got = check(&conditions, s, vars()).await;
        assert_eq!(failures(&got), vec![("slow", None), ("other", None)]);
    }
}
