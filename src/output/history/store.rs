//! The history file: one SQLite database of per-server rows at three
//! resolutions (minute, hour, day) and the state transitions. Each flush
//! is one transaction that adds its deltas to their minutes' rows; the
//! hours and days are rolled up from the minutes in SQLite, once an hour
//! and at start, and a read of them adds the minutes not rolled up yet,
//! so a flush writes one row a server, not three. Opening refuses a file
//! that is not ours or not whole, and sets it aside.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{Resolution, Row, Transition};

/// `application_id` of mcpmon's history files ("mcph").
const APPLICATION_ID: i64 = 0x6d63_7068;
/// The schema's version (`user_version`). 2: hours and days are rolled up
/// from minutes past `meta.rolled`; 1 wrote all three at every flush.
const SCHEMA: i64 = 2;

/// How a row's deltas are added to a row already there: times and counts
/// add up, the median is weighted by the latencies' count, the p95 is the
/// worst. The same whether one flush or a roll-up of minutes adds them.
const ADD: &str = "ON CONFLICT (server, res, t) DO UPDATE SET
       healthy = healthy + excluded.healthy,
       degraded = degraded + excluded.degraded,
       down = down + excluded.down,
       maintenance = maintenance + excluded.maintenance,
       probes = probes + excluded.probes,
       failures = failures + excluded.failures,
       lat_p50 = CASE WHEN lat_count + excluded.lat_count = 0 THEN 0 ELSE
         (lat_p50 * lat_count + excluded.lat_p50 * excluded.lat_count)
           / (lat_count + excluded.lat_count) END,
       lat_p95 = max(lat_p95, excluded.lat_p95),
       lat_count = lat_count + excluded.lat_count";

/// The rows' statistics, from a sample (`analysis_limit`, about a
/// millisecond whatever the file's size). Knowing a server has thousands
/// of rows, SQLite reads a resolution's rows in a time range (the
/// roll-up, the prune, the days read at start) by seeking each server's
/// instead of reading every row of the file. In `history-bench` (1 000
/// servers' 90 days) the hourly roll-up went from 460 to 150 ms with them,
/// the prune from 540 to 140 ms.
const STATS: &str = "PRAGMA analysis_limit = 1000; ANALYZE rows;";

/// A row's columns from `healthy` on.
const COLUMNS: &str =
    "healthy, degraded, down, maintenance, probes, failures, lat_count, lat_p50, lat_p95";

/// The same, summed over a group of rows as `ADD` adds them one at a time.
const SUMS: &str = "sum(healthy), sum(degraded), sum(down), sum(maintenance),
       sum(probes), sum(failures), sum(lat_count),
       CASE WHEN sum(lat_count) = 0 THEN 0
         ELSE sum(lat_p50 * lat_count) / sum(lat_count) END,
       max(lat_p95)";

/// Why the history file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused an operation.
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The query API the history is read from failed.
    #[error("the history's query API: {0}")]
    Remote(String),
    /// The blocking task that ran the query died.
    #[error("the history task failed: {0}")]
    Task(String),
    /// The file could not be set aside.
    #[error("cannot set aside {path}: {source}")]
    SetAside {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What opening found of a file that was already there.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing, or our own file, whole.
    Ours,
    /// Another program's file, or a damaged one: moved to `to`, and a new
    /// history started.
    SetAside {
        /// Why it was refused.
        why: String,
        /// Where it went.
        to: PathBuf,
    },
}

/// An open history file.
pub struct Store {
    db: Connection,
    /// The latest minute whose rows are counted in their hour and day.
    rolled: i64,
}

impl Store {
    /// Open (or create) the history at `path`. A file that is not an
    /// mcpmon history, or fails SQLite's check, is renamed beside itself
    /// (`<path>.refused-<unix time>`) and never written over.
    pub fn open(path: &Path) -> Result<(Store, Found), StoreError> {
        let mut found = Found::Ours;
        if let Some(why) = refusal(path) {
            let to = aside(path);
            std::fs::rename(path, &to).map_err(|source| StoreError::SetAside {
                path: path.to_owned(),
                source,
            })?;
            for suffix in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            found = Found::SetAside { why, to };
        }
        let db = Connection::open(path)?;
        db.busy_timeout(Duration::from_secs(5))?;
        // WAL: a flush is one append, and a process killed mid-flush loses
        // that flush only.
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.pragma_update(None, "application_id", APPLICATION_ID)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS rows (
                server TEXT NOT NULL,
                res INTEGER NOT NULL,
                t INTEGER NOT NULL,
                healthy REAL NOT NULL,
                degraded REAL NOT NULL,
                down REAL NOT NULL,
                maintenance REAL NOT NULL,
                probes INTEGER NOT NULL,
                failures INTEGER NOT NULL,
                lat_count INTEGER NOT NULL,
                lat_p50 REAL NOT NULL,
                lat_p95 REAL NOT NULL,
                PRIMARY KEY (server, res, t)
            ) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS transitions (
                server TEXT NOT NULL,
                at REAL NOT NULL,
                state TEXT NOT NULL,
                reason TEXT NOT NULL,
                detail TEXT NOT NULL,
                PRIMARY KEY (server, at)
            ) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS meta (
                key TEXT PRIMARY KEY,
                value INTEGER NOT NULL
            ) WITHOUT ROWID;
            -- A file of schema 1 has every minute in its hour and day.
            INSERT OR IGNORE INTO meta VALUES
                ('rolled', (SELECT coalesce(max(t), 0) FROM rows WHERE res = 60));",
        )?;
        db.pragma_update(None, "user_version", SCHEMA)?;
        db.execute_batch(STATS)?;
        let rolled = db.query_row("SELECT value FROM meta WHERE key = 'rolled'", [], |r| {
            r.get(0)
        })?;
        Ok((Store { db, rolled }, found))
    }

    /// Add `rows` (each at the minute it fell in) to their minutes, and
    /// record `transitions`; one transaction. A row of a minute already
    /// rolled up (a failed flush's, tried again; a clock set back) is added
    /// to its hour and day too.
    pub fn flush(
        &mut self,
        rows: &[(String, i64, Row)],
        transitions: &[(String, Transition)],
    ) -> Result<(), StoreError> {
        let tx = self.db.transaction()?;
        {
            let mut add = tx.prepare_cached(&format!(
                "INSERT INTO rows VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) {ADD}"
            ))?;
            for (server, minute, r) in rows {
                let all = if *minute <= self.rolled {
                    &Resolution::ALL[..]
                } else {
                    &Resolution::ALL[..1]
                };
                for res in all {
                    add.execute(params![
                        server,
                        res.seconds(),
                        res.start(*minute),
                        r.spent.healthy,
                        r.spent.degraded,
                        r.spent.down,
                        r.spent.maintenance,
                        r.probes,
                        r.failures,
                        r.latency_count,
                        r.latency_p50_ms,
                        r.latency_p95_ms,
                    ])?;
                }
            }
            let mut record = tx
                .prepare_cached("INSERT OR REPLACE INTO transitions VALUES (?1, ?2, ?3, ?4, ?5)")?;
            for (server, t) in transitions {
                record.execute(params![server, t.at, t.state, t.reason, t.detail])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Add the minutes after the last roll-up, to `upto` (a minute's
    /// start), to their hours and days, in SQLite: one statement a
    /// resolution, however many servers. A minute written later than this
    /// and not after `upto` is added by its flush (see `flush`).
    pub fn roll_up(&mut self, upto: i64) -> Result<(), StoreError> {
        if upto <= self.rolled {
            return Ok(());
        }
        let tx = self.db.transaction()?;
        {
            let mut roll = tx.prepare_cached(&format!(
                "INSERT INTO rows SELECT server, ?1, t - t % ?1, {SUMS}
                 FROM rows WHERE res = 60 AND t > ?2 AND t <= ?3
                 GROUP BY server, t - t % ?1 {ADD}"
            ))?;
            for res in &Resolution::ALL[1..] {
                roll.execute(params![res.seconds(), self.rolled, upto])?;
            }
        }
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'rolled'",
            params![upto],
        )?;
        tx.commit()?;
        self.rolled = upto;
        Ok(())
    }

    /// Roll the minutes up, then drop what is past each resolution's keep
    /// at `now`. The writer calls it once an hour, not at each flush.
    pub fn prune(&mut self, now: SystemTime, retention: Duration) -> Result<(), StoreError> {
        // A file that started empty has grown since it was opened.
        self.db.execute_batch(STATS)?;
        let now = unix(now);
        self.roll_up(Resolution::Minute.start(now))?;
        let tx = self.db.transaction()?;
        for res in Resolution::ALL {
            let keep = res.kept(retention).as_secs() as i64;
            tx.execute(
                "DELETE FROM rows WHERE res = ?1 AND t < ?2",
                params![res.seconds(), now - keep],
            )?;
        }
        tx.execute(
            "DELETE FROM transitions WHERE at < ?1",
            params![(now - retention.as_secs() as i64) as f64],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// `server`'s rows of resolution `res` from `since` (unix seconds, the
    /// start of a period), oldest first. Hours and days count the minutes
    /// not rolled up yet too, read by the server's key.
    pub fn rows(
        &self,
        server: &str,
        res: Resolution,
        since: i64,
    ) -> Result<Vec<(i64, Row)>, StoreError> {
        let mut q;
        let rows = if res == Resolution::Minute {
            q = self.db.prepare_cached(&format!(
                "SELECT t, {COLUMNS} FROM rows WHERE server = ?1 AND res = 60 AND t >= ?2 ORDER BY t"
            ))?;
            q.query(params![server, since])?
        } else {
            q = self.db.prepare_cached(&format!(
                "SELECT t, {SUMS} FROM (
                   SELECT t, {COLUMNS} FROM rows WHERE server = ?1 AND res = ?2 AND t >= ?3
                   UNION ALL
                   SELECT t - t % ?2 AS t, {COLUMNS} FROM rows
                   WHERE server = ?1 AND res = 60 AND t > ?4 AND t >= ?3
                 ) GROUP BY t ORDER BY t"
            ))?;
            q.query(params![server, res.seconds(), since, self.rolled])?
        };
        let rows = rows.mapped(|r| {
            Ok((
                r.get::<_, i64>(0)?,
                Row {
                    spent: crate::state::series::Spent {
                        healthy: r.get(1)?,
                        degraded: r.get(2)?,
                        down: r.get(3)?,
                        maintenance: r.get(4)?,
                    },
                    probes: r.get(5)?,
                    failures: r.get(6)?,
                    latency_count: r.get(7)?,
                    latency_p50_ms: r.get(8)?,
                    latency_p95_ms: r.get(9)?,
                },
            ))
        });
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every server's daily observed and down seconds from `since` (unix
    /// seconds): one read of the file, at start.
    pub fn days(&self, since: i64) -> Result<Vec<(String, i64, f64, f64)>, StoreError> {
        let mut q = self.db.prepare(
            "SELECT server, t, healthy + degraded + down, down FROM rows WHERE res = 86400 AND t >= ?1",
        )?;
        let out = q
            .query_map(params![since], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<Result<_, _>>()?;
        Ok(out)
    }

    /// `server`'s transitions from `since` (unix seconds), oldest first, at
    /// most `limit` of the latest.
    pub fn transitions(
        &self,
        server: &str,
        since: f64,
        limit: usize,
    ) -> Result<Vec<Transition>, StoreError> {
        let mut q = self.db.prepare_cached(
            "SELECT at, state, reason, detail FROM transitions
             WHERE server = ?1 AND at >= ?2 ORDER BY at DESC LIMIT ?3",
        )?;
        let mut out: Vec<Transition> = q
            .query_map(params![server, since, limit as i64], |r| {
                Ok(Transition {
                    at: r.get(0)?,
                    state: r.get(1)?,
                    reason: r.get(2)?,
                    detail: r.get(3)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        out.reverse();
        Ok(out)
    }

    /// The latest transition recorded of each server: where a restarted
    /// writer picks up.
    pub fn last_transitions(&self) -> Result<Vec<(String, f64)>, StoreError> {
        let mut q = self
            .db
            .prepare("SELECT server, max(at) FROM transitions GROUP BY server")?;
        let out = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(out)
    }

    /// Bytes the file takes (pages in use, the WAL aside).
    pub fn size(&self) -> Result<u64, StoreError> {
        let pages: i64 = self.db.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let size: i64 = self.db.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        Ok((pages * size) as u64)
    }
}

/// Why an existing file at `path` is not ours to write, if it is not.
fn refusal(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() == 0 {
        return None;
    }
    let mut head = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut head)
    });
    if read.is_err() || &head != b"SQLite format 3\0" {
        return Some("not an SQLite file".to_owned());
    }
    let check = || -> rusqlite::Result<Option<String>> {
        let db = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let id: i64 = db.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let tables: i64 = db.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
        if id != APPLICATION_ID && tables > 0 {
            return Ok(Some(format!(
                "another program's SQLite file (application_id {id:#x})"
            )));
        }
        let ok: Option<String> = db
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .optional()?;
        Ok((ok.as_deref() != Some("ok")).then(|| format!("damaged: {}", ok.unwrap_or_default())))
    };
    match check() {
        Ok(why) => why,
        Err(e) => Some(format!("unreadable: {e}")),
    }
}

/// Where a refused file goes: beside itself, named by the time.
fn aside(path: &Path) -> PathBuf {
    PathBuf::from(format!(
        "{}.refused-{}",
        path.display(),
        unix(SystemTime::now())
    ))
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
