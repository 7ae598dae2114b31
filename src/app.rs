//! The application: the one entry point `main` and the tests share. It
//! wires the layers together (the state owner, the supervisors, discovery,
//! the web server), then runs the main loop: reloads (SIGHUP,
//! `POST /-/reload`, the file watch), discovery updates and shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config};
use crate::discovery::Shard;
use crate::fleet::Fleet;
use crate::output::metrics::Metrics;
use crate::output::{api, web};
use crate::state::Snapshot;
use crate::supervise::{CLOSE_GRACE, Supervisors};
use crate::{discovery, redact, state, supervise};

/// The build's source revision, when the build environment names it.
pub const REVISION: &str = match option_env!("MCPMON_REVISION") {
    Some(r) => r,
    None => "unknown",
};

use crate::supervise::SHUTDOWN_DEADLINE;

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

/// Idle keep-alive connections kept per host: enough for the pings of
/// thousands of servers behind one gateway (a ping holds its connection for
/// well under a millisecond).
const IDLE_CONNECTIONS_PER_HOST: usize = 32;

/// The shared HTTP client: keep-alive pool, rustls, bounded connect.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .user_agent(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        // Servers that share a host (a gateway's paths) share connections:
        // a burst of handshakes would otherwise leave one idle connection,
        // and its buffers, per server.
        .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
        .tcp_keepalive(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

use crate::output::api::{ReloadOutcome, ReloadRequest};

/// How the service runs besides its config and listener.
#[derive(Default)]
pub struct Options {
    /// Serve `POST /-/reload`.
    pub enable_lifecycle: bool,
    /// Re-read the config file when its content changes, checked this often.
    pub auto_reload: Option<Duration>,
    /// Other reload triggers (SIGHUP).
    pub reload: Option<mpsc::Receiver<ReloadRequest>>,
    /// TLS and basic auth for mcpmon's own endpoints.
    pub web: web::Web,
    /// Where the exposition is served; `/metrics` when `None`.
    pub telemetry_path: Option<String>,
    /// More addresses serving the same endpoints.
    pub extra_listeners: Vec<TcpListener>,
    /// This replica's share of the fleet.
    pub shard: Shard,
    /// What `/metrics` carries per server.
    pub exposition: crate::output::metrics::Exposition,
    /// Most handshakes at once; four per core when `None`.
    pub handshakes: Option<usize>,
}

/// Run mcpmon on `listener` until `shutdown` resolves, then close every
/// session and return.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    run_with(config, listener, shutdown, Options::default()).await
}

/// [`run`] with reload triggers and the lifecycle API.
pub async fn run_with(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    mut options: Options,
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new(REVISION, options.exposition)?);
    metrics.record_reload(true);
    redact::set_secrets(config.secrets());
    let http = http_client()?;
    let cancel = CancellationToken::new();
    let (fleet_tx, fleet_rx) = mpsc::channel(4096);
    let (snap_tx, snap_rx) = watch::channel(Arc::new(Snapshot::default()));
    // Ready once every server was judged, or after the slowest first verdict could take.
    let shard = options.shard;
    let grace = config
        .servers
        .iter()
        .filter(|s| shard.owns(&s.id))
        .map(|s| s.settings.connect_timeout.0 + s.settings.ping_timeout.0)
        .max()
        .unwrap_or_default()
        + Duration::from_secs(1);
    let fleet_task = tokio::spawn(state::owner::run(
        fleet_rx,
        snap_tx,
        config.fleet.clone(),
        config.servers.iter().filter(|s| shard.owns(&s.id)).count(),
        grace,
        cancel.child_token(),
    ));
    let supervisors = Supervisors::new(http, fleet_tx.clone(), cancel.child_token())
        .with_handshakes(
            options
                .handshakes
                .unwrap_or_else(supervise::default_handshakes),
        );
    let (sd_tx, mut sd_rx) = mpsc::channel::<discovery::Update>(64);
    let path = config.path.clone();
    // Discovered entries may not aim mcpmon at itself.
    let own_addresses = std::iter::once(&listener)
        .chain(&options.extra_listeners)
        .filter_map(|l| l.local_addr().ok())
        .collect();
    metrics.set_shard(shard.index, shard.count);
    let mut fleet = Fleet::start(
        config,
        supervisors,
        shard,
        fleet_tx.clone(),
        sd_tx,
        cancel.child_token(),
        own_addresses,
    )
    .await;
    tracing::info!(
        servers = fleet.len(),
        config = %path.display(),
        shard.index = shard.index,
        shard.count = shard.count,
        "monitoring started"
    );

    let (reload_tx, mut reload_rx) = mpsc::channel::<ReloadRequest>(8);
    let app = api::router(api::ApiState {
        fleet: snap_rx,
        metrics: metrics.clone(),
        reload: options.enable_lifecycle.then(|| reload_tx.clone()),
        renders: Default::default(),
        telemetry_path: options
            .telemetry_path
            .clone()
            .unwrap_or_else(|| "/metrics".to_owned()),
        shard,
    });
    let app = options.web.protect(app);
    let web_cancel = cancel.clone();
    let mut extra_web = tokio::task::JoinSet::new();
    for extra in std::mem::take(&mut options.extra_listeners) {
        let (server, app, cancel) = (options.web.clone(), app.clone(), cancel.clone());
        extra_web.spawn(async move {
            if let Err(e) = server.serve(extra, app, cancel).await {
                tracing::error!(error = %e, "web server stopped");
            }
        });
    }
    let server = options.web.clone();
    let mut web = tokio::spawn(async move { server.serve(listener, app, web_cancel).await });

    let mut seen_hash = std::fs::read(&path)
        .ok()
        .map(|b| config::watch::fingerprint(&b));
    let mut pending: Option<u64> = None;
    let mut auto = options.auto_reload.map(|every| {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut external = options.reload.take();
    tokio::pin!(shutdown);
    loop {
        let request = tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
            r = &mut web => {
                cancel.cancel();
                fleet.supervisors.stop_all(SHUTDOWN_DEADLINE).await;
                return match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(RunError::Serve(e)),
                    Err(e) => Err(RunError::Serve(std::io::Error::other(e))),
                };
            }
            Some(update) = sd_rx.recv() => {
                // Take every refresh already waiting as one change.
                let mut updates = vec![update];
                while let Ok(u) = sd_rx.try_recv() {
                    updates.push(u);
                }
                fleet.discovered(updates).await;
                continue;
            }
            Some(req) = reload_rx.recv() => (req, None),
            Some(req) = async { external.as_mut()?.recv().await }, if external.is_some() => (req, None),
            _ = async { auto.as_mut()?.tick().await; Some(()) }, if auto.is_some() => {
                let Ok(bytes) = std::fs::read(&path) else { continue };
                if config::watch::step(seen_hash, &mut pending, config::watch::fingerprint(&bytes)) != config::watch::Watch::Apply {
                    continue;
                }
                tracing::info!(config = %path.display(), "config file changed");
                (ReloadRequest { reply: None }, Some(bytes))
            }
        };
        let (request, bytes) = request;
        if bytes.is_none() {
            // An explicit reload (SIGHUP, /-/reload) covers the web config
            // too; its file changes are also noticed by the web server itself.
            reload_web(&options.web).await;
        }
        let bytes = match bytes {
            Some(b) => Ok(b),
            None => std::fs::read(&path),
        };
        // The hash is of exactly the bytes parsed: an edit landing after the
        // read is a change still to come, never one taken as applied.
        seen_hash = bytes
            .as_ref()
            .ok()
            .map(|b| config::watch::fingerprint(b))
            .or(seen_hash);
        let outcome = reload(&path, bytes, &mut fleet, &fleet_tx, &metrics).await;
        if let Some(reply) = request.reply {
            let _ = reply.send(outcome);
        }
    }

    // Stop probing and close every session, within a deadline.
    fleet
        .supervisors
        .stop_all(SHUTDOWN_DEADLINE.max(CLOSE_GRACE * 4))
        .await;
    cancel.cancel();
    let _ = fleet_task.await;
    let all_web = async {
        let _ = web.await;
        while extra_web.join_next().await.is_some() {}
    };
    if tokio::time::timeout(CLOSE_GRACE, all_web).await.is_err() {
        tracing::warn!("web server did not stop in time");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Load the web config file again, keeping the running one on error.
async fn reload_web(web: &web::Web) {
    let web = web.clone();
    match tokio::task::spawn_blocking(move || web.reload()).await {
        Ok(Ok(true)) => tracing::info!("web config reloaded"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, "web config reload rejected; the running one stays")
        }
        Err(e) => tracing::error!(error = %e, "web config reload failed"),
    }
}

/// Validate the file in full, then apply it as a diff; an invalid file
/// changes nothing.
async fn reload(
    path: &std::path::Path,
    bytes: std::io::Result<Vec<u8>>,
    running: &mut Fleet,
    fleet: &mpsc::Sender<state::Msg>,
    metrics: &Metrics,
) -> Result<ReloadOutcome, String> {
    let parsed = match bytes {
        Err(e) => Err(config::ConfigErrors(vec![config::ConfigError {
            file: path.to_owned(),
            line: 0,
            column: 0,
            message: format!("cannot read config file: {e}"),
        }])),
        Ok(b) => config::parse(path, &String::from_utf8_lossy(&b), &|name| {
            std::env::var(name).ok()
        }),
    };
    match parsed {
        Err(errors) => {
            metrics.record_reload(false);
            let errors = redact::redact(&errors.to_string()).into_owned();
            tracing::error!(config = %path.display(), errors = %errors, "reload rejected; the running configuration stays in force");
            Err(errors)
        }
        Ok(new) => {
            for w in &new.warnings {
                tracing::warn!(warning = %w, "risky configuration");
            }
            if new.fleet != running.config.fleet {
                let _ = fleet.send(state::Msg::Policy(new.fleet.clone())).await;
            }
            let diff = running.reload(new).await;
            metrics.record_reload(true);
            diff.log("configuration reloaded");
            Ok(ReloadOutcome {
                added: diff.added,
                removed: diff.removed,
                changed: diff.changed,
                kept: diff.kept,
            })
        }
    }
}
