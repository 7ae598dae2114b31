//! The house's import rules, checked on the source text:
//! - each top-level module of `src/` uses only modules of lower layers (or
//!   its own parts), with the layers read from the map in `src/lib.rs`, so
//!   the map and this check cannot disagree;
//! - no circle among the files of one folder (a folder's `mod.rs` is its
//!   face: its children may use it, and it declares them);
//! - the HTTP crates only where they belong: the client crates in the
//!   layers that reach servers, the server crates in `output`.
//!
//! Comments and string literals are skipped; a test-only helper
//! (`crate::tests`, a `*_tests.rs` file) may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::source::{Source, code_only, sources, src, top_module};

/// The layers as `src/lib.rs` lists them: lines `//! N. ` naming modules
/// in backticks before their first colon.
fn layers_from_map(lib: &str) -> BTreeMap<String, u8> {
    let mut out = BTreeMap::new();
    let mut current = None;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim_start();
        if let Some((n, rest)) = doc.split_once(". ")
            && let Ok(n) = n.parse::<u8>()
        {
            current = Some(n);
            name_modules(rest, n, &mut out);
        } else if let Some(n) = current
            && !doc.is_empty()
            && line.starts_with("//!    ")
        {
            // A continuation line: modules named after a sentence's end.
            name_modules(doc, n, &mut out);
        } else {
            current = None;
        }
    }
    out
}

/// Every module named as `` [`name`] `` or `` `name` `` right before a colon.
fn name_modules(text: &str, layer: u8, out: &mut BTreeMap<String, u8>) {
    for part in text.split(':') {
        let part = part.trim_end();
        let Some(head) = part.strip_suffix("`]").or_else(|| part.strip_suffix('`')) else {
            continue;
        };
        let Some(start) = head.rfind('`') else {
            continue;
        };
        let name = &head[start + 1..];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            out.insert(name.to_owned(), layer);
        }
    }
}

/// Every `prefix<name>` path segment used in `code`, `prefix` not part of a
/// longer name.
fn segments_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix) {
        let start = from + at;
        from = start + prefix.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let name: String = code[from..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// The modules `main.rs` declares: the binary's own, beside the library.
fn binary_modules() -> Vec<String> {
    let main = std::fs::read_to_string(src().join("main.rs")).expect("main.rs");
    main.lines()
        .filter_map(|l| l.trim().strip_prefix("mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect()
}

#[test]
fn the_map_in_lib_rs_lists_every_module_in_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let layers = layers_from_map(&lib);
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("pub mod ")
                .or(l.trim().strip_prefix("mod "))
        })
        .map(|m| m.trim_end_matches(';').to_owned())
        .chain(["lib".to_owned(), "main".to_owned()])
        .chain(binary_modules())
        .collect();
    let listed: BTreeSet<String> = layers.keys().cloned().collect();
    assert_eq!(declared, listed, "modules declared vs. listed in the map");
    // Its order, lowest first, as the rest of the house assumes it.
    assert!(layers["redact"] < layers["config"]);
    assert!(layers["config"] < layers["transport"]);
    assert!(layers["probe"] < layers["state"]);
    assert!(layers["state"] < layers["output"]);
    assert_eq!(layers["supervise"], layers["output"]);
}

#[test]
fn every_import_points_down_the_layers() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let layers = layers_from_map(&lib);
    let files = sources();
    assert!(files.len() >= 40, "{} files", files.len());
    let mut wrong = Vec::new();
    for file in &files {
        let own = top_module(&file.rel);
        let Some(&own_layer) = layers.get(&own) else {
            wrong.push(format!(
                "{}: module {own} is not in the map",
                file.rel.display()
            ));
            continue;
        };
        // `main.rs` and its modules are outside the crate: they name it
        // `mcpmon::` (their `crate::` is the binary).
        let outside = own == "main" || binary_modules().contains(&own);
        let prefix = if outside { "mcpmon::" } else { "crate::" };
        for used in segments_after(&file.code, prefix) {
            match layers.get(&used) {
                _ if used == own => {}
                Some(&l) if l < own_layer => {}
                Some(_) => wrong.push(format!("{}: uses {prefix}{used}", file.rel.display())),
                None if prefix == "mcpmon::"
                    && used.chars().next().is_some_and(char::is_uppercase) => {}
                None if [
                    "run",
                    "run_with",
                    "http_client",
                    "REVISION",
                    "SHUTDOWN_DEADLINE",
                ]
                .contains(&used.as_str()) => {}
                None => wrong.push(format!(
                    "{}: {prefix}{used} is not in the map",
                    file.rel.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// The outputs render the published snapshot and nothing below it: a
/// probe's or a transport's type reaches them only as the snapshot (or the
/// owner's operations sink) names it, so a change down there is the state
/// layer's to absorb, not every renderer's.
#[test]
fn no_output_reads_below_the_snapshot() {
    let files = sources();
    let outputs: Vec<_> = (files.iter())
        .filter(|f| f.rel.starts_with("output"))
        .collect();
    assert!(outputs.len() >= 10, "{} output files", outputs.len());
    let mut wrong = Vec::new();
    for file in outputs {
        for used in resolved_uses(&file.code, &module_of(&file.rel)) {
            if let Some(top) = used.first()
                && ["probe", "transport", "supervise"].contains(&top.as_str())
            {
                wrong.push(format!("{}: uses {}", file.rel.display(), used.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "outputs below the snapshot:\n{}",
        wrong.join("\n")
    );
}

/// The module a file is: `config/validate/mod.rs` is `config::validate`,
/// `config/sd.rs` is `config::sd`, `lib.rs` the crate itself.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every module path `code` (the file of module `own`) names through
/// `crate::` or `super::` (any number of them), braces opened one level:
/// `use super::{sd::X, diff}` names `…::sd` and `…::diff`.
fn resolved_uses(code: &str, own: &[String]) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let names = |rest: &str| -> Vec<Vec<String>> {
        let path = |s: &str| -> Vec<String> {
            s.split("::")
                .map(|seg| {
                    seg.trim()
                        .chars()
                        .take_while(|c| ident(*c))
                        .collect::<String>()
                })
                .take_while(|seg| !seg.is_empty())
                .collect()
        };
        match rest.strip_prefix('{') {
            Some(inner) => {
                let inner = inner.split('}').next().unwrap_or_default();
                inner.split(',').map(path).collect()
            }
            None => vec![path(rest)],
        }
    };
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(['c', 's']) {
        let start = from + at;
        from = start + 1;
        if code[..start]
            .chars()
            .next_back()
            .is_some_and(|c| ident(c) || c == ':')
        {
            continue;
        }
        let rest = &code[start..];
        let (mut base, mut rest) = if let Some(r) = rest.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if rest.starts_with("super::") {
            (own.to_vec(), rest)
        } else {
            continue;
        };
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        for tail in names(rest.trim_start()) {
            let mut full = base.clone();
            full.extend(tail);
            out.push(full);
        }
    }
    out
}

/// The sibling modules each child of `folder` uses, from any file at any
/// depth inside it, through any path (`crate::…`, `super::super::…`): a
/// circle between `config/sd.rs` and `config/validate/mod.rs` is one.
fn sibling_uses(files: &[Source], folder: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let siblings: BTreeSet<String> = std::fs::read_dir(src().join(folder))
        .expect("folder")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = p.file_name()?.to_str()?.trim_end_matches(".rs").to_owned();
            (p.is_dir() || p.extension().is_some_and(|x| x == "rs")).then_some(name)
        })
        .filter(|n| n != "mod")
        .collect();
    let parent = module_of(&folder.join("mod.rs"));
    let depth = parent.len();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let own = module_of(&file.rel);
        if own.len() <= depth || own[..depth] != parent[..] {
            continue;
        }
        let child = own[depth].clone();
        let edges = graph.entry(child.clone()).or_default();
        for used in resolved_uses(&file.code, &own) {
            if used.len() > depth
                && used[..depth] == parent[..]
                && used[depth] != child
                && siblings.contains(&used[depth])
            {
                edges.insert(used[depth].clone());
            }
        }
    }
    graph
}

/// A circle in `graph`, if there is one, as the path around it.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut around = path[at..].to_vec();
            around.push(node.to_owned());
            return Some(around);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = walk(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| walk(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_folder_has_a_circle_among_its_files() {
    let files = sources();
    let folders: BTreeSet<PathBuf> = files
        .iter()
        .filter_map(|f| f.rel.parent().filter(|p| !p.as_os_str().is_empty()))
        .map(Path::to_owned)
        .collect();
    assert!(folders.len() >= 8, "{folders:?}");
    let mut found = Vec::new();
    for folder in &folders {
        if let Some(c) = circle(&sibling_uses(&files, folder)) {
            found.push(format!("{}: {}", folder.display(), c.join(" → ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// Where each HTTP crate may be named. Everything below the layers that
/// reach servers (redact, config, probe, state) names none; `fleet` and
/// `init` neither.
const HTTP_CRATES: &[(&str, &[&str])] = &[
    // Clients: the layers that reach servers, and what builds their client.
    (
        "reqwest",
        &[
            "transport",
            "discovery",
            "supervise",
            "oneshot",
            "app",
            "main",
            // The OTLP push's HTTP client.
            "output",
        ],
    ),
    ("rmcp", &["transport"]),
    ("sse_stream", &["transport"]),
    // hyper's client carries a held session's requests; its server runs in output.
    ("hyper", &["transport", "output"]),
    ("hyper_rustls", &["transport"]),
    // Servers.
    ("axum", &["output"]),
    // hyper-util: the held session's pooled client, and the servers' accept loop.
    ("hyper_util", &["transport", "output"]),
    ("tower_http", &["output"]),
    ("tokio_rustls", &["output"]),
    ("maud", &["output"]),
];

#[test]
fn http_crates_are_named_only_where_they_belong() {
    let mut wrong = Vec::new();
    for file in sources() {
        let own = top_module(&file.rel);
        for (krate, allowed) in HTTP_CRATES {
            let named = !segments_after(&file.code, &format!("{krate}::")).is_empty();
            if named && !allowed.contains(&own.as_str()) {
                wrong.push(format!("{}: names {krate}", file.rel.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "HTTP crates out of place:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn uses_are_resolved_from_any_depth() {
    let own = |p: &str| module_of(Path::new(p));
    assert_eq!(own("config/validate/mod.rs"), ["config", "validate"]);
    assert_eq!(own("config/sd.rs"), ["config", "sd"]);
    let code = "use super::sd::{A, B};\nuse super::{diff::Diff, raw};\nuse crate::state::x;\nfn f() { super::super::app::run() }";
    let got = resolved_uses(code, &own("config/validate/mod.rs"));
    let want: Vec<Vec<String>> = [
        "config::sd::A",
        "config::diff::Diff",
        "config::raw",
        "state::x",
        "app::run",
    ]
    .iter()
    .map(|p| p.split("::").map(str::to_owned).collect())
    .collect();
    for w in &want {
        assert!(
            got.iter().any(|g| g.starts_with(&w[..w.len().min(2)])),
            "{w:?} not in {got:?}"
        );
    }
    // The circle the direct-children rule missed is seen now.
    let files = vec![
        Source {
            rel: PathBuf::from("config/sd.rs"),
            code: "fn f() { super::validate::parse() }".to_owned(),
            text: String::new(),
            in_file_tests: 0,
        },
        Source {
            rel: PathBuf::from("config/validate/mod.rs"),
            code: "use super::sd::X;".to_owned(),
            text: String::new(),
            in_file_tests: 0,
        },
    ];
    let graph = sibling_uses(&files, Path::new("config"));
    assert!(circle(&graph).is_some(), "{graph:?}");
}

#[test]
fn the_checks_see_what_they_look_for() {
    // Comments and literals are not code.
    let code = code_only("a // crate::x\nb \"crate::y\" r#\"crate::z\"# '\"' c /* crate::w */ 'a");
    assert!(!code.contains("crate::"), "{code}");
    assert!(code.contains("'a"), "a lifetime is kept: {code}");
    assert_eq!(
        segments_after(
            "use crate::state::Msg; x::crate::no; crate::output::y",
            "crate::"
        ),
        ["state", "output"]
    );
    // The map's format.
    let map =
        "//! 0. [`redact`]: a.\n//! 2. [`transport`]: b. [`discovery`]:\n//!    c. `fleet`: d.\n";
    let layers = layers_from_map(map);
    assert_eq!(layers["redact"], 0);
    assert_eq!(layers["discovery"], 2);
    assert_eq!(layers["fleet"], 2);
    // A circle is found, and a line is not one.
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry((*a).to_owned())
                .or_default()
                .insert((*b).to_owned());
        }
        g
    };
    assert!(circle(&graph(&[("a", "b"), ("b", "c")])).is_none());
    assert_eq!(
        circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
