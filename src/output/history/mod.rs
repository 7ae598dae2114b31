//! History that survives restarts: what each server's time went to, its
//! probes and latency, minute by minute for a day, hour by hour for 90
//! days and day by day for the retention, and every state change, in one
//! SQLite file. A writer task turns snapshots into rows once per flush
//! interval (never a write per probe); the endpoints read the file. A file
//! that cannot be written (a full or read-only disk) costs the history,
//! counted and logged once, never the probing.

pub mod api;
pub mod page;
pub mod remote;
pub mod rows;
pub mod store;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::state::Reader;
use rows::{DAYS_SHOWN, Daily, Resolution, Row, Sampler, Transition, unix};
use store::{Found, Store, StoreError};

/// Where and how long the history is kept.
#[derive(Clone, Debug)]
pub struct HistoryConfig {
    /// The file.
    pub path: PathBuf,
    /// How long daily rows and transitions are kept (hourly ones at most
    /// 90 days, minutely ones a day).
    pub retention: Duration,
    /// How often the writer adds what happened since: a process killed
    /// loses at most this much.
    pub flush_every: Duration,
    /// Read the history from this Prometheus-compatible query API instead
    /// of a file of its own (`--history.prometheus-url`).
    pub prometheus: Option<String>,
}

/// The default retention: daily rows for 400 days.
pub const RETENTION: Duration = Duration::from_secs(400 * 86_400);
/// The default flush interval.
pub const FLUSH_EVERY: Duration = Duration::from_secs(60);
/// How often rows past their keep are dropped.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The most state changes a read answers: the latest ones.
const MOST_TRANSITIONS: usize = 500;

/// The open history, shared by the writer and the endpoints.
#[derive(Clone)]
pub struct History {
    source: Source,
    retention: Duration,
    /// The last days of every server, for the fleet page.
    daily: Arc<Mutex<Arc<Daily>>>,
}

/// Where the history is read from.
#[derive(Clone)]
enum Source {
    /// mcpmon's own file, written by its writer.
    File(Arc<Mutex<Store>>),
    /// A query API over mcpmon's series; nothing to write.
    Prometheus(remote::Remote),
}

/// One server's history over a window, as the API answers it.
#[derive(Debug, Serialize)]
pub struct Read {
    /// The server.
    pub server: String,
    /// The window, as asked.
    pub window: String,
    /// The rows' period: `minute`, `hour` or `day`.
    pub resolution: &'static str,
    /// Share of the observed time up (`null` when nothing was observed).
    pub uptime: Option<f64>,
    /// Rows, oldest first, each with its start (unix seconds).
    pub rows: Vec<Timed>,
    /// State changes, oldest first (the latest 500).
    pub transitions: Vec<Transition>,
}

/// A row and its period's start.
#[derive(Debug, Serialize)]
pub struct Timed {
    /// Unix seconds.
    pub t: i64,
    /// The row.
    #[serde(flatten)]
    pub row: Row,
}

impl History {
    /// Open the history file; a foreign or damaged one is set aside (and
    /// said so, loudly).
    pub fn open(cfg: &HistoryConfig) -> Result<History, StoreError> {
        if let Some(url) = &cfg.prometheus {
            let client = crate::http_client().map_err(|e| StoreError::Remote(e.to_string()))?;
            return Ok(History {
                source: Source::Prometheus(remote::Remote::new(client, url)),
                retention: cfg.retention,
                daily: Arc::default(),
            });
        }
        if let Some(dir) = cfg.path.parent()
            && !dir.as_os_str().is_empty()
        {
            let _ = std::fs::create_dir_all(dir);
        }
        let (mut store, found) = Store::open(&cfg.path)?;
        if let Found::SetAside { why, to } = found {
            tracing::error!(
                path = %cfg.path.display(),
                set_aside = %to.display(),
                "the history file was refused ({why}); it was moved aside and a new history started"
            );
        }
        let mut daily = Daily::default();
        let now = unix(SystemTime::now());
        let since = Resolution::Day.start(now) - DAYS_SHOWN as i64 * 86_400;
        // What the last process wrote of its last hour, in its days.
        store.roll_up(Resolution::Minute.start(now))?;
        for (server, t, observed, down) in store.days(since)? {
            daily.add(&server, t, observed, down);
        }
        Ok(History {
            source: Source::File(Arc::new(Mutex::new(store))),
            retention: cfg.retention,
            daily: Arc::new(Mutex::new(Arc::new(daily))),
        })
    }

    /// The last days of every server, as the fleet page draws them.
    pub fn daily(&self) -> Arc<Daily> {
        self.daily.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Add a flush's rows to the days in memory.
    fn counted(&self, rows: &[(String, i64, Row)], now: i64) {
        let mut guard = self.daily.lock().unwrap_or_else(|p| p.into_inner());
        let daily = Arc::make_mut(&mut guard);
        for (server, t, r) in rows {
            daily.add(server, *t, r.spent.observed(), r.spent.down);
        }
        daily.trim(now);
    }

    /// Run `f` on the store off the async threads.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let Source::File(store) = &self.source else {
            return Err(StoreError::Remote(
                "the history is read from Prometheus".into(),
            ));
        };
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut s)
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Task(e.to_string())))
    }

    /// `server`'s history over the last `window` (at most the retention).
    pub async fn read(
        &self,
        server: &str,
        window: Duration,
        asked: &str,
    ) -> Result<Read, StoreError> {
        let window = window.min(self.retention);
        let res = Resolution::for_window(window);
        let now = SystemTime::now();
        let since = res.start(unix(now) - window.as_secs() as i64);
        let (id, after) = (server.to_owned(), unix(now) as f64 - window.as_secs_f64());
        let (rows, transitions) = match &self.source {
            Source::File(_) => {
                self.with(move |s| {
                    Ok((
                        s.rows(&id, res, since)?,
                        s.transitions(&id, after, MOST_TRANSITIONS)?,
                    ))
                })
                .await?
            }
            Source::Prometheus(remote) => {
                let (rows, mut transitions) = remote.read(&id, res, since, unix(now)).await?;
                transitions.drain(..transitions.len().saturating_sub(MOST_TRANSITIONS));
                (rows, transitions)
            }
        };
        Ok(Read {
            server: server.to_owned(),
            window: asked.to_owned(),
            resolution: match res {
                Resolution::Minute => "minute",
                Resolution::Hour => "hour",
                Resolution::Day => "day",
            },
            uptime: uptime(rows.iter().map(|(_, r)| r)),
            rows: rows.into_iter().map(|(t, row)| Timed { t, row }).collect(),
            transitions,
        })
    }

    /// Bytes the file takes.
    pub async fn size(&self) -> Result<u64, StoreError> {
        self.with(|s| s.size()).await
    }
}

/// Share of the observed time up over `rows`; `None` when none was observed.
pub fn uptime<'a>(rows: impl Iterator<Item = &'a Row>) -> Option<f64> {
    let (observed, down) = rows.fold((0.0, 0.0), |(o, d), r| {
        (o + r.spent.observed(), d + r.spent.down)
    });
    (observed > 0.0).then(|| 1.0 - down / observed)
}

/// How often a history read from a query API asks again for the fleet
/// page's days (each cell is a day: minutes late is nothing).
const DAYS_EVERY: Duration = Duration::from_secs(300);

/// Keep the fleet page's days from the query API until `cancel`: there is
/// nothing to write, and the page must not query per server per render.
async fn read_days(history: &History, remote: &remote::Remote, cancel: CancellationToken) {
    let mut failing = false;
    loop {
        let now = unix(SystemTime::now());
        let since = Resolution::Day.start(now) - DAYS_SHOWN as i64 * 86_400;
        match remote.days(since, now).await {
            Ok(mut days) => {
                days.trim(now);
                let mut shown = history.daily.lock().unwrap_or_else(|p| p.into_inner());
                days.version = shown.version.wrapping_add(1);
                *shown = Arc::new(days);
                if failing {
                    tracing::info!("the fleet's days are read again");
                }
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot read the fleet's days; the strip keeps the last ones");
                }
                failing = true;
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(DAYS_EVERY) => {}
        }
    }
}

/// Most rows and transitions kept for a flush that failed: a disk full
/// for long loses its oldest minutes, never the monitor's memory.
const MOST_UNWRITTEN: usize = 100_000;

/// Rows of a flush: server, minute, what it did then.
type Rows = Vec<(String, i64, Row)>;
/// State changes of a flush, by server.
type Transitions = Vec<(String, Transition)>;

/// What failed flushes held, to try again.
#[derive(Default)]
struct Unwritten {
    rows: Rows,
    transitions: Transitions,
}

impl Unwritten {
    fn add(&mut self, rows: Rows, transitions: Transitions) {
        self.rows.extend(rows);
        self.transitions.extend(transitions);
        keep_newest(&mut self.rows);
        keep_newest(&mut self.transitions);
    }

    fn take(&mut self) -> (Rows, Transitions) {
        (
            std::mem::take(&mut self.rows),
            std::mem::take(&mut self.transitions),
        )
    }
}

/// Drop the oldest of `v` beyond [`MOST_UNWRITTEN`].
fn keep_newest<T>(v: &mut Vec<T>) {
    let over = v.len().saturating_sub(MOST_UNWRITTEN);
    v.drain(..over);
}

/// Write the history from `fleet`'s snapshots every `every` until
/// `cancel`, then once more (what happened since the last flush); or,
/// when it is read from a query API, keep the fleet page's days from it.
pub async fn run(
    history: History,
    fleet: Reader,
    every: Duration,
    failures: prometheus::IntCounterVec,
    cancel: CancellationToken,
) {
    if let Source::Prometheus(remote) = &history.source {
        return read_days(&history, remote, cancel).await;
    }
    let recorded = history
        .with(|s| s.last_transitions())
        .await
        .unwrap_or_default();
    let mut sampler = Sampler::after(recorded);
    let mut unwritten = Unwritten::default();
    let mut failing = false;
    let mut pruned = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let last = tokio::select! {
            _ = cancel.cancelled() => true,
            _ = tick.tick() => false,
        };
        // The owner's last snapshot, once it has stopped.
        let snap = fleet.current().await;
        let rows::Sample { rows, transitions } = sampler.sample(&snap, tokio::time::Instant::now());
        let now = SystemTime::now();
        let minute = Resolution::Minute.start(unix(now));
        let rows: Rows = rows.into_iter().map(|(id, r)| (id, minute, r)).collect();
        let retention = history.retention;
        // Rolling up and pruning: once an hour, and at the start.
        let prune = pruned.is_none_or(|at: tokio::time::Instant| at.elapsed() >= PRUNE_EVERY);
        if prune {
            pruned = Some(tokio::time::Instant::now());
        }
        history.counted(&rows, unix(now));
        // A flush is one transaction: what a failed one held is tried again
        // at the next, so a full disk freed in time loses nothing.
        unwritten.add(rows, transitions);
        let (rows, transitions) = unwritten.take();
        let outcome = history
            .with(move |s| {
                let flushed = s.flush(&rows, &transitions);
                let pruned = match (&flushed, prune) {
                    (Ok(()), true) => s.prune(now, retention),
                    _ => Ok(()),
                };
                Ok((flushed, pruned, rows, transitions))
            })
            .await;
        let wrote = match outcome {
            Ok((Err(e), _, rows, transitions)) => {
                unwritten.add(rows, transitions);
                Err(e)
            }
            Ok((Ok(()), pruned, ..)) => pruned,
            Err(e) => Err(e),
        };
        // Once per change: a full disk writes one error, not one a minute.
        match (&wrote, failing) {
            (Err(e), false) => {
                tracing::error!(error = %e, "cannot write the history; probing goes on")
            }
            (Ok(()), true) => tracing::info!("the history is written again"),
            _ => {}
        }
        let result = if wrote.is_ok() { "ok" } else { "failed" };
        failures.with_label_values(&[result]).inc();
        failing = wrote.is_err();
        if last {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MOST_UNWRITTEN, keep_newest};

    #[test]
    fn a_disk_full_for_long_keeps_the_newest_unwritten_only() {
        let mut v: Vec<usize> = (0..MOST_UNWRITTEN + 5).collect();
        keep_newest(&mut v);
        assert_eq!(v.len(), MOST_UNWRITTEN);
        assert_eq!(v.first(), Some(&5));
        let mut short = vec![1, 2];
        keep_newest(&mut short);
        assert_eq!(short, [1, 2]);
    }
}
