//! Progress notifications the server sends for mcpmon's requests: counted,
//! and the intervals between consecutive ones of a request kept until the
//! supervisor reads them as evidence. A sign of life only when it answers
//! a request mcpmon made; bounded however many the server sends.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

use super::Progress;

/// Progress notifications the server sent for mcpmon's requests.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    count: AtomicU64,
    state: std::sync::Mutex<Intervals>,
}

#[derive(Debug, Default)]
struct Intervals {
    /// Last notification time per request, for the requests seen last.
    last_by_token: Vec<(i64, Instant)>,
    /// Intervals not yet collected by [`Session::progress`].
    pending: Vec<f64>,
}

/// Requests whose last progress time is remembered for interval measurement.
const PROGRESS_TOKENS_KEPT: usize = 16;
/// Intervals held between two collections; more are dropped (counted still).
const PENDING_INTERVALS: usize = 64;

impl Activity {
    pub(super) fn note_progress(&self, token: &rmcp::model::ProgressToken) {
        // rmcp numbers the progress tokens of the requests it sends; a
        // string token answers nothing mcpmon asked and is no sign of life.
        let rmcp::model::NumberOrString::Number(token) = token.0 else {
            return;
        };
        self.count.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Intervals {
            last_by_token,
            pending,
        } = &mut *st;
        if let Some(entry) = last_by_token.iter_mut().find(|(t, _)| *t == token) {
            if pending.len() < PENDING_INTERVALS {
                pending.push(now.duration_since(entry.1).as_secs_f64());
            }
            entry.1 = now;
        } else {
            if last_by_token.len() == PROGRESS_TOKENS_KEPT {
                last_by_token.remove(0);
            }
            last_by_token.push((token, now));
        }
    }

    /// Progress for a token mcpmon chose (a legacy link's request).
    pub(super) fn note_number(&self, token: u64) {
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        self.note_progress(&rmcp::model::ProgressToken(
            rmcp::model::NumberOrString::Number(token),
        ));
    }

    pub(super) fn take(&self) -> Progress {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Progress {
            count: self.count.load(Ordering::Relaxed),
            intervals: std::mem::take(&mut st.pending),
        }
    }
}
