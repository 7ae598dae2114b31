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
/// holds a shared turn, and [`alone`] waits until none is held.
///
/// Turns are never refused while a test waits to run alone: a test that
/// holds a turn and starts another mcpmon (a replica, a restart) would
/// otherwise wait behind the waiting test, which waits for its turn to
/// end, for ever (tokio's `RwLock` queues readers behind a waiting
/// writer). A test waiting alone runs at the first moment no mcpmon does.
static MACHINE: std::sync::Mutex<Machine> = std::sync::Mutex::new(Machine {
    turns: 0,
    alone: false,
});
static MACHINE_CHANGED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Who holds the machine.
struct Machine {
    turns: usize,
    alone: bool,
}

tokio::task_local! {
    /// Set while a test runs [`alone`]: its own mcpmons take no turn.
    static ALONE: ();
}

/// Wait until `take` says the machine is ours (it has then taken it).
async fn wait_for(mut take: impl FnMut(&mut Machine) -> bool) {
    loop {
        // Listening before looking: a release between the two is not lost.
        let changed = MACHINE_CHANGED.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if take(&mut MACHINE.lock().unwrap_or_else(|p| p.into_inner())) {
            return;
        }
        changed.await;
    }
}

fn release(give: impl FnOnce(&mut Machine)) {
    give(&mut MACHINE.lock().unwrap_or_else(|p| p.into_inner()));
    MACHINE_CHANGED.notify_waiters();
}

/// A shared turn on the machine, held until dropped.
pub struct Turn(());

impl Drop for Turn {
    fn drop(&mut self) {
        release(|m| m.turns -= 1);
    }
}

/// A shared turn, unless the calling test runs alone.
pub async fn turn() -> Option<Turn> {
    if ALONE.try_with(|_| ()).is_ok() {
        return None;
    }
    wait_for(|m| {
        let free = !m.alone;
        m.turns += usize::from(free);
        free
    })
    .await;
    Some(Turn(()))
}

/// Run `test` with the machine to itself: no other test's mcpmon runs
/// meanwhile.
pub async fn alone<F: std::future::Future>(test: F) -> F::Output {
    wait_for(|m| {
        let free = m.turns == 0 && !m.alone;
        m.alone |= free;
        free
    })
    .await;
    struct Alone;
    impl Drop for Alone {
        fn drop(&mut self) {
            release(|m| m.alone = false);
        }
    }
    let _all = Alone;
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
