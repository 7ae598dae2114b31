//! A `file_sd_configs` source: reads every file its patterns match, when
//! the files' directories change (inotify: creations, writes, renames,
//! removals; never the reads, its own included) and every
//! `refresh_interval`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::{Checker, Document, MAX_DOCUMENT, Update};
use crate::config::FileSd;

/// A burst of events (an editor's save, a ConfigMap's symlink swap) is
/// read once, after it has been quiet this long.
const SETTLE: Duration = Duration::from_millis(200);
/// A directory that never goes quiet (another program's log next to the
/// files) is read at least this often all the same.
const SETTLE_AT_MOST: Duration = Duration::from_secs(2);

/// Read the files now, and again on every change and every interval,
/// until cancelled.
pub(super) async fn run(
    id: u64,
    sd: FileSd,
    mut checker: Checker,
    tx: mpsc::Sender<Update>,
    cancel: CancellationToken,
) {
    let changed = Arc::new(Notify::new());
    // Dropped (and the watch removed) when the task ends.
    let _watcher = watch(&sd.files, changed.clone());
    loop {
        let files = sd.files.clone();
        let documents = match tokio::task::spawn_blocking(move || read_all(&files)).await {
            Ok(d) => d,
            Err(e) => vec![Document {
                origin: PathBuf::from("file_sd"),
                text: Err(format!("reading the files failed: {e}")),
            }],
        };
        let checked = checker.check(documents).await;
        if !super::report(&tx, id, checked).await {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(sd.refresh_interval) => {}
            _ = checker.global_changed() => {}
            _ = changed.notified() => {
                if !settle(&changed, &cancel).await {
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

/// Watch the directories the patterns name (files come and go by rename,
/// so the files themselves cannot be watched). Without a watch the interval
/// still applies.
fn watch(patterns: &[PathBuf], changed: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
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
    let mut dirs: Vec<&Path> = patterns.iter().filter_map(|p| p.parent()).collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "file_sd: cannot watch directory; reading it every refresh_interval only");
        }
    }
    Some(watcher)
}

/// Every file the patterns match, sorted by path, each read or failed.
pub(super) fn read_all(patterns: &[PathBuf]) -> Vec<Document> {
    let mut paths = Vec::new();
    for pattern in patterns {
        let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
            continue;
        };
        let name = name.to_string_lossy();
        let Ok(glob) = glob::Pattern::new(&name) else {
            continue;
        };
        // As in a shell, only a pattern that starts with a dot matches dot
        // files (`.mcp.json`); `*` does not.
        let dots = name.starts_with('.');
        // A missing directory matches nothing, as Prometheus's glob does.
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            // Dot files are editors' temporaries and Kubernetes' `..data`.
            let name = file_name.to_string_lossy();
            if (dots || !name.starts_with('.')) && glob.matches(&name) {
                paths.push(entry.path());
            }
        }
    }
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|path| {
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
        })
        .collect()
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
}
