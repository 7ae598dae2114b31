use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::FleetPolicy;
use crate::config::probes::ToolProbe;
use crate::probe::health_check::{HealthReport, Reported};
use crate::probe::{Answer, Deadline, Failure, FailureReason, ProbeKind, ProbeOutcome};
use crate::state::owner::Owner;
use crate::state::series::LATENCY_BUCKETS;
use crate::state::testing::{add, answered, event, opened, spec};
use crate::state::verdict::State;
use crate::state::{Msg, Observation};

fn lines(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

fn render(o: &mut Owner) -> String {
    Metrics::new("test", Exposition::FULL)
        .expect("metrics")
        .render(&o.publish())
}

/// A healthy server as it looks after a while: session open with the
/// health tool, pings and health checks answered, tools listed, stdio
/// process sampled, a state change behind it.
fn healthy_for_a_while(o: &mut Owner, id: &str, labels: usize, http: bool) {
    let now = Instant::now();
    let mut s = spec(id);
    if http {
        s.transport = crate::config::TransportSpec::Http {
            url: "http://127.0.0.1:1/mcp".parse().expect("url"),
            sse: false,
            headers: vec![],
            bearer_token: None,
            oauth2: None,
            tls: None,
        };
    }
    s.labels = (0..labels)
        .map(|i| crate::config::Label {
            name: format!("l{i}"),
            exported: format!("label_l{i}"),
            value: "v".into(),
        })
        .collect();
    add(o, &s, now);
    let mut open = opened();
    if let Observation::Opened { health_check, .. } = &mut open {
        *health_check = true;
    }
    event(o, id, open, now);
    let probe = |o: &mut Owner, outcome: ProbeOutcome| {
        let was_late = false;
        event(o, id, Observation::Probe { outcome, was_late }, now);
    };
    for ms in [1, 3, 40, 700] {
        probe(o, answered(ProbeKind::Ping, ms));
    }
    probe(
        o,
        ProbeOutcome {
            kind: ProbeKind::HealthCheck,
            tool: None,
            duration: Duration::from_millis(2),
            result: Ok(Answer::Health(HealthReport {
                status: Reported::Healthy,
                fields: vec![],
                is_error: false,
            })),
            trace: None,
            conditions: Vec::new(),
        },
    );
    if http {
        return;
    }
    event(
        o,
        id,
        Observation::Process(crate::transport::ProcessSample {
            state: crate::transport::procstat::RunState::Alive,
            cpu: Duration::from_millis(30),
            rss_bytes: 1 << 20,
        }),
        now,
    );
}

/// Series of `id` in an exposition.
fn series_of(text: &str, id: &str) -> Vec<String> {
    let needle = format!("server=\"{id}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&needle))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_healthy_server_stays_within_the_series_budget_by_default() {
    let mut o = Owner::new(FleetPolicy::default(), 2);
    healthy_for_a_while(&mut o, "stdio", 3, false);
    healthy_for_a_while(&mut o, "http", 3, true);
    let snap = o.publish();
    let count = |x: Exposition, id: &str| {
        assert_eq!(snap.servers[id].status.status, State::Healthy);
        let text = Metrics::new("test", x).expect("metrics").render(&snap);
        series_of(&text, id)
    };
    for id in ["stdio", "http"] {
        let default = count(Exposition::default(), id);
        assert!(
            default.len() <= SERIES_BUDGET,
            "{id}: {} series at the default exposition, budget {SERIES_BUDGET}:\n{}",
            default.len(),
            default.join("\n")
        );
        // The small histogram is the classic one, exact at its bounds.
        let classic = count(Exposition::FULL, id);
        for line in default.iter().filter(|l| l.contains("_bucket{")) {
            assert!(
                classic.contains(line),
                "{line} not in the classic histogram"
            );
        }
    }
    // The counts docs/metrics.md gives for each setting, read from its
    // table: the docs cannot drift from the exposition.
    let documented = documented_counts();
    assert_eq!(documented.len(), 5, "{documented:?}");
    for (histograms, detail, want) in documented {
        let x = Exposition { histograms, detail };
        let got = (count(x, "stdio").len(), count(x, "http").len());
        assert_eq!(got, want, "{x:?}: docs/metrics.md says {want:?}");
    }
}

/// The rows of docs/metrics.md's table of series per healthy server:
/// (histograms, detail) -> (stdio, http).
fn documented_counts() -> Vec<(Histograms, bool, (usize, usize))> {
    let doc = include_str!("../../../docs/metrics.md");
    let table = doc
        .split("| `--metrics.histograms` | `--metrics.detail` | stdio | HTTP |")
        .nth(1)
        .expect("the table of series per setting");
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let histograms = match cells[1].split('`').nth(1) {
                Some("small") => Histograms::Small,
                Some("off") => Histograms::Off,
                Some("classic") => Histograms::Classic,
                other => panic!("histograms {other:?} in {row}"),
            };
            let detail = cells[2].starts_with("on");
            let n = |c: &str| c.parse::<usize>().expect("a count");
            (histograms, detail, (n(cells[3]), n(cells[4])))
        })
        .collect()
}

#[test]
fn a_new_server_has_its_always_on_series_and_counters_at_zero() {
    let mut o = Owner::new(FleetPolicy::default(), 1);
    add(&mut o, &spec("a"), Instant::now());
    let text = render(&mut o);
    assert_eq!(
        lines(&text, "mcpmon_server_up{"),
        ["mcpmon_server_up{server=\"a\"} 0"]
    );
    assert_eq!(
        lines(&text, "mcpmon_server_state{"),
        [
            "mcpmon_server_state{server=\"a\",state=\"healthy\"} 0",
            "mcpmon_server_state{server=\"a\",state=\"degraded\"} 0",
            "mcpmon_server_state{server=\"a\",state=\"unhealthy\"} 0",
            "mcpmon_server_state{server=\"a\",state=\"unknown\"} 1",
        ]
    );
    assert_eq!(
        lines(&text, "mcpmon_server_reason{"),
        ["mcpmon_server_reason{reason=\"starting\",server=\"a\"} 1"]
    );
    assert_eq!(
        lines(&text, "mcpmon_probes_total{"),
        [
            "mcpmon_probes_total{probe=\"ping\",server=\"a\"} 0",
            "mcpmon_probes_total{probe=\"discover\",server=\"a\"} 0",
            "mcpmon_probes_total{probe=\"health_check\",server=\"a\"} 0",
        ]
    );
    assert!(
        lines(&text, "mcpmon_reconnects_total{")
            .contains(&"mcpmon_reconnects_total{reason=\"exited\",server=\"a\"} 0".to_owned())
    );
    for absent in [
        "mcpmon_ping_duration_seconds_bucket",
        "mcpmon_server_info{",
        "mcpmon_server_tools{",
        "mcpmon_child_cpu_seconds_total{",
    ] {
        assert!(!text.contains(absent), "{absent} rendered before any event");
    }
    // Every family is declared, samples or not.
    for f in Family::ALL {
        let (name, kind) = (f.name(), f.kind());
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} undeclared"
        );
    }
    assert!(text.contains("mcpmon_build_info{"));
    assert!(text.contains("mcpmon_fleet_servers{state=\"unknown\"} 1"));
    assert!(text.contains("mcpmon_snapshot_generation 1\n"));
}

#[test]
fn histograms_are_cumulative_and_counters_count() {
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 1);
    let mut s = spec("a");
    s.probes.tools.push(ToolProbe {
        tool: "slow".into(),
        arguments: Default::default(),
        interval: Duration::from_secs(60),
        request_timeout: Duration::from_secs(1),
        max_request_timeout: Duration::from_secs(2),
        conditions: vec![],
        task: Default::default(),
    });
    add(&mut o, &s, now);
    event(&mut o, "a", opened(), now);
    for ms in [0, 2, 20_000] {
        let mut outcome = answered(ProbeKind::Ping, ms);
        outcome.duration = Duration::from_micros(ms * 1000 + 300);
        event(
            &mut o,
            "a",
            Observation::Probe {
                outcome,
                was_late: false,
            },
            now,
        );
    }
    let cancelled = ProbeOutcome {
        kind: ProbeKind::Tool,
        tool: Some("slow".into()),
        duration: Duration::from_millis(200),
        result: Err(Failure {
            reason: FailureReason::Timeout,
            detail: "cancelled".into(),
            link_lost: false,
            cancelled: Some(Deadline::RequestTimeout),
            retry_after: None,
            code: None,
        }),
        trace: None,
        conditions: Vec::new(),
    };
    event(
        &mut o,
        "a",
        Observation::Probe {
            outcome: cancelled,
            was_late: false,
        },
        now,
    );
    let text = render(&mut o);
    let b = lines(&text, "mcpmon_ping_duration_seconds_bucket{");
    assert_eq!(b.len(), LATENCY_BUCKETS.bounds.len() + 1);
    assert_eq!(
        b[0],
        "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"0.0005\"} 1"
    );
    assert_eq!(
        b[2],
        "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"0.0025\"} 2"
    );
    assert_eq!(
        b[13],
        "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"10\"} 2"
    );
    assert_eq!(
        b[14],
        "mcpmon_ping_duration_seconds_bucket{server=\"a\",le=\"+Inf\"} 3"
    );
    assert_eq!(
        lines(&text, "mcpmon_ping_duration_seconds_count{"),
        ["mcpmon_ping_duration_seconds_count{server=\"a\"} 3"]
    );
    assert!(
        lines(&text, "mcpmon_probes_total{")
            .contains(&"mcpmon_probes_total{probe=\"ping\",server=\"a\"} 3".to_owned())
    );
    assert!(lines(&text, "mcpmon_probe_failures_total{").contains(
        &"mcpmon_probe_failures_total{probe=\"tool\",reason=\"timeout\",server=\"a\"} 1".to_owned()
    ));
    assert_eq!(
        lines(&text, "mcpmon_tool_call_duration_seconds_count{"),
        ["mcpmon_tool_call_duration_seconds_count{server=\"a\",tool=\"slow\"} 1"]
    );
    assert_eq!(
        lines(&text, "mcpmon_tool_call_cancellations_total{"),
        [
            "mcpmon_tool_call_cancellations_total{reason=\"request_timeout\",server=\"a\",tool=\"slow\"} 1"
        ]
    );
    assert_eq!(
        text.matches("# TYPE mcpmon_ping_duration_seconds histogram")
            .count(),
        1
    );
}

#[test]
fn operator_labels_are_one_escaped_series() {
    let mut o = Owner::new(FleetPolicy::default(), 1);
    let mut s = spec("a");
    s.labels = vec![crate::config::Label {
        name: "team".into(),
        exported: "label_team".into(),
        value: "pay\"ments\\x".into(),
    }];
    add(&mut o, &s, Instant::now());
    let text = render(&mut o);
    assert_eq!(
        lines(&text, "mcpmon_server_labels{"),
        [r#"mcpmon_server_labels{label_team="pay\"ments\\x",server="a"} 1"#]
    );
}

#[test]
fn values_from_servers_are_escaped() {
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 1);
    add(&mut o, &spec("a"), now);
    event(
        &mut o,
        "a",
        Observation::Opened {
            era: crate::transport::Era::Legacy,
            info: crate::transport::ServerInfo {
                protocol_version: "2025-06-18".into(),
                name: "we\"ird\\name".into(),
                version: "1.0".into(),
            },
            tools: None,
            handshake: Duration::ZERO,
            health_check: true,
        },
        now,
    );
    let report = HealthReport {
        status: Reported::Healthy,
        fields: vec![("load".to_owned(), f64::INFINITY)],
        is_error: false,
    };
    let outcome = ProbeOutcome {
        kind: ProbeKind::HealthCheck,
        tool: None,
        duration: Duration::from_millis(1),
        result: Ok(Answer::Health(report)),
        trace: None,
        conditions: Vec::new(),
    };
    event(
        &mut o,
        "a",
        Observation::Probe {
            outcome,
            was_late: false,
        },
        now,
    );
    let text = render(&mut o);
    let info = lines(&text, "mcpmon_server_info{");
    assert_eq!(info.len(), 1);
    assert!(
        info[0].contains(r#"server_name="we\"ird\\name""#),
        "{}",
        info[0]
    );
    assert!(
        info[0].ends_with(r#"server_version="1.0",transport="stdio"} 1"#),
        "{}",
        info[0]
    );
    assert_eq!(
        lines(&text, "mcpmon_health_check_value{"),
        ["mcpmon_health_check_value{field=\"load\",server=\"a\"} +Inf"]
    );
    assert!(
        info[0].starts_with(r#"mcpmon_server_info{health_check="true","#),
        "{}",
        info[0]
    );
}

#[test]
fn removed_servers_vanish_and_readded_ones_start_fresh() {
    let now = Instant::now();
    let mut o = Owner::new(FleetPolicy::default(), 2);
    add(&mut o, &spec("a"), now);
    add(&mut o, &spec("b"), now);
    let ping = || Observation::Probe {
        outcome: answered(ProbeKind::Ping, 3),
        was_late: false,
    };
    event(&mut o, "a", ping(), now);
    o.apply(Msg::Remove("a".into()), now);
    // A stopping supervisor may still report; nothing is rendered for it.
    event(&mut o, "a", ping(), now);
    let text = render(&mut o);
    assert!(!text.contains("server=\"a\""));
    assert!(text.contains("server=\"b\""));
    add(&mut o, &spec("a"), now);
    let text = render(&mut o);
    assert!(text.contains("mcpmon_probes_total{probe=\"ping\",server=\"a\"} 0"));
}

#[test]
fn the_availability_clocks_read_judged_time_and_the_down_part_of_it_at_the_scrape() {
    let mut o = Owner::new(FleetPolicy::default(), 1);
    let start = Instant::now() - Duration::from_secs(100);
    let failed_at = start + Duration::from_secs(60);
    add(&mut o, &spec("s"), start);
    event(&mut o, "s", opened(), start);
    for _ in 0..3 {
        event(
            &mut o,
            "s",
            Observation::Probe {
                outcome: answered(ProbeKind::Ping, 1),
                was_late: false,
            },
            start,
        );
    }
    for _ in 0..10 {
        let outcome = crate::state::testing::failed(ProbeKind::Ping, FailureReason::Closed);
        event(
            &mut o,
            "s",
            Observation::Probe {
                outcome,
                was_late: false,
            },
            failed_at,
        );
    }
    let snap = o.publish();
    assert_eq!(snap.servers["s"].status.status, State::Unhealthy);
    let text = Metrics::new("test", Exposition::default())
        .expect("metrics")
        .render(&snap);
    let value = |name: &str| -> f64 {
        let line = lines(&text, &format!("{name}{{server=\"s\"}} "));
        assert_eq!(line.len(), 1, "{name} in:\n{text}");
        line[0]
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    // Judged from the first answer (100 s ago), down for the last 40 s; the
    // scrape is a moment after `publish`, hence the second of slack.
    let (observed, down) = (
        value("mcpmon_server_observed_seconds_total"),
        value("mcpmon_server_down_seconds_total"),
    );
    assert!((100.0..101.0).contains(&observed), "observed {observed}");
    assert!((40.0..41.0).contains(&down), "down {down}");
}

/// Reads served stale are counted by reason, each from zero: the count
/// the readers keep, as it is at the scrape.
#[tokio::test(start_paused = true)]
async fn stale_reads_are_counted_from_zero_by_reason() {
    let m = Metrics::new("test", Exposition::default()).expect("metrics");
    let (publisher, reader) = crate::state::reader::channel(None);
    m.count_stale_reads(reader.stale_reads())
        .expect("registered");
    let stale = |text: &str| lines(text, "mcpmon_state_reads_stale_total{");
    let text = m.render(&Snapshot::default());
    assert_eq!(
        stale(&text),
        [
            "mcpmon_state_reads_stale_total{reason=\"queue_full\"} 0",
            "mcpmon_state_reads_stale_total{reason=\"timeout\"} 0",
        ]
    );
    // Nobody answers the ask: it waits its bound and takes the published.
    reader.current().await;
    let text = m.render(&Snapshot::default());
    assert!(
        stale(&text).contains(&"mcpmon_state_reads_stale_total{reason=\"timeout\"} 1".to_owned()),
        "{text}"
    );
    drop(publisher);
}
