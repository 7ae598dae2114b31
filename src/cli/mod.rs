//! The binary's commands, one file each: `serve` (the service),
//! `check_config`, `probe`, `import` and `slo`. Each turns its flags into a call
//! of the library and its outcome into an exit code.

pub mod check_config;
pub mod import;
pub mod probe;
pub mod serve;
pub mod slo;

/// How a command writes what it found: for people, or for programs (logs
/// and `probe`'s report alike).
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// Lines of text.
    Text,
    /// JSON.
    Json,
}
