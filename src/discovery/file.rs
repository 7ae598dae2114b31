//! A `file_sd_configs` source: reads every file its patterns match, when
//! the files' directories change (inotify: creations, writes, renames,
//! removals; never the reads, its own included) and every
//! `refresh_interval`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use notify::Watcher;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Discover, Document, MAX_DOCUMENT, Mechanism, Task};
use crate::config::{EntrySource, FileSd, Format, Trust};

/// A `file_sd_configs` entry.
#[derive(Debug, PartialEq)]
pub(super) struct Files(pub(super) FileSd);

impl Discover for Files {
    fn mechanism(&self) -> Mechanism {
        Mechanism::File
    }

    fn entry_source<'a>(
        &'a self,
        origin: &'a Path,
        base: &'a Path,
        own: &'a [SocketAddr],
    ) -> EntrySource<'a> {
        local(&self.0, Format::Yaml, origin, base, own)
    }

    fn files(&self) -> Option<&[PathBuf]> {
        Some(&self.0.files)
    }

    fn run(&self, task: Task) -> BoxFuture<'static, ()> {
        Box::pin(run(self.0.clone(), task))
    }
}

/// How a local file's entries are read: as the operator's own, like the
/// main file, with relative paths read from the file's folder.
pub(super) fn local<'a>(
    sd: &'a FileSd,
    format: Format,
    origin: &'a Path,
    base: &'a Path,
    own: &'a [SocketAddr],
) -> EntrySource<'a> {
    EntrySource {
        trust: Trust::Local,
        format,
        labels: &sd.labels,
        base: origin.parent().unwrap_or(base),
        max_servers: sd.max_servers,
        own_addresses: own,
        relabel: &[],
    }
}

/// A burst of events (an editor's save, a ConfigMap's symlink swap) is
/// read once, after it has been quiet this long.
const SETTLE: Duration = Duration::from_millis(200);
/// A directory that never goes quiet (another program's log next to the
/// files) is read at least this often all the same.
const SETTLE_AT_MOST: Duration = Duration::from_secs(2);

/// Read the files now, and again on every change and every interval,
/// until cancelled.
pub(super) async fn run(sd: FileSd, mut task: Task) {
    let changed = Arc::new(Notify::new());
    // Dropped (and the watch removed) when the task ends; set anew when a
    // wildcard directory comes or goes.
    let mut watching = Vec::new();
    let mut _watcher = None;
    loop {
        let files = sd.files.clone();
        let read = tokio::task::spawn_blocking(move || (read_all(&files), watched(&files)));
        let documents = match read.await {
            Ok((d, dirs)) => {
                if dirs != watching {
                    _watcher = watch(&dirs, changed.clone());
                    watching = dirs;
                }
                d
            }
            Err(e) => vec![Document {
                origin: PathBuf::from("file_sd"),
                text: Err(format!("reading the files failed: {e}")),
            }],
        };
        if !task.report(documents).await {
            return;
        }
        tokio::select! {
            _ = task.cancel.cancelled() => return,
            _ = tokio::time::sleep(sd.refresh_interval) => {}
            _ = task.checker.global_changed() => {}
            _ = changed.notified() => {
                if !settle(&changed, &task.cancel).await {
                    return;
                }
            }
        }
    }
}

/// Wait for a burst of changes to end: until `changed` has been quiet for
/// [`SETTLE`], or [`SETTLE_AT_MOST`] has passed. False when cancelled.
async fn settle(changed: &Notify, cancel: &CancellationToken) -> bool {
    let give_up = tokio::time::sleep(SETTLE_AT_MOST);
    tokio::pin!(give_up);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = &mut give_up => return true,
            _ = tokio::time::sleep(SETTLE) => return true,
            _ = changed.notified() => {}
        }
    }
}

/// Watch the directories the patterns read ([`watched`]: files come and
/// go by rename, so the files themselves cannot be watched). Without a
/// watch the interval still applies.
fn watch(dirs: &[PathBuf], changed: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    let mut watcher = match notify::recommended_watcher(
        move |event: notify::Result<notify::Event>| {
            // Reading a file is an event too: waking on those, mcpmon's
            // own reads among them, read an unchanged file in a loop.
            if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
                changed.notify_one();
            }
        },
    ) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "file_sd: cannot watch files; reading them every refresh_interval only");
            return None;
        }
    };
    for dir in dirs {
        if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "file_sd: cannot watch directory; reading it every refresh_interval only");
        }
    }
    Some(watcher)
}

/// Most directories one pattern's wildcards may expand to; past it the
/// pattern is reported, not silently cut.
const MAX_DIRS: usize = 4096;

/// Whether a path segment is a pattern rather than a name.
fn is_pattern(segment: &str) -> bool {
    segment.contains(['*', '?', '['])
}

/// The entries of `dir` whose names match `segment` (dot entries only when
/// the segment starts with a dot, as in a shell: `*` skips editors'
/// temporaries and Kubernetes' `..data`), directories or files as `dirs`
/// says. A missing directory matches nothing, as Prometheus's glob does.
fn matching(dir: &Path, segment: &str, dirs: bool) -> Vec<PathBuf> {
    let Ok(glob) = glob::Pattern::new(segment) else {
        return Vec::new();
    };
    let dots = segment.starts_with('.');
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            (dots || !name.starts_with('.')) && glob.matches(&name) && e.path().is_dir() == dirs
        })
        .map(|e| e.path())
        .collect()
}

/// The directories a pattern's directory part names: itself when it has
/// no wildcard, else every directory its wildcards match (`/srv/*/`),
/// sorted; an error past [`MAX_DIRS`].
fn directories(pattern: &Path) -> Result<Vec<PathBuf>, String> {
    let Some(parent) = pattern.parent() else {
        return Ok(Vec::new());
    };
    let mut dirs = vec![PathBuf::new()];
    for part in parent.components() {
        let segment = part.as_os_str().to_string_lossy();
        if !is_pattern(&segment) {
            dirs.iter_mut().for_each(|d| d.push(part));
            continue;
        }
        let mut next = Vec::new();
        for d in &dirs {
            next.extend(matching(d, &segment, true));
            if next.len() > MAX_DIRS {
                return Err(format!(
                    "the pattern's directories match more than {MAX_DIRS} directories"
                ));
            }
        }
        dirs = next;
    }
    dirs.sort();
    Ok(dirs)
}

/// Every directory the patterns read, for the watch: the ones they match
/// now, and the folder above each wildcard, so a new project folder is
/// noticed too.
fn watched(patterns: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for pattern in patterns {
        out.extend(directories(pattern).unwrap_or_default());
        let mut literal = PathBuf::new();
        for part in pattern.parent().into_iter().flat_map(Path::components) {
            if is_pattern(&part.as_os_str().to_string_lossy()) {
                out.push(literal.clone());
                break;
            }
            literal.push(part);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every file the patterns match, sorted by path, each read or failed.
/// A wildcard may stand in any segment (`/srv/*/.mcp.json`); a pattern
/// whose directories cannot be listed within bounds is one failed document.
pub(super) fn read_all(patterns: &[PathBuf]) -> Vec<Document> {
    let mut paths = Vec::new();
    let mut failed = Vec::new();
    for pattern in patterns {
        let Some(name) = pattern.file_name() else {
            continue;
        };
        match directories(pattern) {
            Ok(dirs) => {
                for dir in dirs {
                    paths.extend(matching(&dir, &name.to_string_lossy(), false));
                }
            }
            Err(why) => failed.push(Document {
                origin: pattern.clone(),
                text: Err(why),
            }),
        }
    }
    paths.sort();
    paths.dedup();
    let read = paths.into_iter().filter_map(|path| {
        let text = match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => return None,
            Ok(m) if m.len() > MAX_DOCUMENT => Err(format!(
                "file is {} bytes, more than the {MAX_DOCUMENT} a discovery file may hold",
                m.len()
            )),
            Ok(_) => std::fs::read_to_string(&path).map_err(|e| format!("cannot read: {e}")),
            // Removed between listing and reading: gone.
            Err(_) => return None,
        };
        Some(Document { origin: path, text })
    });
    read.chain(failed).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_read_once_quiet_and_a_directory_that_never_goes_quiet_still_is() {
        let changed = Arc::new(Notify::new());
        let cancel = CancellationToken::new();
        // Quiet at once: read after SETTLE.
        let start = tokio::time::Instant::now();
        assert!(settle(&changed, &cancel).await);
        assert_eq!(start.elapsed(), SETTLE);
        // A change every 100 ms, for ever: read after SETTLE_AT_MOST.
        let noisy = changed.clone();
        let noise = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                noisy.notify_one();
            }
        });
        let start = tokio::time::Instant::now();
        let bounded = tokio::time::timeout(Duration::from_secs(10), settle(&changed, &cancel));
        assert_eq!(bounded.await, Ok(true), "settling never ended");
        assert_eq!(start.elapsed(), SETTLE_AT_MOST);
        noise.abort();
        cancel.cancel();
        assert!(!settle(&changed, &cancel).await);
    }

    #[test]
    fn patterns_match_file_names_sorted_and_skip_dot_files() {
        let dir = std::env::temp_dir().join(format!("mcpmon-filesd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["b.yaml", "a.yaml", ".a.yaml.swp", "c.json", "notes.txt"] {
            std::fs::write(dir.join(name), "[]").unwrap();
        }
        let docs = read_all(&[
            dir.join("*.yaml"),
            dir.join("c.json"),
            dir.join("missing/*.yaml"),
        ]);
        let names: Vec<String> = docs
            .iter()
            .map(|d| d.origin.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.yaml", "b.yaml", "c.json"]);
        // Named with its dot, a dot file is read.
        let docs = read_all(&[dir.join(".a.yaml.swp")]);
        assert_eq!(docs.len(), 1);
        assert!(docs.iter().all(|d| d.text.as_deref() == Ok("[]")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_wildcard_in_a_directory_matches_every_folder_but_dot_folders() {
        let dir = tempfile::tempdir().unwrap();
        for project in ["alpha", "beta", ".cache", "gamma"] {
            std::fs::create_dir(dir.path().join(project)).unwrap();
        }
        for project in ["alpha", "beta", ".cache"] {
            std::fs::write(dir.path().join(project).join(".mcp.json"), "{}").unwrap();
        }
        std::fs::write(dir.path().join("file-not-dir"), "").unwrap();
        let pattern = dir.path().join("*/.mcp.json");
        let docs = read_all(std::slice::from_ref(&pattern));
        let found: Vec<PathBuf> = docs.iter().map(|d| d.origin.clone()).collect();
        assert_eq!(
            found,
            [
                dir.path().join("alpha/.mcp.json"),
                dir.path().join("beta/.mcp.json")
            ]
        );
        // The watch covers each folder and the one above the wildcard.
        let w = watched(&[pattern]);
        for d in ["", "alpha", "beta", "gamma"] {
            assert!(w.contains(&dir.path().join(d)), "{d:?} not in {w:?}");
        }
        assert!(!w.contains(&dir.path().join(".cache")));
    }

    #[test]
    fn a_wildcard_that_expands_past_the_bound_is_one_failed_document() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_DIRS {
            std::fs::create_dir(dir.path().join(format!("p{i}"))).unwrap();
        }
        let docs = read_all(&[dir.path().join("p*/.mcp.json")]);
        let [doc] = &docs[..] else { panic!("{docs:?}") };
        assert!(
            doc.text
                .as_ref()
                .is_err_and(|e| e.contains("more than 4096")),
            "{doc:?}"
        );
    }
}
