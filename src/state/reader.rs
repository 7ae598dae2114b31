//! How the fleet's state reaches its readers. The owner publishes a
//! snapshot at once only for news: a verdict, a reason or a maintenance
//! window that changed, a server come or gone. What a probe merely counts
//! (its time, its latency, a counter) waits until a reader asks, so a
//! server's record is copied out of the owner's hands once per read, not
//! once per probe: at a thousand servers pinged every second and scraped
//! every 15 s, one copy in fifteen thousand pings instead of every ping.
//!
//! Readers that can wait (every HTTP handler, the history) ask with
//! [`Reader::current`]; the owner answers between two messages. Readers
//! that cannot (OTLP's observers, called inside its SDK) take
//! [`Reader::published`], at most [`Publisher::unasked`] behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::Snapshot;

/// How long a reader waits for the owner's answer before it takes the
/// snapshot last published. The owner answers between two messages, in
/// microseconds; only a start-up burst of thousands of servers, applied
/// in one turn, can hold it near this long.
pub const ASK_WITHIN: Duration = Duration::from_millis(500);

/// Asks that may wait at once; a reader finding the queue full takes the
/// snapshot last published (the owner is answering others).
const ASKS_QUEUED: usize = 256;

/// At most one warning of reads served stale per this long: a stuck owner
/// makes every read stale, and every health check and scrape a line of
/// log. The counter has them all.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// One ask: where the owner sends the snapshot of this moment.
pub type Ask = oneshot::Sender<Arc<Snapshot>>;

/// The owner's end: where it publishes, and the asks it answers.
pub struct Publisher {
    /// The snapshots published, the last one kept.
    pub published: watch::Sender<Arc<Snapshot>>,
    /// Readers asking for the state of the moment.
    pub asks: mpsc::Receiver<Ask>,
    /// How far behind what only counts may be in the published snapshot:
    /// set when some reader cannot ask (OTLP's observers, read once per
    /// export); with none, it is published only when asked for or with news.
    pub unasked: Option<Duration>,
}

/// A reader's end, cheap to clone: one per handler, per task.
#[derive(Clone, Debug)]
pub struct Reader {
    published: watch::Receiver<Arc<Snapshot>>,
    asks: mpsc::Sender<Ask>,
    stale: Arc<StaleReads>,
}

/// Reads that asked and were served the snapshot last published instead,
/// because the owner, running, did not answer: a sign of an owner too
/// busy or stuck, which every page would otherwise hide. A read after
/// the owner stopped (at shutdown) is not one.
#[derive(Debug, Default)]
pub struct StaleReads {
    timeout: AtomicU64,
    queue_full: AtomicU64,
    /// When a stale read was last warned of.
    warned: Mutex<Option<Instant>>,
}

impl StaleReads {
    /// Each reason and its count: `timeout` (no answer within
    /// [`ASK_WITHIN`]) and `queue_full` (too many asks waiting).
    pub fn counts(&self) -> [(&'static str, u64); 2] {
        [
            ("timeout", self.timeout.load(Ordering::Relaxed)),
            ("queue_full", self.queue_full.load(Ordering::Relaxed)),
        ]
    }

    /// Whether a stale read at `now` is to be warned of: the first, and
    /// then the first after each [`WARN_EVERY`].
    fn warn_due(&self, now: Instant) -> bool {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.is_some_and(|at| now < at + WARN_EVERY) {
            return false;
        }
        *warned = Some(now);
        true
    }
}

/// A publisher and the reader of what it publishes, starting from an empty
/// snapshot (no server, not ready, generation 0); `unasked` as in
/// [`Publisher::unasked`].
pub fn channel(unasked: Option<Duration>) -> (Publisher, Reader) {
    let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
    let (ask_tx, ask_rx) = mpsc::channel(ASKS_QUEUED);
    (
        Publisher {
            published: tx,
            asks: ask_rx,
            unasked,
        },
        Reader {
            published: rx,
            asks: ask_tx,
            stale: Arc::default(),
        },
    )
}

impl Reader {
    /// The snapshot last published: news within the owner's publish period,
    /// counters within [`Publisher::unasked`]. For readers that cannot wait.
    pub fn published(&self) -> Arc<Snapshot> {
        self.published.borrow().clone()
    }

    /// The state of this moment: everything the owner has applied. Falls
    /// back to [`Reader::published`] when the owner has stopped, is not
    /// answering within [`ASK_WITHIN`], or has too many asks queued.
    pub async fn current(&self) -> Arc<Snapshot> {
        let (tx, rx) = oneshot::channel();
        match self.asks.try_send(tx) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.stale.queue_full.fetch_add(1, Ordering::Relaxed);
                return self.published();
            }
            Err(TrySendError::Closed(_)) => return self.published(),
        }
        match tokio::time::timeout(ASK_WITHIN, rx).await {
            Ok(Ok(snap)) => snap,
            Ok(Err(_)) => self.published(),
            Err(_) => {
                let stale = self.stale.timeout.fetch_add(1, Ordering::Relaxed) + 1;
                if self.stale.warn_due(Instant::now()) {
                    tracing::warn!(
                        waited_ms = ASK_WITHIN.as_millis() as u64,
                        stale_reads = stale,
                        warned_every_s = WARN_EVERY.as_secs(),
                        "the state owner did not answer; serving the snapshot last published \
                         (mcpmon_state_reads_stale_total counts the reads not warned of)"
                    );
                }
                self.published()
            }
        }
    }

    /// The reads this reader and its clones served stale.
    pub fn stale_reads(&self) -> Arc<StaleReads> {
        self.stale.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no owner answering, a reader gets the published snapshot, and
    /// within the bound; it counts as stale while the owner runs, not
    /// once the owner is gone.
    #[tokio::test(start_paused = true)]
    async fn a_reader_with_no_answer_takes_the_published_snapshot() {
        let (publisher, reader) = channel(None);
        let snap = Snapshot {
            generation: 7,
            ..Snapshot::default()
        };
        publisher.published.send_replace(Arc::new(snap));
        let started = tokio::time::Instant::now();
        assert_eq!(reader.current().await.generation, 7);
        assert!(started.elapsed() <= ASK_WITHIN);
        let stale = reader.stale_reads();
        assert_eq!(stale.counts(), [("timeout", 1), ("queue_full", 0)]);
        drop(publisher);
        assert_eq!(reader.current().await.generation, 7, "owner gone");
        assert_eq!(stale.counts(), [("timeout", 1), ("queue_full", 0)]);
    }

    /// Past the asks that may wait, a reader takes the published snapshot
    /// at once, and it counts.
    #[tokio::test(start_paused = true)]
    async fn a_reader_past_a_full_queue_takes_the_published_snapshot_at_once() {
        let (_publisher, reader) = channel(None);
        let waiting: Vec<_> = (0..ASKS_QUEUED)
            .map(|_| {
                let reader = reader.clone();
                tokio::spawn(async move { reader.current().await })
            })
            .collect();
        // Until every waiting reader has asked (a bounded wait).
        for _ in 0..ASKS_QUEUED * 4 {
            if reader.asks.capacity() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(reader.asks.capacity(), 0, "the queue is full");
        let started = tokio::time::Instant::now();
        reader.current().await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        let counts = reader.stale_reads().counts();
        assert_eq!(counts[1], ("queue_full", 1));
        for w in waiting {
            w.await.expect("joined");
        }
    }

    /// A stuck owner makes every read stale; the log hears of the first,
    /// then of one per period, however many reads there are.
    #[test]
    fn stale_reads_are_warned_of_once_per_period() {
        let stale = StaleReads::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(stale.warn_due(at(0)), "the first");
        let period = WARN_EVERY.as_millis() as u64;
        for ms in [1, 500, period - 1] {
            assert!(!stale.warn_due(at(ms)), "{ms} ms after the first");
        }
        assert!(stale.warn_due(at(period)), "a period after the first");
        assert!(!stale.warn_due(at(period + 1)));
        assert!(stale.warn_due(at(3 * period)), "after a quiet spell");
    }

    /// An answer is what the reader gets, not the published snapshot.
    #[tokio::test]
    async fn a_reader_gets_the_answer() {
        let (mut publisher, reader) = channel(None);
        let answer = tokio::spawn(async move {
            let ask = publisher.asks.recv().await.expect("asked");
            let snap = Snapshot {
                generation: 9,
                ..Snapshot::default()
            };
            ask.send(Arc::new(snap)).expect("reader waits");
            publisher
        });
        assert_eq!(reader.current().await.generation, 9);
        let publisher = answer.await.expect("answered");
        assert_eq!(publisher.published.borrow().generation, 0);
    }
}
