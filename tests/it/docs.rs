//! The documentation's fleet-file examples are real: every YAML block in
//! the README and `docs/` whose top-level keys are a fleet file's is
//! written out and checked by `mcpmon check-config` as a user would run
//! it, so an example that drifts from the code fails here. Blocks of other
//! files (Prometheus, Envoy, Kubernetes, the web config) are told apart by
//! their first key and left to the tests of those recipes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// The keys a fleet file may have at its top level.
const FLEET_KEYS: &[&str] = &[
    "global",
    "fleet",
    "servers",
    "file_sd_configs",
    "http_sd_configs",
    "client_config_sd_configs",
    "registry_sd_configs",
    "maintenance",
];

/// One fenced YAML block: where it starts, and its text.
struct Block {
    file: PathBuf,
    line: usize,
    text: String,
}

/// Every ```yaml block of `file`.
fn yaml_blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).expect("a doc");
    let mut out = Vec::new();
    // Where the block's text starts, its fence's indent, and its text.
    let mut open: Option<(usize, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match &mut open {
            None if fence.starts_with("```yaml") => {
                open = Some((i + 2, line.len() - fence.len(), String::new()))
            }
            Some((at, _, body)) if fence.starts_with("```") => {
                out.push(Block {
                    file: file.to_owned(),
                    line: *at,
                    text: std::mem::take(body),
                });
                open = None;
            }
            Some((_, indent, body)) => {
                // A block inside a list item is indented with its fence.
                let blank = line.len() - fence.len();
                body.push_str(line.get((*indent).min(blank)..).unwrap_or(fence));
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The first key of a block written at column 0, if any.
fn first_key(text: &str) -> Option<&str> {
    text.lines()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .filter(|l| !l.starts_with(' '))
        .and_then(|l| l.split(':').next())
}

/// The environment variables an example names (`${VAR}`, `*_env: VAR`):
/// the reader sets them, and so does the test.
fn variables(text: &str) -> Vec<String> {
    let name = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out: Vec<String> = text.split("${").skip(1).map(name).collect();
    for line in text.lines() {
        for part in line.split(['{', ',']) {
            if let Some((key, value)) = part.split_once(':')
                && key.trim().ends_with("_env")
            {
                out.push(name(value.trim()));
            }
        }
    }
    out.retain(|v| !v.is_empty());
    out
}

/// An error that only says a file the example names is not on this
/// machine (a CA bundle, a client config under /home): the reader's own
/// files, which the example cannot ship.
fn names_your_own_file(line: &str) -> bool {
    line.contains(": cannot read ") && line.ends_with("No such file or directory (os error 2)")
}

fn docs() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_fleet_file_example_in_the_docs_passes_check_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut checked = 0;
    let mut failures = Vec::new();
    for block in docs().iter().flat_map(|f| yaml_blocks(f)) {
        let where_ = format!("{}:{}", block.file.display(), block.line);
        let Some(key) = first_key(&block.text) else {
            failures.push(format!(
                "{where_}: a fragment; write the example as a whole file"
            ));
            continue;
        };
        if !FLEET_KEYS.contains(&key) {
            continue;
        }
        let path = dir.path().join(format!("example-{checked}.yaml"));
        std::fs::write(&path, &block.text).expect("write the example");
        let out = Command::new(env!("CARGO_BIN_EXE_mcpmon"))
            .arg("check-config")
            .arg(&path)
            .envs(
                variables(&block.text)
                    .into_iter()
                    .map(|v| (v, "set-by-the-test")),
            )
            .current_dir(repo())
            .output()
            .expect("run mcpmon check-config");
        checked += 1;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| !names_your_own_file(l)).collect();
        if !out.status.success() && !errors.is_empty() {
            failures.push(format!("{where_}:\n{}", errors.join("\n")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The README's first fleet file and the configuration guide's.
    assert!(checked >= 10, "only {checked} examples found");
}

#[test]
fn the_block_reader_finds_indented_blocks_and_tells_fragments_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = dir.path().join("d.md");
    std::fs::write(
        &doc,
        "text\n\n* item\n\n  ```yaml\n  servers: []\n  ```\n\n```yaml\n  - id: x\n```\n",
    )
    .expect("write");
    let blocks = yaml_blocks(&doc);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].line, 6);
    assert_eq!(first_key(&blocks[0].text), Some("servers"));
    assert_eq!(first_key(&blocks[1].text), None);
    let vars =
        variables("env: {A: \"${KEY_1}\"}\nbearer_token_env: TOKEN\nx: {token_env: T2, y: 1}\n");
    assert_eq!(vars, ["KEY_1", "TOKEN", "T2"]);
}
