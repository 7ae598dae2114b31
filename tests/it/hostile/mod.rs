//! Hostile input through the real binary: one case per way a server or a
//! discovery document was found to take more than its own verdict. Every
//! case asserts the same four things while the attack runs: mcpmon's
//! resident memory stays within a bound of its baseline (64 MiB unless the
//! case says otherwise), `/-/healthy` answers every request within 1 s, a
//! well-behaved bystander stays healthy, and signals and reloads are acted
//! on within 2 s.
//!
//! The attackers are `tests/hostile/attacks.py` (stdlib Python). Attacks
//! run alone (they load the machine on purpose: no other test's mcpmon runs
//! meanwhile), and each starts only once its baseline is taken.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::Value;

const GLOBAL: &str = r#"
global:
  ping_interval: 400ms
  ping_timeout: 300ms
  connect_timeout: 5s
  backoff_initial: 200ms
  backoff_max: 1s
  window: 2s
  stuck_after: 5s
"#;

/// How long each attack runs while the four promises are checked.
const ATTACK: Duration = Duration::from_secs(6);
/// The default memory bound over the baseline.
const RSS_BOUND_MIB: u64 = 64;
/// How long a reload or a signal may take to be acted on.
const OBEY_WITHIN: Duration = Duration::from_secs(2);
/// How long setting up a case may take (a loaded machine).
const PATIENCE: Duration = Duration::from_secs(30);

fn attacks() -> String {
    repo()
        .join("tests/hostile/attacks.py")
        .display()
        .to_string()
}

/// A healthy server beside the attacked one, with timers generous enough
/// that only real interference (the monitor stalled for a second or more)
/// changes its verdict.
fn bystander() -> String {
    format!(
        "  - id: bystander\n    transport: stdio\n    command: {:?}\n    args: [\"--name\", \"bystander\"]\n    ping_interval: 1s\n    ping_timeout: 1s\n    healthy_max_latency: 1s\n    degraded_max_latency: 2s\n    stuck_after: 20s\n",
        demo_server().display()
    )
}

/// One case: a directory, mcpmon on a config with the bystander, and the
/// file whose existence starts the attack.
struct Case {
    _dir: tempfile::TempDir,
    mon: Binary,
    trigger: PathBuf,
    _peers: Vec<Spawned>,
}

impl Case {
    /// Start mcpmon with the bystander, `servers` (YAML list items) and
    /// `rest` (top-level keys), and wait for the bystander to be healthy.
    async fn start(
        dir: tempfile::TempDir,
        servers: &str,
        rest: &str,
        extra: &[&str],
        peers: Vec<Spawned>,
    ) -> Case {
        let cfg = dir.path().join("fleet.yaml");
        std::fs::write(
            &cfg,
            format!("{GLOBAL}servers:\n{}{servers}{rest}", bystander()),
        )
        .expect("write config");
        let mut args = vec!["--web.enable-lifecycle"];
        args.extend_from_slice(extra);
        let mon = Binary::start(&cfg, &args).await;
        mon.wait_status("bystander", "healthy", PATIENCE).await;
        let trigger = dir.path().join("attack");
        Case {
            _dir: dir,
            mon,
            trigger,
            _peers: peers,
        }
    }

    /// Start the attack and check the four promises for [`ATTACK`]; returns
    /// the largest growth of resident memory seen, in MiB.
    async fn attack(&mut self, rss_bound_mib: u64) -> u64 {
        let base = held(self.mon.pid()).rss_kib;
        std::fs::write(&self.trigger, "go").expect("trigger");
        let growth = endure(&self.mon, base, ATTACK, rss_bound_mib).await;
        still_obeys(&mut self.mon).await;
        growth
    }
}

/// Under attack for `span`: every 250 ms `/-/healthy` answers within 1 s,
/// the bystander reads healthy, and memory stays within the bound.
async fn endure(mon: &Binary, base_kib: u64, span: Duration, bound_mib: u64) -> u64 {
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .expect("client");
    let mut worst = 0u64;
    throughout(span, Duration::from_millis(250), async || {
        let t = Instant::now();
        let r = quick
            .get(format!("http://{}/-/healthy", mon.addr))
            .send()
            .await;
        assert!(
            r.as_ref().is_ok_and(|r| r.status() == 200),
            "/-/healthy failed after {:?} under attack: {r:?}",
            t.elapsed()
        );
        let (_, v) = mon.server("bystander").await;
        assert_eq!(v["status"], "healthy", "the bystander was hurt: {v}");
        let grown = held(mon.pid()).rss_kib.saturating_sub(base_kib) >> 10;
        worst = worst.max(grown);
        assert!(
            grown <= bound_mib,
            "resident memory grew {grown} MiB over its baseline (bound {bound_mib} MiB)"
        );
    })
    .await;
    eprintln!("worst memory growth: {worst} MiB");
    worst
}

/// A reload (SIGHUP and `POST /-/reload`) is acted on within 2 s.
async fn still_obeys(mon: &mut Binary) {
    let reloaded = || count_logs(mon, "configuration reloaded");
    let before = reloaded();
    mon.signal(libc::SIGHUP);
    eventually("SIGHUP acted on", OBEY_WITHIN, async || {
        if reloaded() == before {
            Err("not yet")
        } else {
            Ok(())
        }
    })
    .await;
    let quick = reqwest::Client::builder()
        .timeout(OBEY_WITHIN)
        .build()
        .expect("client");
    let r = quick
        .post(format!("http://{}/-/reload", mon.addr))
        .send()
        .await;
    assert!(
        r.as_ref().is_ok_and(|r| r.status() == 200),
        "POST /-/reload not answered within {OBEY_WITHIN:?}: {r:?}"
    );
}

/// SIGTERM is acted on within 2 s, and mcpmon exits cleanly.
async fn stops_at_once(mon: &mut Binary) {
    mon.signal(libc::SIGTERM);
    eventually("SIGTERM acted on", OBEY_WITHIN, async || {
        match count_logs(mon, "shutting down") {
            0 => Err("no \"shutting down\" line yet"),
            _ => Ok(()),
        }
    })
    .await;
    assert!(mon.wait_exit(Duration::from_secs(20)).await.success());
}

/// JSON log lines whose message is `message`.
fn count_logs(mon: &Binary, message: &str) -> usize {
    logs(mon)
        .iter()
        .filter(|v| v["fields"]["message"] == message)
        .count()
}

fn logs(mon: &Binary) -> Vec<Value> {
    mon.logs
        .lock()
        .expect("logs")
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Sum of a counter's samples whose labels match `labels`.
fn counter(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    exposition::sum(metrics, name, labels)
}

/// Poll `/metrics` (bounded) until `done` holds.
async fn wait_metrics(mon: &Binary, what: &str, done: impl Fn(&str) -> bool) -> String {
    eventually(what, PATIENCE, async || {
        let (_, m) = mon.get("/metrics").await;
        if done(&m) { Ok(m) } else { Err("not yet") }
    })
    .await
}

/// A Python peer listening on a port it writes to `port_file`.
async fn python_peer(args: &[&str], port_file: &Path) -> (Spawned, u16) {
    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg(attacks()).args(args).arg(port_file);
    cmd.kill_on_drop(true)
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    let child = cmd.spawn().expect("spawn python");
    let port = eventually("listening", PATIENCE, async || {
        if let Ok(text) = std::fs::read_to_string(port_file)
            && let Ok(p) = text.trim().parse()
        {
            return Ok(p);
        }
        Err(format!("{args:?} never listened"))
    })
    .await;
    let url = format!("http://127.0.0.1:{port}");
    (Spawned { child, url, port }, port)
}

// ---- 1. Notification storms, every kind, both eras, both transports ----

const STORMS: [&str; 4] = ["message", "progress", "list_changed", "mix"];

/// A storm of `kind` from a server of `era` over `transport`: the session
/// is cut as `message_flood`, rebuilt with backoff, and nothing else moves.
async fn storm(transport: &str, era: &str, kind: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let trigger = dir.path().join("attack");
    let trigger_s = trigger.display().to_string();
    let mut peers = Vec::new();
    let server = match transport {
        "stdio" => format!(
            "  - id: attacker\n    transport: stdio\n    command: python3\n    args: [{:?}, stdio, {era}, {kind}, {trigger_s:?}]\n",
            attacks()
        ),
        "sse" => {
            let (peer, port) =
                python_peer(&["sse", kind, &trigger_s], &dir.path().join("port")).await;
            peers.push(peer);
            format!("  - id: attacker\n    transport: sse\n    url: http://127.0.0.1:{port}/sse\n")
        }
        _ => {
            let (peer, port) =
                python_peer(&["http", era, kind, &trigger_s], &dir.path().join("port")).await;
            peers.push(peer);
            format!("  - id: attacker\n    transport: http\n    url: http://127.0.0.1:{port}/mcp\n")
        }
    };
    let mut case = Case::start(dir, &server, "", &[], peers).await;
    case.mon.wait_status("attacker", "healthy", PATIENCE).await;
    let (_, v) = case.mon.server("attacker").await;
    assert_eq!(v["era"], era, "{v}");
    case.attack(RSS_BOUND_MIB).await;
    let m = wait_metrics(&case.mon, "the storm cut as message_flood", |m| {
        counter(
            m,
            "mcpmon_session_closes_total",
            &[("reason", "message_flood")],
        ) >= 1.0
    })
    .await;
    eprintln!(
        "{transport} {era} {kind}: cut {} times",
        counter(
            &m,
            "mcpmon_session_closes_total",
            &[("reason", "message_flood")]
        )
    );
    stops_at_once(&mut case.mon).await;
}

async fn storms(transport: &str, era: &str) {
    alone(async {
        for kind in STORMS {
            storm(transport, era, kind).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_storms_over_stdio_legacy() {
    require!(program("python3"));
    storms("stdio", "legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_storms_over_stdio_modern() {
    require!(program("python3"));
    storms("stdio", "modern").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_storms_over_http_legacy() {
    require!(program("python3"));
    storms("http", "legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_storms_over_http_modern() {
    require!(program("python3"));
    storms("http", "modern").await;
}

/// A legacy HTTP+SSE stream that names a message endpoint on another
/// origin is refused before anything is POSTed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_cannot_aim_mcpmon_elsewhere() {
    require!(program("python3"));
    let dir = tempfile::tempdir().expect("tempdir");
    let trigger = dir.path().join("attack").display().to_string();
    let (peer, port) = python_peer(&["sse", "elsewhere", &trigger], &dir.path().join("port")).await;
    let server =
        format!("  - id: attacker\n    transport: sse\n    url: http://127.0.0.1:{port}/sse\n");
    let case = Case::start(dir, &server, "", &[], vec![peer]).await;
    let (v, _) = case
        .mon
        .wait_status("attacker", "unhealthy", PATIENCE)
        .await;
    assert_eq!(v["reason"], "connect_failed", "{v}");
    let detail = v["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("http://127.0.0.1:9/messages") && detail.contains("refused"),
        "{detail}"
    );
}

/// The legacy HTTP+SSE transport is legacy-era only; its stream carries
/// every storm, and one event that never ends is cut at the size bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_storms_and_an_endless_event_over_legacy_sse() {
    require!(program("python3"));
    alone(async {
        for kind in STORMS.iter().chain(&["endless-event"]) {
            storm("sse", "legacy", kind).await;
        }
    })
    .await;
}

// ---- 2, 3, 6, 7. Discovery documents ----

/// A case with an http_sd endpoint serving `body.json` and a file_sd
/// directory `sd/`; both start empty.
async fn discovery_case(extra_sd: &str, extra: &[&str]) -> (Case, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body.json");
    std::fs::write(&body, "[]").expect("write");
    let sd = dir.path().join("sd");
    std::fs::create_dir(&sd).expect("mkdir");
    let (peer, port) = python_peer(
        &["serve", &body.display().to_string()],
        &dir.path().join("port"),
    )
    .await;
    let rest = format!(
        "http_sd_configs:\n  - url: http://127.0.0.1:{port}/sd\n    refresh_interval: 1s\n{extra_sd}file_sd_configs:\n  - files: [{:?}]\n",
        sd.join("*.yaml").display()
    );
    let case = Case::start(dir, "", &rest, extra, vec![peer]).await;
    (case, body, sd)
}

/// Replace `path` atomically (a rename, as the README asks of writers).
fn put(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// 34 KB of YAML: one anchor of 2 000 nodes and 6 000 aliases to it, twelve
/// million nodes once expanded.
fn alias_bomb() -> String {
    let mut text = String::from("- &a [");
    text.push_str(&"x,".repeat(2000));
    text.push_str("x]\n");
    text.push_str(&"- *a\n".repeat(6000));
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_alias_bomb_in_a_file_or_an_endpoint_is_refused() {
    require!(program("python3"));
    alone(async {
        let (mut case, body, sd) = discovery_case("", &[]).await;
        let bomb = alias_bomb();
        let base = held(case.mon.pid()).rss_kib;
        put(&sd.join("bomb.yaml"), &bomb);
        put(&body, &bomb);
        endure(&case.mon, base, ATTACK, RSS_BOUND_MIB).await;
        still_obeys(&mut case.mon).await;
        let m = wait_metrics(&case.mon, "both refreshes failing", |m| {
            counter(
                m,
                "mcpmon_sd_refresh_failures_total",
                &[("mechanism", "file")],
            ) >= 1.0
                && counter(
                    m,
                    "mcpmon_sd_refresh_failures_total",
                    &[("mechanism", "http")],
                ) >= 1.0
        })
        .await;
        assert!(m.contains("mcpmon_sd_servers{mechanism=\"file\"} 0"), "{m}");
        let text = case.mon.log_text();
        assert!(
            text.contains("aliases expand"),
            "the file's refusal says why"
        );
        assert!(text.contains("not JSON"), "the endpoint's refusal says why");
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

/// `n` entries that each fail validation (an unknown key), 75 bytes each.
fn bad_entries(n: usize) -> String {
    let entries: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id":"bad{i}","transport":"http","url":"http://h/","nope":1}}"#))
        .collect();
    format!("[{}]", entries.join(",\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_bad_entries_never_delay_signals_or_reloads() {
    require!(program("python3"));
    alone(async {
        // Validation of 4 000 bad entries took 30 s of the main loop's time.
        let (mut case, body, _) = discovery_case("    max_servers: 100000\n", &[]).await;
        let base = held(case.mon.pid()).rss_kib;
        put(&body, &bad_entries(4000));
        endure(&case.mon, base, Duration::from_secs(2), RSS_BOUND_MIB).await;
        still_obeys(&mut case.mon).await;
        let m = wait_metrics(&case.mon, "4 000 entries counted", |m| {
            counter(
                m,
                "mcpmon_sd_entries_rejected_total",
                &[("reason", "invalid")],
            ) >= 4000.0
        })
        .await;
        let lines = logs(&case.mon)
            .iter()
            .filter(|v| v["fields"]["message"] == "discovered entry left out")
            .count();
        assert!(lines <= 40, "{lines} lines for one bad document");
        drop(m);
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_asking_for_sixty_thousand_servers_or_a_tight_loop_is_held_to_its_limits() {
    require!(program("python3"));
    alone(async {
    // A cap of 100: the servers it admits cost what any 100 servers cost;
    // what must not cost anything is the 59 900 past it.
    let (mut case, body, _) = discovery_case("    max_servers: 100\n", &[]).await;
    let closed = ClosedPort::bind();
    let dead = closed.port();
    let entries: Vec<String> = (0..60_000)
        .map(|i| {
            format!(
                r#"{{"id":"sd{i}","transport":"http","url":"http://127.0.0.1:{dead}/{i}","backoff_initial":"1ms","backoff_max":"2ms"}}"#
            )
        })
        .collect();
    let base = held(case.mon.pid()).rss_kib;
    put(&body, &format!("[{}]", entries.join(",")));
    endure(&case.mon, base, ATTACK, RSS_BOUND_MIB).await;
    still_obeys(&mut case.mon).await;
    let m = wait_metrics(&case.mon, "the cap applied", |m| {
        counter(
            m,
            "mcpmon_sd_entries_rejected_total",
            &[("reason", "over_limit")],
        ) >= 59_900.0
    })
    .await;
    assert!(
        m.contains("mcpmon_sd_servers{mechanism=\"http\"} 100"),
        "{m}"
    );
    // 100 unreachable servers whose entries asked for a 1 ms backoff:
    // held to at least 1 s between attempts, 200 more attempts take at
    // least a second (each server's second one waits a whole delay), not
    // the milliseconds a 1 ms backoff would take.
    let before = counter(&m, "mcpmon_reconnects_total", &[("server", "sd*")]);
    let start = Instant::now();
    wait_metrics(&case.mon, "200 more attempts", |m| {
        counter(m, "mcpmon_reconnects_total", &[("server", "sd*")]) >= before + 200.0
    })
    .await;
    let took = start.elapsed();
    eprintln!("200 reconnects in {took:?}");
    assert!(took >= Duration::from_secs(1), "200 reconnects in {took:?}");
    stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_entries_aimed_at_mcpmon_itself_are_refused() {
    require!(program("python3"));
    alone(async {
        // A second listen address on a known port, for the entries to aim at.
        let own = free_port();
        let listen = format!("127.0.0.1:{own}");
        let (mut case, body, _) = discovery_case("", &["--web.listen-address", &listen]).await;
        let entries: Vec<String> = (0..20)
        .map(|i| {
            format!(
                r#"{{"id":"loop{i}","transport":"http","url":"http://127.0.0.1:{own}/-/reload"}}"#
            )
        })
        .collect();
        let base = held(case.mon.pid()).rss_kib;
        put(&body, &format!("[{}]", entries.join(",")));
        let m = wait_metrics(&case.mon, "the entries refused", |m| {
            counter(
                m,
                "mcpmon_sd_entries_rejected_total",
                &[("reason", "own_address")],
            ) >= 20.0
        })
        .await;
        drop(m);
        let reloads = count_logs(&case.mon, "configuration reloaded");
        endure(&case.mon, base, ATTACK, RSS_BOUND_MIB).await;
        assert_eq!(
            count_logs(&case.mon, "configuration reloaded"),
            reloads,
            "mcpmon reloaded itself"
        );
        still_obeys(&mut case.mon).await;
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

// ---- 4. tools/list amplification ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_listing_of_sixty_four_megabytes_and_endless_list_changed() {
    require!(program("python3"));
    alone(async {
    let dir = tempfile::tempdir().expect("tempdir");
    let trigger = dir.path().join("attack");
    let server = format!(
        "  - id: attacker\n    transport: stdio\n    command: python3\n    args: [{:?}, stdio, legacy, huge-tools, {:?}]\n",
        attacks(),
        trigger.display().to_string()
    );
    let mut case = Case::start(dir, &server, "", &[], vec![]).await;
    let (before, _) = case.mon.wait_status("attacker", "healthy", PATIENCE).await;
    // One page of 4 MB is read whole before it is digested; the bound
    // allows a few such pages in flight, never the 64 MB listing.
    case.attack(RSS_BOUND_MIB).await;
    let (_, v) = case.mon.server("attacker").await;
    // Its pings are answered all along, and the announcements restart
    // nothing: one session, healthy; the listing over its bound was never
    // taken, so the tools it had stand.
    assert_eq!(v["status"], "healthy", "{v}");
    assert_eq!(v["sessions"], 1, "{v}");
    assert_eq!(v["tools_hash"], before["tools_hash"], "{v}");
    stops_at_once(&mut case.mon).await;
    })
    .await;
}

// ---- 5. Whole-fleet pages for clients that never read ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_whole_fleet_pages_share_one_render() {
    require!(program("python3"));
    alone(async {
    let dir = tempfile::tempdir().expect("tempdir");
    let closed = ClosedPort::bind();
    let dead = closed.port();
    let servers: String = (0..2000)
        .map(|i| {
            format!(
                "  - id: far-{i:04}\n    transport: http\n    url: http://127.0.0.1:{dead}/{i}\n    backoff_initial: 30s\n    backoff_max: 60s\n    labels: {{team: \"team-{}\", owner: \"a rather long owner name to fill the page {i}\"}}\n",
                i % 7
            )
        })
        .collect();
    let mut case = Case::start(dir, &servers, "", &[], vec![]).await;
    let (_, page) = case.mon.get("/").await;
    eprintln!("status page: {} KiB", page.len() >> 10);
    let base = held(case.mon.pid()).rss_kib;
    // 120 connections ask for the page and the fleet JSON, and never read.
    let mut idle = Vec::new();
    for i in 0..120 {
        let path = if i % 2 == 0 { "/" } else { "/health/fleet" };
        let mut s = tokio::net::TcpStream::connect(&case.mon.addr)
            .await
            .expect("connect");
        use tokio::io::AsyncWriteExt;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        idle.push(s);
    }
    std::fs::write(&case.trigger, "").expect("trigger");
    endure(&case.mon, base, ATTACK, RSS_BOUND_MIB).await;
    still_obeys(&mut case.mon).await;
    drop(idle);
    stops_at_once(&mut case.mon).await;
    })
    .await;
}

// ---- 8, 9. What untrusted sources may write ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_source_cannot_censor_other_text_or_break_a_json_line() {
    require!(program("python3"));
    alone(async {
    let dir = tempfile::tempdir().expect("tempdir");
    // A token endpoint that hands out JSON syntax as its token.
    let (token, token_port) =
        python_peer(&["token", r#"{"timestamp":""#], &dir.path().join("tport")).await;
    let closed = ClosedPort::bind();
    let dead = closed.port();
    let main = format!(
        "  - id: oauth\n    transport: http\n    url: http://127.0.0.1:{dead}/mcp\n    oauth2:\n      client_id: c\n      client_secret: \"${{SECRET_FOR_OAUTH}}\"\n      token_url: http://127.0.0.1:{token_port}/token\n"
    );
    let body = dir.path().join("body.json");
    // Header values that spell another server's id, and JSON syntax.
    let entries = serde_json::json!([
        {"id": "evil1", "transport": "http", "url": format!("http://127.0.0.1:{dead}/a"),
         "headers": {"X-A": "bystander", "X-B": "{\"timestamp\":\""}},
        {"id": "evil2", "transport": "http", "url": format!("http://127.0.0.1:{dead}/b?k=bystander")},
    ]);
    std::fs::write(&body, entries.to_string()).expect("write");
    let (sd, port) = python_peer(
        &["serve", &body.display().to_string()],
        &dir.path().join("port"),
    )
    .await;
    let rest = format!(
        "http_sd_configs:\n  - url: http://127.0.0.1:{port}/sd\n    refresh_interval: 1s\n"
    );
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!("{GLOBAL}servers:\n{}{main}{rest}", bystander()),
    )
    .expect("write");
    let mut mon = Binary::start_with_env(
        &cfg,
        &["--web.enable-lifecycle", "--log.level", "debug"],
        &[("SECRET_FOR_OAUTH", "an-operator-secret")],
    )
    .await;
    mon.wait_status("bystander", "healthy", PATIENCE).await;
    for id in ["evil1", "evil2", "oauth"] {
        mon.wait_status(id, "unhealthy", PATIENCE).await;
    }
    let base = held(mon.pid()).rss_kib;
    endure(&mon, base, Duration::from_secs(3), RSS_BOUND_MIB).await;
    still_obeys(&mut mon).await;
    let lines = mon.logs.lock().expect("logs").clone();
    let broken: Vec<&String> = lines
        .iter()
        .filter(|l| serde_json::from_str::<Value>(l).is_err())
        .collect();
    assert!(broken.is_empty(), "log lines that are not JSON: {broken:?}");
    let about_bystander = logs(&mon)
        .into_iter()
        .filter(|v| v["fields"]["server"] == "bystander" || v["span"]["server"] == "bystander")
        .count();
    assert!(
        about_bystander > 0,
        "the bystander's id was censored from the log"
    );
    let (_, v) = mon.server("bystander").await;
    assert_eq!(v["id"], "bystander");
    let (_, fleet) = mon.get("/health/fleet").await;
    assert!(fleet.contains("\"bystander\""), "{fleet}");
    // The operator's own secret stays hidden everywhere.
    assert!(!mon.log_text().contains("an-operator-secret"));
    drop((token, sd));
    stops_at_once(&mut mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovery_key_cannot_forge_a_log_line() {
    require!(program("python3"));
    alone(async {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body.json");
    std::fs::write(
        &body,
        "[{\"id\":\"k\",\"transport\":\"http\",\"url\":\"http://h/\",\"x\\n2026-12-01T00:00:00Z ERROR forged\\u001b[31m\":1}]",
    )
    .expect("write");
    let (sd, port) = python_peer(
        &["serve", &body.display().to_string()],
        &dir.path().join("port"),
    )
    .await;
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{GLOBAL}servers:\n{}http_sd_configs:\n  - url: http://127.0.0.1:{port}/sd\n",
            bystander()
        ),
    )
    .expect("write");
    let mut mon = Binary::start_text(&cfg, &[]).await;
    eventually("the entry refused", PATIENCE, async || {
        let told = mon.log_text().contains("discovered entry left out");
        if told { Ok(()) } else { Err("not yet") }
    })
    .await;
    let text = mon.log_text();
    assert!(
        !text.contains('\u{1b}'),
        "an escape sequence reached the log"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("2026-12-01T00:00:00Z ERROR forged")),
        "a forged line: {text}"
    );
    drop(sd);
    mon.signal(libc::SIGTERM);
    assert!(mon.wait_exit(Duration::from_secs(20)).await.success());
    })
    .await;
}

// ---- 10. file_sd and its own reads ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sd_reads_a_broken_file_once_not_on_its_own_reads() {
    require!(program("python3"));
    alone(async {
        let (mut case, _, sd) = discovery_case("", &[]).await;
        put(&sd.join("fine.yaml"), "[]\n");
        let broken = format!("- {{ id: x\n{}", "  # padding\n".repeat(180_000));
        let cpu_before = cpu_seconds(case.mon.pid());
        let base = held(case.mon.pid()).rss_kib;
        put(&sd.join("broken.yaml"), &broken);
        endure(&case.mon, base, Duration::from_secs(8), RSS_BOUND_MIB).await;
        let failures = logs(&case.mon)
            .iter()
            .filter(|v| {
                v["fields"]["message"]
                    == "discovery refresh failed; the source keeps its last good list"
            })
            .count();
        let cpu = cpu_seconds(case.mon.pid()) - cpu_before;
        eprintln!("{failures} failures logged, {cpu:.2} s of CPU in 8 s");
        assert!(
            failures <= 2,
            "{failures} warnings for one broken file in 8 s"
        );
        still_obeys(&mut case.mon).await;
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

// ---- 11. An SSE event that arrives a kibibyte at a time ----

/// CPU time (user and system) of a process, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15; 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sse_event_is_scanned_once() {
    require!(program("python3"));
    alone(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let trigger = dir.path().join("attack").display().to_string();
        let (peer, port) = python_peer(
            &["http", "legacy", "slow-event", &trigger],
            &dir.path().join("port"),
        )
        .await;
        let server = format!(
            "  - id: attacker\n    transport: http\n    url: http://127.0.0.1:{port}/mcp\n"
        );
        let mut case = Case::start(dir, &server, "", &[], vec![peer]).await;
        case.mon.wait_status("attacker", "healthy", PATIENCE).await;
        let before = cpu_seconds(case.mon.pid());
        let answered = |m: &str| counter(m, "mcpmon_probes_total", &[("server", "attacker")]);
        let (_, m) = case.mon.get("/metrics").await;
        let pings_before = answered(&m);
        case.attack(RSS_BOUND_MIB).await;
        let cpu = cpu_seconds(case.mon.pid()) - before;
        let (_, m) = case.mon.get("/metrics").await;
        let pings = answered(&m) - pings_before;
        eprintln!("{pings} probes of 3 MiB answers cost {cpu:.2} s of CPU");
        assert!(pings >= 2.0, "the slow answers never came: {pings}");
        // Scanned once, a 3 MiB answer costs milliseconds; rescanned at every
        // kibibyte, seconds.
        assert!(
            cpu < 3.0 + pings * 0.1,
            "{cpu:.2} s of CPU for {pings} answers"
        );
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

mod surfaces;
