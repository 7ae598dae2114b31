//! `mcpmon slo`: the fleet file's objectives as Sloth, Pyrra or OpenSLO
//! documents on stdout.

use std::path::Path;
use std::process::ExitCode;

use mcpmon::slo::{self, SloFormat};

/// `mcpmon slo`: the servers written in the file (discovered ones come and
/// go, and are not there to list). A file that does not load is every
/// error with its file:line:column, as `check-config` prints them.
pub fn run(
    file: &Path,
    format: SloFormat,
    by: Option<&str>,
    namespace: &str,
) -> anyhow::Result<ExitCode> {
    let config = match mcpmon::config::load(file) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let objectives = slo::objectives(&config.servers, by)?;
    print!("{}", slo::render(&objectives, format, namespace)?);
    Ok(ExitCode::SUCCESS)
}
