//! Reading what a `health_check` tool returned.
//!
//! No spec defines the tool, so real servers answer in many shapes:
//! `structuredContent`, a JSON object in a text block (sometimes wrapped in
//! `toolResult`), or a bare word such as `ok`. This module turns any of them
//! into a status and a bounded list of numeric fields. [`interpret`] is
//! pure; [`run`] is the probe.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::{Answer, Cadence, Failure, Probe, ProbeKind, ProbeOutcome};
use crate::config::ServerSpec;
use crate::transport::tools::ToolSurface;
use crate::transport::{BoxFuture, Era, Session, ToolCall};

/// The health-check probe of a server: runs while its tool is listed.
pub struct HealthCheck(std::sync::Arc<ServerSpec>);

impl HealthCheck {
    /// The health check `spec` asks for.
    pub fn of(spec: std::sync::Arc<ServerSpec>) -> Self {
        HealthCheck(spec)
    }
}

impl Probe for HealthCheck {
    fn kind(&self, _: Era) -> ProbeKind {
        ProbeKind::HealthCheck
    }

    fn cadence(&self) -> Cadence {
        let s = &self.0.settings;
        Cadence {
            every: s.health_check_interval.0,
            deadline: s.health_check_timeout.0,
            late_after: None,
            needs_listing: true,
        }
    }

    fn listed(&self, tools: &ToolSurface) -> bool {
        let tool = &self.0.settings.health_check_tool;
        tools.names().any(|n| n == tool)
    }

    fn name(&self) -> Option<&str> {
        Some("health_check")
    }

    fn run<'a>(
        &'a self,
        session: &'a dyn Session,
        deadline: Duration,
    ) -> BoxFuture<'a, ProbeOutcome> {
        Box::pin(async move {
            let spec = HealthCheckSpec::of(&self.0.settings).with_conditions(&self.0.conditions);
            run(session, &spec, deadline).await
        })
    }
}

/// What the health probe calls, from the server's settings.
#[derive(Clone, Copy, Debug)]
pub struct HealthCheckSpec<'a> {
    /// The tool's name.
    pub tool: &'a str,
    /// Its arguments.
    pub arguments: &'a BTreeMap<String, Value>,
    /// Most numeric fields kept.
    pub max_fields: usize,
    /// The server's conditions (those on the report are evaluated).
    pub conditions: &'a [crate::config::condition::Condition],
}

impl<'a> HealthCheckSpec<'a> {
    /// The health check a server's settings ask for.
    pub fn of(s: &'a crate::config::Settings) -> Self {
        HealthCheckSpec {
            tool: &s.health_check_tool,
            arguments: &s.health_check_arguments,
            max_fields: s.health_check_max_fields,
            conditions: &[],
        }
    }

    /// The same, with the server's conditions.
    pub fn with_conditions(self, conditions: &'a [crate::config::condition::Condition]) -> Self {
        HealthCheckSpec { conditions, ..self }
    }
}

/// The report's conditions: `report` is the structured content, or the
/// first text block parsed as JSON.
async fn report_conditions(
    conditions: &[crate::config::condition::Condition],
    result: &crate::transport::CallToolResult,
    took: Duration,
) -> Vec<super::conditions::Checked> {
    use crate::config::condition::Subject;
    if !conditions
        .iter()
        .any(|c| c.subject == Subject::HealthReport)
    {
        return Vec::new();
    }
    let mut r = super::conditions::tool_result(result);
    let report = match r["structuredContent"].take() {
        Value::Null => r["json"].take(),
        structured => structured,
    };
    let vars = super::conditions::Vars {
        json: vec![("report", report)],
        duration: Some(took),
    };
    super::conditions::check(conditions, Subject::HealthReport, vars).await
}

/// Call the health tool under `deadline` and read its answer.
pub async fn run(
    session: &dyn Session,
    spec: &HealthCheckSpec<'_>,
    deadline: Duration,
) -> ProbeOutcome {
    let start = Instant::now();
    let trace = super::trace::new();
    let call = ToolCall {
        name: spec.tool.to_owned(),
        arguments: spec.arguments.clone().into_iter().collect(),
        timeout: deadline,
        max: deadline,
        progress_resets: false,
        traceparent: Some(trace.traceparent()),
    };
    let mut checked = Vec::new();
    let result = match session.call_tool(call).await {
        Ok(result) => {
            if result.is_error != Some(true) {
                checked = report_conditions(spec.conditions, &result, start.elapsed()).await;
            }
            let texts: Vec<&str> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
                .collect();
            Ok(Answer::Health(interpret(
                result.structured_content.as_ref(),
                &texts,
                result.is_error.unwrap_or(false),
                spec.max_fields,
            )))
        }
        Err(e) => Err(Failure::from_tool_call(&e).traced(&trace.trace_hex())),
    };
    ProbeOutcome {
        kind: ProbeKind::HealthCheck,
        tool: None,
        duration: start.elapsed(),
        result,
        trace: Some(Box::new(trace)),
        conditions: checked,
    }
}

/// What a server's own health_check said about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reported {
    /// `healthy`, `ok`, `pass`, `up`.
    Healthy,
    /// `degraded`, `warn`.
    Degraded,
    /// `unhealthy`, `fail`, `down`, `error`, or `isError: true`.
    Unhealthy,
    /// Answered, but in no shape mcpmon can read a status from. Never taken
    /// for a healthy self-report.
    #[default]
    Unreadable,
}

/// Longest field name exported as a label value.
const MAX_FIELD_NAME: usize = 64;
/// Largest text block parsed as JSON; bigger ones are not read.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// What one health_check call told us.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct HealthReport {
    /// The status the server reported ([`Reported::Unreadable`] if none
    /// could be read).
    pub status: Reported,
    /// Numeric top-level fields, sanitised names, at most `max_fields`.
    pub fields: Vec<(String, f64)>,
    /// True when the tool said `isError: true`.
    pub is_error: bool,
}

/// Map a status word to a status; unknown words give `None`.
pub fn status_word(word: &str) -> Option<Reported> {
    match word.trim().to_ascii_lowercase().as_str() {
        "healthy" | "ok" | "pass" | "passing" | "up" | "green" | "good" | "alive" => {
            Some(Reported::Healthy)
        }
        "degraded" | "warn" | "warning" | "yellow" => Some(Reported::Degraded),
        "unhealthy" | "fail" | "failed" | "failing" | "down" | "error" | "critical" | "red" => {
            Some(Reported::Unhealthy)
        }
        _ => None,
    }
}

/// How deep wrappers (`{"result": "<JSON text>"}`, `{"toolResult": {…}}`)
/// are followed; real SDKs nest at most twice.
const MAX_DEPTH: u8 = 4;

/// Interpret a tool result given its parts: `structuredContent`, the text of
/// its text blocks, and `isError`.
///
/// Each part is read in turn, structured content first, and the first that
/// names a status wins; numeric fields come from the first object found. A
/// result with no readable status at all is [`Reported::Unreadable`], never
/// taken for healthy. Shapes read, as the maintained SDKs produce them:
/// - an object with `status` / `state` / `health` (string or bool), or
///   `healthy` / `ok` (bool);
/// - PyPI `mcp` FastMCP / MCPServer wrapping a `str`, `bool` or list return
///   as `{"result": …}`, where a string may itself hold JSON or a bare word;
/// - a JSON object or a bare word (`ok`, `"degraded"`) in a text block, as
///   TypeScript SDK tools usually answer; the seeds' `{"toolResult": {…}}`.
pub fn interpret(
    structured: Option<&Value>,
    texts: &[&str],
    is_error: bool,
    max_fields: usize,
) -> HealthReport {
    let mut status = None;
    let mut fields: Option<Vec<(String, f64)>> = None;
    let parts = structured
        .into_iter()
        .map(Read::Value)
        .chain(texts.iter().map(|t| Read::Text(t)));
    for part in parts {
        let found = read(part, MAX_DEPTH, max_fields);
        if fields.is_none() {
            fields = found.fields;
        }
        if found.status.is_some() {
            status = found.status;
            break;
        }
    }
    let status = if is_error {
        Reported::Unhealthy
    } else {
        status.unwrap_or(Reported::Unreadable)
    };
    HealthReport {
        status,
        fields: fields.unwrap_or_default(),
        is_error,
    }
}

enum Read<'a> {
    Value(&'a Value),
    Text(&'a str),
}

#[derive(Default)]
struct Found {
    status: Option<Reported>,
    fields: Option<Vec<(String, f64)>>,
}

fn read(part: Read<'_>, depth: u8, max_fields: usize) -> Found {
    if depth == 0 {
        return Found::default();
    }
    match part {
        Read::Text(t) => match parse_text(t) {
            Some(v @ (Value::Object(_) | Value::String(_) | Value::Bool(_))) => {
                read(Read::Value(&v), depth - 1, max_fields)
            }
            Some(_) => Found::default(),
            None => Found {
                status: status_word(t.trim().trim_matches('"')),
                fields: None,
            },
        },
        Read::Value(Value::String(t)) => read(Read::Text(t), depth - 1, max_fields),
        Read::Value(Value::Bool(b)) => Found {
            status: Some(if *b {
                Reported::Healthy
            } else {
                Reported::Unhealthy
            }),
            fields: None,
        },
        Read::Value(Value::Object(m)) => match wrapped(m) {
            Some(inner) => read(Read::Value(inner), depth - 1, max_fields),
            None => Found {
                status: object_status(m),
                fields: Some(numeric_fields(m, max_fields)),
            },
        },
        Read::Value(_) => Found::default(),
    }
}

fn parse_text(text: &str) -> Option<Value> {
    if text.len() > MAX_TEXT_BYTES {
        return None;
    }
    serde_json::from_str(text.trim()).ok()
}

/// The one value inside a single-key wrapper: `result` (FastMCP's wrapping
/// of non-object returns) or `toolResult` (the seeds' TypeScript example).
fn wrapped(m: &Map<String, Value>) -> Option<&Value> {
    if m.len() != 1 {
        return None;
    }
    m.get("result").or_else(|| m.get("toolResult"))
}

fn object_status(m: &Map<String, Value>) -> Option<Reported> {
    for key in ["status", "state", "health"] {
        match m.get(key) {
            Some(Value::String(s)) => return status_word(s),
            Some(Value::Bool(true)) => return Some(Reported::Healthy),
            Some(Value::Bool(false)) => return Some(Reported::Unhealthy),
            _ => {}
        }
    }
    for key in ["healthy", "ok"] {
        if let Some(Value::Bool(b)) = m.get(key) {
            return Some(if *b {
                Reported::Healthy
            } else {
                Reported::Unhealthy
            });
        }
    }
    None
}

fn numeric_fields(m: &Map<String, Value>, max_fields: usize) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for (k, v) in m {
        if out.len() == max_fields {
            break;
        }
        let (Some(name), Some(x)) = (sanitize(k), v.as_f64().filter(|f| f.is_finite())) else {
            continue;
        };
        // `a-b` and `a_b` sanitise alike; the first wins, so no two
        // samples of one series are ever exported.
        if !out.iter().any(|(n, _)| *n == name) {
            out.push((name, x));
        }
    }
    out
}

/// A label-safe field name: `[a-zA-Z0-9_]`, bounded length, or `None`.
fn sanitize(name: &str) -> Option<String> {
    let s: String = name
        .chars()
        .take(MAX_FIELD_NAME)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn structured_content_wins() {
        let v = json!({"status": "healthy", "uptime_seconds": 12, "request_count": 3,
                       "memory_mb": 41.5, "timestamp": "2026-11-29T00:00:00Z"});
        let r = interpret(Some(&v), &["ignored"], false, 16);
        assert_eq!(r.status, Reported::Healthy);
        assert_eq!(
            r.fields,
            fields(&[
                ("memory_mb", 41.5),
                ("request_count", 3.0),
                ("uptime_seconds", 12.0)
            ])
        );
        assert!(!r.is_error);
    }

    #[test]
    fn json_in_a_text_block() {
        let r = interpret(
            None,
            &[r#" {"status":"degraded","connections":7} "#],
            false,
            16,
        );
        assert_eq!(r.status, Reported::Degraded);
        assert_eq!(r.fields, fields(&[("connections", 7.0)]));
    }

    #[test]
    fn tool_result_wrapper_from_the_seed() {
        let r = interpret(
            None,
            &[r#"{"toolResult":{"status":"unhealthy","uptime":5}}"#],
            false,
            16,
        );
        assert_eq!(r.status, Reported::Unhealthy);
        assert_eq!(r.fields, fields(&[("uptime", 5.0)]));
    }

    #[test]
    fn plain_words() {
        for (text, want) in [
            ("ok", Reported::Healthy),
            ("OK\n", Reported::Healthy),
            ("\"pass\"", Reported::Healthy),
            ("up", Reported::Healthy),
            ("warn", Reported::Degraded),
            ("degraded", Reported::Degraded),
            ("fail", Reported::Unhealthy),
            ("down", Reported::Unhealthy),
            ("error", Reported::Unhealthy),
            ("unhealthy", Reported::Unhealthy),
            ("all systems nominal", Reported::Unreadable),
        ] {
            assert_eq!(interpret(None, &[text], false, 16).status, want, "{text:?}");
        }
    }

    #[test]
    fn fastmcp_wraps_a_str_return_in_result() {
        // PyPI `mcp` FastMCP, a tool declared `-> str` returning JSON text:
        // the same JSON in structuredContent.result and in a text block.
        let text = r#"{"status": "degraded", "queue_depth": 12}"#;
        let r = interpret(Some(&json!({ "result": text })), &[text], false, 16);
        assert_eq!(r.status, Reported::Degraded);
        assert_eq!(r.fields, fields(&[("queue_depth", 12.0)]));
        // ... and the bare word.
        let r = interpret(
            Some(&json!({"result": "degraded"})),
            &["degraded"],
            false,
            16,
        );
        assert_eq!(r.status, Reported::Degraded);
        // A bool return, and a JSON string holding a quoted word.
        let r = interpret(Some(&json!({"result": false})), &["false"], false, 16);
        assert_eq!(r.status, Reported::Unhealthy);
        let r = interpret(None, &[r#""unhealthy""#], false, 16);
        assert_eq!(r.status, Reported::Unhealthy);
    }

    #[test]
    fn a_dict_or_model_return_is_read_as_is() {
        let v = json!({"status": "ok", "connections": 3});
        let r = interpret(Some(&v), &[&v.to_string()], false, 16);
        assert_eq!(r.status, Reported::Healthy);
        assert_eq!(r.fields, fields(&[("connections", 3.0)]));
    }

    #[test]
    fn a_status_less_structured_part_falls_back_to_the_text() {
        let r = interpret(Some(&json!({"load": 0.5})), &["warn"], false, 16);
        assert_eq!(r.status, Reported::Degraded);
        assert_eq!(r.fields, fields(&[("load", 0.5)]));
    }

    #[test]
    fn wrappers_are_followed_only_so_deep() {
        let mut v = json!("degraded");
        for _ in 0..10 {
            v = json!({ "result": v });
        }
        assert_eq!(
            interpret(Some(&v), &[], false, 16).status,
            Reported::Unreadable
        );
    }

    #[test]
    fn is_error_is_unhealthy_whatever_the_text_says() {
        let r = interpret(None, &["ok"], true, 16);
        assert_eq!(r.status, Reported::Unhealthy);
        assert!(r.is_error);
    }

    #[test]
    fn boolean_shapes() {
        let r = interpret(Some(&json!({"healthy": false})), &[], false, 16);
        assert_eq!(r.status, Reported::Unhealthy);
        let r = interpret(Some(&json!({"status": true})), &[], false, 16);
        assert_eq!(r.status, Reported::Healthy);
    }

    #[test]
    fn fields_that_sanitise_alike_are_exported_once() {
        let r = interpret(
            Some(&json!({"status": "ok", "a-b": 1, "a_b": 2, "a.b": 3})),
            &[],
            false,
            16,
        );
        assert_eq!(r.fields, fields(&[("a_b", 1.0)]));
    }

    #[test]
    fn fields_are_bounded_sanitised_and_finite() {
        let mut m = Map::new();
        for i in 0..100 {
            m.insert(format!("f{i:03}"), json!(i));
        }
        m.insert("weird name!".into(), json!(1));
        m.insert("x".repeat(500), json!(2));
        let r = interpret(Some(&Value::Object(m)), &[], false, 8);
        assert_eq!(r.fields.len(), 8);
        assert!(r.fields.iter().all(|(k, _)| k.len() <= MAX_FIELD_NAME
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')));
    }

    #[test]
    fn non_object_json_and_garbage_are_unreadable() {
        let unreadable = Reported::Unreadable;
        assert_eq!(interpret(None, &["[1,2]"], false, 16).status, unreadable);
        assert_eq!(
            interpret(Some(&json!(42)), &[], false, 16).status,
            unreadable
        );
        assert_eq!(interpret(None, &[], false, 16).status, unreadable);
        assert_eq!(
            interpret(Some(&json!({"uptime": 3})), &[], false, 16).status,
            unreadable
        );
        let huge = format!(
            "{{\"status\":\"ok\",\"pad\":\"{}\"}}",
            "a".repeat(MAX_TEXT_BYTES)
        );
        assert_eq!(interpret(None, &[&huge], false, 16).fields, vec![]);
    }
}
