//! The set of running supervisors, and how a new configuration is applied
//! to it: as a diff. Added servers start, removed ones stop (their sessions
//! closed, their series dropped), changed ones restart, and unchanged ones
//! are not touched: they keep their sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::server::Supervisor;
use crate::config::{Config, Diff, ServerSpec};
use crate::state::Msg;
use crate::transport::Connector;
use crate::transport::session::McpConnector;

/// Makes the connector for a server; tests hand in fakes.
pub type MakeConnector = Arc<dyn Fn(&ServerSpec) -> Arc<dyn Connector> + Send + Sync>;

struct Running {
    /// The spec its supervisor runs: one allocation, shared with it.
    spec: Arc<ServerSpec>,
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

/// Every running supervisor, by server id.
pub struct Supervisors {
    running: HashMap<String, Running>,
    connect: MakeConnector,
    state: mpsc::Sender<Msg>,
    cancel: CancellationToken,
    /// Turns to open a session: at most this many handshakes at once.
    admission: Arc<tokio::sync::Semaphore>,
}

/// How many handshakes run at once by default: four per core, and at least
/// four. A stdio server's start is mostly CPU (`npx` alone takes about a
/// second of it), so 28 of them at once on 2 cores made 8 miss their
/// `connect_timeout`; a remote handshake is mostly waiting, and a few per
/// core keep a large HTTP fleet opening quickly.
pub fn default_handshakes() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cores).max(4)
}

impl Supervisors {
    /// An empty set whose servers are reached through real sessions over
    /// `http` (or stdio); supervisors get child tokens of `cancel`.
    pub fn new(
        http: crate::transport::Http,
        state: mpsc::Sender<Msg>,
        cancel: CancellationToken,
    ) -> Self {
        let connect: MakeConnector = Arc::new(move |spec: &ServerSpec| {
            match McpConnector::new(spec, &http, crate::transport::http_client_builder) {
                Ok(c) => Arc::new(c) as Arc<dyn Connector>,
                Err(e) => Arc::new(crate::transport::Refusing(
                    crate::transport::OpenError::new(
                        crate::transport::LinkFailure::TlsFailed,
                        "connect",
                        e.to_string(),
                    ),
                )),
            }
        });
        Self::with_connector(connect, state, cancel)
    }

    /// An empty set whose sessions come from `connect`.
    pub fn with_connector(
        connect: MakeConnector,
        state: mpsc::Sender<Msg>,
        cancel: CancellationToken,
    ) -> Self {
        Supervisors {
            running: HashMap::new(),
            connect,
            state,
            cancel,
            admission: Arc::new(tokio::sync::Semaphore::new(default_handshakes())),
        }
    }

    /// At most `n` handshakes at once (at least one); a server's
    /// `connect_timeout` is counted from when its turn comes.
    pub fn with_handshakes(mut self, n: usize) -> Self {
        self.admission = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    async fn start(&mut self, spec: Arc<ServerSpec>) {
        let cancel = self.cancel.child_token();
        let (stuck_tx, stuck_rx) = tokio::sync::watch::channel(0);
        // The owner learns of the server before its first event.
        let _ = self
            .state
            .send(Msg::Add {
                spec: spec.clone(),
                stuck: stuck_tx,
            })
            .await;
        let sup = Supervisor {
            id: Arc::from(spec.id.as_str()),
            connector: (self.connect)(&spec),
            probes: super::server::probes_of(&spec, &self.state),
            spec: spec.clone(),
            state: self.state.clone(),
            stuck: stuck_rx,
            cancel: cancel.clone(),
            admission: self.admission.clone(),
        };
        let handle = tokio::spawn(sup.run());
        self.running.insert(
            spec.id.clone(),
            Running {
                spec,
                cancel,
                handle,
            },
        );
    }

    /// Stop these supervisors together, waiting at most `deadline` for their
    /// sessions to close; those that do not finish are aborted and named.
    async fn stop(&mut self, ids: &[String], deadline: Duration) {
        let mut stopping = Vec::new();
        for id in ids {
            if let Some(r) = self.running.remove(id) {
                r.cancel.cancel();
                stopping.push((id.clone(), r));
            }
        }
        let until = tokio::time::Instant::now() + deadline;
        for (id, mut r) in stopping {
            if tokio::time::timeout_at(until, &mut r.handle).await.is_err() {
                tracing::warn!(server = %id, "supervisor did not stop in time; aborting it");
                r.handle.abort();
            }
        }
    }

    /// Make the running set match `config`.
    pub async fn apply(&mut self, config: &Config, deadline: Duration) -> Diff {
        let diff = Diff::between(self.running.values().map(|r| &*r.spec), &config.servers);
        let mut stop = diff.removed.clone();
        stop.extend(diff.changed.iter().cloned());
        self.stop(&stop, deadline).await;
        for id in &diff.removed {
            // The owner outlives every supervisor; a closed channel means shutdown.
            let _ = self.state.send(Msg::Remove(Arc::from(id.as_str()))).await;
        }
        for spec in &config.servers {
            let Some(running) = self.running.get_mut(&spec.id) else {
                self.start(spec.clone()).await;
                continue;
            };
            // Kept: only what its operator says may have changed.
            if running.spec.operator != spec.operator {
                Arc::make_mut(&mut running.spec).operator = spec.operator.clone();
                let id = Arc::from(spec.id.as_str());
                let _ = self.state.send(Msg::Said(id, spec.operator.clone())).await;
            }
        }
        diff
    }

    /// Stop everything (shutdown).
    pub async fn stop_all(&mut self, deadline: Duration) {
        let ids: Vec<String> = self.running.keys().cloned().collect();
        self.stop(&ids, deadline).await;
    }
}
