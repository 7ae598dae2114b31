//! Entry points shared by the `cargo fuzz` targets (`fuzz/`) and the
//! regression test that replays their corpus and every crash they found
//! (`tests/fuzz_regressions.rs`). Each checks the invariants, not just
//! "no panic".

use std::path::Path;

/// Parse arbitrary config text: a config, or errors that each carry a
/// message; never a panic.
pub fn config(text: &str) {
    match crate::config::parse(Path::new("fuzz.yaml"), text, &|name| {
        (name == "SET").then(|| "value".to_owned())
    }) {
        Ok(cfg) => {
            let mut ids = std::collections::HashSet::new();
            for s in &cfg.servers {
                assert!(ids.insert(s.id.clone()), "duplicate id accepted: {}", s.id);
                assert!(s.settings.ping_timeout <= s.settings.ping_interval);
            }
        }
        Err(errors) => {
            assert!(!errors.0.is_empty());
            assert!(errors.0.iter().all(|e| !e.message.is_empty()));
        }
    }
}

/// Read arbitrary bytes as a health_check result, both as a text block and
/// (when it parses) as structured content: fields stay bounded and finite.
pub fn health_check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let structured: Option<serde_json::Value> = serde_json::from_slice(data).ok();
    for is_error in [false, true] {
        let r = crate::probe::health_check::interpret(structured.as_ref(), &[&text], is_error, 8);
        assert!(r.fields.len() <= 8);
        assert!(
            r.fields
                .iter()
                .all(|(k, v)| v.is_finite() && !k.is_empty() && k.len() <= 64)
        );
        if is_error {
            assert_eq!(r.status, crate::probe::health_check::Reported::Unhealthy);
        }
    }
}
