//! The application: the one entry point `main` and the tests share. It
//! wires the layers together (the state owner, the supervisors, discovery,
//! the web server) into a running service, then runs the main loop:
//! reloads (SIGHUP, `POST /-/reload`, the file watch; [`reload`]),
//! discovery updates and shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config};
use crate::discovery::Shard;
use crate::fleet::Fleet;
use crate::output::lifecycle::{Reload, ReloadRequest};
use crate::output::metrics::Metrics;
use crate::output::otlp::Otlp;
use crate::output::status::Links;
use crate::output::{router, web};
use crate::supervise::{CLOSE_GRACE, SHUTDOWN_DEADLINE, Supervisors};
use crate::{discovery, redact, state, supervise};
use reload::Triggers;

mod reload;

/// The build's source revision, when the build environment names it.
pub const REVISION: &str = match option_env!("MCPMON_REVISION") {
    Some(r) => r,
    None => "unknown",
};

/// Failures of the service itself (not of monitored servers).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The metrics registry rejected a metric (a programming error).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The HTTP clients could not be built (TLS roots unavailable).
    #[error("http client: {0}")]
    Http(#[from] crate::transport::HttpSetupError),
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
    /// Where this replica probes from, when several do
    /// (`mcpmon_location_info`).
    pub location: Option<String>,
    /// Where the history is kept; none when it is off.
    pub history: Option<crate::output::history::HistoryConfig>,
    /// Serve no badges.
    pub badges_disabled: bool,
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
    let mut service = Service::start(config, listener, &mut options).await?;
    tokio::pin!(shutdown);
    loop {
        match service.next(shutdown.as_mut()).await {
            Woke::Shutdown => break,
            Woke::Ended(result) => return service.abandon(result).await,
            Woke::Discovered(first) => service.discovered(first).await,
            Woke::Reload(request, bytes) => service.reload(request, bytes, &options.web).await,
        }
    }
    service.stop().await;
    Ok(())
}

/// What the main loop woke for.
enum Woke {
    /// Shutdown was asked for.
    Shutdown,
    /// A task the service cannot run without ended: the run's result.
    Ended(Result<(), RunError>),
    /// Discovery has news (this, and whatever waits behind it).
    Discovered(discovery::Update),
    /// A reload was asked for, with the file's bytes when its change asked.
    Reload(ReloadRequest, Option<Vec<u8>>),
}

/// The running service: the state owner, the fleet's supervisors and
/// discovery, the web servers and the reload triggers, wired together.
struct Service {
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
    owner: tokio::task::JoinHandle<()>,
    otlp: Option<Arc<Otlp>>,
    fleet: Fleet,
    fleet_tx: mpsc::Sender<state::Msg>,
    discovery: mpsc::Receiver<discovery::Update>,
    web: WebTasks,
    triggers: Triggers,
    history: Option<tokio::task::JoinHandle<()>>,
}

impl Service {
    /// Start every part, the owner first so no observation is lost.
    async fn start(
        config: Config,
        listener: TcpListener,
        options: &mut Options,
    ) -> Result<Service, RunError> {
        let metrics = Arc::new(Metrics::new(REVISION, options.exposition)?);
        metrics.record_reload(true);
        redact::set_secrets(config.secrets());
        let http = crate::transport::Http::shared()?;
        let cancel = CancellationToken::new();
        let (fleet_tx, fleet_rx) = mpsc::channel(4096);
        // What only counts is published for readers that cannot ask: OTLP's
        // observers, read once per export.
        let unasked = options.otlp.as_ref().map(|o| o.interval);
        let (snap_tx, snap_rx) = state::reader::channel(unasked);
        metrics.count_stale_reads(snap_rx.stale_reads())?;
        let shard = options.shard;
        let otlp = start_otlp(options.otlp.as_ref(), &snap_rx, &metrics)?;
        let owner = start_owner(
            &config,
            shard,
            (fleet_rx, &fleet_tx),
            snap_tx,
            (otlp.clone(), options.owner_abort.take()),
            &cancel,
        );
        let handshakes = (options.handshakes).unwrap_or_else(supervise::default_handshakes);
        let supervisors = Supervisors::new(http, fleet_tx.clone(), cancel.child_token())
            .with_handshakes(handshakes);
        let (sd_tx, discovery) = mpsc::channel::<discovery::Update>(64);
        let path = config.path.clone();
        let own = own_addresses(&listener, &options.extra_listeners);
        metrics.set_shard(shard.index, shard.count);
        if let Some(location) = &options.location {
            metrics.set_location(location);
        }
        let (sd_cancel, fleet_sender) = (cancel.child_token(), fleet_tx.clone());
        let fleet = Fleet::start(
            config,
            supervisors,
            shard,
            fleet_sender,
            sd_tx,
            sd_cancel,
            own,
        )
        .await;
        let (reload_tx, reload_rx) = mpsc::channel::<ReloadRequest>(8);
        let (history, writer) =
            start_history(options.history.as_ref(), &snap_rx, &metrics, &cancel);
        let api = router::AppState {
            fleet: snap_rx,
            metrics: metrics.clone(),
            reload: Reload(options.enable_lifecycle.then_some(reload_tx)),
            renders: Default::default(),
            links: Links {
                telemetry_path: options.telemetry_path(),
            },
            shard,
            history,
            badges: crate::output::badges::Badges(!options.badges_disabled),
        };
        let web = WebTasks::start(listener, options, api, &cancel);
        let triggers = Triggers::new(&path, reload_rx, options);
        Ok(Service {
            metrics,
            cancel,
            owner,
            otlp,
            fleet,
            fleet_tx,
            discovery,
            web,
            triggers,
            history: writer,
        })
    }

    /// Wait for what the main loop acts on.
    async fn next(&mut self, mut shutdown: Pin<&mut impl Future<Output = ()>>) -> Woke {
        loop {
            let woke = tokio::select! {
                _ = shutdown.as_mut() => Some(Woke::Shutdown),
                r = &mut self.web.main => Some(Woke::Ended(served(r))),
                // Before shutdown the owner never ends: if it does, every
                // verdict is gone, and the process must not read healthy.
                ended = &mut self.owner => {
                    Some(Woke::Ended(Err(RunError::ended("state owner", ended))))
                }
                Some(update) = self.discovery.recv() => Some(Woke::Discovered(update)),
                // A poll that found nothing to apply waits on.
                trigger = self.triggers.next() => trigger.map(|(r, bytes)| Woke::Reload(r, bytes)),
            };
            if let Some(woke) = woke {
                return woke;
            }
        }
    }

    /// Apply discovery's news: `first` and every update behind it, as one change.
    async fn discovered(&mut self, first: discovery::Update) {
        let updates = waiting(first, &mut self.discovery);
        self.fleet.discovered(updates).await;
    }

    /// Reload from the file (or the `changed` bytes its watch brought),
    /// and answer `request`: the diff applied, or why the file was refused.
    async fn reload(&mut self, request: ReloadRequest, changed: Option<Vec<u8>>, web: &web::Web) {
        let bytes = self.triggers.bytes(changed, web).await;
        let path = self.fleet.config.path.clone();
        let (fleet, metrics) = (&self.fleet_tx, &self.metrics);
        let outcome = reload::reload(&path, bytes, &mut self.fleet, fleet, metrics).await;
        if let Some(reply) = request.reply {
            let _ = reply.send(outcome);
        }
    }

    /// An essential task ended with `result`: stop probing, and end the run so.
    async fn abandon(mut self, result: Result<(), RunError>) -> Result<(), RunError> {
        self.cancel.cancel();
        self.fleet.supervisors.stop_all(SHUTDOWN_DEADLINE).await;
        result
    }

    /// Stop probing and close every session within a deadline, then let
    /// the owner, the OTLP push and the web servers finish.
    async fn stop(mut self) {
        tracing::info!("shutting down");
        let deadline = SHUTDOWN_DEADLINE.max(CLOSE_GRACE * 4);
        self.fleet.supervisors.stop_all(deadline).await;
        self.cancel.cancel();
        owner_stopped(self.owner, self.otlp).await;
        // Its last flush: what happened since the one before.
        if let Some(writer) = self.history {
            let _ = tokio::time::timeout(CLOSE_GRACE * 2, writer).await;
        }
        self.web.stopped().await;
        tracing::info!("stopped");
    }
}

/// Open the history and start its writer (or, read from a query API, its
/// reader of the fleet's days), when it is on. A history that
/// cannot be opened (a read-only directory) is off for this run, said once.
fn start_history(
    cfg: Option<&crate::output::history::HistoryConfig>,
    snapshots: &state::Reader,
    metrics: &Metrics,
    cancel: &CancellationToken,
) -> (
    Option<crate::output::history::History>,
    Option<tokio::task::JoinHandle<()>>,
) {
    use crate::output::history;
    let Some(cfg) = cfg else {
        return (None, None);
    };
    let opened = match history::History::open(cfg) {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(path = %cfg.path.display(), error = %e, "cannot open the history; running without it");
            metrics.history_writes.with_label_values(&["failed"]).inc();
            return (None, None);
        }
    };
    let writer = tokio::spawn(history::run(
        opened.clone(),
        snapshots.clone(),
        cfg.flush_every,
        metrics.history_writes.clone(),
        cancel.child_token(),
    ));
    (Some(opened), Some(writer))
}

/// Start the OTLP push when it is configured; probes then sample their
/// traces at the share its spans keep.
fn start_otlp(
    cfg: Option<&crate::output::otlp::OtlpConfig>,
    snapshots: &state::Reader,
    metrics: &Metrics,
) -> Result<Option<Arc<Otlp>>, RunError> {
    let Some(cfg) = cfg else {
        return Ok(None);
    };
    let otlp = Otlp::start(cfg, snapshots, metrics.otlp.clone())?;
    if cfg.traces_endpoint.is_some() {
        crate::probe::trace::set_sample_ratio(cfg.sample_ratio);
    }
    Ok(Some(Arc::new(otlp)))
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
    tx: state::reader::Publisher,
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
fn first_verdicts_within<'a>(
    servers: impl Iterator<Item = &'a std::sync::Arc<config::ServerSpec>>,
) -> Duration {
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
