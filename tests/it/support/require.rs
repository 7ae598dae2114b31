//! What a test needs from outside the repository's own build: a program
//! on `PATH` (promtool, haproxy, helm…) or something `.ci/setup` installs
//! under the repository (the npm servers, the Python venvs). A test whose
//! needs are missing is skipped with a line naming them, so the fast local
//! loop works on a bare machine; under `CI=true` it fails instead, so CI
//! can never pass by skipping.

use std::path::{Path, PathBuf};

/// One thing a test needs.
pub enum Need {
    /// A program on `PATH`.
    Program(&'static str),
    /// A path under the repository that `.ci/setup` makes.
    Installed(&'static str),
}

/// A program on `PATH`.
pub fn program(name: &'static str) -> Need {
    Need::Program(name)
}

/// A path under the repository that `.ci/setup` makes.
pub fn installed(path: &'static str) -> Need {
    Need::Installed(path)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        p.to_str()?
            .split(':')
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
    })
}

/// What of `needs` is missing, in words; `None` when all are there.
pub fn missing(needs: &[Need]) -> Option<String> {
    let gone: Vec<String> = needs
        .iter()
        .filter_map(|n| match n {
            Need::Program(p) => on_path(p).is_none().then(|| format!("{p} (not on PATH)")),
            Need::Installed(p) => (!super::repo().join(p).exists()).then(|| p.to_string()),
        })
        .collect();
    (!gone.is_empty()).then(|| format!("{} missing: run .ci/setup", gone.join(", ")))
}

/// Whether this run is CI's, where nothing may be skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Skip the test (or, under `CI=true`, fail it) unless everything it needs
/// is there: `require!(program("promtool"), installed("tests/node/node_modules"));`
macro_rules! require {
    ($($need:expr),+ $(,)?) => {
        if let Some(why) = $crate::support::missing(&[$($need),+]) {
            assert!(!$crate::support::under_ci(), "{why}");
            eprintln!("SKIP {}: {why}", module_path!());
            return;
        }
    };
}
