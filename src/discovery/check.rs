//! Validating what a source read: a [`Checker`] per source task, which
//! validates only the documents whose text changed (all of them after a
//! change of `global:`) on a blocking thread, and `check-config`'s reading
//! of every local file source as the running service would.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::{Against, Checked, Discovered, Document, Report, Resolved, Shard, Source, Update};
use super::{read_files, sources};
use crate::config::{Config, ConfigError, Entries, Rejection};

/// What a source task validates its documents against, and what it
/// already validated.
pub struct Checker {
    source: Source,
    base: PathBuf,
    own: Arc<[SocketAddr]>,
    env: fn(&str) -> Option<String>,
    global: watch::Receiver<Arc<Against>>,
    /// A fingerprint of each document's last text.
    seen: HashMap<PathBuf, u64>,
}

impl Checker {
    /// A checker of `source`'s documents against `global:` as it is now
    /// and as it changes; relative paths read from `base`, entries aimed
    /// at `own` refused.
    pub(super) fn new(
        source: Source,
        base: PathBuf,
        own: Arc<[SocketAddr]>,
        global: watch::Receiver<Arc<Against>>,
    ) -> Checker {
        Checker {
            source,
            base,
            own,
            env: |name| std::env::var(name).ok(),
            global,
            seen: HashMap::new(),
        }
    }

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
pub(super) fn validate(
    doc: &Document,
    source: &Source,
    against: &Against,
    base: &Path,
    own: &[SocketAddr],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Entries, ConfigError> {
    let text = (doc.text.as_ref()).map_err(|e| ConfigError::whole_file(&doc.origin, e.clone()))?;
    let mut entry_source = source.entry_source(&doc.origin, base, own);
    entry_source.relabel = &against.relabel;
    let global = &against.global;
    let Some(translated) = source.translate(&doc.origin, text, env)? else {
        return crate::config::parse_entries(&doc.origin, text, global, &entry_source, env);
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
    let against = Against::of(config);
    let base = config.path.parent().unwrap_or(Path::new("."));
    let mut found = Discovered::default();
    let mut reports = Vec::new();
    let sources: Vec<(u64, Source)> = sources(config)
        .into_iter()
        .filter(|s| s.files().is_some())
        .zip(0..)
        .map(|(s, i)| (i, s))
        .collect();
    found.set_sources(sources.clone());
    for (id, source) in sources {
        let documents = read_files(source.files().unwrap_or_default())
            .into_iter()
            .map(|doc| {
                let parsed = validate(&doc, &source, &against, base, &[], &env);
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
