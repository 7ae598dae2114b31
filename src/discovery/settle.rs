//! What the main loop knows of every source, and how it settles them: the
//! last good entries of each document, what a refresh found worth telling
//! (failures logged once until they change), and the one server list the
//! supervisors reconcile against, duplicates settled by source order.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use super::{Checked, Mechanism, Shard, Source, Update};
use crate::config::{Config, ConfigError, Entries, Rejection, ServerSpec};

/// What the main loop knows of every source.
#[derive(Default)]
pub struct Discovered {
    /// In settling order, each with the last good entries of its documents.
    pub(super) sources: Vec<(u64, Source, BTreeMap<PathBuf, Entries>)>,
    /// The last failure of each failing document, by source: the same
    /// failure again is counted, not logged again.
    failing: HashMap<(u64, PathBuf), String>,
}

/// What one update found worth telling.
#[derive(Debug, Default)]
pub struct Report {
    /// Documents that could not be read or were not a list of entries,
    /// failing anew or otherwise than last time.
    pub failures: Vec<(Mechanism, ConfigError)>,
    /// Documents failing again as they did last time: counted, not logged.
    pub failing_again: Vec<Mechanism>,
    /// Documents that failed last time and read well now.
    pub recovered: Vec<(Mechanism, PathBuf)>,
    /// Entries left out: how many, why, and their problems.
    pub rejected: Vec<(Mechanism, Rejection, usize, Vec<ConfigError>)>,
    /// Risky but valid settings in new entries.
    pub warnings: Vec<ConfigError>,
    /// Whether any source's list changed.
    pub changed: bool,
}

/// The server list to run, and the ids given twice.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The main file's servers and the discovered ones, in this shard.
    pub servers: Vec<Arc<ServerSpec>>,
    /// Discovered entries dropped because an earlier source has the id:
    /// the mechanism, and an error naming both origins.
    pub duplicates: Vec<(Mechanism, String)>,
    /// Valid servers each mechanism returns, before sharding.
    pub counts: BTreeMap<Mechanism, usize>,
}

impl Discovered {
    /// Take the sources [`super::Discovery::apply`] runs, in settling order. Known
    /// ones keep their documents' entries.
    pub fn set_sources(&mut self, sources: Vec<(u64, Source)>) {
        let mut old: HashMap<u64, BTreeMap<PathBuf, Entries>> = std::mem::take(&mut self.sources)
            .into_iter()
            .map(|(id, _, docs)| (id, docs))
            .collect();
        for (id, source) in sources {
            let docs = old.remove(&id).unwrap_or_default();
            self.sources.push((id, source, docs));
        }
        let ids: Vec<u64> = self.sources.iter().map(|(id, ..)| *id).collect();
        self.failing.retain(|(id, _), _| ids.contains(id));
    }

    /// Take one source's refresh: keep what validated, keep the last good
    /// entries of a document that failed.
    pub fn update(&mut self, update: Update) -> Report {
        let mut report = Report::default();
        let Some((_, source, docs)) = self
            .sources
            .iter_mut()
            .find(|(id, ..)| *id == update.source)
        else {
            // A source stopped since it sent this.
            return report;
        };
        let mechanism = source.mechanism();
        let before = docs.len();
        docs.retain(|origin, _| update.documents.iter().any(|d| d.origin() == origin));
        report.changed |= docs.len() != before;
        for doc in update.documents {
            let Checked::Fresh(origin, parsed) = doc else {
                continue;
            };
            let key = (update.source, origin.clone());
            match parsed {
                Err(e) => {
                    let text = e.to_string();
                    if self.failing.get(&key) == Some(&text) {
                        report.failing_again.push(mechanism);
                    } else {
                        self.failing.insert(key, text);
                        report.failures.push((mechanism, e));
                    }
                }
                Ok(entries) => {
                    if self.failing.remove(&key).is_some() {
                        report.recovered.push((mechanism, origin.clone()));
                    }
                    for r in &entries.rejected {
                        report
                            .rejected
                            .push((mechanism, r.reason, r.count, r.errors.clone()));
                    }
                    report.warnings.extend(entries.warnings.iter().cloned());
                    if docs.get(&origin) != Some(&entries) {
                        docs.insert(origin, entries);
                        report.changed = true;
                    }
                }
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
        let mut servers: Vec<&Arc<ServerSpec>> = config.servers.iter().collect();
        for (_, source, docs) in &self.sources {
            let mechanism = source.mechanism();
            out.counts.entry(mechanism).or_default();
            for entries in docs.values() {
                for (spec, origin) in &entries.servers {
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
