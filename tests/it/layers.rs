//! The house's import rule, checked: each module of `src/` uses only
//! modules of lower layers (or its own), so data flows one way and there is
//! no import circle. Layers, lowest first:
//!
//! redact → config → transport, discovery → probe → state → supervise,
//! output → oneshot, fleet, init → lib, main, fuzzing.

use std::path::Path;

/// The layer of a top-level module of the crate.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "redact" => 0,
        "config" => 1,
        "transport" | "discovery" => 2,
        "probe" => 3,
        "state" => 4,
        "supervise" | "output" => 5,
        "oneshot" | "fleet" | "init" => 6,
        "app" => 7,
        "lib" | "main" | "fuzzing" => 8,
        _ => return None,
    })
}

/// Every `crate::<module>` named in a source text.
fn uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    assert!(files.len() >= 20, "{files:?}");
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let own = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .expect("a module");
        let Some(own_layer) = layer(own) else {
            wrong.push(format!("{}: module {own} has no layer", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        // Code only: a doc comment may point anywhere.
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for used in uses(&code) {
            // A test-only helper may reach anywhere; this checks production code.
            if used == "tests" {
                continue;
            }
            match layer(&used) {
                Some(l) if used == own || l < own_layer => {}
                Some(_) => wrong.push(format!("{}: uses crate::{used}", rel.display())),
                None => wrong.push(format!("{}: crate::{used} has no layer", rel.display())),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_a_wrong_import() {
    assert_eq!(
        uses("use crate::state::Msg; crate::output::x"),
        ["state", "output"]
    );
    assert!(layer("output") > layer("state"));
}
