//! mcpmon: keeps sessions open to a fleet of MCP servers, probes each one,
//! judges it healthy / degraded / unhealthy, and serves what it found.
//!
//! Data flows one way, and imports point down the same list:
//!
//! ```text
//! config ─> transport ─> probe ─> supervise ──Msg──> state ──Snapshot──> output
//!           (session:     (one fn   (one task      (one owner:   (/metrics, /health,
//!            stdio|HTTP)   per kind)  per server)    evidence,     same generation)
//!                                                    verdict)
//! ```
//!
//! - [`config`]: the fleet file, validated with file:line:column errors;
//!   [`redact`]: keeps registered secrets out of everything published.
//! - [`transport`]: the [`transport::Session`] trait, its rmcp implementation
//!   over stdio children and Streamable HTTP, `/proc` sampling.
//! - [`probe`]: liveness, health_check and tool probes, one signature:
//!   `(session, spec, deadline) -> ProbeOutcome`.
//! - [`supervise`]: one task per server schedules probes and reports typed
//!   events; the running set is reconciled with each new config as a diff.
//! - [`state`]: the one owner runs each server's evidence and the pure
//!   verdict, keeps its counters, and publishes numbered snapshots.
//! - [`output`]: `/metrics`, `/health/*`, lifecycle, the web server; they
//!   read snapshots only.
//! - [`oneshot`]: `mcpmon probe`, the same probe layer run once.
//!
//! [`run`] is the single entry point shared by `main` and the tests.

mod app;
pub mod config;
pub mod discovery;
mod fleet;
pub mod fuzzing;
pub mod init;
pub mod oneshot;
pub mod output;
pub mod probe;
pub mod redact;
pub mod state;
pub mod supervise;
pub mod transport;

pub use app::{Options, REVISION, RunError, http_client, run, run_with};
pub use output::lifecycle::ReloadRequest;
pub use supervise::SHUTDOWN_DEADLINE;
