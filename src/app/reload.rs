//! Reloading: what asks for one (`POST /-/reload`, SIGHUP, the file's own
//! changes), and how a new file is applied: validated in full, then as a
//! diff, so an invalid file changes nothing.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Options;
use crate::config;
use crate::fleet::Fleet;
use crate::output::lifecycle::ReloadRequest;
use crate::output::metrics::Metrics;
use crate::output::web;
use crate::{redact, state};

/// What asks for a reload: `POST /-/reload`, SIGHUP, and the file's own
/// changes when `--config.auto-reload` is set.
pub(super) struct Triggers {
    api: mpsc::Receiver<ReloadRequest>,
    external: Option<mpsc::Receiver<ReloadRequest>>,
    auto: Option<tokio::time::Interval>,
    file: config::watch::FileWatch,
}

impl Triggers {
    pub(super) fn new(
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
    pub(super) async fn next(&mut self) -> Option<(ReloadRequest, Option<Vec<u8>>)> {
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
    pub(super) async fn bytes(
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
pub(super) async fn reload(
    path: &std::path::Path,
    bytes: std::io::Result<Vec<u8>>,
    running: &mut Fleet,
    fleet: &mpsc::Sender<state::Msg>,
    metrics: &Metrics,
) -> Result<config::Diff, String> {
    let parsed = match bytes {
        Err(e) => Err(config::ConfigErrors::unreadable(path, &e)),
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
