//! `mcpmon import`: client configs turned into one fleet file to start from.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// `mcpmon import`: every file read, then one fleet on stdout; a file
/// that cannot be read is an error naming file:line:column.
pub fn run(files: &[PathBuf], format: &str) -> anyhow::Result<ExitCode> {
    use mcpmon::config::clients::{self, ClientFormat};
    let format: ClientFormat = format.parse().map_err(|_| {
        anyhow::anyhow!(
            "--format {format:?}: one of auto, claude, cursor, claude-code, windsurf, vscode, codex"
        )
    })?;
    let env = |v: &str| std::env::var(v).ok();
    let home = std::env::var("HOME").unwrap_or_default();
    let mut configs = Vec::with_capacity(files.len());
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let config =
            clients::read(file, &text, format, &env, &home).map_err(|e| anyhow::anyhow!("{e}"))?;
        configs.push((file.clone(), config));
    }
    print!("{}", clients::fleet_yaml(&configs));
    Ok(ExitCode::SUCCESS)
}
