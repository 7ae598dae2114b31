//! The OTLP instruments: the MCP conventions' client histograms, recorded
//! from the owner's observations, and the judgment as mcpmon's own
//! instruments, observed from the owner's latest snapshot at each push.
//! Both read the one source `/metrics` reads, so the numbers agree.
//!
//! Attributes per server: `mcpmon.server.id` and `network.transport`
//! everywhere; the operator's labels as `mcpmon.label.<name>` on the
//! judgment; `mcp.protocol.version`, `server.address` and `server.port`
//! where the conventions put them (the histograms), so a protocol upgrade
//! does not fork the judgment's series.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, Meter};

use crate::output::families::Family;
use crate::state::Reader;
use crate::state::operations::{Operation, Peer, SessionEnd};
use crate::state::series::unix_seconds;
use crate::state::snapshot::ServerStatus;
use crate::state::verdict::State;

/// The conventions' recommended buckets for MCP durations, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The judgment's data points per server: up, four states, the reason,
/// last check, state changes and tool-surface changes. The histograms add
/// one point per (method, tool, error.type, protocol version) seen: two
/// for a healthy server with a health tool, one more per configured tool
/// probe, and one per kind of failure it has shown.
pub const JUDGMENT_POINTS: usize = 9;

/// `network.transport`: `pipe` for a child's stdio, `tcp` for HTTP.
pub fn network_transport(status: &ServerStatus) -> &'static str {
    if status.transport == "stdio" {
        "pipe"
    } else {
        "tcp"
    }
}

/// The attributes of a probe, as the conventions name them.
pub fn operation_attributes(op: &Operation<'_>) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("mcp.method.name", op.method),
        KeyValue::new("mcpmon.server.id", op.status.id.clone()),
    ];
    if let Some(tool) = op.tool {
        a.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
    }
    if let Some(e) = &op.error_type {
        a.push(KeyValue::new("error.type", e.clone()));
    }
    peer_attributes(&mut a, op.status, op.peer);
    a
}

fn peer_attributes(a: &mut Vec<KeyValue>, status: &ServerStatus, peer: Option<&Peer>) {
    a.push(KeyValue::new(
        "network.transport",
        network_transport(status),
    ));
    if let Some(info) = &status.server_info {
        a.push(KeyValue::new(
            "mcp.protocol.version",
            info.protocol_version.clone(),
        ));
    }
    if let Some(p) = peer {
        a.push(KeyValue::new("server.address", p.address.clone()));
        a.push(KeyValue::new("server.port", i64::from(p.port)));
    }
}

/// The conventions' histograms.
#[derive(Debug)]
pub struct Histograms {
    operation: Histogram<f64>,
    session: Histogram<f64>,
}

impl Histograms {
    /// Create them on `meter`.
    pub fn new(meter: &Meter) -> Histograms {
        let histogram = |name: &'static str, what: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(what)
                .with_boundaries(BUCKETS.to_vec())
                .build()
        };
        Histograms {
            operation: histogram(
                "mcp.client.operation.duration",
                "Duration of the MCP requests mcpmon's probes send, answered or not.",
            ),
            session: histogram(
                "mcp.client.session.duration",
                "Duration of mcpmon's MCP sessions, recorded when one ends.",
            ),
        }
    }

    /// Record one probe; its attributes, for its span.
    pub fn operation(&self, op: &Operation<'_>) -> Vec<KeyValue> {
        let attributes = operation_attributes(op);
        self.operation
            .record(op.duration.as_secs_f64(), &attributes);
        attributes
    }

    /// Record one session's end.
    pub fn session(&self, end: &SessionEnd<'_>) {
        let mut a = vec![KeyValue::new("mcpmon.server.id", end.status.id.clone())];
        if let Some(e) = end.error {
            a.push(KeyValue::new("error.type", e));
        }
        peer_attributes(&mut a, end.status, end.peer);
        self.session.record(end.duration.as_secs_f64(), &a);
    }
}

/// A server's judgment attributes: its id, transport and labels.
fn judgment_attributes(status: &ServerStatus) -> Vec<KeyValue> {
    let mut a = vec![
        KeyValue::new("mcpmon.server.id", status.id.clone()),
        KeyValue::new("network.transport", network_transport(status)),
    ];
    for l in status.labels.iter() {
        a.push(KeyValue::new(
            format!("mcpmon.label.{}", l.name),
            l.value.clone(),
        ));
    }
    a
}

fn with(base: &[KeyValue], extra: KeyValue) -> Vec<KeyValue> {
    let mut a = base.to_vec();
    a.push(extra);
    a
}

/// The name and description OTLP gives `family`: the metric table's, so
/// a series is declared once for both outputs.
fn declared(family: Family) -> (&'static str, &'static str) {
    match family.otlp_name() {
        Some(name) => (name, family.help()),
        // The table is fixed at compile time, and a test checks that
        // every instrument pushed is named there.
        None => (family.name(), family.help()),
    }
}

/// Register the judgment instruments, observed from the latest snapshot.
pub fn observe_judgment(meter: &Meter, snapshots: &Reader) {
    let latest = {
        let rx = snapshots.clone();
        move || rx.published()
    };
    let each = move |f: &dyn Fn(&ServerStatus, &crate::state::series::Series, &[KeyValue])| {
        let snap = latest();
        for r in snap.servers.values() {
            f(&r.status, &r.series, &judgment_attributes(&r.status));
        }
    };
    let each = Arc::new(each);
    let gauge = |family: Family| {
        let (name, help) = declared(family);
        meter.u64_observable_gauge(name).with_description(help)
    };
    let counter = |family: Family| {
        let (name, help) = declared(family);
        meter.u64_observable_counter(name).with_description(help)
    };
    let e = each.clone();
    gauge(Family::Up)
        .with_callback(move |o| e(&|st, _, a| o.observe(u64::from(st.status.is_up()), a)))
        .build();
    let e = each.clone();
    gauge(Family::State)
        .with_callback(move |o| {
            e(&|st, _, a| {
                for s in State::ALL {
                    let v = u64::from(st.status == s);
                    o.observe(v, &with(a, KeyValue::new("mcpmon.state", s.as_str())));
                }
            })
        })
        .build();
    let e = each.clone();
    gauge(Family::Reason)
        .with_callback(move |o| {
            e(&|st, _, a| {
                o.observe(
                    1,
                    &with(a, KeyValue::new("mcpmon.reason", st.reason.as_str())),
                )
            })
        })
        .build();
    let e = each.clone();
    let (name, help) = declared(Family::LastCheck);
    meter
        .f64_observable_gauge(name)
        .with_unit("s")
        .with_description(help)
        .with_callback(move |o| {
            e(&|st, _, a| {
                if let Some(t) = st.last_check {
                    o.observe(unix_seconds(t), a);
                }
            })
        })
        .build();
    let e = each.clone();
    counter(Family::StateChanges)
        .with_callback(move |o| e(&|_, s, a| o.observe(s.state_changes, a)))
        .build();
    let e = each;
    counter(Family::ToolsChanges)
        .with_callback(move |o| e(&|_, s, a| o.observe(s.tools_changes, a)))
        .build();
}

#[cfg(test)]
#[path = "instruments_tests.rs"]
mod tests;
