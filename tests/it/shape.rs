//! The shape of the code, checked: a file is read top to bottom, a function
//! on one screen or two. Outside tests no source file is over 600 lines
//! and no function over 100; an in-file test module over 200 lines moves
//! to a sibling file. (Test files and test modules are not held to the
//! first two: a table of cases is long by nature.)

use crate::support::source::{Source, sources};

/// Most lines of a source file, its in-file tests cut off.
const MAX_FILE: usize = 600;
/// Most lines of a function, from `fn` to its closing brace.
const MAX_FN: usize = 100;
/// Most lines of an in-file test module.
const MAX_IN_FILE_TESTS: usize = 200;

/// Functions allowed to be longer, each with why. Empty: keep it so, or
/// say here why a function cannot be cut.
const LONG_FNS: &[(&str, &str, &str)] = &[];

/// Each function in `code` (comments and literals blanked out): its name,
/// the line of its `fn` (1-based) and its length in lines. Declarations
/// without a body (in traits) are left out.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("fn ") {
        let at = from + found;
        from = at + 3;
        if at > 0 && ident(bytes[at - 1]) {
            continue;
        }
        let name: String = code[from..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // A `fn(..)` pointer type.
        }
        // The body opens at the first `{` outside parentheses and brackets;
        // a `;` first means there is none.
        let mut depth = 0i32;
        let mut open = None;
        for (i, b) in bytes.iter().enumerate().skip(from) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else {
            continue;
        };
        let mut braces = 0i32;
        let close = bytes[open..].iter().position(|b| {
            match b {
                b'{' => braces += 1,
                b'}' => braces -= 1,
                _ => {}
            }
            braces == 0
        });
        let Some(close) = close else {
            continue;
        };
        out.push((name, line_of(at), line_of(open + close) - line_of(at) + 1));
    }
    out
}

fn problems(files: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for f in files {
        let path = f.rel.display();
        let lines = f.text.lines().count();
        if lines > MAX_FILE {
            found.push(format!("{path}: {lines} lines (at most {MAX_FILE})"));
        }
        if f.in_file_tests > MAX_IN_FILE_TESTS {
            found.push(format!(
                "{path}: an in-file test module of {} lines (at most {MAX_IN_FILE_TESTS}: move it beside)",
                f.in_file_tests
            ));
        }
        for (name, line, length) in functions(&f.code) {
            let allowed = LONG_FNS
                .iter()
                .any(|(file, func, _)| f.rel.ends_with(file) && *func == name);
            if length > MAX_FN && !allowed {
                found.push(format!(
                    "{path}:{line}: fn {name} is {length} lines (at most {MAX_FN})"
                ));
            }
        }
    }
    found
}

#[test]
fn no_file_over_600_lines_and_no_function_over_100() {
    let files = sources();
    assert!(files.len() >= 40, "{} files", files.len());
    let found = problems(&files);
    assert!(found.is_empty(), "too long:\n{}", found.join("\n"));
}

#[test]
fn the_measure_finds_functions_and_their_length() {
    let code = "trait T {\n    fn declared(&self);\n}\nfn short() {\n}\n\
                pub async fn spread<F: Fn(u8)>(f: F) -> [u8; 2]\nwhere\n    F: Copy,\n{\n    let x = { 1 };\n    f(x);\n    [x, x]\n}\n\
                fn takes(p: fn(u8) -> u8) {}\n";
    let found = functions(code);
    assert_eq!(
        found,
        [
            ("short".to_owned(), 4, 2),
            ("spread".to_owned(), 6, 8),
            ("takes".to_owned(), 14, 1),
        ]
    );
}

/// The arms of the first `select!` in `code`: its `=>` at the top level
/// of its braces.
fn select_arms(code: &str) -> Option<usize> {
    let start = code.find("select!")?;
    let open = start + code[start..].find('{')?;
    let (mut depth, mut arms) = (0i32, 0);
    let bytes = code.as_bytes();
    for i in open..bytes.len() {
        match bytes[i] {
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => depth -= 1,
            b'=' if depth == 1 && bytes.get(i + 1) == Some(&b'>') => arms += 1,
            _ => {}
        }
        if depth == 0 {
            return Some(arms);
        }
    }
    None
}

/// The loop that drives a session's probes knows no probe kind: a kind is
/// a value in its schedule, so the loop has a handful of arms however many
/// kinds there are, and stays short because there is little to do in it.
/// The service's main loop likewise: the parts start, serve and stop in
/// their own functions.
#[test]
fn the_probe_loop_has_at_most_five_arms_and_names_no_probe_kind() {
    let files = sources();
    let file = |name: &str| {
        (files.iter())
            .find(|f| f.rel.ends_with(name))
            .unwrap_or_else(|| panic!("{name} not found"))
    };
    let server = file("supervise/server.rs");
    let (_, line, length) = functions(&server.code)
        .into_iter()
        .find(|(name, ..)| name == "probe_loop")
        .expect("probe_loop");
    assert!(length < 50, "probe_loop is {length} lines");
    let body: String = server
        .code
        .lines()
        .skip(line - 1)
        .take(length)
        .collect::<Vec<_>>()
        .join("\n");
    let arms = select_arms(&body).expect("a select! in probe_loop");
    assert!(
        (1..=5).contains(&arms),
        "probe_loop's select! has {arms} arms"
    );
    let app = file("app/mod.rs");
    let (.., run_with) = functions(&app.code)
        .into_iter()
        .find(|(name, ..)| name == "run_with")
        .expect("run_with");
    assert!(run_with < 50, "run_with is {run_with} lines");
    for name in ["supervise/server.rs", "supervise/schedule.rs"] {
        let code = &file(name).code;
        assert!(!code.contains("ProbeKind::"), "{name} names a probe kind");
    }
    assert_eq!(
        select_arms("select! { a => {}, b = f(x) => { match y { _ => {} } } }"),
        Some(2)
    );
}

/// The supervisors report and never judge: a lost session goes to the
/// owner as the failure it was (`state::Loss`), and what it means for the
/// verdict is said in one place in the state layer.
#[test]
fn no_supervisor_picks_a_verdict_reason() {
    let files = sources();
    let supervise: Vec<_> = (files.iter())
        .filter(|f| f.rel.starts_with("supervise"))
        .filter(|f| !f.rel.to_string_lossy().ends_with("tests.rs"))
        .collect();
    assert!(supervise.len() >= 3, "the supervise module was not found");
    for f in supervise {
        let code = f.code.replace("FailureReason", "");
        assert!(
            !code.contains("Reason"),
            "{} names the verdict's Reason",
            f.rel.display()
        );
    }
}

/// Every Rust file of the tests and of `src/` (test modules included),
/// as code only.
fn every_file_with_tests() -> Vec<(std::path::PathBuf, String)> {
    fn visit(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read a folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                visit(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    visit(&crate::support::repo().join("tests/it"), &mut files);
    visit(&crate::support::source::src(), &mut files);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read");
            (p, crate::support::source::code_only(&text))
        })
        .collect()
}

/// The async functions of `code` whose bodies block their thread with
/// `std::thread::sleep`: their `fn` line.
fn blocking_sleeps(code: &str) -> Vec<usize> {
    let lines: Vec<&str> = code.lines().collect();
    functions(code)
        .into_iter()
        .filter(|(_, line, _)| lines[line - 1].contains("async fn "))
        .filter(|(_, line, len)| {
            lines[line - 1..line - 1 + len]
                .iter()
                .any(|l| l.contains("thread::sleep"))
        })
        .map(|(_, line, _)| line)
        .collect()
}

/// Every wait of the integration tests goes through `support/poll.rs`:
/// polled until what it waits for happens, or checked across a stretch of
/// time, never a bare sleep standing in for an event.
#[test]
fn every_wait_goes_through_the_poll_helpers() {
    let found: Vec<String> = every_file_with_tests()
        .into_iter()
        .filter(|(path, _)| path.starts_with(crate::support::repo().join("tests/it")))
        .filter(|(path, _)| !path.ends_with("support/poll.rs") && !path.ends_with("shape.rs"))
        .flat_map(|(path, code)| {
            (code.lines().enumerate())
                .filter(|(_, l)| l.contains("time::sleep(") || l.contains("thread::sleep("))
                .map(|(n, _)| format!("{}:{}", path.display(), n + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "sleeps outside the poll helpers:\n{}",
        found.join("\n")
    );
}

/// A blocking sleep in an async test stalls the runtime it shares with
/// mcpmon in-process: waits go through `support::eventually`.
#[test]
fn no_async_function_blocks_its_thread_with_a_sleep() {
    let mut found = Vec::new();
    let files = every_file_with_tests();
    assert!(files.len() > 100, "the sources were not found");
    for (path, code) in files {
        for line in blocking_sleeps(&code) {
            found.push(format!("{}:{line}", path.display()));
        }
    }
    assert!(
        found.is_empty(),
        "std::thread::sleep in async fns:\n{}",
        found.join("\n")
    );
    let planted = "fn a() {\n    std::thread::sleep(d);\n}\nasync fn b() {\n    let x = 1;\n    std::thread::sleep(d);\n}\n";
    assert_eq!(blocking_sleeps(planted), [4]);
}
