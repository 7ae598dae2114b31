//! Servers found by `file_sd_configs`, `http_sd_configs`,
//! `client_config_sd_configs` and `registry_sd_configs`, merged with the
//! main file's and cut down to this replica's shard.
//!
//! Laid out as Prometheus lays out its discovery: each mechanism is one
//! module implementing [`Discover`] (what it is called, how its documents
//! are read, the task that reads them), and [`sources`] is the one list of
//! mechanisms. Each configured source runs as one task that reads its
//! files or asks its endpoint, validates what changed on a blocking thread
//! ([`Checker`], in `check`), and sends the result to the main loop. A
//! document is untrusted input and may be 16 MiB of bad entries: its
//! validation must never hold up signals, reloads or other sources, so
//! none of it runs on the main loop. The main loop keeps the last good
//! entries of every document ([`Discovered`], in `settle`), and
//! [`Discovered::resolve`] turns everything into the one server list the
//! supervisors reconcile against, exactly as a reload does.

mod check;
mod clients;
mod file;
mod http;
mod kubernetes;
mod registry;
mod settle;
pub mod shard;

use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::clients::Translated;
use crate::config::{Config, ConfigError, Entries, EntrySource, TunablesFile};
pub use check::{Checker, FileCheck, check_files};
pub use kubernetes::rbac;
pub use settle::{Discovered, Report, Resolved};
pub use shard::{Shard, ShardError};

/// Largest document a source may return (a file or an endpoint's body).
pub const MAX_DOCUMENT: u64 = 16 << 20;

/// A discovery mechanism, named as Prometheus names its own.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
pub enum Mechanism {
    /// `file_sd_configs`
    File,
    /// `http_sd_configs`
    Http,
    /// `client_config_sd_configs`
    #[strum(serialize = "client_config")]
    ClientConfig,
    /// `registry_sd_configs`
    Registry,
    /// `kubernetes_sd_configs`
    Kubernetes,
}

impl Mechanism {
    /// The `mechanism` label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One discovery mechanism's configured source, as Prometheus's
/// `discovery.Config` is: it names its mechanism, says how the entries of
/// its documents are read, and runs the task that reads them. Each
/// mechanism is one module that implements it.
pub trait Discover: SameAs + fmt::Debug + Send + Sync {
    /// Its mechanism.
    fn mechanism(&self) -> Mechanism;

    /// How the entries of the document read from `origin` are read: who
    /// wrote them, their labels and bounds, and the folder relative paths
    /// start from (`base`, unless the mechanism says otherwise).
    fn entry_source<'a>(
        &'a self,
        origin: &'a Path,
        base: &'a Path,
        own: &'a [SocketAddr],
    ) -> EntrySource<'a>;

    /// A document's text as the entry list it stands for, when it is
    /// written in another shape (a client config, a registry's records);
    /// `None` when it is a list of entries already.
    fn translate(
        &self,
        _origin: &Path,
        _text: &str,
        _env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Translated>, ConfigError> {
        Ok(None)
    }

    /// The local file patterns it reads, for `check-config`; none for a
    /// source that asks an endpoint.
    fn files(&self) -> Option<&[PathBuf]> {
        None
    }

    /// Read now and on every change or interval, reporting each refresh
    /// through `task`, until it is cancelled.
    fn run(&self, task: Task) -> BoxFuture<'static, ()>;
}

/// Equality across [`Discover`] implementations: a source configured as
/// before keeps its task. Every `PartialEq` type has it.
pub trait SameAs {
    /// Whether `other` is a source of the same type, configured the same.
    fn same_as(&self, other: &dyn Any) -> bool;
    /// Itself, for [`SameAs::same_as`].
    fn as_any(&self) -> &dyn Any;
}

impl<T: PartialEq + Any> SameAs for T {
    fn same_as(&self, other: &dyn Any) -> bool {
        other.downcast_ref::<T>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One configured source, of any mechanism.
#[derive(Clone, Debug)]
pub struct Source(Arc<dyn Discover>);

impl Source {
    /// A source of the mechanism `discover` implements.
    pub fn new(discover: impl Discover + 'static) -> Source {
        Source(Arc::new(discover))
    }

    /// Its mechanism.
    pub fn mechanism(&self) -> Mechanism {
        self.0.mechanism()
    }
}

impl std::ops::Deref for Source {
    type Target = dyn Discover;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        self.0.same_as(other.0.as_any())
    }
}

/// Every source of a config, in the order duplicates are settled by: the
/// one place that knows which config key is which mechanism.
pub fn sources(config: &Config) -> Vec<Source> {
    let files = config.file_sd.iter().map(|f| match f.client {
        Some(format) => Source::new(clients::ClientConfigs {
            sd: f.clone(),
            format,
        }),
        None => Source::new(file::Files(f.clone())),
    });
    let endpoints = config.http_sd.iter().map(|h| match h.registry {
        Some(_) => Source::new(registry::Registry(h.clone())),
        None => Source::new(http::Endpoint(h.clone())),
    });
    let clusters = config
        .kubernetes_sd
        .iter()
        .map(|k| Source::new(kubernetes::Kubernetes(k.clone())));
    files.chain(endpoints).chain(clusters).collect()
}

/// Every file `patterns` match, read (for `check-config`, and the file task).
pub fn read_files(patterns: &[PathBuf]) -> Vec<Document> {
    file::read_all(patterns)
}

/// What every discovered entry is resolved against: the main file's
/// `global:` and its `relabel_configs`. A change makes every source
/// validate its documents again.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Against {
    /// `global:` as written.
    pub global: TunablesFile,
    /// `relabel_configs`, in order.
    pub relabel: Vec<crate::config::relabel::Relabel>,
}

impl Against {
    /// What `config` resolves discovered entries against.
    pub fn of(config: &Config) -> Against {
        Against {
            global: config.global.clone(),
            relabel: config.relabel.clone(),
        }
    }
}

/// One document a source read: a file, or an endpoint's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The file, or the endpoint's URL without query or credentials.
    pub origin: PathBuf,
    /// Its text, or why it could not be read.
    pub text: Result<String, String>,
}

/// One document as the main loop receives it.
#[derive(Debug)]
pub enum Checked {
    /// Read and validated: its entries, or why the document is unusable
    /// (the source then keeps its last good list).
    Fresh(PathBuf, Result<Entries, ConfigError>),
    /// The same text as last time, already validated.
    Same(PathBuf),
}

impl Checked {
    fn origin(&self) -> &Path {
        match self {
            Checked::Fresh(o, _) | Checked::Same(o) => o,
        }
    }
}

/// What one source has at one refresh: every document it has now (a file
/// source's files that no longer match are simply absent).
#[derive(Debug)]
pub struct Update {
    /// Which source ([`Discovery::apply`] numbers them).
    pub source: u64,
    /// Its documents.
    pub documents: Vec<Checked>,
}

/// What a source task runs with: its number, the checker of its
/// documents, where it reports, and when it stops.
pub struct Task {
    id: u64,
    /// Validates what the source read.
    pub(super) checker: Checker,
    tx: mpsc::Sender<Update>,
    /// Fires when the source is removed or mcpmon stops.
    pub(super) cancel: CancellationToken,
}

impl Task {
    /// Validate what the source has now and hand it to the main loop;
    /// false once nobody listens (shutdown).
    pub(super) async fn report(&mut self, documents: Vec<Document>) -> bool {
        let documents = self.checker.check(documents).await;
        let update = Update {
            source: self.id,
            documents,
        };
        self.tx.send(update).await.is_ok()
    }
}

/// The running source tasks.
pub struct Discovery {
    running: Vec<(u64, Source, CancellationToken)>,
    next: u64,
    tx: mpsc::Sender<Update>,
    cancel: CancellationToken,
    /// What every entry is resolved against.
    global: watch::Sender<Arc<Against>>,
    base: PathBuf,
    own: Arc<[SocketAddr]>,
}

impl Discovery {
    /// No sources yet; updates go to `tx`. Relative paths of discovered
    /// entries are read from `base`; entries aimed at `own` (mcpmon's
    /// listen addresses) are refused.
    pub fn new(
        tx: mpsc::Sender<Update>,
        cancel: CancellationToken,
        base: PathBuf,
        own: Vec<SocketAddr>,
    ) -> Discovery {
        Discovery {
            running: Vec::new(),
            next: 0,
            tx,
            cancel,
            global: watch::Sender::new(Arc::default()),
            base,
            own: own.into(),
        }
    }

    /// Run exactly `wanted`, resolving entries `against` the main file: a
    /// source configured as before keeps its task (and its number, so its
    /// last list stays), others start or stop. A changed `against` makes
    /// every task validate its documents again. Returns the sources with
    /// their numbers, in `wanted`'s order.
    pub fn apply(&mut self, wanted: &[Source], global: &Against) -> Vec<(u64, Source)> {
        self.global.send_if_modified(|g| {
            let changed = **g != *global;
            if changed {
                *g = Arc::new(global.clone());
            }
            changed
        });
        let mut old = std::mem::take(&mut self.running);
        for source in wanted {
            if let Some(i) = old.iter().position(|(_, s, _)| s == source) {
                self.running.push(old.swap_remove(i));
                continue;
            }
            let id = self.next;
            self.next += 1;
            let cancel = self.cancel.child_token();
            let tx = self.tx.clone();
            let mut global = self.global.subscribe();
            global.mark_unchanged();
            let checker = Checker::new(source.clone(), self.base.clone(), self.own.clone(), global);
            tokio::spawn(source.run(Task {
                id,
                checker,
                tx,
                cancel: cancel.clone(),
            }));
            self.running.push((id, source.clone(), cancel));
        }
        for (_, _, cancel) in old {
            cancel.cancel();
        }
        self.running
            .iter()
            .map(|(id, s, _)| (*id, s.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests;
