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

/// Rows of each resolution in the file, as written (not as read).
fn written(s: &Store) -> [i64; 3] {
    Resolution::ALL.map(|res| {
        s.db.query_row(
            "SELECT count(*) FROM rows WHERE res = ?1",
            [res.seconds()],
            |r| r.get(0),
        )
        .expect("count")
    })
}

/// `server`'s hours and days as read: (start, healthy, down, probes,
/// p50, p95) each.
fn coarse(s: &Store, server: &str) -> Vec<(i64, f64, f64, u64, f64, f64)> {
    [Resolution::Hour, Resolution::Day]
        .into_iter()
        .flat_map(|res| s.rows(server, res, 0).expect("rows"))
        .map(|(t, r)| {
            let p50 = round(r.latency_p50_ms);
            (
                t,
                r.spent.healthy,
                r.spent.down,
                r.probes,
                p50,
                r.latency_p95_ms,
            )
        })
        .collect()
}

/// Medians are means of floats, summed in another order by a roll-up.
fn round(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

#[test]
fn a_flush_writes_minutes_and_hours_and_days_are_rolled_up_from_them_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut s, _) = Store::open(&dir.path().join("h.db")).expect("open");
    let hour = 1_796_000_400; // an hour's start
    // Three minutes: two in one hour, one in the next.
    s.flush(
        &[
            ("a".into(), hour + 60, row(60.0, 0.0, 4.0)),
            ("b".into(), hour + 60, row(50.0, 10.0, 6.0)),
        ],
        &[],
    )
    .expect("flush");
    s.flush(&[("a".into(), hour + 120, row(40.0, 20.0, 8.0))], &[])
        .expect("flush");
    s.flush(&[("a".into(), hour + 3600, row(60.0, 0.0, 2.0))], &[])
        .expect("flush");
    assert_eq!(written(&s), [4, 0, 0], "a flush writes its minutes only");
    let day = Resolution::Day.start(hour);
    let want: Vec<_> = expected_rows(hour, day)
        .into_iter()
        .map(|(t, h, d, p, p50, p95)| (t, h, d, p, round(p50), p95))
        .collect();
    assert_eq!(coarse(&s, "a"), want, "read before the roll-up");
    s.roll_up(hour + 3600).expect("roll up");
    assert_eq!(written(&s), [4, 3, 2], "a and b's hours and days");
    assert_eq!(
        coarse(&s, "a"),
        want,
        "read after it: nothing counted twice"
    );
    s.roll_up(hour + 3600).expect("roll up again");
    assert_eq!(coarse(&s, "a"), want, "a second roll-up adds nothing");
    assert_eq!(
        coarse(&s, "b"),
        vec![
            (hour, 50.0, 10.0, 10, 3.0, 6.0),
            (day, 50.0, 10.0, 10, 3.0, 6.0)
        ]
    );
    // A minute already rolled up, written again (a failed flush's rows,
    // tried later): counted in its hour and day, once.
    s.flush(&[("b".into(), hour + 60, row(10.0, 0.0, 9.0))], &[])
        .expect("flush");
    s.roll_up(hour + 7200).expect("roll up");
    assert_eq!(
        coarse(&s, "b"),
        vec![
            (hour, 60.0, 10.0, 20, 3.75, 9.0),
            (day, 60.0, 10.0, 20, 3.75, 9.0)
        ]
    );
    // What is rolled up survives reopening.
    drop(s);
    let (s, _) = Store::open(&dir.path().join("h.db")).expect("reopen");
    assert_eq!(coarse(&s, "a"), want);
}

/// `a`'s hours and day in the test above.
fn expected_rows(hour: i64, day: i64) -> Vec<(i64, f64, f64, u64, f64, f64)> {
    vec![
        (hour, 100.0, 20.0, 20, 3.0, 8.0),
        (hour + 3600, 60.0, 0.0, 10, 1.0, 2.0),
        (day, 160.0, 20.0, 30, (2.0 + 4.0 + 1.0) / 3.0, 8.0),
    ]
}

#[test]
fn a_file_of_the_first_schema_is_not_counted_twice() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("h.db");
    let hour = 1_796_000_400;
    {
        // As schema 1 left it: every minute in its hour and day already.
        let db = Connection::open(&path).expect("create");
        db.pragma_update(None, "application_id", APPLICATION_ID)
            .expect("id");
        db.pragma_update(None, "user_version", 1).expect("version");
        db.execute_batch(
            "CREATE TABLE rows (
                server TEXT NOT NULL, res INTEGER NOT NULL, t INTEGER NOT NULL,
                healthy REAL NOT NULL, degraded REAL NOT NULL, down REAL NOT NULL,
                maintenance REAL NOT NULL, probes INTEGER NOT NULL,
                failures INTEGER NOT NULL, lat_count INTEGER NOT NULL,
                lat_p50 REAL NOT NULL, lat_p95 REAL NOT NULL,
                PRIMARY KEY (server, res, t)
            ) WITHOUT ROWID;",
        )
        .expect("schema 1");
        for (res, t) in [
            (60, hour + 60),
            (3600, hour),
            (86_400, Resolution::Day.start(hour)),
        ] {
            db.execute(
                "INSERT INTO rows VALUES ('a', ?1, ?2, 60, 0, 0, 0, 6, 0, 6, 2, 4)",
                params![res, t],
            )
            .expect("row");
        }
    }
    let (mut s, found) = Store::open(&path).expect("open");
    assert_eq!(found, Found::Ours);
    s.roll_up(hour + 3600).expect("roll up");
    let healthy: Vec<f64> = coarse(&s, "a").iter().map(|r| r.1).collect();
    assert_eq!(healthy, [60.0, 60.0], "the hour and the day, once each");
    s.flush(&[("a".into(), hour + 120, row(30.0, 0.0, 4.0))], &[])
        .expect("flush");
    let healthy: Vec<f64> = coarse(&s, "a").iter().map(|r| r.1).collect();
    assert_eq!(healthy, [90.0, 90.0], "and a new minute in them");
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
