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
use crate::output::otlp::Otlp;
use crate::output::{router, web};
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
    /// The OTLP export could not start.
    #[error("OTLP: {0}")]
    Otlp(#[from] crate::output::otlp::OtlpError),
    /// A task the service cannot run without ended while it ran: the
    /// process stops rather than serve a fleet without its verdicts.
    #[error("the {task} stopped while the service ran ({why}); stopping")]
    Ended {
        /// Which task.
        task: &'static str,
        /// How it ended: its panic's message, or that it was cancelled.
        why: String,
    },
}

/// The shared HTTP client: keep-alive pool, rustls, bounded connect.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    crate::transport::http_client_builder().build()
}

use crate::output::lifecycle::ReloadRequest;

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
    /// OTLP push, when configured.
    pub otlp: Option<crate::output::otlp::OtlpConfig>,
    /// Receives the state owner's abort handle once it runs: a test kills
    /// the owner with it on purpose, and the run must end loudly.
    #[doc(hidden)]
    pub owner_abort: Option<OwnerAbort>,
}

/// Where the state owner's abort handle goes ([`Options::owner_abort`]).
pub type OwnerAbort = tokio::sync::oneshot::Sender<tokio::task::AbortHandle>;

impl Options {
    /// Where the exposition is served.
    fn telemetry_path(&self) -> String {
        self.telemetry_path
            .clone()
            .unwrap_or_else(|| "/metrics".to_owned())
    }
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
    let shard = options.shard;
    let otlp = (options.otlp.as_ref())
        .map(|cfg| Otlp::start(cfg, &snap_rx, metrics.otlp.clone()).map(Arc::new))
        .transpose()?;
    let mut fleet_task = start_owner(
        &config,
        shard,
        (fleet_rx, &fleet_tx),
        snap_tx,
        (otlp.clone(), options.owner_abort.take()),
        &cancel,
    );
    let handshakes = options
        .handshakes
        .unwrap_or_else(supervise::default_handshakes);
    let supervisors =
        Supervisors::new(http, fleet_tx.clone(), cancel.child_token()).with_handshakes(handshakes);
    let (sd_tx, mut sd_rx) = mpsc::channel::<discovery::Update>(64);
    let path = config.path.clone();
    let own_addresses = own_addresses(&listener, &options.extra_listeners);
    metrics.set_shard(shard.index, shard.count);
    let (sd_cancel, fleet_sender) = (cancel.child_token(), fleet_tx.clone());
    let mut fleet = Fleet::start(
        config,
        supervisors,
        shard,
        fleet_sender,
        sd_tx,
        sd_cancel,
        own_addresses,
    )
    .await;
    let (reload_tx, reload_rx) = mpsc::channel::<ReloadRequest>(8);
    let api = router::AppState {
        fleet: snap_rx,
        metrics: metrics.clone(),
        reload: options.enable_lifecycle.then_some(reload_tx),
        renders: Default::default(),
        telemetry_path: options.telemetry_path(),
        shard,
    };
    let mut web = WebTasks::start(listener, &mut options, api, &cancel);
    let mut triggers = Triggers::new(&path, reload_rx, &mut options);
    tokio::pin!(shutdown);
    loop {
        let (request, bytes) = tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
            r = &mut web.main => {
                cancel.cancel();
                fleet.supervisors.stop_all(SHUTDOWN_DEADLINE).await;
                return served(r);
            }
            // Before shutdown the owner never ends: if it does, every
            // verdict is gone, and the process must not read healthy.
            ended = &mut fleet_task => {
                cancel.cancel();
                fleet.supervisors.stop_all(SHUTDOWN_DEADLINE).await;
                return Err(RunError::ended("state owner", ended));
            }
            Some(update) = sd_rx.recv() => {
                fleet.discovered(waiting(update, &mut sd_rx)).await;
                continue;
            }
            // (A poll that found nothing must not disable this branch.)
            trigger = triggers.next() => match trigger {
                Some(trigger) => trigger,
                None => continue,
            },
        };
        let bytes = triggers.bytes(bytes, &options.web).await;
        let outcome = reload(&path, bytes, &mut fleet, &fleet_tx, &metrics).await;
        if let Some(reply) = request.reply {
            let _ = reply.send(outcome);
        }
    }
    // Stop probing and close every session, within a deadline.
    let deadline = SHUTDOWN_DEADLINE.max(CLOSE_GRACE * 4);
    fleet.supervisors.stop_all(deadline).await;
    cancel.cancel();
    owner_stopped(fleet_task, otlp).await;
    web.stopped().await;
    tracing::info!("stopped");
    Ok(())
}

/// Wait for the owner to stop, then push what the OTLP export has left
/// (the owner held the other reference).
async fn owner_stopped(task: tokio::task::JoinHandle<()>, otlp: Option<Arc<Otlp>>) {
    let _ = task.await;
    if let Some(otlp) = otlp.and_then(Arc::into_inner) {
        otlp.shutdown(CLOSE_GRACE * 2).await;
    }
}

/// Start the state owner on the servers this shard owns, telling `otlp`
/// of every probe; its abort handle goes to `abort` when asked for.
fn start_owner(
    config: &Config,
    shard: Shard,
    (rx, tx_fleet): (mpsc::Receiver<state::Msg>, &mpsc::Sender<state::Msg>),
    tx: watch::Sender<Arc<Snapshot>>,
    (otlp, abort): (Option<Arc<Otlp>>, Option<OwnerAbort>),
    cancel: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    // Before any server joins (the queue is empty), so none starts outside
    // its window.
    let windows = Arc::from(config.maintenance.clone());
    let _ = tx_fleet.try_send(state::Msg::Maintenance(windows));
    let owned = config.servers.iter().filter(|s| shard.owns(&s.id));
    let task = tokio::spawn(state::owner::run(
        rx,
        tx,
        config.fleet.clone(),
        owned.clone().count(),
        first_verdicts_within(owned),
        otlp.map(|o| o as Arc<dyn state::operations::Operations>),
        cancel.child_token(),
    ));
    if let Some(abort) = abort {
        let _ = abort.send(task.abort_handle());
    }
    task
}

/// The addresses mcpmon serves on: discovered entries may not aim mcpmon at
/// itself.
fn own_addresses(main: &TcpListener, extra: &[TcpListener]) -> Vec<std::net::SocketAddr> {
    std::iter::once(main)
        .chain(extra)
        .filter_map(|l| l.local_addr().ok())
        .collect()
}

/// `first` and every update already waiting behind it, taken as one change.
fn waiting(
    first: discovery::Update,
    rx: &mut mpsc::Receiver<discovery::Update>,
) -> Vec<discovery::Update> {
    let mut updates = vec![first];
    while let Ok(u) = rx.try_recv() {
        updates.push(u);
    }
    updates
}

/// Readiness waits for every server's first verdict, or for as long as the
/// slowest of them could take.
fn first_verdicts_within<'a>(servers: impl Iterator<Item = &'a config::ServerSpec>) -> Duration {
    let slowest = servers
        .map(|s| s.settings.connect_timeout.0 + s.settings.ping_timeout.0)
        .max()
        .unwrap_or_default();
    slowest + Duration::from_secs(1)
}

impl RunError {
    /// The essential `task` ended with `how`: logged, as the run's error.
    fn ended(task: &'static str, how: Result<(), tokio::task::JoinError>) -> RunError {
        let why = match how {
            Err(e) if e.is_panic() => panic_text(e.into_panic()),
            Err(_) => "cancelled".to_owned(),
            Ok(()) => "returned".to_owned(),
        };
        tracing::error!(task, why = %why, "an essential task stopped; stopping");
        RunError::Ended { task, why }
    }
}

/// A panic's message, when it is text.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => format!("panicked: {s}"),
        Err(p) => p
            .downcast_ref::<&str>()
            .map_or_else(|| "panicked".to_owned(), |s| format!("panicked: {s}")),
    }
}

/// How the main web server ended, as the run's result.
fn served(r: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), RunError> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(RunError::Serve(e)),
        Err(e) => Err(RunError::Serve(std::io::Error::other(e))),
    }
}

/// The web servers: the main listener's, whose end ends the run, and the
/// extra listeners'.
struct WebTasks {
    main: tokio::task::JoinHandle<std::io::Result<()>>,
    extra: tokio::task::JoinSet<()>,
}

impl WebTasks {
    fn start(
        listener: TcpListener,
        options: &mut Options,
        state: router::AppState,
        cancel: &CancellationToken,
    ) -> Self {
        let app = options.web.protect(router::router(state));
        let mut extra = tokio::task::JoinSet::new();
        for l in std::mem::take(&mut options.extra_listeners) {
            let (server, app, cancel) = (options.web.clone(), app.clone(), cancel.clone());
            extra.spawn(async move {
                if let Err(e) = server.serve(l, app, cancel).await {
                    tracing::error!(error = %e, "web server stopped");
                }
            });
        }
        let (server, cancel) = (options.web.clone(), cancel.clone());
        let main = tokio::spawn(async move { server.serve(listener, app, cancel).await });
        WebTasks { main, extra }
    }

    /// Wait (a little) for every web server to finish its answers.
    async fn stopped(mut self) {
        let all = async {
            let _ = (&mut self.main).await;
            while self.extra.join_next().await.is_some() {}
        };
        if tokio::time::timeout(CLOSE_GRACE, all).await.is_err() {
            tracing::warn!("web server did not stop in time");
        }
    }
}

/// What asks for a reload: `POST /-/reload`, SIGHUP, and the file's own
/// changes when `--config.auto-reload` is set.
struct Triggers {
    api: mpsc::Receiver<ReloadRequest>,
    external: Option<mpsc::Receiver<ReloadRequest>>,
    auto: Option<tokio::time::Interval>,
    file: config::watch::FileWatch,
}

impl Triggers {
    fn new(
        path: &std::path::Path,
        api: mpsc::Receiver<ReloadRequest>,
        options: &mut Options,
    ) -> Self {
        let auto = options.auto_reload.map(|every| {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        Triggers {
            api,
            external: options.reload.take(),
            auto,
            file: config::watch::FileWatch::new(path),
        }
    }

    /// The next reload asked for, with the file's bytes when its own change
    /// asked (else it is read then); `None` when a poll found nothing to
    /// apply. Cancel-safe: each branch is.
    async fn next(&mut self) -> Option<(ReloadRequest, Option<Vec<u8>>)> {
        tokio::select! {
            Some(req) = self.api.recv() => Some((req, None)),
            Some(req) = async { self.external.as_mut()?.recv().await }, if self.external.is_some() => Some((req, None)),
            Some(()) = async { self.auto.as_mut()?.tick().await; Some(()) }, if self.auto.is_some() => {
                let bytes = self.file.poll()?;
                tracing::info!(config = %self.file.path().display(), "config file changed");
                Some((ReloadRequest { reply: None }, Some(bytes)))
            }
            // Nothing left that could ask (no lifecycle API, no SIGHUP, no
            // watch): never resolve, rather than end the select.
            else => std::future::pending().await,
        }
    }

    /// The bytes to parse: those a file change brought, or the file read
    /// now. An explicit reload (SIGHUP, /-/reload) covers the web config
    /// too; its file changes are also noticed by the web server itself.
    async fn bytes(
        &mut self,
        changed: Option<Vec<u8>>,
        web: &web::Web,
    ) -> std::io::Result<Vec<u8>> {
        let bytes = match changed {
            Some(b) => Ok(b),
            None => {
                reload_web(web).await;
                std::fs::read(self.file.path())
            }
        };
        self.file.parsing(&bytes);
        bytes
    }
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
) -> Result<config::Diff, String> {
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
            let windows = Arc::from(new.maintenance.clone());
            let _ = fleet.send(state::Msg::Maintenance(windows)).await;
            let diff = running.reload(new).await;
            metrics.record_reload(true);
            diff.log("configuration reloaded");
            Ok(diff)
        }
    }
}
