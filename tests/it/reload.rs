//! Hot reload and shutdown, through the real binary: SIGHUP, POST /-/reload
//! and the file watch apply a valid config as a diff (unchanged servers keep
//! their sessions), reject an invalid one without changing anything, and
//! neither SIGTERM nor SIGKILL of mcpmon leaves a stdio child behind.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

fn stdio(id: &str, marker: &str) -> String {
    format!(
        "  - id: {id}\n    transport: stdio\n    command: {:?}\n    args: [\"--name\", \"{id}\"]\n    env: {{MCPMON_TEST_MARKER: {marker:?}}}\n",
        demo_server().display()
    )
}

/// The demo server behind `sh -c '…; true'`: the shell forks, so the server
/// is a grandchild of mcpmon.
fn wrapped_in_forking_shell(marker: &str) -> String {
    format!(
        "  - id: wrapped\n    transport: stdio\n    command: /bin/sh\n    args: [\"-c\", \"{} --name wrapped; true\"]\n    env: {{MCPMON_TEST_MARKER: {marker:?}}}\n",
        demo_server().display()
    )
}

fn write(path: &Path, servers: &[String], extra_global: &str) {
    std::fs::write(
        path,
        format!("{FAST_GLOBAL}{extra_global}servers:\n{}", servers.concat()),
    )
    .expect("write config");
}

fn reload_metrics(m: &str) -> (Option<f64>, Option<f64>) {
    (
        metric(m, "mcpmon_config_last_reload_successful"),
        metric(m, "mcpmon_config_last_reload_success_timestamp_seconds"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_a_diff_and_a_bad_reload_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let (ma, mb, mc, md) = (marker("a"), marker("b"), marker("c"), marker("d"));
    write(
        &cfg,
        &[stdio("keep", &ma), stdio("drop", &mb), stdio("change", &mc)],
        "",
    );
    let mon = Binary::start(&cfg, &["--web.enable-lifecycle"]).await;
    for id in ["keep", "drop", "change"] {
        mon.wait_status(id, "healthy", Duration::from_secs(10))
            .await;
    }
    let (_, before) = mon.server("keep").await;
    let keep_pids = pids_with_marker(&ma);
    let (_, m) = mon.get("/metrics").await;
    let (ok, stamp) = reload_metrics(&m);
    assert_eq!(ok, Some(1.0));

    // A bad file: rejected with its errors, nothing changes.
    std::fs::write(
        &cfg,
        "servers:\n  - id: x\n    transport: stdio\n    comand: /bin/true\n",
    )
    .expect("write");
    let (code, body) = mon.post("/-/reload").await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains(&format!("{}:4:", cfg.display())), "{body}");
    assert!(body.contains("comand"), "{body}");
    let (_, m) = mon.get("/metrics").await;
    assert_eq!(
        reload_metrics(&m),
        (Some(0.0), stamp),
        "failure recorded, success time unchanged"
    );
    for id in ["keep", "drop", "change"] {
        let (code, v) = mon.server(id).await;
        assert_eq!(code, 200, "{id} still monitored: {v}");
    }
    assert!(mon.log_text().contains("reload rejected"));

    // A good file via SIGHUP: keep unchanged, drop removed, change restarted, add started.
    write(
        &cfg,
        &[
            stdio("keep", &ma),
            stdio("change", &mc).replace("    env:", "    ping_interval: 500ms\n    env:"),
            stdio("add", &md),
        ],
        "",
    );
    mon.signal(libc::SIGHUP);
    mon.wait_status("add", "healthy", Duration::from_secs(10))
        .await;
    eventually("drop unlisted", Duration::from_secs(10), async || {
        if mon.server("drop").await.0 != 404 {
            Err("not yet")
        } else {
            Ok(())
        }
    })
    .await;
    assert!(
        pids_with_marker(&mb).is_empty(),
        "removed server's process stopped"
    );
    let (_, after) = mon.server("keep").await;
    assert_eq!(
        after["session_started"], before["session_started"],
        "unchanged server kept its session"
    );
    assert_eq!(after["sessions"], 1);
    assert_eq!(pids_with_marker(&ma), keep_pids, "same process");
    let (changed, _) = mon
        .wait_status("change", "healthy", Duration::from_secs(10))
        .await;
    assert_ne!(changed["session_started"], before["session_started"]);
    let (_, m) = mon.get("/metrics").await;
    let (ok, new_stamp) = reload_metrics(&m);
    assert_eq!(ok, Some(1.0));
    assert!(new_stamp > stamp, "success time advanced");
    assert!(
        !m.contains("server=\"drop\""),
        "removed server's series dropped"
    );
    let keep_reconnects = exposition::sum(&m, "mcpmon_reconnects_total", &[("server", "keep")]);
    assert_eq!(
        keep_reconnects, 0.0,
        "no reconnect counted for the unchanged server"
    );
    let (_, fleet) = mon.get("/health/fleet").await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).expect("json");
    assert_eq!(fleet["summary"]["total"], 3, "{fleet}");

    // POST /-/reload with the same file: nothing to do.
    let (code, body) = mon.post("/-/reload").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["kept"], 3, "{v}");
    assert_eq!(v["added"].as_array().map(Vec::len), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_watch_reloads_on_change_and_lifecycle_is_off_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let (m1, m2) = (marker("w1"), marker("w2"));
    write(&cfg, &[stdio("one", &m1)], "");
    let mon = Binary::start(
        &cfg,
        &[
            "--config.auto-reload",
            "--config.auto-reload-interval",
            "200ms",
        ],
    )
    .await;
    mon.wait_status("one", "healthy", Duration::from_secs(10))
        .await;
    assert_eq!(
        mon.post("/-/reload").await.0,
        403,
        "lifecycle API is opt-in"
    );
    write(&cfg, &[stdio("one", &m1), stdio("two", &m2)], "");
    mon.wait_status("two", "healthy", Duration::from_secs(10))
        .await;
    let (_, one) = mon.server("one").await;
    assert_eq!(one["sessions"], 1);
}

/// The real binary with two healthy stdio servers, one plain and one behind
/// a shell wrapper that forks; returns their markers.
async fn plain_and_wrapped(prefix: &str) -> (tempfile::TempDir, Binary, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    let (m1, m2) = (marker(&format!("{prefix}1")), marker(&format!("{prefix}2")));
    let wrapped = wrapped_in_forking_shell(&m2);
    write(&cfg, &[stdio("plain", &m1), wrapped], "");
    let mon = Binary::start(&cfg, &[]).await;
    for id in ["plain", "wrapped"] {
        mon.wait_status(id, "healthy", Duration::from_secs(10))
            .await;
    }
    (dir, mon, m1, m2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_every_session_within_a_bound_and_exits_zero() {
    let (_dir, mut mon, m1, m2) = plain_and_wrapped("t").await;
    assert_eq!(
        wait_pids(&m2, Duration::from_secs(5)).await.len(),
        2,
        "sh and the server"
    );
    let start = Instant::now();
    mon.signal(libc::SIGTERM);
    let status = mon.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "{status}");
    eprintln!("stopped in {:?}", start.elapsed());
    assert!(pids_with_marker(&m1).is_empty() && pids_with_marker(&m2).is_empty());
    let logs = mon.log_text();
    assert!(logs.contains("\"stopped\""), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_mcpmon_leaves_no_stdio_child() {
    let (_dir, mut mon, m1, m2) = plain_and_wrapped("k").await;
    mon.signal(libc::SIGKILL);
    mon.wait_exit(Duration::from_secs(5)).await;
    // The direct child dies with mcpmon (parent-death signal); what it
    // started sees its stdin close and exits.
    eventually(
        "no child outliving mcpmon",
        Duration::from_secs(5),
        async || {
            let left: Vec<i32> = pids_with_marker(&m1)
                .into_iter()
                .chain(pids_with_marker(&m2))
                .collect();
            if left.is_empty() {
                return Ok(());
            }
            Err(format!("children survived mcpmon: {left:?}"))
        },
    )
    .await
}
