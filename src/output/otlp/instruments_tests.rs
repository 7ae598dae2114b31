use std::sync::Arc;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use tokio::time::Instant;

use super::*;
use crate::config::FleetPolicy;
use crate::probe::{Failure, FailureReason, ProbeKind};
use crate::state::Observation;
use crate::state::operations::Operations;
use crate::state::owner::Owner;
use crate::state::testing::{add, answered, event, failed, opened, spec};

/// The histograms as the owner's sink.
#[derive(Debug)]
struct Sink(Histograms);

impl Operations for Sink {
    fn operation(&self, op: &Operation<'_>) {
        self.0.operation(op);
    }
    fn session_ended(&self, end: &SessionEnd<'_>) {
        self.0.session(end);
    }
}

/// Every data point of the last collection: (instrument, attributes).
fn points(exporter: &InMemoryMetricExporter) -> Vec<(String, Vec<(String, String)>)> {
    let all: Vec<ResourceMetrics> = exporter.get_finished_metrics().expect("metrics");
    let last = all.last().expect("one collection");
    let mut out = Vec::new();
    for sm in last.scope_metrics() {
        for m in sm.metrics() {
            let attrs = |a: &mut dyn Iterator<Item = &KeyValue>| -> Vec<(String, String)> {
                a.map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect()
            };
            let mut each: Vec<Vec<(String, String)>> = Vec::new();
            match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    each.extend(h.data_points().map(|p| attrs(&mut p.attributes())));
                }
                AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                    each.extend(g.data_points().map(|p| attrs(&mut p.attributes())));
                }
                AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                    each.extend(g.data_points().map(|p| attrs(&mut p.attributes())));
                }
                AggregatedMetrics::U64(MetricData::Sum(s)) => {
                    each.extend(s.data_points().map(|p| attrs(&mut p.attributes())));
                }
                other => panic!("{}: unexpected kind {other:?}", m.name()),
            }
            out.extend(each.into_iter().map(|a| (m.name().to_owned(), a)));
        }
    }
    out
}

fn has(a: &[(String, String)], k: &str, v: &str) -> bool {
    a.iter().any(|(key, val)| key == k && val == v)
}

/// A meter over an in-memory exporter, and an owner telling its histograms.
fn setup() -> (SdkMeterProvider, InMemoryMetricExporter, Owner, Instant) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let sink = Sink(Histograms::new(&provider.meter("test")));
    let mut owner = Owner::new(FleetPolicy::default(), 1).with_operations(Some(Arc::new(sink)));
    let now = Instant::now();
    add(&mut owner, &spec("a"), now);
    event(&mut owner, "a", opened(), now);
    (provider, exporter, owner, now)
}

fn collect(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
    owner: &mut Owner,
) -> Vec<(String, Vec<(String, String)>)> {
    let (publisher, reader) = crate::state::reader::channel(None);
    publisher.published.send_replace(owner.publish());
    observe_judgment(&provider.meter("judgment"), &reader);
    provider.force_flush().expect("flush");
    points(exporter)
}

#[test]
fn a_healthy_server_costs_the_stated_points_named_as_the_conventions_say() {
    let (provider, exporter, mut owner, now) = setup();
    let probe = |outcome| Observation::Probe {
        outcome,
        was_late: false,
    };
    event(&mut owner, "a", probe(answered(ProbeKind::Ping, 2)), now);
    event(
        &mut owner,
        "a",
        probe(answered(ProbeKind::HealthCheck, 3)),
        now,
    );
    let points = collect(&provider, &exporter, &mut owner);
    let of_a: Vec<_> = points
        .iter()
        .filter(|(_, a)| has(a, "mcpmon.server.id", "a"))
        .collect();
    assert_eq!(of_a.len(), JUDGMENT_POINTS + 2, "{of_a:#?}");
    let op = |method: &str| {
        of_a.iter()
            .find(|(n, a)| {
                n == "mcp.client.operation.duration" && has(a, "mcp.method.name", method)
            })
            .unwrap_or_else(|| panic!("no {method} point: {of_a:#?}"))
    };
    let ping = &op("ping").1;
    assert!(has(ping, "network.transport", "pipe"), "{ping:?}");
    assert!(has(ping, "mcp.protocol.version", "2025-06-18"), "{ping:?}");
    assert!(!ping.iter().any(|(k, _)| k == "error.type"), "{ping:?}");
    let call = &op("tools/call").1;
    assert!(has(call, "gen_ai.tool.name", "health_check"), "{call:?}");
    let states: Vec<_> = of_a
        .iter()
        .filter(|(n, _)| n == "mcpmon.server.state")
        .collect();
    assert_eq!(states.len(), 4);
}

#[test]
fn the_judgment_is_pushed_under_the_names_the_metric_table_declares() {
    let (provider, exporter, mut owner, now) = setup();
    let probe = Observation::Probe {
        outcome: answered(ProbeKind::Ping, 2),
        was_late: false,
    };
    event(&mut owner, "a", probe, now);
    let points = collect(&provider, &exporter, &mut owner);
    let pushed: std::collections::BTreeSet<&str> = points
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| n.starts_with("mcpmon."))
        .collect();
    let declared: std::collections::BTreeSet<&str> = crate::output::families::Family::ALL
        .iter()
        .filter_map(|f| f.otlp_name())
        .collect();
    assert_eq!(pushed, declared);
}

#[test]
fn error_type_is_the_json_rpc_code_tool_error_or_the_reason() {
    let (provider, exporter, mut owner, now) = setup();
    let mut rpc = failed(ProbeKind::HealthCheck, FailureReason::RpcError);
    if let Err(f) = &mut rpc.result {
        f.code = Some(-32601);
    }
    let mut tool = failed(ProbeKind::Tool, FailureReason::ToolError);
    tool.tool = Some("search".into());
    tool.result = Err(Failure::tool_error());
    for outcome in [rpc, tool, failed(ProbeKind::Ping, FailureReason::Timeout)] {
        let obs = Observation::Probe {
            outcome,
            was_late: false,
        };
        event(&mut owner, "a", obs, now);
    }
    event(&mut owner, "a", Observation::Closed, now);
    let points = collect(&provider, &exporter, &mut owner);
    let errors: Vec<String> = points
        .iter()
        .filter(|(n, _)| n == "mcp.client.operation.duration")
        .filter_map(|(_, a)| {
            a.iter()
                .find(|(k, _)| k == "error.type")
                .map(|(_, v)| v.clone())
        })
        .collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    for want in ["-32601", "tool_error", "timeout"] {
        assert!(errors.iter().any(|e| e == want), "{want} in {errors:?}");
    }
    let tool_point = points
        .iter()
        .find(|(_, a)| has(a, "gen_ai.tool.name", "search"));
    assert!(tool_point.is_some(), "the probed tool is named");
    let sessions: Vec<_> = points
        .iter()
        .filter(|(n, _)| n == "mcp.client.session.duration")
        .collect();
    assert_eq!(
        sessions.len(),
        1,
        "a closed session is recorded once: {sessions:?}"
    );
    assert!(
        !sessions[0].1.iter().any(|(k, _)| k == "error.type"),
        "closed on purpose"
    );
}
