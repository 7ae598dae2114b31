//! Start-up from evidence, with real child processes: a stdio server that
//! is busy starting (a core spinning, as an interpreter importing its
//! modules does) for longer than its `connect_timeout` is starting, not
//! failing, and its first verdict is healthy; one that sits silent fails
//! its handshake at the deadline, and twice is unhealthy.

use std::time::{Duration, Instant};

use crate::support::*;

/// A stdio server that runs `before` in a shell, then becomes the demo
/// server.
fn server(id: &str, before: &str) -> String {
    let script = format!("{before}; exec \"$0\" --name {id}");
    format!(
        "  - id: {id}\n    transport: stdio\n    command: sh\n    args: [\"-c\", {script:?}, {:?}]\n",
        demo_server().display().to_string()
    )
}

/// The fleet, with a 2 s `connect_timeout`: the cap is four times that.
fn fleet(servers: &[String]) -> String {
    format!(
        "{}servers:\n{}",
        FAST_GLOBAL.replace("connect_timeout: 10s", "connect_timeout: 2s"),
        servers.concat()
    )
}

/// Spin a core for `secs` seconds (the shell's own loop: CPU, no output).
fn spin(secs: u32) -> String {
    format!("end=$(( $(date +%s) + {secs} )); while [ $(date +%s) -lt $end ]; do :; done")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_busy_starting_past_its_connect_timeout_is_healthy_first() {
    let mon = Monitor::start(&fleet(&[server("busy", &spin(5))])).await;
    let started = Instant::now();
    let (v, _) = mon
        .wait_status("busy", "healthy", Duration::from_secs(20))
        .await;
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "it spun for 5 s before it could answer: {:?}",
        started.elapsed()
    );
    let events = v["events"].as_array().cloned().unwrap_or_default();
    assert!(
        events.iter().all(|e| e["kind"] != "connect_failed"),
        "a busy start read as a failed one: {events:#?}"
    );
    assert_eq!(v["sessions"], 1, "{v:#}");
    mon.stop().await;
}

/// Silent past its `connect_timeout`, it fails its handshake there; as
/// the very first attempt of a server that said nothing of why, that is
/// not yet a verdict (it stays `starting`), and the second attempt's
/// failure is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_silent_past_its_connect_timeout_twice_is_unhealthy_after_the_second() {
    let mon = Monitor::start(&fleet(&[server("silent", "sleep 30")])).await;
    let started = Instant::now();
    let (v, _) = mon
        .wait_status("silent", "unhealthy", Duration::from_secs(15))
        .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(10),
        "two attempts of 2 s each: {took:?}"
    );
    assert_eq!(v["reason"], "handshake_failed", "{v:#}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("no answer to"), "{detail}");
    let events = v["events"].as_array().cloned().unwrap_or_default();
    let failed = events
        .iter()
        .filter(|e| e["kind"] == "connect_failed")
        .count();
    assert!(failed >= 2, "{events:#?}");
    mon.stop().await;
}
