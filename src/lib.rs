//! mcpmon: keeps sessions open to a fleet of MCP servers, probes each one,
//! judges it healthy / degraded / unhealthy, and serves what it found.
//!
//! Data flows one way:
//!
//! ```text
//! config ──> supervisor (one task per server) ──> tracker ──> verdict
//!                 │ session: stdio child | Streamable HTTP        │
//!                 └──────────── status ──> fleet owner ──> snapshot ──> api (/metrics, /health)
//! ```
//!
//! - [`config`]: the fleet file, validated with file:line:column errors.
//! - [`child`], [`session`]: transports and the MCP client session.
//! - [`supervisor`]: the probe loop and reconnects, per server.
//! - [`tracker`], [`verdict`], [`health_check`], [`procstat`]: evidence and the pure judgment.
//! - [`fleet`], [`metrics`], [`api`]: fleet state and outputs.
//! - [`probe`]: the one-shot `mcpmon probe` check.
//!
//! [`run`] is the single entry point shared by `main` and the tests.

pub mod api;
pub mod child;
pub mod config;
pub mod fleet;
pub mod health_check;
pub mod metrics;
pub mod probe;
pub mod procstat;
pub mod session;
pub mod supervisor;
pub mod tracker;
pub mod verdict;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::fleet::Snapshot;
use crate::metrics::Metrics;
use crate::supervisor::{CLOSE_GRACE, Supervisor};

/// The build's source revision, when the build environment names it.
pub const REVISION: &str = match option_env!("MCPMON_REVISION") {
    Some(r) => r,
    None => "unknown",
};

/// How long shutdown waits for supervisors to close their sessions.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Failures of the service itself (not of monitored servers).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics registry rejected a metric (a programming error).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The HTTP client could not be built (TLS roots unavailable).
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    /// The web server failed.
    #[error("web server: {0}")]
    Serve(#[from] std::io::Error),
}

/// The shared HTTP client: keep-alive pool, rustls, bounded connect.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .user_agent(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_keepalive(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// Run mcpmon on `listener` until `shutdown` resolves, then close every
/// session and return.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new(REVISION)?);
    metrics.config_reload_ok.set(1.0);
    metrics.config_reload_time.set(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    );
    let http = http_client()?;
    let cancel = CancellationToken::new();
    let (fleet_tx, fleet_rx) = mpsc::channel(4096);
    let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
    // Ready once every server was judged, or after the slowest first verdict could take.
    let grace = config
        .servers
        .iter()
        .map(|s| s.settings.connect_timeout.0 + s.settings.ping_timeout.0)
        .max()
        .unwrap_or_default()
        + Duration::from_secs(1);
    let fleet_task = tokio::spawn(fleet::run(
        fleet_rx,
        snap_tx,
        config.fleet.clone(),
        config.servers.len(),
        grace,
        metrics.clone(),
        cancel.child_token(),
    ));

    let sup_cancel = cancel.child_token();
    let mut supervisors: HashMap<String, JoinHandle<()>> = HashMap::new();
    for spec in &config.servers {
        let sup = Supervisor {
            spec: spec.clone(),
            http: http.clone(),
            metrics: metrics.clone(),
            fleet: fleet_tx.clone(),
            cancel: sup_cancel.child_token(),
        };
        supervisors.insert(spec.id.clone(), tokio::spawn(sup.run()));
    }
    drop(fleet_tx);
    tracing::info!(
        servers = config.servers.len(),
        config = %config.path.display(),
        "monitoring started"
    );

    let app = api::router(api::ApiState {
        fleet: snap_rx,
        metrics: metrics.clone(),
    });
    let web_cancel = cancel.clone();
    let mut web = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { web_cancel.cancelled().await })
            .await
    });

    tokio::select! {
        _ = shutdown => tracing::info!("shutting down"),
        r = &mut web => {
            cancel.cancel();
            return match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(RunError::Serve(e)),
                Err(e) => Err(RunError::Serve(std::io::Error::other(e))),
            };
        }
    }

    // Stop probing and close every session, within a deadline.
    sup_cancel.cancel();
    let deadline = tokio::time::Instant::now() + SHUTDOWN_DEADLINE.max(CLOSE_GRACE * 4);
    for (id, handle) in &mut supervisors {
        if tokio::time::timeout_at(deadline, &mut *handle)
            .await
            .is_err()
        {
            tracing::warn!(server = %id, "supervisor did not stop in time; aborting it");
            handle.abort();
        }
    }
    cancel.cancel();
    let _ = fleet_task.await;
    if tokio::time::timeout(CLOSE_GRACE, web).await.is_err() {
        tracing::warn!("web server did not stop in time");
    }
    tracing::info!("stopped");
    Ok(())
}
