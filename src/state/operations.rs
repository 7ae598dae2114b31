//! What the owner hands an operations sink (the OTLP export) about every
//! probe and session, from the very observations it records its series
//! from: the sink's histograms count what `/metrics` counts, and its spans
//! are the probes the series describe. The sink is called on the owner's
//! task, so it must only record (into an aggregator, or onto a bounded
//! queue), never wait.

use std::time::Duration;

use super::snapshot::ServerStatus;
use crate::config::{ServerSpec, TransportSpec};
use crate::probe::ProbeOutcome;

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

/// One probe as the sink sees it.
#[derive(Debug)]
pub struct Operation<'a> {
    /// The server's status after the probe was judged.
    pub status: &'a ServerStatus,
    /// Its peer, for HTTP servers.
    pub peer: Option<&'a Peer>,
    /// The health tool's name (a health check's `gen_ai.tool.name`).
    pub health_tool: &'a str,
    /// What the probe found.
    pub outcome: &'a ProbeOutcome,
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
