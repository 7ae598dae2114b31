//! Where the programs the tests run are: the repository, the demo server,
//! the third-party servers `.ci/setup` installs.

use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The demo server example, built by `cargo test` alongside the tests.
pub fn demo_server() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mcpmon"));
    let path = bin
        .parent()
        .expect("target dir")
        .join("examples")
        .join("demo-server");
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test` so examples are built",
        path.display()
    );
    path
}

pub fn everything_bin() -> PathBuf {
    let p = repo().join("tests/node/node_modules/.bin/mcp-server-everything");
    assert!(p.exists(), "{} missing: run .ci/setup", p.display());
    p
}

pub fn python(era: &str) -> PathBuf {
    let p = repo().join(format!("tests/python/.venv-{era}/bin/python"));
    assert!(p.exists(), "{} missing: run .ci/setup", p.display());
    p
}

pub fn python_server() -> PathBuf {
    repo().join("tests/python/server.py")
}
