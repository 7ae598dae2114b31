//! Shared helpers for the integration tests, by what they start: mcpmon
//! in-process ([`in_process`]) or as the real binary ([`binary`]), both
//! asked through one set of requests and waits ([`served`]), servers
//! ([`servers`]), processes ([`procs`]), certificates ([`certs`]), external
//! tools ([`tools`]) and Prometheus ([`prometheus`]); `/metrics` read by one
//! parser ([`exposition`]); and the crate's own
//! source ([`source`]), read for the house rules. Every wait is bounded
//! polling ([`eventually`]), never a bare sleep as synchronisation.

#[macro_use]
mod require;

mod binary;
mod certs;
pub mod exposition;
mod in_process;
pub mod kube;
mod paths;
mod poll;
mod procs;
mod prometheus;
mod served;
mod servers;
pub mod source;
mod tools;

pub use binary::*;
pub use certs::*;
pub use exposition::metric;
pub use in_process::*;
pub use paths::*;
pub use poll::*;
pub use procs::*;
pub use prometheus::*;
pub use require::*;
pub use served::Served;
pub use servers::*;
pub use tools::*;

use std::time::Duration;

/// Tests share the machine, except those that load it on purpose (the
/// hostile suite's attacks), which run alone: each mcpmon a test starts
/// holds a shared turn, and [`alone`] waits for all of them to end.
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

tokio::task_local! {
    /// Set while a test runs [`alone`]: its own mcpmons take no turn.
    static ALONE: ();
}

/// A shared turn on the machine.
pub type Turn = tokio::sync::RwLockReadGuard<'static, ()>;

/// A shared turn, unless the calling test runs alone.
pub async fn turn() -> Option<Turn> {
    if ALONE.try_with(|_| ()).is_ok() {
        return None;
    }
    Some(MACHINE.read().await)
}

/// Run `test` with the machine to itself: no other test's mcpmon runs
/// meanwhile.
pub async fn alone<F: std::future::Future>(test: F) -> F::Output {
    let _all = MACHINE.write().await;
    ALONE.scope((), test).await
}

/// Fast timers so tests finish quickly; every bound below derives from them.
pub const FAST_GLOBAL: &str = r#"
global:
  ping_interval: 400ms
  ping_timeout: 300ms
  connect_timeout: 10s
  health_check_interval: 400ms
  health_check_timeout: 1s
  backoff_initial: 200ms
  backoff_max: 1s
  stuck_after: 30s
"#;
pub const PING_INTERVAL: Duration = Duration::from_millis(400);
pub const PING_TIMEOUT: Duration = Duration::from_millis(300);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Slack added to every outcome bound. Generous on purpose: a real-process
/// test claims *what* happens; *how soon* is claimed by the paused-time unit
/// tests and measured by the benchmarks, never by a wall clock here.
pub const SLACK: Duration = Duration::from_secs(20);
