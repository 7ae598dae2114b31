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

use crate::config::{Config, ServerSpec};
use crate::fleet::FleetMsg;
use crate::metrics::Metrics;
use crate::supervisor::Supervisor;

struct Running {
    spec: ServerSpec,
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

/// What a reload changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Servers started.
    pub added: Vec<String>,
    /// Servers stopped.
    pub removed: Vec<String>,
    /// Servers restarted with new settings.
    pub changed: Vec<String>,
    /// Servers left running as they were.
    pub kept: usize,
}

/// Every running supervisor, by server id.
pub struct Supervisors {
    running: HashMap<String, Running>,
    http: reqwest::Client,
    metrics: Arc<Metrics>,
    fleet: mpsc::Sender<FleetMsg>,
    cancel: CancellationToken,
}

impl Supervisors {
    /// An empty set; supervisors get child tokens of `cancel`.
    pub fn new(
        http: reqwest::Client,
        metrics: Arc<Metrics>,
        fleet: mpsc::Sender<FleetMsg>,
        cancel: CancellationToken,
    ) -> Self {
        Supervisors {
            running: HashMap::new(),
            http,
            metrics,
            fleet,
            cancel,
        }
    }

    fn start(&mut self, spec: ServerSpec) {
        let cancel = self.cancel.child_token();
        let sup = Supervisor {
            spec: spec.clone(),
            http: self.http.clone(),
            series: self.metrics.add_server(
                &spec.id,
                &spec
                    .tool_probes
                    .iter()
                    .map(|t| t.tool.clone())
                    .collect::<Vec<_>>(),
            ),
            fleet: self.fleet.clone(),
            cancel: cancel.clone(),
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
        let mut diff = Diff::default();
        let wanted: HashMap<&str, &ServerSpec> =
            config.servers.iter().map(|s| (s.id.as_str(), s)).collect();
        for (id, r) in &self.running {
            match wanted.get(id.as_str()) {
                Some(spec) if **spec == r.spec => {
                    diff.kept += 1;
                    continue;
                }
                Some(_) => diff.changed.push(id.clone()),
                None => diff.removed.push(id.clone()),
            }
        }
        let mut stop = diff.removed.clone();
        stop.extend(diff.changed.iter().cloned());
        self.stop(&stop, deadline).await;
        for id in &stop {
            self.metrics.forget(id);
        }
        for id in &diff.removed {
            // The fleet owner outlives every supervisor; a closed channel means shutdown.
            let _ = self.fleet.send(FleetMsg::Remove(id.clone())).await;
        }
        for spec in &config.servers {
            if !self.running.contains_key(&spec.id) {
                if !diff.changed.contains(&spec.id) {
                    diff.added.push(spec.id.clone());
                }
                self.start(spec.clone());
            }
        }
        diff.removed.sort();
        diff.changed.sort();
        diff.added.sort();
        diff
    }

    /// Stop everything (shutdown).
    pub async fn stop_all(&mut self, deadline: Duration) {
        let ids: Vec<String> = self.running.keys().cloned().collect();
        self.stop(&ids, deadline).await;
    }
}
