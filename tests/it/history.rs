//! The history survives restarts: a real mcpmon writes it, is stopped with
//! SIGTERM (and later killed with SIGKILL), and the next one on the same
//! file serves the same past through the history API: nothing lost to a
//! SIGTERM, at most one flush interval to a kill -9. A history file in a
//! place that cannot hold one, or a disk that fills, costs the history,
//! never the probing.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// Flushes in the tests: what a kill -9 may lose.
const FLUSH: &str = "500ms";

fn fleet(demo_url: &str) -> String {
    format!(
        r#"
global:
  ping_interval: 200ms
  ping_timeout: 150ms
  backoff_initial: 200ms
  backoff_max: 500ms
servers:
  - {{id: search, transport: http, url: "{demo_url}"}}
"#
    )
}

/// `search`'s history over the last hour: (observed seconds, down
/// seconds, uptime, transitions).
async fn past(m: &Binary) -> (f64, f64, Option<f64>, Vec<Value>) {
    let (code, v) = m.get_json("/api/v1/history/search?window=1h").await;
    assert_eq!(code, 200, "{v}");
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let sum = |k: &str| {
        rows.iter()
            .map(|r| r[k].as_f64().unwrap_or(0.0))
            .sum::<f64>()
    };
    let observed = sum("healthy") + sum("degraded") + sum("down");
    let transitions = v["transitions"].as_array().cloned().unwrap_or_default();
    (observed, sum("down"), v["uptime"].as_f64(), transitions)
}

async fn start(file: &std::path::Path, db: &std::path::Path) -> Binary {
    let db = db.display().to_string();
    Binary::start(
        file,
        &["--storage.path", &db, "--storage.flush-interval", FLUSH],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_survives_sigterm_whole_and_kill_9_but_for_one_flush() {
    let mut server = demo_http(&["--name", "search"], 0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let (file, db) = (dir.path().join("fleet.yaml"), dir.path().join("h.db"));
    std::fs::write(&file, fleet(&server.url)).expect("fleet");

    // Up for a while, then down for a while: an uptime strictly between.
    let mut first = start(&file, &db).await;
    first
        .wait_status("search", "healthy", Duration::from_secs(10))
        .await;
    eventually(
        "two seconds of history",
        Duration::from_secs(20),
        async || {
            let (observed, ..) = past(&first).await;
            if observed >= 2.0 {
                Ok(())
            } else {
                Err(observed)
            }
        },
    )
    .await;
    server.kill().await;
    first
        .wait_status("search", "unhealthy", Duration::from_secs(10))
        .await;
    eventually("a second of it down", Duration::from_secs(20), async || {
        let (_, down, ..) = past(&first).await;
        if down >= 1.0 { Ok(()) } else { Err(down) }
    })
    .await;

    // SIGTERM: the last flush writes what happened since the one before.
    let lived = metric_sum(&first, "mcpmon_server_observed_seconds_total").await;
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(Duration::from_secs(15)).await.success());
    let second = start(&file, &db).await;
    let (observed, down, uptime, transitions) = past(&second).await;
    assert!(
        observed >= lived,
        "{observed} s in the history, {lived} s lived: a SIGTERM loses nothing"
    );
    let uptime = uptime.expect("an uptime");
    assert!(uptime > 0.0 && uptime < 1.0, "{uptime}");
    assert!((uptime - (1.0 - down / observed)).abs() < 1e-9);
    let states: Vec<&str> = transitions
        .iter()
        .filter_map(|t| t["state"].as_str())
        .collect();
    assert_eq!(states, ["healthy", "unhealthy"], "{transitions:?}");
    assert_eq!(transitions[1]["reason"], "unreachable", "{transitions:?}");

    // kill -9: what the second lived is there, but for one flush.
    second
        .wait_status("search", "unhealthy", Duration::from_secs(10))
        .await;
    eventually(
        "the second's own time written",
        Duration::from_secs(20),
        async || {
            let (now, ..) = past(&second).await;
            if now >= observed + 1.0 {
                Ok(())
            } else {
                Err(now)
            }
        },
    )
    .await;
    let lived = metric_sum(&second, "mcpmon_server_observed_seconds_total").await;
    let mut second = second;
    second.signal(libc::SIGKILL);
    second.wait_exit(Duration::from_secs(10)).await;
    let third = start(&file, &db).await;
    let (after, ..) = past(&third).await;
    let flush = 0.5;
    assert!(
        after >= observed + lived - flush - 0.2,
        "{after} s after the kill; {observed} s before the second, which lived {lived} s"
    );
    // Each run adds its own first verdict; none is written twice.
    let (_, _, _, again) = past(&third).await;
    let at: Vec<f64> = again.iter().filter_map(|t| t["at"].as_f64()).collect();
    assert!(
        at.len() >= 3 && at.windows(2).all(|w| w[0] < w[1]),
        "{again:?}"
    );
    assert_eq!(
        again[..2],
        transitions[..2],
        "the first run's, as they were"
    );
}

/// The sum of `name`'s samples on `m`'s /metrics.
async fn metric_sum(m: &Binary, name: &str) -> f64 {
    let text = m.metrics().await;
    exposition::sum(&text, name, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_that_cannot_be_opened_costs_the_history_not_the_probing() {
    let server = demo_http(&["--name", "search"], 0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, fleet(&server.url)).expect("fleet");
    // A path under a file: no directory can be made there, root or not.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").expect("write");
    let m = start(&file, &blocker.join("h.db")).await;
    m.wait_status("search", "healthy", Duration::from_secs(10))
        .await;
    let (code, body) = m.get("/api/v1/history/search").await;
    assert_eq!(code, 404, "{body}");
    let text = m.metrics().await;
    assert_eq!(
        exposition::value(
            &text,
            "mcpmon_history_writes_total",
            &[("result", "failed")]
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        m.log_text().contains("cannot open the history"),
        "{}",
        m.log_text()
    );
}

/// The keys shields.io documents for its endpoint badge's JSON.
const SHIELDS_KEYS: [&str; 12] = [
    "schemaVersion",
    "label",
    "message",
    "color",
    "labelColor",
    "isError",
    "namedLogo",
    "logoSvg",
    "logoColor",
    "logoWidth",
    "style",
    "cacheSeconds",
];

/// `v` has the shape shields.io's endpoint badge reads: schemaVersion 1,
/// a label and a non-empty message, and no key it does not document.
fn shields_shaped(v: &Value) {
    let o = v.as_object().unwrap_or_else(|| panic!("an object: {v}"));
    assert_eq!(o.get("schemaVersion"), Some(&Value::from(1)), "{v}");
    assert!(o.get("label").is_some_and(Value::is_string), "{v}");
    assert!(
        o.get("message")
            .and_then(Value::as_str)
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    for k in o.keys() {
        assert!(
            SHIELDS_KEYS.contains(&k.as_str()),
            "{k} is not in shields.io's schema: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn badges_say_status_uptime_and_response_time_in_svg_and_shields_json() {
    let server = demo_http(&["--name", "search"], 0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("fleet.yaml");
    let closed = ClosedPort::bind();
    let dead = closed.mcp_url();
    std::fs::write(
        &file,
        format!(
            "{}  - {{id: gone, transport: http, url: \"{dead}\"}}\n",
            fleet(&server.url)
        ),
    )
    .expect("fleet");
    let m = start(&file, &dir.path().join("h.db")).await;
    m.wait_status("search", "healthy", Duration::from_secs(10))
        .await;
    m.wait_status("gone", "unhealthy", Duration::from_secs(10))
        .await;
    eventually(
        "a flush with answers in it",
        Duration::from_secs(20),
        async || {
            let (_, v) = m
                .get_json("/api/v1/servers/search/response-times/1h/badge.json")
                .await;
            if v["message"].as_str().is_some_and(|s| s.ends_with(" ms")) {
                Ok(())
            } else {
                Err(v)
            }
        },
    )
    .await;
    for (id, kind, message, color) in [
        ("search", "health", "healthy", "brightgreen"),
        ("gone", "health", "unhealthy", "red"),
        ("search", "uptimes/24h", "100%", "brightgreen"),
        ("gone", "uptimes/7d", "0%", "red"),
        ("gone", "response-times/30d", "no data", "lightgrey"),
    ] {
        let (code, v) = m
            .get_json(&format!("/api/v1/servers/{id}/{kind}/badge.json"))
            .await;
        assert_eq!(code, 200, "{id} {kind}: {v}");
        shields_shaped(&v);
        assert_eq!(
            (v["message"].as_str(), v["color"].as_str()),
            (Some(message), Some(color)),
            "{id} {kind}: {v}"
        );
    }
    let (code, v) = m
        .get_json("/api/v1/servers/search/response-times/1h/badge.json")
        .await;
    assert_eq!(code, 200);
    shields_shaped(&v);
    // The SVG says the same, as an image.
    let resp = test_client()
        .get(format!(
            "http://{}/api/v1/servers/search/uptimes/1h/badge.svg",
            m.addr
        ))
        .send()
        .await
        .expect("svg");
    assert_eq!(resp.headers()["content-type"], "image/svg+xml");
    let svg = resp.text().await.expect("body");
    assert!(
        svg.starts_with("<svg") && svg.contains("uptime 1h: 100%"),
        "{svg}"
    );
    // A server that does not exist, a window not offered, a badge not made.
    for path in [
        "/api/v1/servers/nobody/health/badge.svg",
        "/api/v1/servers/search/uptimes/2h/badge.svg",
        "/api/v1/servers/search/health/badge.png",
    ] {
        assert_eq!(m.get(path).await.0, 404, "{path}");
    }
    // Turned off, they are not there.
    let off = Binary::start(&file, &["--badges.disabled", "--history.disabled"]).await;
    assert_eq!(
        off.get("/api/v1/servers/search/health/badge.svg").await.0,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_a_file_reads_the_history_from_prometheus() {
    require!(program("prometheus"));
    let mut server = demo_http(&["--name", "search"], 0).await;
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, fleet(&server.url)).expect("fleet");
    let writer = start(&file, &dir.path().join("h.db")).await;
    writer
        .wait_status("search", "healthy", Duration::from_secs(10))
        .await;
    let prom = Prometheus::start(&[&writer.addr]).await;
    eventually(
        "Prometheus sees search up",
        Duration::from_secs(30),
        async || {
            let up = prom.query("mcpmon_server_up{server=\"search\"} == 1").await;
            if up.is_empty() {
                Err("not yet")
            } else {
                Ok(())
            }
        },
    )
    .await;
    server.kill().await;
    writer
        .wait_status("search", "unhealthy", Duration::from_secs(10))
        .await;
    // Enough scraped for a day's increase: the fleet's days are read once
    // at start, then every five minutes.
    eventually(
        "Prometheus has an increase of search's time",
        Duration::from_secs(30),
        async || {
            let q = "increase(mcpmon_server_observed_seconds_total{server=\"search\"}[1d]) > 0";
            if prom.query(q).await.is_empty() {
                Err("not yet")
            } else {
                Ok(())
            }
        },
    )
    .await;
    // A replica with no file of its own, reading what Prometheus scraped.
    let reader = Binary::start(&file, &["--history.prometheus-url", prom.base()]).await;
    let read = eventually(
        "the change read from Prometheus",
        Duration::from_secs(60),
        async || {
            let (code, v) = reader.get_json("/api/v1/history/search?window=1h").await;
            let changed = v["transitions"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["state"] == "unhealthy"));
            let down: f64 = v["rows"]
                .as_array()
                .map(|r| r.iter().filter_map(|r| r["down"].as_f64()).sum())
                .unwrap_or(0.0);
            if code == 200 && changed && down > 0.0 {
                Ok(v)
            } else {
                Err(v)
            }
        },
    )
    .await;
    assert_eq!(read["resolution"], "minute");
    let uptime = read["uptime"].as_f64().expect("an uptime");
    assert!(uptime > 0.0 && uptime < 1.0, "up, then down: {read}");
    let t = read["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .find(|t| t["state"] == "unhealthy")
        .cloned()
        .expect("unhealthy");
    assert_eq!(t["reason"], "unreachable", "{t}");
    // The fleet page's days come from the same API, for the whole fleet.
    let (code, page) = reader.get("/").await;
    assert_eq!(code, 200);
    assert!(page.contains("last 30 days: worst day"), "{page}");
    // It writes no file of its own.
    assert!(!dir.path().join("fleet.history.db").exists());
    // An API that does not answer is the API's failure, said as such.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let gone = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let lost = Binary::start(&file, &["--history.prometheus-url", &gone]).await;
    let (code, body) = lost.get("/api/v1/history/search?window=1h").await;
    assert_eq!(code, 502, "{body}");
    assert!(body.contains("query API"), "{body}");
}

/// A tmpfs of `size` mounted at `at` for the test's life (a real file
/// system that fills), or why it cannot be.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if out.status.success() {
            Ok(Tmpfs(at.to_owned()))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// `mcpmon_history_writes_total{result}` on `m`.
async fn writes(m: &Binary, result: &str) -> f64 {
    let text = m.metrics().await;
    exposition::value(&text, "mcpmon_history_writes_total", &[("result", result)]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fills_mid_run_costs_the_history_not_the_probing() {
    let dir = tempfile::tempdir().expect("tmp");
    let disk = match Tmpfs::mount(&dir.path().join("disk"), "2m") {
        Ok(d) => d,
        Err(why) => {
            // Mounting needs root (CI runs as root on its machine).
            assert!(!under_ci(), "cannot mount a tmpfs: {why}");
            eprintln!("SKIP: cannot mount a tmpfs: {why}");
            return;
        }
    };
    let mut server = demo_http(&["--name", "search"], 0).await;
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, fleet(&server.url)).expect("fleet");
    let m = start(&file, &disk.0.join("h.db")).await;
    m.wait_status("search", "healthy", Duration::from_secs(10))
        .await;
    eventually("two flushes written", Duration::from_secs(20), async || {
        let ok = writes(&m, "ok").await;
        if ok >= 2.0 { Ok(()) } else { Err(ok) }
    })
    .await;

    // Fill the disk to its last byte.
    let filler = disk.0.join("filler");
    let mut f = std::fs::File::create(&filler).expect("filler");
    let chunk = vec![0u8; 16 * 1024];
    let mut full = false;
    for _ in 0..1_000 {
        if let Err(e) = std::io::Write::write_all(&mut f, &chunk) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            full = true;
            break;
        }
    }
    assert!(full, "a 2 MiB tmpfs holds no 16 MiB");
    drop(f);
    eventually("a flush refused", Duration::from_secs(20), async || {
        let failed = writes(&m, "failed").await;
        if failed >= 1.0 { Ok(()) } else { Err(failed) }
    })
    .await;

    // Probing goes on: the server's fall is judged while the disk is full.
    server.kill().await;
    m.wait_status("search", "unhealthy", Duration::from_secs(10))
        .await;
    let failed = writes(&m, "failed").await;
    eventually(
        "more flushes refused",
        Duration::from_secs(20),
        async || {
            let now = writes(&m, "failed").await;
            if now >= failed + 2.0 {
                Ok(())
            } else {
                Err(now)
            }
        },
    )
    .await;
    let said = |log: &str| log.matches("cannot write the history").count();
    assert_eq!(said(&m.log_text()), 1, "logged once: {}", m.log_text());

    // Room again: the history is written again, and says so.
    std::fs::remove_file(&filler).expect("free the disk");
    let ok = writes(&m, "ok").await;
    eventually("written again", Duration::from_secs(20), async || {
        let now = writes(&m, "ok").await;
        if now > ok { Ok(()) } else { Err(now) }
    })
    .await;
    assert!(m.log_text().contains("the history is written again"));
    // What the refused flushes held was kept and written: the fall too.
    let (observed, down, _, transitions) = past(&m).await;
    let lived = metric_sum(&m, "mcpmon_server_observed_seconds_total").await;
    assert!(down > 0.0, "the time down while full: {down}");
    assert!(
        observed >= lived - 1.0,
        "{observed} s written of {lived} s lived"
    );
    let states: Vec<&str> = transitions
        .iter()
        .filter_map(|t| t["state"].as_str())
        .collect();
    assert_eq!(states, ["healthy", "unhealthy"], "{transitions:?}");
}
