//! Conditions: checks users write, in the Common Expression Language, on
//! what a probe returned (a tool's result, the health report, the tool
//! list). Each is compiled once, when the config is read; `check-config`
//! reports a syntax error or an unknown variable at the expression's
//! file:line:column, with the position inside the expression.

use std::sync::Arc;

use serde::Deserialize;

/// How bad a failed condition makes the server.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Degraded (the default).
    #[default]
    Degraded,
    /// Unhealthy.
    Unhealthy,
}

/// What a condition is evaluated on, and so which variables it may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A tool probe's answer: `result` and `duration`.
    ToolResult,
    /// The health check's parsed report: `report` and `duration`.
    HealthReport,
    /// The tool list: `tools`.
    Tools,
}

impl Subject {
    /// The variables a condition on this subject may read.
    pub fn variables(self) -> &'static [&'static str] {
        match self {
            Subject::ToolResult => &["result", "duration"],
            Subject::HealthReport => &["report", "duration"],
            Subject::Tools => &["tools"],
        }
    }
}

/// A compiled expression, compared and shown by its source.
#[derive(Clone)]
pub struct Expr {
    /// As written.
    pub source: String,
    /// Compiled.
    pub program: Arc<cel::Program>,
    /// Set while an evaluation runs: one that outruns its deadline keeps
    /// its blocking thread (CEL cannot be stopped), so the next answer must
    /// not start another beside it.
    running: Arc<std::sync::atomic::AtomicBool>,
}

impl Expr {
    /// Take the right to evaluate it; false while an evaluation runs.
    pub fn claim(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Give back what [`Expr::claim`] took.
    pub fn release(&self) {
        self.running
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.source)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// One condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// Its name, unique among the server's conditions (a label value).
    pub name: String,
    /// What must hold.
    pub expr: Expr,
    /// How bad it is when it does not.
    pub severity: Severity,
    /// What it reads.
    pub subject: Subject,
}

/// Longest expression accepted: conditions are one-liners, and a long
/// one is a mistake.
pub const MAX_EXPR: usize = 4096;

/// Deepest bracket nesting accepted (`(`, `[`, `{`): a condition reads a
/// few levels, and each level costs the parser's stack dearly.
pub const MAX_NESTING: usize = 8;

/// The stack an expression is compiled on: eight times what the deepest
/// accepted one takes in a debug build.
const COMPILE_STACK: usize = 16 << 20;

/// Compile `source` for `subject`: a syntax error, or a variable the
/// subject does not offer, as a message naming where in the expression.
pub fn compile(source: &str, subject: Subject) -> Result<Expr, String> {
    if source.len() > MAX_EXPR {
        return Err(format!("longer than {MAX_EXPR} bytes"));
    }
    if let Some((line, column)) = super::depth::too_deep(source, MAX_NESTING) {
        return Err(format!(
            "brackets nested more than {MAX_NESTING} deep at {line}:{column} of the expression"
        ));
    }
    // The parser recurses a dozen frames per bracket: it gets a stack of
    // its own, whatever thread reads the config (a runtime worker's is
    // 2 MiB).
    let owned = source.to_owned();
    let compiled = std::thread::Builder::new()
        .name("cel-compile".into())
        .stack_size(COMPILE_STACK)
        .spawn(move || cel::Program::compile(&owned))
        .map_err(|e| format!("cannot compile: {e}"))?
        .join()
        .map_err(|_| "the expression could not be compiled".to_owned())?;
    let program = compiled.map_err(|e| {
        let first = e.errors.first();
        match first {
            // Positions are 1-based line and column already.
            Some(p) => format!(
                "syntax error at {}:{} of the expression: {}",
                p.pos.0, p.pos.1, p.msg
            ),
            None => format!("syntax error: {e}"),
        }
    })?;
    // Comprehension variables (`t` in `tools.exists(t, …)`) are bound by
    // their macro; a root name outside both is a typo.
    let bound = comprehension_variables(source);
    let allowed = subject.variables();
    let unknown: Vec<String> = program
        .references()
        .variables()
        .into_iter()
        .filter(|v| !allowed.contains(v) && !bound.iter().any(|b| b == v))
        .map(str::to_owned)
        .collect();
    if let Some(v) = unknown.first() {
        return Err(format!(
            "unknown variable {v:?}; a condition here reads {}",
            allowed.join(" and ")
        ));
    }
    Ok(Expr {
        source: source.to_owned(),
        program: Arc::new(program),
        running: Arc::default(),
    })
}

/// The names a macro binds: the first argument of `.all(`, `.exists(`,
/// `.exists_one(`, `.map(` and `.filter(`.
fn comprehension_variables(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for m in [".all(", ".exists(", ".exists_one(", ".map(", ".filter("] {
        for (i, _) in source.match_indices(m) {
            let rest = &source[i + m.len()..];
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_expressions_compile_for_their_subject() {
        for (src, subject) in [
            (r#"result.json.timezone == "UTC""#, Subject::ToolResult),
            (
                "duration < duration('2s') && !result.isError",
                Subject::ToolResult,
            ),
            ("report.queue_depth < 100", Subject::HealthReport),
            (r#"tools.exists(t, t.name == "search")"#, Subject::Tools),
            ("tools.all(tool, tool.name.size() < 64)", Subject::Tools),
        ] {
            compile(src, subject).unwrap_or_else(|e| panic!("{src}: {e}"));
        }
    }

    #[test]
    fn errors_say_where_and_what() {
        let e = compile("result.json.timezone ==", Subject::ToolResult).expect_err("bad");
        assert!(e.starts_with("syntax error at 1:"), "{e}");
        let e = compile("report.ok", Subject::ToolResult).expect_err("bad");
        assert_eq!(
            e,
            r#"unknown variable "report"; a condition here reads result and duration"#
        );
        let e = compile("tools.exists(t, x.name == 1)", Subject::Tools).expect_err("bad");
        assert!(e.starts_with(r#"unknown variable "x""#), "{e}");
        let long = "1 == 1 && ".repeat(500) + "true";
        assert!(compile(&long, Subject::Tools).is_err());
    }
}
