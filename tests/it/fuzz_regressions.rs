//! Replays the fuzz seeds and every input a fuzz run ever crashed on
//! (`fuzz/regressions/<target>/`, kept there by `fuzz/run.sh`) through the
//! same entry points the fuzz targets use, on stable, in every test run.

use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.path().is_file() {
                out.push((
                    e.path().display().to_string(),
                    std::fs::read(e.path()).expect("read"),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn config_inputs_never_panic() {
    let all = inputs("config");
    assert!(all.len() >= 5, "seeds missing");
    for (name, data) in all {
        if let Ok(text) = std::str::from_utf8(&data) {
            let r = std::panic::catch_unwind(|| mcpmon::fuzzing::config(text));
            assert!(r.is_ok(), "{name} panics");
        }
    }
}

#[test]
fn health_check_inputs_never_panic() {
    let all = inputs("health_check");
    assert!(all.len() >= 4, "seeds missing");
    for (name, data) in all {
        let r = std::panic::catch_unwind(|| mcpmon::fuzzing::health_check(&data));
        assert!(r.is_ok(), "{name} panics");
    }
}

/// Replays `target`'s seeds and kept crashes through `run`.
fn replay(target: &str, min_seeds: usize, run: fn(&[u8])) {
    let all = inputs(target);
    assert!(all.len() >= min_seeds, "{target} seeds missing");
    for (name, data) in all {
        let r = std::panic::catch_unwind(|| run(&data));
        assert!(r.is_ok(), "{name} panics");
    }
}

#[test]
fn metrics_renders_parse_back() {
    replay("metrics", 3, mcpmon::fuzzing::metrics);
}

#[test]
fn lean_ping_readers_agree_however_the_body_is_cut() {
    replay("lean_ping", 3, mcpmon::fuzzing::lean_ping);
}

#[test]
fn basic_auth_parser_round_trips() {
    replay("basic_auth", 4, mcpmon::fuzzing::basic_auth);
}

#[test]
fn redactor_leaves_no_secret() {
    // The only test in this binary that registers secrets.
    replay("redact", 3, mcpmon::fuzzing::redact);
}

#[test]
fn discovery_documents_stay_within_their_bounds() {
    replay("discovery", 5, mcpmon::fuzzing::discovery);
}

#[test]
fn the_exposition_oracle_rejects_what_prometheus_would() {
    // The parser the metrics target checks against must itself fail on
    // broken text, or the target could not find anything.
    let ok = "# TYPE a gauge\na{x=\"1\\\"2\"} 3\n";
    let samples = mcpmon::fuzzing::parse_exposition(ok).expect("valid");
    assert_eq!(samples[0].labels, [("x".to_owned(), "1\"2".to_owned())]);
    for bad in [
        "a 1\n",                            // no TYPE
        "# TYPE a gauge\na{x=\"1} 3\n",     // unterminated value
        "# TYPE a gauge\na{x=\"\\q\"} 3\n", // bad escape
        "# TYPE a gauge\na{x=\"1\"} three\n",
        "# TYPE a gauge\na{x=\"1\nb\"} 3\n", // raw newline in a value
        "# TYPE a gauge\na{1x=\"1\"} 3\n",
    ] {
        assert!(
            mcpmon::fuzzing::parse_exposition(bad).is_err(),
            "accepted {bad:?}"
        );
    }
}
