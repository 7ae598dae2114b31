//! The surfaces added last, attacked one hostile peer or file at a time: a
//! registry, a stdio server's unsolicited listings, a client config, a CEL
//! condition's answer, a legacy SSE stream. Each case holds the suite's
//! four promises (memory within its bound of the baseline, `/-/healthy`
//! within 1 s, the bystander healthy, signals and reloads obeyed) and says
//! how the hostile source was counted and logged.

use super::*;

/// A case whose registry source is `attacks.py registry KIND`.
async fn registry_case(kind: &str, extra_sd: &str) -> Case {
    let dir = tempfile::tempdir().expect("tempdir");
    let trigger = dir.path().join("attack").display().to_string();
    let (peer, port) = python_peer(&["registry", kind, &trigger], &dir.path().join("port")).await;
    let rest = format!(
        "registry_sd_configs:\n  - url: http://127.0.0.1:{port}\n    refresh_interval: 1s\n{extra_sd}"
    );
    Case::start(dir, "", &rest, &[], vec![peer]).await
}

/// Log lines of rejected entries for `reason`.
fn rejections_logged(mon: &Binary, reason: &str) -> usize {
    logs(mon)
        .iter()
        .filter(|v| {
            v["fields"]["message"] == "discovered entry left out" && v["fields"]["reason"] == reason
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_of_fifteen_megabyte_versions_is_skipped_not_kept() {
    require!(program("python3"));
    alone(async {
        // Twelve pages of one server each, its version 15 MiB: kept, the
        // walk took 1.7 GiB. Each is now skipped as it is read.
        let mut case = registry_case("huge-version", "").await;
        case.attack(RSS_BOUND_MIB).await;
        let m = wait_metrics(&case.mon, "the twelve records counted", |m| {
            counter(
                m,
                "mcpmon_sd_entries_rejected_total",
                &[("reason", "too_large")],
            ) >= 12.0
        })
        .await;
        assert!(
            m.contains("mcpmon_sd_servers{mechanism=\"registry\"} 0"),
            "{m}"
        );
        // Walked again every second with the same answer: counted and
        // logged once, not once per walk.
        assert_eq!(
            counter(
                &m,
                "mcpmon_sd_entries_rejected_total",
                &[("reason", "too_large")]
            ),
            12.0
        );
        assert_eq!(rejections_logged(&case.mon, "too_large"), 12);
        assert!(
            case.mon
                .log_text()
                .contains("its version is 15728640 bytes, over 255"),
            "the log says which field"
        );
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_thousand_registry_names_alike_are_told_apart_in_linear_time() {
    require!(program("python3"));
    alone(async {
        // Equal in their first 64 characters, so their ids collide: made
        // unique by a quadratic loop, they took 25 s of CPU unfinished.
        let mut case = registry_case("alike-names", "    max_servers: 10\n").await;
        case.attack(RSS_BOUND_MIB).await;
        let m = wait_metrics(&case.mon, "all 40 000 accounted for", |m| {
            let left_out = counter(
                m,
                "mcpmon_sd_entries_rejected_total",
                &[("reason", "over_limit")],
            ) + counter(
                m,
                "mcpmon_sd_entries_rejected_total",
                &[("reason", "too_large")],
            );
            left_out >= 39_990.0
        })
        .await;
        assert!(
            m.contains("mcpmon_sd_servers{mechanism=\"registry\"} 10"),
            "{m}"
        );
        let left_out = counter(
            &m,
            "mcpmon_sd_entries_rejected_total",
            &[("reason", "over_limit")],
        ) + counter(
            &m,
            "mcpmon_sd_entries_rejected_total",
            &[("reason", "too_large")],
        );
        assert_eq!(left_out, 39_990.0, "each counted once: {m}");
        let ids: std::collections::HashSet<String> = case
            .mon
            .get("/health/fleet")
            .await
            .1
            .parse::<Value>()
            .expect("fleet JSON")["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(ids.len(), 11, "ten distinct ids and the bystander: {ids:?}");
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_listings_naming_megabyte_tools_pin_nothing() {
    require!(program("python3"));
    alone(async {
        // Lines shaped like a listing, answering nothing mcpmon asked, each
        // naming a new tool of a megabyte: kept, they pinned ~1 GiB.
        let dir = tempfile::tempdir().expect("tempdir");
        let trigger = dir.path().join("attack").display().to_string();
        let server = format!(
            "  - id: attacker\n    transport: stdio\n    command: python3\n    args: [{:?}, stdio, legacy, sniff, {trigger:?}]\n",
            attacks()
        );
        let mut case = Case::start(dir, &server, "", &[], vec![]).await;
        case.mon.wait_status("attacker", "healthy", PATIENCE).await;
        case.attack(RSS_BOUND_MIB).await;
        // What it answers to mcpmon's own requests is right all along.
        let (_, v) = case.mon.server("attacker").await;
        assert_eq!(v["status"], "healthy", "{v}");
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_config_nested_twenty_thousand_deep_is_refused_and_the_monitor_lives() {
    require!(program("python3"));
    alone(async {
        // The JSON5 parser recursed to a stack overflow within 0.5 s.
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("claude_desktop_config.json");
        std::fs::write(&file, r#"{"mcpServers": {}}"#).expect("write");
        let rest = format!(
            "client_config_sd_configs:\n  - files: [{:?}]\n    refresh_interval: 1s\n",
            file.display()
        );
        let mut case = Case::start(dir, "", &rest, &[], vec![]).await;
        let base = held(case.mon.pid()).rss_kib;
        put(&file, &format!("{{\"mcpServers\": {}", "[".repeat(20_000)));
        endure(&case.mon, base, ATTACK, RSS_BOUND_MIB).await;
        still_obeys(&mut case.mon).await;
        wait_metrics(&case.mon, "the refusal counted", |m| {
            counter(
                m,
                "mcpmon_sd_refresh_failures_total",
                &[("mechanism", "client_config")],
            ) >= 1.0
        })
        .await;
        let refused = count_logs(
            &case.mon,
            "discovery refresh failed; the source keeps its last good list",
        );
        assert_eq!(refused, 1, "logged once");
        assert!(
            case.mon
                .log_text()
                .contains("nested more than 128 levels deep"),
            "the log says why"
        );
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_that_outruns_its_deadline_is_not_started_again_beside_itself() {
    require!(program("python3"));
    alone(async {
        // Each answer has 3 000 items and the condition compares each with
        // each: seconds of CEL, which cannot be stopped. Started again at
        // every probe, evaluations piled up on blocking threads.
        let dir = tempfile::tempdir().expect("tempdir");
        let trigger = dir.path().join("attack").display().to_string();
        let server = format!(
            "  - id: attacker\n    transport: stdio\n    command: python3\n    args: [{:?}, stdio, legacy, slow-cel, {trigger:?}]\n    tool_probes:\n      - tool: echo\n        interval: 400ms\n        request_timeout: 300ms\n        max_request_timeout: 300ms\n        conditions:\n          - {{name: pairs, expr: 'result.content.all(a, result.content.all(b, a.type == b.type))'}}\n",
            attacks()
        );
        let mut case = Case::start(dir, &server, "", &[], vec![]).await;
        case.mon.wait_status("attacker", "healthy", PATIENCE).await;
        let threads = held(case.mon.pid()).threads;
        case.attack(RSS_BOUND_MIB).await;
        let now = held(case.mon.pid()).threads;
        assert!(
            now <= threads + 4,
            "threads grew from {threads} to {now}: evaluations piled up"
        );
        let (_, v) = case.mon.server("attacker").await;
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("took over") || detail.contains("still running"),
            "the condition says it was cut short: {v}"
        );
        stops_at_once(&mut case.mon).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_stream_of_empty_events_is_a_flood_like_any_other() {
    require!(program("python3"));
    alone(async {
        // "\n\n" as fast as the stream takes it: each an event that cost
        // nothing against the message budget.
        let dir = tempfile::tempdir().expect("tempdir");
        let trigger = dir.path().join("attack").display().to_string();
        let (peer, port) =
            python_peer(&["sse", "blank-events", &trigger], &dir.path().join("port")).await;
        let server =
            format!("  - id: attacker\n    transport: sse\n    url: http://127.0.0.1:{port}/sse\n");
        let mut case = Case::start(dir, &server, "", &[], vec![peer]).await;
        case.mon.wait_status("attacker", "healthy", PATIENCE).await;
        case.attack(RSS_BOUND_MIB).await;
        wait_metrics(&case.mon, "the stream cut as message_flood", |m| {
            counter(
                m,
                "mcpmon_session_closes_total",
                &[("reason", "message_flood")],
            ) >= 1.0
        })
        .await;
        stops_at_once(&mut case.mon).await;
    })
    .await;
}
