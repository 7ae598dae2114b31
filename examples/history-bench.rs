//! The history at scale: 90 days of 1 000 servers, generated into a real
//! history file, then measured as docs/benchmarks.md reports it.
//!
//!     cargo build --release --bin mcpmon --example history-bench
//!     target/release/examples/history-bench target/release/mcpmon
//!
//! - the file's size, in all and per server;
//! - the write path: the CPU of one flush of 1 000 servers' rows, as a
//!   share of a core at the default one flush a minute, and as a ratio
//!   to the same flush writing every row's hour and day too (the baseline,
//!   measured in the same run);
//! - a server's status page with its 90 days, against the same page with
//!   history off, served by the real binary in the same run (a ratio).

use std::time::{Duration, Instant, SystemTime};

use mcpmon::output::history::rows::{Row, Transition};
use mcpmon::output::history::store::Store;
use mcpmon::state::series::Spent;

const SERVERS: usize = 1000;
const DAYS: i64 = 90;

fn main() {
    let mcpmon = std::env::args()
        .nth(1)
        .expect("usage: history-bench PATH_TO_MCPMON");
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("fleet.history.db");
    let now = SystemTime::now();
    let end = unix(now);
    let ids: Vec<String> = (0..SERVERS).map(|i| format!("server-{i:04}")).collect();
    let row = |i: usize, t: i64, secs: f64| {
        // One server in 50 has a bad hour a day.
        let down = if i.is_multiple_of(50) && t.rem_euclid(86_400) < 3600 {
            secs * 0.2
        } else {
            0.0
        };
        Row {
            spent: Spent {
                healthy: secs - down,
                degraded: 0.0,
                down,
                maintenance: 0.0,
            },
            probes: (secs / 10.0) as u64,
            failures: u64::from(down > 0.0),
            latency_count: (secs / 10.0) as u64,
            latency_p50_ms: 3.0 + (i % 7) as f64,
            latency_p95_ms: 12.0 + (i % 11) as f64,
        }
    };
    // Every server's row of `secs` seconds at `t`, as one flush holds them.
    let rows_at = |t: i64, secs: f64| -> Vec<(String, i64, Row)> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), t, row(i, t, secs)))
            .collect()
    };
    let started = Instant::now();
    let (mut store, _) = Store::open(&db).expect("open");
    let retention = Duration::from_secs(400 * 86_400);
    let first = end - DAYS * 86_400;
    // An hour's rows a flush for 90 days, then a minute's for the last day.
    for h in 0..DAYS * 24 {
        let t = first + h * 3600;
        let rows = rows_at(t, 3600.0);
        let transitions: Vec<(String, Transition)> = if h % 24 == 0 {
            ids.iter()
                .step_by(50)
                .map(|id| {
                    let t = Transition {
                        at: t as f64,
                        state: "unhealthy".into(),
                        reason: "unreachable".into(),
                        detail: "generated".into(),
                    };
                    (id.clone(), t)
                })
                .collect()
        } else {
            Vec::new()
        };
        store.flush(&rows, &transitions).expect("flush");
        if h % 24 == 23 {
            store.prune(at(t + 3600), retention).expect("prune");
        }
    }
    for m in 0..1440 {
        let t = end - 86_400 + m * 60;
        let rows = rows_at(t, 60.0);
        store.flush(&rows, &[]).expect("flush");
    }
    store.prune(at(end), retention).expect("prune");
    let generated = started.elapsed();
    // The write path: flushes as the writer makes them, one a minute, to
    // minutes after the last roll-up (at `end`'s minute). Each is paired
    // with the baseline, in the same file and run: a flush of minutes
    // already rolled up (the day before the last, whose minutes are
    // pruned), which writes each row into its minute, hour and day, as
    // every flush did before hours and days were rolled up.
    let reps = 60; // an hour of minutes, which the roll-up below takes
    let next = end - end.rem_euclid(60) + 60;
    let (mut flush_cpu, mut three_cpu) = (0.0, 0.0);
    for r in 0..reps {
        for (t, spent) in [
            (next + r * 60, &mut flush_cpu),
            (end - 2 * 86_400 + r * 60, &mut three_cpu),
        ] {
            let rows = rows_at(t, 60.0);
            let cpu0 = cpu_seconds();
            store.flush(&rows, &[]).expect("flush");
            *spent += (cpu_seconds() - cpu0) / reps as f64;
        }
    }
    drop(store);
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(dir.path().join("fleet.history.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    println!(
        "generated {SERVERS} servers x {DAYS} days in {:.1} s",
        generated.as_secs_f64()
    );
    println!(
        "size: {:.1} MiB, {:.1} KiB per server",
        size as f64 / 1048576.0,
        size as f64 / 1024.0 / SERVERS as f64
    );
    let opening = Instant::now();
    let (mut store, _) = Store::open(&db).expect("open");
    println!(
        "open at start (SQLite's quick_check included): {:.2} s",
        opening.elapsed().as_secs_f64()
    );
    let cpu1 = cpu_seconds();
    store.roll_up(next + reps * 60).expect("roll up");
    let roll_cpu = cpu_seconds() - cpu1;
    let cpu1 = cpu_seconds();
    store.prune(at(next + reps * 60), retention).expect("prune");
    let prune_cpu = cpu_seconds() - cpu1;
    drop(store);
    println!(
        "write path: {:.1} ms CPU per flush of {SERVERS} servers, {:.3}% of a core at one flush a minute; \
         the hourly roll-up {:.0} ms and prune {:.0} ms, {:.3}% of a core",
        flush_cpu * 1000.0,
        flush_cpu / 60.0 * 100.0,
        roll_cpu * 1000.0,
        prune_cpu * 1000.0,
        (roll_cpu + prune_cpu) / 3600.0 * 100.0
    );
    println!(
        "a flush writing each row's minute, hour and day: {:.1} ms CPU; minutes only = {:.2}x of it; \
         with the roll-up's share, {:.2}x",
        three_cpu * 1000.0,
        flush_cpu / three_cpu,
        (flush_cpu + roll_cpu / 60.0) / three_cpu
    );

    // The page, served by the real binary: with the history, and without.
    let fleet = dir.path().join("fleet.yaml");
    let mut yaml = String::from("servers:\n");
    for id in ids.iter().take(5) {
        yaml.push_str(&format!(
            "  - {{id: {id}, transport: http, url: \"http://127.0.0.1:9/mcp\"}}\n"
        ));
    }
    std::fs::write(&fleet, yaml).expect("fleet");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut times = Vec::new();
    for (name, extra) in [
        ("with 90 days of history", &[][..]),
        ("history off", &["--history.disabled"][..]),
    ] {
        let port = free_port();
        let mut child = std::process::Command::new(&mcpmon)
            .args(["--config.file"])
            .arg(&fleet)
            .args([
                "--web.listen-address",
                &format!("127.0.0.1:{port}"),
                "--log.level",
                "error",
                "--storage.path",
            ])
            .arg(&db)
            .args(extra)
            .spawn()
            .expect("mcpmon");
        let page = rt.block_on(median_get(
            &format!("http://127.0.0.1:{port}/servers/server-0000"),
            200,
        ));
        let _ = child.kill();
        let _ = child.wait();
        println!("page {name}: median {:.2} ms of 200", page * 1000.0);
        times.push(page);
    }
    println!("page with history / without: {:.2}x", times[0] / times[1]);
}

/// The median time of `n` GETs of `url`, after it first answers 200.
async fn median_get(url: &str, n: usize) -> f64 {
    let client = reqwest::Client::new();
    let ready = Instant::now();
    loop {
        if let Ok(r) = client.get(url).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            ready.elapsed() < Duration::from_secs(20),
            "{url} never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let body = client
            .get(url)
            .send()
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        assert!(!body.is_empty());
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[n / 2]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn at(t: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(t as u64)
}

/// This process's CPU seconds, from /proc (in USER_HZ, 100 a second).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let tick = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}
