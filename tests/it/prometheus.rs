//! The shipped monitoring parts, proven against the real thing: the rules
//! pass `promtool check` and `promtool test`, the compose file passes
//! `docker compose config`, and a real Prometheus, running the shipped
//! prometheus.yml and rules natively against a live mcpmon with one server
//! killed, evaluates every rule without error, returns data for every panel
//! query of every dashboard, and fires the unhealthy alert for the killed
//! server and no other.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::Value;

fn rule_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("alerts"))
        .expect("alerts/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    files
}

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    require!(
        program("prometheus"),
        program("promtool"),
        program("docker")
    );
    let out = run_ok(
        Command::new(which("promtool"))
            .arg("check")
            .arg("rules")
            .args(rule_files()),
    );
    assert!(!out.to_lowercase().contains("warning"), "{out}");
    let tests: Vec<PathBuf> = std::fs::read_dir(repo().join("alerts/tests"))
        .expect("alerts/tests")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(!tests.is_empty());
    let out = run_ok(
        Command::new(which("promtool"))
            .args(["test", "rules"])
            .args(&tests),
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_has_a_unit_test_and_an_absolute_runbook_link() {
    require!(
        program("prometheus"),
        program("promtool"),
        program("docker")
    );
    let rules: String = rule_files()
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .collect();
    let tests: String = std::fs::read_dir(repo().join("alerts/tests"))
        .expect("tests")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).expect("read"))
        .collect();
    let runbook = std::fs::read_to_string(repo().join("docs/runbook.md")).expect("docs/runbook.md");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 15, "{alerts:?}");
    for a in &alerts {
        assert!(
            tests.contains(&format!("alertname: {a}")),
            "{a} has no promtool test"
        );
    }
    let links: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
        .map(|l| l.trim_matches('"'))
        .collect();
    assert_eq!(links.len(), alerts.len(), "one runbook link per alert");
    let base = "https://github.com/mcpmon/mcpmon/blob/main/docs/runbook.md#";
    for link in links {
        // Alertmanager cannot follow a repo-relative path.
        let anchor = link
            .strip_prefix(base)
            .unwrap_or_else(|| panic!("runbook_url {link:?} is not an absolute link under {base}"));
        assert!(
            runbook
                .lines()
                .any(|h| h.starts_with('#')
                    && h.trim_start_matches('#').trim().to_lowercase() == anchor),
            "docs/runbook.md has no heading for #{anchor}"
        );
    }
}

#[test]
fn rules_come_from_the_mixin_and_name_no_job() {
    require!(
        program("prometheus"),
        program("promtool"),
        program("docker")
    );
    // The committed files are what alerts/build.py makes, Helm's copy included.
    run_ok(
        Command::new("python3")
            .arg(repo().join("alerts/build.py"))
            .arg("--check"),
    );
    for file in rule_files() {
        let text = std::fs::read_to_string(&file).expect("read");
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            assert!(
                !line.contains("job=") && !line.contains("job!=") && !line.contains("job=~"),
                "{}: a rule names a job: {line}",
                file.display()
            );
        }
    }
    // One selector, set in one place, reaches every mcpmon metric selector.
    let out = run_ok(
        Command::new("python3")
            .arg(repo().join("alerts/build.py"))
            .args(["--stdout", "--selector", "namespace=\"mon\""]),
    );
    let mut selectors = 0;
    // Expression lines only: annotations (`key: "…"`) hold prose and a
    // template query of their own.
    let exprs = out.lines().filter(|l| {
        let t = l.trim_start();
        !t.starts_with('#') && !t.starts_with("- ") && !t.contains(": ") && !t.ends_with(':')
    });
    for line in exprs {
        for (i, _) in line.match_indices("mcpmon_") {
            let before = line[..i].chars().next_back();
            if before.is_some_and(|c| c == ':' || c == '_' || c.is_ascii_alphanumeric()) {
                continue; // part of a recording rule's name
            }
            let name: String = line[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let rest = &line[i + name.len()..];
            let body = rest
                .strip_prefix('{')
                .and_then(|r| r.split_once('}'))
                .map(|(b, _)| b)
                .unwrap_or_else(|| panic!("{name} has no selector in: {line}"));
            assert!(
                body.contains("namespace=\"mon\""),
                "{name}{{{body}}} misses the selector"
            );
            selectors += 1;
        }
    }
    assert!(selectors >= 20, "{selectors} selectors checked");
}

#[test]
fn compose_file_is_valid() {
    require!(
        program("prometheus"),
        program("promtool"),
        program("docker")
    );
    let out = Command::new(which("docker"))
        .args(["compose", "config", "--quiet"])
        .current_dir(repo())
        .output()
        .expect("docker compose");
    assert!(
        out.status.success(),
        "docker compose config:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every panel query of a dashboard, with its template variables
/// substituted: those of the panels shown at mcpmon's default exposition.
fn panel_queries(file: &str, server: &str) -> Vec<(String, String)> {
    queries(file, server, false)
}

/// The queries of the panels in collapsed rows: series mcpmon exports only
/// with `--metrics.detail` or `--metrics.histograms=classic`.
fn opt_in_queries(file: &str, server: &str) -> Vec<(String, String)> {
    queries(file, server, true)
}

fn queries(file: &str, server: &str, opt_in: bool) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("dashboards").join(file)).expect("dashboard");
    let d: Value = serde_json::from_str(&text).expect("json");
    assert!(
        d["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{file}: stable uid"
    );
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(
        vars.contains(&"datasource") && vars.contains(&"server"),
        "{file}: {vars:?}"
    );
    let mut out = Vec::new();
    let top = d["panels"].as_array().expect("panels");
    let panels: Vec<&Value> = if opt_in {
        top.iter()
            .filter(|p| p["type"] == "row")
            .flat_map(|r| r["panels"].as_array().expect("row panels"))
            .collect()
    } else {
        top.iter().filter(|p| p["type"] != "row").collect()
    };
    for p in panels {
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "{file}: {}",
            p["title"]
        );
        for t in p["targets"].as_array().expect("targets") {
            let expr = t["expr"].as_str().expect("expr");
            if expr.contains("rate(") || expr.contains("increase(") || expr.contains("changes(") {
                assert!(expr.contains("$__rate_interval"), "{file}: {expr}");
            }
            let e = expr
                .replace("$__rate_interval", "15s")
                .replace("$job", "mcpmon")
                .replace("$server", server);
            out.push((
                format!("{file} / {}", p["title"].as_str().unwrap_or("?")),
                e,
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_prometheus_evaluates_rules_fills_dashboards_and_fires_for_the_killed_server() {
    require!(
        program("prometheus"),
        program("promtool"),
        program("docker")
    );
    let mut search = demo_http(&["--name", "search"], 0).await;
    let yaml = format!(
        r#"
global:
  ping_interval: 400ms
  ping_timeout: 300ms
  health_check_interval: 400ms
  health_check_timeout: 2s
  backoff_initial: 200ms
  backoff_max: 1s
  window: 5s
fleet:
  min_available_percentage: 50
servers:
  - id: billing
    transport: stdio
    command: {demo:?}
    args: ["--name", "billing"]
  - id: inventory
    transport: stdio
    command: {demo:?}
    args: ["--name", "inventory", "--status", "degraded", "--era", "legacy"]
  - id: reports
    transport: stdio
    command: {demo:?}
    args: ["--name", "reports", "--era", "legacy", "--latency-ms", "350", "--crash-after-ms", "5000"]
    tool_probes:
      - {{tool: build_report, arguments: {{steps: 3, step_ms: 150}}, interval: 2s, request_timeout: 1s, max_request_timeout: 2s}}
      - {{tool: sleep, arguments: {{ms: 5000}}, interval: 2s, request_timeout: 300ms, max_request_timeout: 2s}}
  - id: search
    transport: http
    url: {url}
"#,
        demo = demo_server().display(),
        url = search.url
    );
    let mon = Monitor::start(&yaml).await;
    mon.wait_status("search", "healthy", Duration::from_secs(10))
        .await;
    search.kill().await;
    mon.wait_status("search", "unhealthy", Duration::from_secs(5))
        .await;
    let prom = Prometheus::start(&[&mon.addr.to_string()]).await;

    // Data flows: every server's series scraped.
    eventually(
        "every server's series scraped",
        Duration::from_secs(30),
        async || {
            if prom.query("mcpmon_server_up").await.len() < 4 {
                Err("not yet")
            } else {
                Ok(())
            }
        },
    )
    .await;

    // Every panel query returns data (rates need a few scrapes, so retry
    // each one for a bounded time).
    let mut queries = panel_queries("mcpmon-fleet.json", ".*");
    queries.extend(panel_queries("mcpmon-server.json", "reports"));
    assert!(queries.len() >= 30, "{}", queries.len());
    let deadline = Instant::now() + Duration::from_secs(60);
    for (panel, expr) in &queries {
        let what = format!("{panel}: data for {expr}");
        let left = deadline.saturating_duration_since(Instant::now());
        eventually(&what, left, async || {
            if prom.query(expr).await.is_empty() {
                Err("none")
            } else {
                Ok(())
            }
        })
        .await;
    }
    // The opt-in panels' queries are valid PromQL (empty at this exposition).
    let opt_in = opt_in_queries("mcpmon-server.json", "reports");
    assert!(opt_in.len() >= 5, "{}", opt_in.len());
    for (_, expr) in &opt_in {
        prom.query(expr).await;
    }
    // The variables' own queries find values.
    assert!(!prom.query("mcpmon_build_info").await.is_empty());

    // The links from fleet panels to the server dashboard resolve: every
    // series of a linked panel names its server, and the server dashboard
    // opened on that server has data.
    let fleet: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("dashboards/mcpmon-fleet.json")).expect("fleet"),
    )
    .expect("json");
    let linked: Vec<String> = fleet["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["fieldConfig"].to_string().contains("var-server="))
        .filter_map(|p| p["title"].as_str().map(str::to_owned))
        .collect();
    assert!(linked.len() >= 3, "{linked:?}");
    for (panel, expr) in panel_queries("mcpmon-fleet.json", ".*") {
        if !linked.iter().any(|t| panel.ends_with(&format!("/ {t}"))) {
            continue;
        }
        for series in prom.query(&expr).await {
            let server = series["metric"]["server"]
                .as_str()
                .unwrap_or_else(|| panic!("{panel}: a series without a server: {series}"));
            let state = panel_queries("mcpmon-server.json", server)
                .into_iter()
                .find(|(p, _)| p.ends_with("/ State"))
                .expect("the server dashboard's State panel");
            assert!(
                !prom.query(&state.1).await.is_empty(),
                "{panel}: the link to {server} opens an empty dashboard"
            );
        }
    }

    // Every alerting and recording rule evaluates without error.
    eventually(
        "every rule evaluated ok",
        Duration::from_secs(20),
        async || {
            let groups = prom.api("/api/v1/rules", &[]).await["groups"].clone();
            let rules: Vec<Value> = groups
                .as_array()
                .expect("groups")
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            assert!(rules.len() >= 15, "{} rules loaded", rules.len());
            for r in &rules {
                assert_eq!(
                    r["lastError"].as_str().unwrap_or(""),
                    "",
                    "{}: {}",
                    r["name"],
                    r["lastError"]
                );
            }
            if rules.iter().all(|r| r["health"] == "ok") {
                return Ok(());
            }
            Err(format!("rules not all evaluated ok: {rules:?}"))
        },
    )
    .await;

    // McpServerUnhealthy fires (after its 1m `for`) for search and no other.
    let firing = eventually(
        "McpServerUnhealthy firing",
        Duration::from_secs(100),
        async || {
            let alerts = prom.api("/api/v1/alerts", &[]).await["alerts"].clone();
            let unhealthy: Vec<&Value> = alerts
                .as_array()
                .expect("alerts")
                .iter()
                .filter(|a| a["labels"]["alertname"] == "McpServerUnhealthy")
                .collect();
            let firing: BTreeSet<String> = unhealthy
                .iter()
                .filter(|a| a["state"] == "firing")
                .filter_map(|a| a["labels"]["server"].as_str().map(str::to_owned))
                .collect();
            if !firing.is_empty() {
                return Ok(firing);
            }
            Err(format!("McpServerUnhealthy never fired: {unhealthy:?}"))
        },
    )
    .await;
    assert_eq!(firing, BTreeSet::from(["search".to_owned()]));
    let alerts = prom.api("/api/v1/alerts", &[]).await["alerts"].clone();
    let desc = alerts
        .as_array()
        .expect("alerts")
        .iter()
        .find(|a| a["labels"]["alertname"] == "McpServerUnhealthy" && a["state"] == "firing")
        .map(|a| {
            a["annotations"]["description"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    assert!(desc.contains("reason: unreachable"), "{desc}");
    mon.stop().await;
}

#[test]
fn dashboards_link_servers_both_ways_and_say_what_their_numbers_are() {
    require!(
        program("prometheus"),
        program("promtool"),
        program("docker")
    );
    let load = |f: &str| -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(repo().join("dashboards").join(f)).expect("dashboard"),
        )
        .expect("json")
    };
    let fleet = load("mcpmon-fleet.json");
    let server = load("mcpmon-server.json");
    let text = |v: &Value| v.to_string();
    // Every panel, in rows or not.
    let all = |board: &Value| -> Vec<Value> {
        let top = board["panels"].as_array().cloned().expect("panels");
        top.iter()
            .flat_map(|p| {
                let inner = p["panels"].as_array().cloned().unwrap_or_default();
                std::iter::once(p.clone()).chain(inner)
            })
            .filter(|p| p["type"] != "row")
            .collect()
    };
    // Every fleet panel that shows servers one by one links to the server
    // dashboard with that server selected.
    for p in &all(&fleet) {
        let per_server = p["targets"].as_array().expect("targets").iter().any(|t| {
            t["expr"].as_str().is_some_and(|e| e.contains("by (server"))
                || t["legendFormat"] == "{{server}}"
                || t["legendFormat"]
                    .as_str()
                    .is_some_and(|l| l.contains("{{server}}"))
        });
        if per_server {
            let links = text(&p["fieldConfig"]);
            assert!(
                links.contains("/d/mcpmon-server/") && links.contains("var-server="),
                "{} has no link to the server dashboard",
                p["title"]
            );
        }
    }
    // And back.
    assert!(
        text(&server["links"]).contains("/d/mcpmon-fleet/"),
        "no way back to the fleet"
    );
    // Counts that should be zero are green at zero.
    for title in ["Servers unhealthy", "Servers degraded"] {
        let p = fleet["panels"]
            .as_array()
            .expect("panels")
            .iter()
            .find(|p| p["title"] == title)
            .expect(title);
        let steps = &p["fieldConfig"]["defaults"]["thresholds"]["steps"];
        assert_eq!(steps[0]["color"], "green", "{title}");
        assert_eq!(steps[1]["value"], 1, "{title}");
    }
    // Every numeric panel says its unit; the latency panel shows the alert's line.
    for board in [&fleet, &server] {
        for p in &all(board) {
            let kind = p["type"].as_str().unwrap_or_default();
            let exempt = [
                "Reason",
                "health_check values",
                "State",
                "Servers",
                "State timeline",
                "Liveness latency",
            ];
            if matches!(kind, "timeseries" | "stat" | "bargauge")
                && !exempt.contains(&p["title"].as_str().unwrap_or_default())
            {
                assert!(
                    p["fieldConfig"]["defaults"]["unit"].is_string(),
                    "{} has no unit",
                    p["title"]
                );
            }
        }
    }
    let latency = server["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| p["title"] == "Liveness latency quantiles")
        .expect("latency panel");
    assert_eq!(
        latency["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"],
        0.5
    );
    let rules = std::fs::read_to_string(repo().join("alerts/mcpmon-alerts.yml")).expect("alerts");
    assert!(
        rules.contains("server:mcpmon_ping_duration_seconds:p99_rate5m > 0.5"),
        "the dashboard's line must move with the alert"
    );
}
