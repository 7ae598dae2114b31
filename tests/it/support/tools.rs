//! Running external tools, finding them, and marking a test's own processes.

use std::path::{Path, PathBuf};

/// Run a tool to completion: whether it succeeded, and its stdout then stderr.
pub fn run(cmd: &mut std::process::Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Run a tool that must succeed; its stdout then stderr.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let (ok, text) = run(cmd);
    assert!(ok, "{cmd:?} failed:\n{text}");
    text
}

/// Run a tool that must succeed; its stdout alone (what some versions
/// warn on stderr is shown only when it fails).
pub fn stdout_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A program on PATH; panics naming the setup step when it is missing.
pub fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            p.to_str()?
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| panic!("{name} not found: run .ci/setup"))
}

/// A unique marker to find a test's own processes by their environment.
pub fn marker(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
