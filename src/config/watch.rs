//! Watching the config file for changes (`--config.auto-reload`): a change
//! is applied only once it has held still for one poll.

/// What the file watch does with the file it just read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// The bytes last applied (or rejected).
    Unchanged,
    /// Changed since the last poll: wait one more.
    Settling,
    /// Changed, and the same as at the last poll: apply.
    Apply,
}

/// A writer that is not atomic can leave a truncated file that still
/// parses: a change is applied only once it has held still for one whole
/// poll. `applied` is the hash of the bytes last parsed, `pending` the hash
/// seen at the previous poll.
pub fn step(applied: Option<u64>, pending: &mut Option<u64>, now: u64) -> Watch {
    if Some(now) == applied {
        *pending = None;
        Watch::Unchanged
    } else if *pending == Some(now) {
        *pending = None;
        Watch::Apply
    } else {
        *pending = Some(now);
        Watch::Settling
    }
}

/// The watch on one file: the fingerprint of the bytes last parsed, and
/// of those seen at the previous poll.
pub struct FileWatch {
    path: std::path::PathBuf,
    applied: Option<u64>,
    pending: Option<u64>,
}

impl FileWatch {
    /// Watch `path`, its present content taken as applied.
    pub fn new(path: &std::path::Path) -> Self {
        FileWatch {
            path: path.to_owned(),
            applied: std::fs::read(path).ok().map(|b| fingerprint(&b)),
            pending: None,
        }
    }

    /// The file watched.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Read the file: its bytes when they are a change to apply now.
    pub fn poll(&mut self) -> Option<Vec<u8>> {
        let bytes = std::fs::read(&self.path).ok()?;
        let now = fingerprint(&bytes);
        (step(self.applied, &mut self.pending, now) == Watch::Apply).then_some(bytes)
    }

    /// `bytes` are about to be parsed, for whatever reason. The hash is of
    /// exactly those: an edit landing after the read is a change still to
    /// come, never one taken as applied.
    pub fn parsing(&mut self, bytes: &std::io::Result<Vec<u8>>) {
        if let Ok(b) = bytes {
            self.applied = Some(fingerprint(b));
        }
    }
}

/// A cheap fingerprint of a file's content.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_applied_only_after_holding_still_for_a_poll() {
        let mut pending = None;
        assert_eq!(step(Some(1), &mut pending, 1), Watch::Unchanged);
        // A writer mid-way: 2 (truncated), then 3 (complete) at the next poll.
        assert_eq!(step(Some(1), &mut pending, 2), Watch::Settling);
        assert_eq!(step(Some(1), &mut pending, 3), Watch::Settling);
        assert_eq!(step(Some(1), &mut pending, 3), Watch::Apply);
        assert_eq!(pending, None);
        // Edited back to what is applied: nothing to do.
        assert_eq!(step(Some(1), &mut pending, 4), Watch::Settling);
        assert_eq!(step(Some(1), &mut pending, 1), Watch::Unchanged);
        assert_eq!(step(Some(1), &mut pending, 4), Watch::Settling);
    }
}
