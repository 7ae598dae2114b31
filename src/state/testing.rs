//! Helpers for unit tests of the state layer and of what renders it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::owner::Owner;
use super::{Msg, Observation};
use crate::config::{Protocol, ServerSpec, Settings, TransportSpec};
use crate::probe::{Answer, Failure, FailureReason, ProbeKind, ProbeOutcome};
use crate::transport::{Era, ServerInfo};

/// A stdio server with default settings.
pub fn spec(id: &str) -> ServerSpec {
    ServerSpec {
        id: id.to_owned(),
        transport: TransportSpec::Stdio {
            command: "x".into(),
            args: vec![],
            env: vec![],
            inherit_env: vec![],
            cwd: None,
        },
        settings: Settings::default(),
        protocol: Protocol::Auto,
        probes: Default::default(),
        expanded: vec![],
        expected_tools: vec![],
        conditions: vec![],
        labels: vec![],
        trust: crate::config::Trust::Local,
        scrubber: Default::default(),
        operator: None,
    }
}

/// An answered probe.
pub fn answered(kind: ProbeKind, ms: u64) -> ProbeOutcome {
    ProbeOutcome {
        kind,
        tool: None,
        duration: Duration::from_millis(ms),
        result: Ok(Answer::Alive),
        trace: None,
        conditions: Vec::new(),
    }
}

/// A failed probe.
pub fn failed(kind: ProbeKind, reason: FailureReason) -> ProbeOutcome {
    ProbeOutcome {
        kind,
        tool: None,
        duration: Duration::from_millis(1),
        result: Err(Failure {
            reason,
            detail: format!("{} failed", kind.as_str()),
            link_lost: matches!(reason, FailureReason::Closed | FailureReason::Unreachable),
            cancelled: None,
            retry_after: None,
            code: None,
        }),
        trace: None,
        conditions: Vec::new(),
    }
}

/// Add `spec` to `owner`.
pub fn add(owner: &mut Owner, spec: &ServerSpec, now: Instant) {
    let (stuck, _) = tokio::sync::watch::channel(0);
    owner.apply(
        Msg::Add {
            spec: Arc::new(spec.clone()),
            stuck,
        },
        now,
    );
}

/// Send `event` about `id`.
pub fn event(owner: &mut Owner, id: &str, event: Observation, now: Instant) {
    owner.apply(Msg::Server(Arc::from(id), event), now);
}

/// A legacy session opened.
pub fn opened() -> Observation {
    Observation::Opened {
        era: Era::Legacy,
        info: ServerInfo {
            protocol_version: "2025-06-18".into(),
            name: "demo".into(),
            version: "1".into(),
        },
        tools: Some(crate::transport::tools::ToolSurface::from_json([])),
        handshake: Duration::from_millis(2),
        health_check: false,
    }
}
