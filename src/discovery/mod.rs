//! Servers found by `file_sd_configs` and `http_sd_configs`, merged with the
//! main file's and cut down to this replica's shard.
//!
//! Each source is one task ([`Discovery`]) that reads its files or asks its
//! endpoint and sends what it read, as text, to the main loop. The main loop
//! keeps the last good text and entries of every document ([`Discovered`]),
//! validates a document again only when its text (or `global:`) changed, and
//! [`Discovered::resolve`] turns everything into the one server list the
//! supervisors reconcile against, exactly as a reload does.

mod file;
mod http;
pub mod shard;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{
    Config, ConfigError, Entries, EntrySource, FileSd, HttpSd, Rejection, ServerSpec, Trust,
    TunablesFile,
};
pub use shard::{Shard, ShardError};

/// Largest document a source may return (a file or an endpoint's body).
pub const MAX_DOCUMENT: u64 = 16 << 20;

/// A discovery mechanism, named as Prometheus names its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// `file_sd_configs`
    File,
    /// `http_sd_configs`
    Http,
}

impl Mechanism {
    /// The `mechanism` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::File => "file",
            Mechanism::Http => "http",
        }
    }
}

/// One configured source.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// Files matching patterns.
    File(FileSd),
    /// An endpoint.
    Http(HttpSd),
}

impl Source {
    /// Its mechanism.
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Source::File(_) => Mechanism::File,
            Source::Http(_) => Mechanism::Http,
        }
    }

    fn entry_source<'a>(&'a self, base: &'a Path) -> EntrySource<'a> {
        match self {
            Source::File(f) => EntrySource {
                trust: Trust::Local,
                labels: &f.labels,
                base,
            },
            Source::Http(h) => EntrySource {
                trust: Trust::Remote {
                    allow_stdio: h.allow_stdio,
                },
                labels: &h.labels,
                base,
            },
        }
    }
}

/// Every source of a config, in the order duplicates are settled by.
pub fn sources(config: &Config) -> Vec<Source> {
    let files = config.file_sd.iter().cloned().map(Source::File);
    files
        .chain(config.http_sd.iter().cloned().map(Source::Http))
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

/// What one source read at one refresh: every document it has now (a file
/// source's files that no longer match are simply absent).
#[derive(Debug)]
pub struct Update {
    /// Which source ([`Discovery::apply`] numbers them).
    pub source: u64,
    /// What it read.
    pub documents: Vec<Document>,
}

/// Hand what a source read to the main loop; false once nobody listens
/// (shutdown).
async fn report(tx: &mpsc::Sender<Update>, source: u64, documents: Vec<Document>) -> bool {
    tx.send(Update { source, documents }).await.is_ok()
}

/// The running source tasks.
pub struct Discovery {
    running: Vec<(u64, Source, CancellationToken)>,
    next: u64,
    tx: mpsc::Sender<Update>,
    cancel: CancellationToken,
}

impl Discovery {
    /// No sources yet; updates go to `tx`.
    pub fn new(tx: mpsc::Sender<Update>, cancel: CancellationToken) -> Discovery {
        Discovery {
            running: Vec::new(),
            next: 0,
            tx,
            cancel,
        }
    }

    /// Run exactly `wanted`: a source configured as before keeps its task
    /// (and its number, so its last list stays), others start or stop.
    /// Returns the sources with their numbers, in `wanted`'s order.
    pub fn apply(&mut self, wanted: &[Source]) -> Vec<(u64, Source)> {
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
            match source.clone() {
                Source::File(f) => {
                    tokio::spawn(file::run(id, f, tx, cancel.clone()));
                }
                Source::Http(h) => {
                    tokio::spawn(http::run(id, h, tx, cancel.clone()));
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

/// A document's last good text and what it validated to.
struct Parsed {
    text: String,
    entries: Entries,
}

/// What the main loop knows of every source.
#[derive(Default)]
pub struct Discovered {
    /// In settling order, each with its documents by origin.
    sources: Vec<(u64, Source, BTreeMap<PathBuf, Parsed>)>,
}

/// What one update found worth telling.
#[derive(Debug, Default)]
pub struct Report {
    /// Documents that could not be read or were not a list of entries.
    pub failures: Vec<(Mechanism, ConfigError)>,
    /// Entries left out, each with its problems.
    pub rejected: Vec<(Mechanism, Rejection, Vec<ConfigError>)>,
    /// Risky but valid settings in new entries.
    pub warnings: Vec<ConfigError>,
    /// Whether any source's list changed.
    pub changed: bool,
}

/// The server list to run, and the ids given twice.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The main file's servers and the discovered ones, in this shard.
    pub servers: Vec<ServerSpec>,
    /// Discovered entries dropped because an earlier source has the id:
    /// the mechanism, and an error naming both origins.
    pub duplicates: Vec<(Mechanism, String)>,
    /// Valid servers each mechanism returns, before sharding.
    pub counts: BTreeMap<Mechanism, usize>,
}

impl Discovered {
    /// Take the sources [`Discovery::apply`] runs. Known ones keep their
    /// documents; all are validated again when `global:` changed.
    pub fn set_sources(
        &mut self,
        sources: Vec<(u64, Source)>,
        global: &TunablesFile,
        global_changed: bool,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Report {
        let mut old: HashMap<u64, BTreeMap<PathBuf, Parsed>> = std::mem::take(&mut self.sources)
            .into_iter()
            .map(|(id, _, docs)| (id, docs))
            .collect();
        let mut report = Report::default();
        for (id, source) in sources {
            let mut docs = old.remove(&id).unwrap_or_default();
            if global_changed {
                for (origin, parsed) in docs.iter_mut() {
                    let doc = Document {
                        origin: origin.clone(),
                        text: Ok(parsed.text.clone()),
                    };
                    if let Some(p) = parse(&doc, &source, global, base, env, &mut report) {
                        *parsed = p;
                    }
                }
            }
            self.sources.push((id, source, docs));
        }
        report.changed = true;
        report
    }

    /// Take one source's refresh: validate what changed, keep the last good
    /// list of a document that failed.
    pub fn update(
        &mut self,
        update: Update,
        global: &TunablesFile,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Report {
        let mut report = Report::default();
        let Some((_, source, docs)) = self
            .sources
            .iter_mut()
            .find(|(id, ..)| *id == update.source)
        else {
            // A source stopped since it sent this.
            return report;
        };
        let present: Vec<PathBuf> = update.documents.iter().map(|d| d.origin.clone()).collect();
        let before = docs.len();
        docs.retain(|origin, _| present.contains(origin));
        report.changed |= docs.len() != before;
        for doc in update.documents {
            if let (Some(old), Ok(text)) = (docs.get(&doc.origin), &doc.text)
                && old.text == *text
            {
                continue;
            }
            if let Some(parsed) = parse(&doc, source, global, base, env, &mut report) {
                docs.insert(doc.origin, parsed);
                report.changed = true;
            }
        }
        report
    }

    /// The servers to run: the main file's first, then each source's in
    /// configured order (a file source's files by name); an id already
    /// taken is dropped, naming both origins. Then only this shard's.
    pub fn resolve(&self, config: &Config, shard: Shard) -> Resolved {
        let mut out = Resolved::default();
        let mut taken: HashMap<&str, &str> = config
            .origins
            .iter()
            .map(|(id, origin)| (id.as_str(), origin.as_str()))
            .collect();
        let mut servers: Vec<&ServerSpec> = config.servers.iter().collect();
        for (_, source, docs) in &self.sources {
            let mechanism = source.mechanism();
            out.counts.entry(mechanism).or_default();
            for parsed in docs.values() {
                for (spec, origin) in &parsed.entries.servers {
                    if let Some(first) = taken.get(spec.id.as_str()) {
                        out.duplicates.push((
                            mechanism,
                            format!(
                                "duplicate server id {:?}: {origin} repeats {first}; the first is kept",
                                spec.id
                            ),
                        ));
                        continue;
                    }
                    taken.insert(&spec.id, origin);
                    *out.counts.entry(mechanism).or_default() += 1;
                    servers.push(spec);
                }
            }
        }
        out.servers = servers
            .into_iter()
            .filter(|s| shard.owns(&s.id))
            .cloned()
            .collect();
        out
    }
}

/// Validate one document of `source`; `None` (with the failure reported)
/// when it is unusable as a whole.
fn parse(
    doc: &Document,
    source: &Source,
    global: &TunablesFile,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    report: &mut Report,
) -> Option<Parsed> {
    let failure = |message: String| ConfigError {
        file: doc.origin.clone(),
        line: 0,
        column: 0,
        message,
    };
    let text = match &doc.text {
        Ok(t) => t,
        Err(e) => {
            report
                .failures
                .push((source.mechanism(), failure(e.clone())));
            return None;
        }
    };
    // Relative paths in a file are read from that file's directory.
    let base = match source {
        Source::File(_) => doc.origin.parent().unwrap_or(base),
        Source::Http(_) => base,
    };
    match crate::config::parse_entries(&doc.origin, text, global, &source.entry_source(base), env) {
        Ok(entries) => {
            for r in &entries.rejected {
                report
                    .rejected
                    .push((source.mechanism(), r.reason, r.errors.clone()));
            }
            report.warnings.extend(entries.warnings.iter().cloned());
            Some(Parsed {
                text: text.clone(),
                entries,
            })
        }
        Err(e) => {
            report.failures.push((source.mechanism(), e));
            None
        }
    }
}

#[cfg(test)]
mod tests;
