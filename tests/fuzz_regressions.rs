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
