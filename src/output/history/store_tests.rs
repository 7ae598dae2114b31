use std::time::{Duration, SystemTime};

use super::*;
use crate::output::history::rows::Row;
use crate::state::series::Spent;

fn row(healthy: f64, down: f64, p95: f64) -> Row {
    Row {
        spent: Spent {
            healthy,
            degraded: 0.0,
            down,
            maintenance: 0.0,
        },
        probes: 10,
        failures: 1,
        latency_count: 10,
        latency_p50_ms: p95 / 2.0,
        latency_p95_ms: p95,
    }
}

const YEAR: Duration = Duration::from_secs(400 * 86_400);

#[test]
fn flushes_add_up_in_the_minute_the_hour_and_the_day() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut s, found) = Store::open(&dir.path().join("h.db")).expect("open");
    assert_eq!(found, Found::Ours);
    let t = 1_796_000_040; // a minute's start
    s.flush(&[("a".into(), t, row(30.0, 0.0, 4.0))], &[])
        .expect("flush");
    s.flush(
        &[
            ("a".into(), t, row(20.0, 10.0, 8.0)),
            ("a".into(), t + 60, row(60.0, 0.0, 2.0)),
        ],
        &[],
    )
    .expect("flush");
    let minutes = s.rows("a", Resolution::Minute, 0).expect("rows");
    assert_eq!(minutes.len(), 2);
    assert_eq!(
        minutes[0].1.spent.healthy, 50.0,
        "two flushes into one minute add up"
    );
    assert_eq!(minutes[0].1.spent.down, 10.0);
    assert_eq!(minutes[0].1.probes, 20);
    assert_eq!(minutes[0].1.latency_p95_ms, 8.0, "the worst p95");
    assert_eq!(
        minutes[0].1.latency_p50_ms, 3.0,
        "the count-weighted mean of medians"
    );
    let hours = s.rows("a", Resolution::Hour, 0).expect("rows");
    assert_eq!(hours.len(), 1);
    assert_eq!(
        (hours[0].1.spent.healthy, hours[0].1.spent.down),
        (110.0, 10.0)
    );
    assert_eq!(s.rows("a", Resolution::Day, 0).expect("rows").len(), 1);
    assert!(s.rows("b", Resolution::Minute, 0).expect("rows").is_empty());
}

#[test]
fn rows_past_their_resolution_s_keep_are_dropped() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut s, _) = Store::open(&dir.path().join("h.db")).expect("open");
    let old = 1_796_000_040;
    let t = |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs((old + secs) as u64);
    let transition = Transition {
        at: old as f64,
        state: "unhealthy".into(),
        reason: "exited".into(),
        detail: String::new(),
    };
    s.flush(
        &[("a".into(), old, row(60.0, 0.0, 1.0))],
        &[("a".into(), transition)],
    )
    .expect("flush");
    // Two days on: the minute is gone, the hour and the day and the
    // transition stay.
    s.prune(t(2 * 86_400), YEAR).expect("prune");
    assert!(s.rows("a", Resolution::Minute, 0).expect("rows").is_empty());
    assert_eq!(s.rows("a", Resolution::Hour, 0).expect("rows").len(), 1);
    assert_eq!(s.transitions("a", 0.0, 10).expect("transitions").len(), 1);
    // 91 days on the hour goes; past the retention, everything.
    s.prune(t(91 * 86_400), YEAR).expect("prune");
    assert!(s.rows("a", Resolution::Hour, 0).expect("rows").is_empty());
    assert_eq!(s.rows("a", Resolution::Day, 0).expect("rows").len(), 1);
    s.prune(t(401 * 86_400), YEAR).expect("prune");
    assert!(s.rows("a", Resolution::Day, 0).expect("rows").is_empty());
    assert!(s.transitions("a", 0.0, 10).expect("transitions").is_empty());
}

#[test]
fn a_foreign_or_damaged_file_is_set_aside_untouched_and_a_new_history_starts() {
    let dir = tempfile::tempdir().expect("tmp");
    // Not SQLite at all.
    let path = dir.path().join("notes.db");
    std::fs::write(&path, b"my notes, not a database\n").expect("write");
    let (_, found) = Store::open(&path).expect("open");
    let Found::SetAside { why, to } = found else {
        panic!("kept {found:?}")
    };
    assert!(why.contains("not an SQLite file"), "{why}");
    assert_eq!(
        std::fs::read(&to).expect("set aside"),
        b"my notes, not a database\n"
    );
    // Another program's SQLite database.
    let theirs = dir.path().join("theirs.db");
    {
        let db = Connection::open(&theirs).expect("open");
        db.execute_batch("CREATE TABLE accounts (id INTEGER); INSERT INTO accounts VALUES (7);")
            .expect("create");
    }
    let (_, found) = Store::open(&theirs).expect("open");
    let Found::SetAside { why, to } = found else {
        panic!("kept {found:?}")
    };
    assert!(why.contains("another program"), "{why}");
    let kept: i64 = Connection::open(&to)
        .expect("open")
        .query_row("SELECT id FROM accounts", [], |r| r.get(0))
        .expect("read");
    assert_eq!(kept, 7, "their data is where it was moved, whole");
    // Ours, damaged in the middle.
    let ours = dir.path().join("ours.db");
    {
        let (mut s, _) = Store::open(&ours).expect("open");
        let rows: Vec<(String, i64, Row)> = (0..500)
            .map(|i| (format!("s{i}"), 1_796_000_040, row(60.0, 0.0, 1.0)))
            .collect();
        s.flush(&rows, &[]).expect("flush");
        s.db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .expect("checkpoint");
    }
    let mut bytes = std::fs::read(&ours).expect("read");
    assert!(bytes.len() > 3 * 4096, "{}", bytes.len());
    for b in &mut bytes[2 * 4096..2 * 4096 + 2000] {
        *b = 0xa5;
    }
    std::fs::write(&ours, &bytes).expect("write");
    let (s, found) = Store::open(&ours).expect("open");
    assert!(matches!(found, Found::SetAside { .. }), "{found:?}");
    assert!(
        s.rows("s1", Resolution::Minute, 0)
            .expect("rows")
            .is_empty(),
        "a new history"
    );
    // And ours, whole, is kept.
    let (_, again) = Store::open(&ours).expect("open");
    assert_eq!(again, Found::Ours);
}

/// What one server's history holds at most: a day of minutes, 90 days of
/// hours, 400 days of days. docs/endpoints.md states the bound.
pub const MOST_PER_SERVER_YEAR: u64 = 400 * 1024;

#[test]
fn a_year_of_one_server_stays_within_the_stated_size() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut s, _) = Store::open(&dir.path().join("h.db")).expect("open");
    let start = 1_795_996_800 - 400 * 86_400; // midnight UTC
    let end = start + 400 * 86_400;
    let at = |t: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(t as u64);
    // A row an hour for 400 days, then a row a minute for the last day.
    let hours: Vec<(String, i64, Row)> = (0..400 * 24)
        .map(|h| {
            (
                "search-api-eu-1".to_owned(),
                start + h * 3600,
                row(3590.5, 9.5, 12.25),
            )
        })
        .collect();
    s.flush(&hours, &[]).expect("flush");
    s.prune(at(end), YEAR).expect("prune");
    let minutes: Vec<(String, i64, Row)> = (0..1440)
        .map(|m| {
            (
                "search-api-eu-1".to_owned(),
                end - 86_400 + m * 60,
                row(59.5, 0.5, 12.25),
            )
        })
        .collect();
    s.flush(&minutes, &[]).expect("flush");
    s.prune(at(end), YEAR).expect("prune");
    let count = |res| s.rows("search-api-eu-1", res, 0).expect("rows").len();
    assert_eq!(count(Resolution::Minute), 1440);
    assert!(
        (2160..=2184).contains(&count(Resolution::Hour)),
        "{}",
        count(Resolution::Hour)
    );
    assert!(
        (400..=401).contains(&count(Resolution::Day)),
        "{}",
        count(Resolution::Day)
    );
    s.db.execute_batch("VACUUM").expect("vacuum");
    let size = s.size().expect("size");
    eprintln!("one server-year: {size} bytes");
    assert!(size <= MOST_PER_SERVER_YEAR, "{size} bytes");
}
