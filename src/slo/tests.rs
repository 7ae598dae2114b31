use std::time::Duration;

use super::*;
use crate::config::{Dur, Label};

fn server(id: &str, labels: &[(&str, &str)], slo: Slo) -> ServerSpec {
    let mut s = crate::state::testing::spec(id);
    s.labels = labels
        .iter()
        .map(|(n, v)| Label {
            name: (*n).to_owned(),
            exported: format!("label_{n}"),
            value: (*v).to_owned(),
        })
        .collect();
    s.settings.slo = slo;
    s
}

fn docs(text: &str) -> Vec<yaml_serde::Value> {
    text.split("---\n")
        .filter(|d| !d.trim().is_empty() && !d.trim_start().starts_with('#'))
        .map(|d| yaml_serde::from_str(d).expect("each document is YAML"))
        .collect()
}

#[test]
fn names_are_dns_labels_and_two_ids_never_share_one() {
    assert_eq!(
        name("search-1"),
        "search-1",
        "a name that is one already stays"
    );
    let (upper, lower) = (name("Search"), name("search"));
    assert_ne!(upper, lower);
    for n in [&upper, &name("a.b_c"), &name("..."), &name(&"x".repeat(90))] {
        assert!(n.len() <= 47, "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{n}"
        );
        assert!(!n.starts_with('-') && !n.ends_with('-'), "{n}");
    }
    assert_ne!(name("a.b"), name("a_b"));
}

#[test]
fn one_objective_per_server_selects_its_series_with_its_own_targets() {
    let strict = Slo {
        availability: 99.99,
        ..Slo::default()
    };
    let objs = objectives(
        &[
            server("a", &[], Slo::default()),
            server("b", &[], strict.clone()),
        ],
        None,
    )
    .expect("objectives");
    assert_eq!(objs.len(), 2);
    assert_eq!(objs[0].matcher, "server=\"a\"");
    assert_eq!(objs[1].slo, strict);
    assert_eq!(objs[1].labels["server"], "b");
}

#[test]
fn by_label_groups_the_servers_that_have_it_under_the_strictest_targets() {
    let fast = Slo {
        latency_threshold: Dur(Duration::from_millis(100)),
        window: Dur(Duration::from_secs(28 * 86_400)),
        ..Slo::default()
    };
    let strict = Slo {
        availability: 99.95,
        latency: 98.0,
        ..Slo::default()
    };
    let fleet = [
        server("pay.1", &[("team", "pay")], fast),
        server("pay-2", &[("team", "pay")], strict),
        server("web", &[("team", "web")], Slo::default()),
        server("lone", &[], Slo::default()),
    ];
    let objs = objectives(&fleet, Some("team")).expect("objectives");
    assert_eq!(objs.len(), 2, "the server without the label is in no group");
    let pay = &objs[0];
    assert_eq!(pay.name, "team-pay");
    assert_eq!(
        pay.matcher, r#"server=~"pay\\.1|pay-2""#,
        "a dot is literal in the regex"
    );
    assert_eq!(pay.slo.availability, 99.95);
    assert_eq!(pay.slo.latency, 99.0);
    assert_eq!(pay.slo.latency_threshold.0, Duration::from_millis(100));
    assert_eq!(pay.slo.window.0, Duration::from_secs(30 * 86_400));
    assert_eq!(
        objectives(&fleet, Some("zone")),
        Err(SloError::NoServers(" with the label \"zone\"".into()))
    );
}

#[test]
fn each_format_writes_both_indicators_over_the_time_clocks_and_the_kept_bucket() {
    let objs = objectives(&[server("a", &[], Slo::default())], None).expect("objectives");
    let sloth = docs(&render(&objs, SloFormat::Sloth, "monitoring").expect("sloth"));
    assert_eq!(sloth.len(), 1);
    let slos = &sloth[0]["slos"];
    assert_eq!(slos[0]["objective"].as_f64(), Some(99.9));
    assert_eq!(
        slos[0]["sli"]["events"]["error_query"].as_str(),
        Some("sum(rate(mcpmon_server_down_seconds_total{server=\"a\"}[{{.window}}]))")
    );
    assert!(
        slos[1]["sli"]["events"]["error_query"]
            .as_str()
            .is_some_and(|q| q.contains("le=\"0.5\""))
    );

    let pyrra = docs(&render(&objs, SloFormat::Pyrra, "obs").expect("pyrra"));
    assert_eq!(pyrra.len(), 2);
    assert_eq!(pyrra[0]["metadata"]["namespace"].as_str(), Some("obs"));
    assert_eq!(pyrra[0]["spec"]["target"].as_str(), Some("99.9"));
    assert_eq!(pyrra[0]["spec"]["window"].as_str(), Some("30d"));
    assert_eq!(
        pyrra[1]["spec"]["indicator"]["latency"]["total"]["metric"].as_str(),
        Some("mcpmon_ping_duration_seconds_count{server=\"a\"}")
    );

    let openslo = docs(&render(&objs, SloFormat::Openslo, "").expect("openslo"));
    assert_eq!(openslo.len(), 3, "the service and two SLOs");
    assert_eq!(openslo[0]["kind"].as_str(), Some("Service"));
    assert_eq!(
        openslo[1]["spec"]["objectives"][0]["target"].as_f64(),
        Some(0.999)
    );
}

#[test]
fn sloth_takes_one_period_so_differing_windows_are_refused() {
    let week = Slo {
        window: Dur(Duration::from_secs(7 * 86_400)),
        ..Slo::default()
    };
    let objs = objectives(
        &[server("a", &[], Slo::default()), server("b", &[], week)],
        None,
    )
    .expect("objectives");
    let err = render(&objs, SloFormat::Sloth, "").expect_err("two periods");
    assert!(err.to_string().contains("a 30d, b 7d"), "{err}");
    assert!(
        render(&objs, SloFormat::Pyrra, "").is_ok(),
        "Pyrra has a window per object"
    );
}

#[test]
fn the_config_refuses_targets_outside_a_percentage_a_bound_it_cannot_count_and_a_short_window() {
    let bad = Slo {
        availability: 100.0,
        latency: 0.0,
        latency_threshold: Dur(Duration::from_millis(300)),
        window: Dur(Duration::from_secs(3600)),
    };
    let keys: Vec<&str> = bad.problems().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        ["availability", "latency", "latency_threshold", "window"]
    );
    assert!(Slo::default().problems().is_empty());
}
