//! Servers found by `file_sd_configs`, `http_sd_configs`,
//! `client_config_sd_configs` and `registry_sd_configs`, merged with the
//! main file's and cut down to this replica's shard.
//!
//! Each source is one task ([`Discovery`]) that reads its files or asks its
//! endpoint, validates what changed on a blocking thread ([`Checker`]), and
//! sends the result to the main loop. A document is untrusted input and may
//! be 16 MiB of bad entries: its validation must never hold up signals,
//! reloads or other sources, so none of it runs on the main loop. The main
//! loop keeps the last good entries of every document ([`Discovered`], in
//! `settle`), and
//! [`Discovered::resolve`] turns everything into the one server list the
//! supervisors reconcile against, exactly as a reload does.

mod file;
mod http;
mod registry;
mod settle;
pub mod shard;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{
    Config, ConfigError, Entries, EntrySource, FileSd, Format, HttpSd, Rejection, Trust,
    TunablesFile, clients,
};
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
}

impl Mechanism {
    /// The `mechanism` label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One configured source.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Files matching patterns.
    File(FileSd),
    /// An endpoint, or a registry (boxed: the larger by far).
    Http(Box<HttpSd>),
}

impl Source {
    /// Its mechanism.
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Source::File(FileSd {
                client: Some(_), ..
            }) => Mechanism::ClientConfig,
            Source::File(_) => Mechanism::File,
            Source::Http(h) if h.registry.is_some() => Mechanism::Registry,
            Source::Http(_) => Mechanism::Http,
        }
    }

    fn entry_source<'a>(&'a self, base: &'a Path, own: &'a [SocketAddr]) -> EntrySource<'a> {
        match self {
            Source::File(f) => EntrySource {
                trust: Trust::Local,
                // Client configs arrive translated, as JSON.
                format: if f.client.is_some() {
                    Format::Json
                } else {
                    Format::Yaml
                },
                labels: &f.labels,
                base,
                max_servers: f.max_servers,
                own_addresses: own,
            },
            Source::Http(h) => EntrySource {
                trust: Trust::Remote {
                    allow_stdio: h.allow_stdio,
                },
                format: Format::Json,
                labels: &h.labels,
                base,
                max_servers: h.max_servers,
                own_addresses: own,
            },
        }
    }
}

/// Every source of a config, in the order duplicates are settled by.
pub fn sources(config: &Config) -> Vec<Source> {
    let files = config.file_sd.iter().cloned().map(Source::File);
    files
        .chain(
            config
                .http_sd
                .iter()
                .cloned()
                .map(|h| Source::Http(Box::new(h))),
        )
        .collect()
}

/// Every file `patterns` match, read (for `check-config`, and the file task).
pub fn read_files(patterns: &[PathBuf]) -> Vec<Document> {
    file::read_all(patterns)
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

/// Hand what a source has to the main loop; false once nobody listens
/// (shutdown).
async fn report(tx: &mpsc::Sender<Update>, source: u64, documents: Vec<Checked>) -> bool {
    tx.send(Update { source, documents }).await.is_ok()
}

/// What a source task validates its documents against, and what it
/// already validated.
pub struct Checker {
    source: Source,
    base: PathBuf,
    own: Arc<[SocketAddr]>,
    env: fn(&str) -> Option<String>,
    global: watch::Receiver<Arc<TunablesFile>>,
    /// A fingerprint of each document's last text.
    seen: HashMap<PathBuf, u64>,
}

impl Checker {
    /// Validate what changed since the last call (everything, after a
    /// change of `global:`), off the runtime's workers.
    pub async fn check(&mut self, documents: Vec<Document>) -> Vec<Checked> {
        if self.global.has_changed().unwrap_or(false) {
            self.global.mark_unchanged();
            self.seen.clear();
        }
        let mut out = Vec::with_capacity(documents.len());
        let mut todo = Vec::new();
        for doc in documents {
            let fingerprint = doc.text.as_ref().ok().map(|t| fingerprint(t.as_bytes()));
            if fingerprint.is_some() && self.seen.get(&doc.origin) == fingerprint.as_ref() {
                out.push(Checked::Same(doc.origin));
                continue;
            }
            match fingerprint {
                Some(f) => {
                    self.seen.insert(doc.origin.clone(), f);
                }
                None => {
                    self.seen.remove(&doc.origin);
                }
            }
            todo.push(doc);
        }
        self.seen.retain(|origin, _| {
            out.iter().any(|c| c.origin() == origin) || todo.iter().any(|d| &d.origin == origin)
        });
        if todo.is_empty() {
            return out;
        }
        let (source, base, own, env) = (
            self.source.clone(),
            self.base.clone(),
            self.own.clone(),
            self.env,
        );
        let global = self.global.borrow().clone();
        let checked = tokio::task::spawn_blocking(move || {
            todo.into_iter()
                .map(|doc| {
                    let parsed = validate(&doc, &source, &global, &base, &own, &env);
                    Checked::Fresh(doc.origin, parsed)
                })
                .collect::<Vec<_>>()
        })
        .await;
        match checked {
            Ok(fresh) => out.extend(fresh),
            Err(e) => tracing::error!(error = %e, "discovery: validation failed"),
        }
        out
    }

    /// Resolves when `global:` changes (the documents must be validated
    /// again); never, once the main loop is gone.
    pub async fn global_changed(&mut self) {
        if self.global.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A cheap fingerprint of a document's text.
fn fingerprint(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Validate one document of `source`: its entries, or why it is unusable.
fn validate(
    doc: &Document,
    source: &Source,
    global: &TunablesFile,
    base: &Path,
    own: &[SocketAddr],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Entries, ConfigError> {
    let text = (doc.text.as_ref()).map_err(|e| ConfigError::whole_file(&doc.origin, e.clone()))?;
    // Relative paths in a file are read from that file's directory.
    let base = match source {
        Source::File(_) => doc.origin.parent().unwrap_or(base),
        Source::Http(_) => base,
    };
    let entry_source = source.entry_source(base, own);
    let translated = match source {
        Source::File(FileSd {
            client: Some(format),
            ..
        }) => {
            let home = env("HOME").unwrap_or_default();
            clients::as_entries(&doc.origin, text, *format, env, &home)?
        }
        Source::Http(h) if h.registry.is_some() => {
            crate::config::registry::as_entries(&doc.origin, text)?
        }
        _ => return crate::config::parse_entries(&doc.origin, text, global, &entry_source, env),
    };
    let mut entries =
        crate::config::parse_entries(&doc.origin, &translated.json, global, &entry_source, env)?;
    translated.place(&mut entries);
    Ok(entries)
}

/// What `check-config` found in the file_sd documents.
#[derive(Debug, Default)]
pub struct FileCheck {
    /// Servers the documents would add.
    pub servers: usize,
    /// Every problem: unreadable files, rejected entries, duplicates.
    pub problems: Vec<String>,
    /// Risky but valid settings.
    pub warnings: Vec<String>,
}

/// Every file_sd document of `config`, read and validated as the running
/// service would (for `check-config`).
pub fn check_files(config: &Config) -> FileCheck {
    let (resolved, reports) = read_all_files(config);
    let mut check = FileCheck {
        servers: resolved.counts.values().sum(),
        ..FileCheck::default()
    };
    for report in &reports {
        let failures = report.failures.iter().map(|(_, e)| e.to_string());
        check.problems.extend(failures);
        for (_, reason, _, errors) in &report.rejected {
            // A client config's entry that needs a person is theirs to
            // finish, not an error in what mcpmon was given.
            let into = if *reason == Rejection::NeedsConfiguration {
                &mut check.warnings
            } else {
                &mut check.problems
            };
            into.extend(errors.iter().map(|e| e.to_string()));
        }
        check
            .warnings
            .extend(report.warnings.iter().map(|w| w.to_string()));
    }
    check
        .problems
        .extend(resolved.duplicates.iter().map(|(_, d)| d.clone()));
    check
}

/// What each file source would add, and its report.
fn read_all_files(config: &Config) -> (Resolved, Vec<Report>) {
    let env = |name: &str| std::env::var(name).ok();
    let base = config.path.parent().unwrap_or(Path::new("."));
    let mut found = Discovered::default();
    let mut reports = Vec::new();
    let sources: Vec<(u64, Source)> = sources(config)
        .into_iter()
        .filter(|s| matches!(s, Source::File(_)))
        .zip(0..)
        .map(|(s, i)| (i, s))
        .collect();
    found.set_sources(sources.clone());
    for (id, source) in sources {
        let Source::File(sd) = &source else { continue };
        let documents = read_files(&sd.files)
            .into_iter()
            .map(|doc| {
                let parsed = validate(&doc, &source, &config.global, base, &[], &env);
                Checked::Fresh(doc.origin, parsed)
            })
            .collect();
        reports.push(found.update(Update {
            source: id,
            documents,
        }));
    }
    (found.resolve(config, Shard::default()), reports)
}

/// The running source tasks.
pub struct Discovery {
    running: Vec<(u64, Source, CancellationToken)>,
    next: u64,
    tx: mpsc::Sender<Update>,
    cancel: CancellationToken,
    /// The main file's `global:`, which every entry is resolved against.
    global: watch::Sender<Arc<TunablesFile>>,
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

    /// Run exactly `wanted`, resolving entries against `global`: a source
    /// configured as before keeps its task (and its number, so its last
    /// list stays), others start or stop. A changed `global` makes every
    /// task validate its documents again. Returns the sources with their
    /// numbers, in `wanted`'s order.
    pub fn apply(&mut self, wanted: &[Source], global: &TunablesFile) -> Vec<(u64, Source)> {
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
            let checker = Checker {
                source: source.clone(),
                base: self.base.clone(),
                own: self.own.clone(),
                env: |name| std::env::var(name).ok(),
                global,
                seen: HashMap::new(),
            };
            match source.clone() {
                Source::File(f) => {
                    tokio::spawn(file::run(id, f, checker, tx, cancel.clone()));
                }
                Source::Http(h) if h.registry.is_some() => {
                    tokio::spawn(registry::run(id, *h, checker, tx, cancel.clone()));
                }
                Source::Http(h) => {
                    tokio::spawn(http::run(id, *h, checker, tx, cancel.clone()));
                }
            }
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
