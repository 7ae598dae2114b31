//! mcpmon: keeps sessions open to a fleet of MCP servers, probes each one,
//! judges it healthy / degraded / unhealthy, and serves what it found.
//!
//! # Data flow
//!
//! Data flows one way:
//!
//! ```text
//!              app: the main loop (reloads, discovery updates, shutdown)
//!               │
//!  config ──> fleet <── discovery
//!               │  the set of servers, reconciled as one diff
//!               v
//!           supervise ──> probe ──> transport (stdio | Streamable HTTP | legacy HTTP | HTTP+SSE)
//!               │  Observations, one task per server
//!               v
//!             state   one owner: evidence, verdict, series
//!               │  numbered Snapshots
//!               v
//!            output   /metrics, /health/*, /-/*, the status page
//! ```
//!
//! # Layers, lowest first
//!
//! Each module uses only modules of lower layers, or its own parts; peers
//! of one layer do not use each other. `tests/it/layers.rs` reads this list
//! and checks every import against it, circles inside a folder included.
//!
//! 0. [`redact`]: keeps secrets out of everything published or logged.
//! 1. [`config`]: the fleet file and discovered entries, validated with
//!    file:line:column; what a reload changes ([`config::Diff`]); client
//!    configs and registry records read as entries.
//! 2. [`transport`]: the [`transport::Session`] trait over stdio children and
//!    HTTP, the inbound budget, `/proc` sampling. [`discovery`]: the
//!    file_sd, http_sd, client config and MCP Registry sources, and
//!    sharding. [`slo`]: the fleet's objectives as Sloth, Pyrra and
//!    OpenSLO documents.
//! 3. [`probe`]: liveness, health_check and tool probes, one signature:
//!    `(session, spec, deadline) -> ProbeOutcome`.
//! 4. [`state`]: the one owner runs each server's evidence and the pure
//!    verdict, keeps every series, and publishes numbered snapshots.
//! 5. [`supervise`]: one task per server opens its session, schedules its
//!    probes and reports observations. [`output`]: everything served, read
//!    from snapshots only.
//! 6. [`oneshot`]: `mcpmon probe`, the same probe layer run once. `fleet`:
//!    the set of servers (main file, discovery, shard) reconciled as one
//!    diff. [`init`]: PID 1 duties when mcpmon is a container's init.
//! 7. `app`: the application ([`run`], [`run_with`]): wires the layers and
//!    runs the main loop.
//! 8. `lib`: this map. `main`: the binary's edge (flags, logging, the
//!    runtime), with `cli`: one file per command (serve, check-config,
//!    probe, import, slo). [`fuzzing`]: entry points of the fuzz targets.

mod app;
pub mod config;
pub mod discovery;
mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod init;
pub mod oneshot;
pub mod output;
pub mod probe;
pub mod redact;
pub mod slo;
pub mod state;
pub mod supervise;
pub mod transport;

pub use app::{Options, REVISION, RunError, http_client, run, run_with};
pub use output::lifecycle::ReloadRequest;
pub use supervise::SHUTDOWN_DEADLINE;
