//! What the owner hands an operations sink (the OTLP export) about every
//! probe and session, from the very observations it records its series
//! from: the sink's histograms count what `/metrics` counts, and its spans
//! are the probes the series describe. The sink is called on the owner's
//! task, so it must only record (into an aggregator, or onto a bounded
//! queue), never wait. What a sink reads of a probe is read off its
//! outcome here, in the conventions' terms, so no sink needs a probe type.

use std::time::{Duration, SystemTime};

use super::snapshot::ServerStatus;
use crate::config::{ServerSpec, TransportSpec};
use crate::probe::{FailureReason, ProbeOutcome};

/// The network peer of an HTTP server: the conventions' `server.address`
/// and `server.port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Host name or address, as configured.
    pub address: String,
    /// Port, explicit or the scheme's default.
    pub port: u16,
}

impl Peer {
    /// The peer of an HTTP server; `None` for a child process.
    pub fn of(spec: &ServerSpec) -> Option<Peer> {
        match &spec.transport {
            TransportSpec::Http { url, .. } => Some(Peer {
                address: url.host_str()?.to_owned(),
                port: url.port_or_known_default()?,
            }),
            TransportSpec::Stdio { .. } => None,
        }
    }
}

/// One probe as the sink sees it, named as the MCP conventions name it.
#[derive(Debug)]
pub struct Operation<'a> {
    /// The server's status after the probe was judged.
    pub status: &'a ServerStatus,
    /// Its peer, for HTTP servers.
    pub peer: Option<&'a Peer>,
    /// The MCP method it sent: `mcp.method.name`.
    pub method: &'static str,
    /// The tool it called (a tool probe's, or the health tool):
    /// `gen_ai.tool.name`.
    pub tool: Option<&'a str>,
    /// `error.type`: the JSON-RPC code of an error answer, else mcpmon's
    /// bounded failure reason (`tool_error` for `isError: true`).
    pub error_type: Option<String>,
    /// The bounded failure reason, if it failed.
    pub failure: Option<&'static str>,
    /// From sending to its end.
    pub duration: Duration,
    /// The trace it sent, when sampled: its span's ids.
    pub span: Option<SpanIds>,
}

/// A sampled probe's span: the ids its `traceparent` carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanIds {
    /// The trace id.
    pub trace_id: u128,
    /// The probe's span id.
    pub span_id: u64,
    /// When the probe started.
    pub started: SystemTime,
}

impl<'a> Operation<'a> {
    /// `outcome`, a probe of the server in `status` (whose health tool is
    /// `health_tool`), as a sink sees it.
    pub fn of(
        status: &'a ServerStatus,
        peer: Option<&'a Peer>,
        health_tool: &'a str,
        outcome: &'a ProbeOutcome,
    ) -> Self {
        let failure = outcome.failure();
        let code = outcome.result.as_ref().err().and_then(|f| f.code);
        let error_type = failure.map(|reason| match (reason, code) {
            (FailureReason::RpcError, Some(code)) => code.to_string(),
            (reason, _) => reason.as_str().to_owned(),
        });
        // The conventions' tool name is a `tools/call`'s: a configured
        // tool's, or else the health check's.
        let tool = (outcome.kind.method() == "tools/call")
            .then(|| outcome.tool.as_deref().unwrap_or(health_tool));
        let span = (outcome.trace.as_deref())
            .filter(|t| t.sampled)
            .map(|t| SpanIds {
                trace_id: t.trace_id,
                span_id: t.span_id,
                started: t.started,
            });
        Operation {
            status,
            peer,
            method: outcome.kind.method(),
            tool,
            error_type,
            failure: failure.map(FailureReason::as_str),
            duration: outcome.duration,
            span,
        }
    }
}

/// A session that ended, as the sink sees it.
#[derive(Debug)]
pub struct SessionEnd<'a> {
    /// The server's status.
    pub status: &'a ServerStatus,
    /// Its peer, for HTTP servers.
    pub peer: Option<&'a Peer>,
    /// From open to end.
    pub duration: Duration,
    /// Why it ended, when it was lost rather than closed on purpose.
    pub error: Option<&'static str>,
}

/// Receives every probe and session end, on the owner's task.
pub trait Operations: Send + Sync + std::fmt::Debug {
    /// A probe ended.
    fn operation(&self, op: &Operation<'_>);
    /// A session ended.
    fn session_ended(&self, end: &SessionEnd<'_>);
}
