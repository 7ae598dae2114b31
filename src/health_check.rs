//! Reading what a `health_check` tool returned.
//!
//! No spec defines the tool, so real servers answer in many shapes:
//! `structuredContent`, a JSON object in a text block (sometimes wrapped in
//! `toolResult`), or a bare word such as `ok`. This module turns any of them
//! into a status and a bounded list of numeric fields. Pure; no I/O.

use serde_json::{Map, Value};

use crate::verdict::Reported;

/// Longest field name exported as a label value.
const MAX_FIELD_NAME: usize = 64;
/// Largest text block parsed as JSON; bigger ones are not read.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// What one health_check call told us.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HealthReport {
    /// The status the server reported, if it reported one we understand.
    pub status: Option<Reported>,
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

/// Interpret a tool result given its parts: `structuredContent`, the text of
/// its text blocks, and `isError`.
pub fn interpret(
    structured: Option<&Value>,
    texts: &[&str],
    is_error: bool,
    max_fields: usize,
) -> HealthReport {
    let from_text = texts.iter().find_map(|t| parse_text(t));
    let object = match structured {
        Some(Value::Object(m)) => Some(m.clone()),
        _ => from_text.as_ref().and_then(|v| v.as_object().cloned()),
    };
    let object = object.map(unwrap_tool_result);
    let mut report = HealthReport {
        status: None,
        fields: Vec::new(),
        is_error,
    };
    match &object {
        Some(m) => {
            report.status = object_status(m);
            report.fields = numeric_fields(m, max_fields);
        }
        None => {
            // A bare word (`ok`), possibly as a JSON string.
            report.status = texts.iter().find_map(|t| {
                let t = t.trim().trim_matches('"');
                status_word(t)
            });
        }
    }
    if is_error {
        report.status = Some(Reported::Unhealthy);
    }
    report
}

fn parse_text(text: &str) -> Option<Value> {
    if text.len() > MAX_TEXT_BYTES {
        return None;
    }
    serde_json::from_str(text.trim()).ok()
}

/// The seeds' TypeScript example nests the answer in `toolResult`.
fn unwrap_tool_result(m: Map<String, Value>) -> Map<String, Value> {
    match m.get("toolResult") {
        Some(Value::Object(inner)) if m.len() == 1 => inner.clone(),
        _ => m,
    }
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
    m.iter()
        .filter_map(|(k, v)| Some((sanitize(k)?, v.as_f64().filter(|f| f.is_finite())?)))
        .take(max_fields)
        .collect()
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
        assert_eq!(r.status, Some(Reported::Healthy));
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
        assert_eq!(r.status, Some(Reported::Degraded));
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
        assert_eq!(r.status, Some(Reported::Unhealthy));
        assert_eq!(r.fields, fields(&[("uptime", 5.0)]));
    }

    #[test]
    fn plain_words() {
        for (text, want) in [
            ("ok", Some(Reported::Healthy)),
            ("OK\n", Some(Reported::Healthy)),
            ("\"pass\"", Some(Reported::Healthy)),
            ("up", Some(Reported::Healthy)),
            ("warn", Some(Reported::Degraded)),
            ("degraded", Some(Reported::Degraded)),
            ("fail", Some(Reported::Unhealthy)),
            ("down", Some(Reported::Unhealthy)),
            ("error", Some(Reported::Unhealthy)),
            ("unhealthy", Some(Reported::Unhealthy)),
            ("all systems nominal", None),
        ] {
            assert_eq!(interpret(None, &[text], false, 16).status, want, "{text:?}");
        }
    }

    #[test]
    fn is_error_is_unhealthy_whatever_the_text_says() {
        let r = interpret(None, &["ok"], true, 16);
        assert_eq!(r.status, Some(Reported::Unhealthy));
        assert!(r.is_error);
    }

    #[test]
    fn boolean_shapes() {
        let r = interpret(Some(&json!({"healthy": false})), &[], false, 16);
        assert_eq!(r.status, Some(Reported::Unhealthy));
        let r = interpret(Some(&json!({"status": true})), &[], false, 16);
        assert_eq!(r.status, Some(Reported::Healthy));
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
    fn non_object_json_and_garbage_give_no_status() {
        assert_eq!(interpret(None, &["[1,2]"], false, 16).status, None);
        assert_eq!(interpret(Some(&json!(42)), &[], false, 16).status, None);
        let huge = format!(
            "{{\"status\":\"ok\",\"pad\":\"{}\"}}",
            "a".repeat(MAX_TEXT_BYTES)
        );
        assert_eq!(interpret(None, &[&huge], false, 16).fields, vec![]);
    }
}
