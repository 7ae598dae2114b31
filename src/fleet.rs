//! The set of servers this replica runs: the main file's, plus what its
//! discovery sources return, cut down to this replica's shard, reconciled
//! with the supervisors as one diff. A reload and a discovery change take
//! the same path, so unchanged servers keep their sessions either way.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Diff, Rejection};
use crate::discovery::{self, Discovered, Discovery, Mechanism, Report, Shard, Update};
use crate::redact;
use crate::state::{DiscoveryNews, Msg};
use crate::supervise::Supervisors;

/// The running fleet and where it comes from.
pub(crate) struct Fleet {
    /// The main file as last loaded.
    pub config: Config,
    /// What the supervisors run now (main file + discovered, this shard).
    running: Config,
    discovery: Discovery,
    discovered: Discovered,
    shard: Shard,
    /// The supervisors.
    pub supervisors: Supervisors,
    /// The state owner, which counts what discovery finds.
    owner: mpsc::Sender<Msg>,
}

/// Most problems with discovered entries logged one by one per refresh: a
/// source of thousands of bad entries must not become thousands of lines.
const LOGGED_REJECTIONS: usize = 20;

/// Relative paths in discovered entries are read from here.
fn base(config: &Config) -> PathBuf {
    config.path.parent().unwrap_or(Path::new(".")).to_owned()
}

impl Fleet {
    /// Start the main file's servers of this shard, and its sources.
    pub async fn start(
        config: Config,
        supervisors: Supervisors,
        shard: Shard,
        owner: mpsc::Sender<Msg>,
        updates: mpsc::Sender<Update>,
        cancel: CancellationToken,
        own_addresses: Vec<std::net::SocketAddr>,
    ) -> Fleet {
        let mut fleet = Fleet {
            running: Config {
                servers: Vec::new(),
                ..config.clone()
            },
            discovery: Discovery::new(updates, cancel, base(&config), own_addresses),
            discovered: Discovered::default(),
            shard,
            supervisors,
            owner,
            config,
        };
        fleet.reload(fleet.config.clone()).await;
        tracing::info!(
            servers = fleet.len(),
            config = %fleet.config.path.display(),
            shard.index = shard.index,
            shard.count = shard.count,
            "monitoring started"
        );
        fleet
    }

    /// Take a new main file: its sources start or stop, and the servers are
    /// reconciled.
    pub async fn reload(&mut self, new: Config) -> Diff {
        let sources = self
            .discovery
            .apply(&discovery::sources(&new), &discovery::Against::of(&new));
        self.discovered.set_sources(sources);
        self.config = new;
        self.reconcile().await
    }

    /// Take what sources read: validate what changed, and reconcile if any
    /// list did.
    pub async fn discovered(&mut self, updates: Vec<Update>) {
        let mut changed = false;
        for update in updates {
            let report = self.discovered.update(update);
            self.tell(&report).await;
            changed |= report.changed;
        }
        if changed {
            let diff = self.reconcile().await;
            if !diff.is_empty() {
                diff.log("discovered servers applied");
            }
        }
    }

    /// Hand discovery's news to the state owner, which counts it.
    async fn count(&self, news: DiscoveryNews) {
        // The owner outlives the main loop; a closed channel means shutdown.
        let _ = self.owner.send(Msg::Discovery(news)).await;
    }

    /// Log and count what a refresh found wrong.
    async fn tell(&self, report: &Report) {
        for (mechanism, e) in &report.failures {
            self.count(DiscoveryNews::Failed(*mechanism)).await;
            tracing::warn!(
                mechanism = mechanism.as_str(),
                error = %redact::redact(&e.to_string()),
                "discovery refresh failed; the source keeps its last good list"
            );
        }
        // The same failure again is counted, and was logged the first time.
        for mechanism in &report.failing_again {
            self.count(DiscoveryNews::Failed(*mechanism)).await;
        }
        for (mechanism, origin) in &report.recovered {
            tracing::info!(
                mechanism = mechanism.as_str(),
                origin = %redact::redact(&origin.display().to_string()),
                "discovery refresh succeeded again"
            );
        }
        let mut logged = 0;
        let mut unlogged = 0;
        for (mechanism, reason, count, errors) in &report.rejected {
            self.count(DiscoveryNews::Rejected(*mechanism, *reason, *count as u64))
                .await;
            for e in errors {
                if logged == LOGGED_REJECTIONS {
                    unlogged += 1;
                    continue;
                }
                logged += 1;
                tracing::error!(
                    mechanism = mechanism.as_str(),
                    reason = reason.as_str(),
                    error = %redact::redact(&e.to_string()),
                    "discovered entry left out"
                );
            }
        }
        if unlogged > 0 {
            tracing::error!(
                more = unlogged,
                "more problems with discovered entries, not logged one by one (counted in mcpmon_sd_entries_rejected_total)"
            );
        }
        for w in &report.warnings {
            tracing::warn!(warning = %w, "risky configuration in a discovered entry");
        }
    }

    /// Settle the full list and hand it to the supervisors.
    async fn reconcile(&mut self) -> Diff {
        let resolved = self.discovered.resolve(&self.config, self.shard);
        for (mechanism, message) in &resolved.duplicates {
            self.count(DiscoveryNews::Rejected(*mechanism, Rejection::Duplicate, 1))
                .await;
            tracing::error!(
                mechanism = mechanism.as_str(),
                "{}",
                redact::redact(message)
            );
        }
        for &mechanism in <Mechanism as strum::VariantArray>::VARIANTS {
            let n = resolved.counts.get(&mechanism).copied().unwrap_or(0);
            self.count(DiscoveryNews::Servers(mechanism, n)).await;
        }
        let next = Config {
            servers: resolved.servers,
            ..self.config.clone()
        };
        // Sessions being closed may still log the old values.
        redact::set_secrets(
            self.running
                .secrets()
                .into_iter()
                .chain(next.secrets())
                .collect(),
        );
        let diff = self
            .supervisors
            .apply(&next, crate::supervise::SHUTDOWN_DEADLINE)
            .await;
        redact::set_secrets(next.secrets());
        self.running = next;
        diff
    }

    /// How many servers run now.
    pub fn len(&self) -> usize {
        self.running.servers.len()
    }
}
