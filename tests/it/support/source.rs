//! The crate's own source, read as the house rules need it: each file
//! with comments and literals blanked out, in-file test modules cut off,
//! test-only files left out.

use std::path::{Path, PathBuf};

/// The crate's `src/`.
pub fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `text` with comments and the contents of string and char literals
/// blanked out, lines kept.
pub fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            // A raw string: `r`, hashes, quote (the `r` not ending a name).
            let mut hashes = 0;
            while i > hashes && b[i - hashes - 1] == '#' {
                hashes += 1;
            }
            let r_at = i.checked_sub(hashes + 1);
            let raw = r_at.is_some_and(|r| {
                b[r] == 'r'
                    && (r == 0
                        || !ident(b[r - 1])
                        || (b[r - 1] == 'b' && (r == 1 || !ident(b[r - 2]))))
            });
            out.push('"');
            i += 1;
            while i < b.len() {
                if !raw && b[i] == '\\' {
                    i += 2;
                    continue;
                }
                if b[i] == '"' && (0..hashes).all(|k| b.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + if raw { hashes } else { 0 };
                    out.push('"');
                    break;
                }
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime (kept).
            if next == Some('\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A production source file of the crate, its text without comments and
/// literals.
pub struct Source {
    /// Relative to `src/`.
    pub rel: PathBuf,
    /// Code only: comments and literals blanked out.
    pub code: String,
    /// The whole text, in-file test modules cut off.
    pub text: String,
    /// Lines of the in-file test module, if there is one.
    pub in_file_tests: usize,
}

pub fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs" || name == "testing.rs" || name == "fake.rs" || name.ends_with("_tests.rs")
}

pub fn sources() -> Vec<Source> {
    fn visit(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                visit(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let root = src();
    let mut files = Vec::new();
    visit(&root, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).expect("under src").to_owned();
            let text = std::fs::read_to_string(&path).expect("read");
            // In-file test modules are tests: cut at the first one.
            let (text, in_file_tests) = match text.find("#[cfg(test)]\nmod tests {") {
                Some(at) => (text[..at].to_owned(), text[at..].lines().count()),
                None => (text, 0),
            };
            Source {
                rel,
                code: code_only(&text),
                text,
                in_file_tests,
            }
        })
        .filter(|s| !is_test_file(&s.rel))
        .collect()
}

/// The top-level module a file belongs to (`transport/open.rs` → `transport`).
pub fn top_module(rel: &Path) -> String {
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_owned()
}
