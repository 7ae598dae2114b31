//! The liveness probe: `ping` in the legacy era, `server/discover` in the
//! modern one (where `ping` is gone). It answers "can the peer still answer
//! a message?", nothing more.

use std::time::Duration;

use tokio::time::Instant;

use super::{Answer, Failure, ProbeKind, ProbeOutcome};
use crate::transport::{Era, Session};

/// The probe kind liveness is for an era.
pub fn kind(era: Era) -> ProbeKind {
    match era {
        Era::Legacy => ProbeKind::Ping,
        Era::Modern => ProbeKind::Discover,
    }
}

/// Send the era's liveness request under `deadline` (liveness needs no
/// spec beyond the session's era). The duration is the
/// round trip as the session measured it when answered.
pub async fn run(session: &dyn Session, deadline: Duration) -> ProbeOutcome {
    let start = Instant::now();
    // Liveness requests carry no `_meta`, so this trace is the probe's
    // span alone: the server never hears of it.
    let trace = super::trace::new();
    let r = session.liveness(deadline).await;
    ProbeOutcome {
        kind: kind(session.era()),
        tool: None,
        duration: *r.as_ref().unwrap_or(&start.elapsed()),
        result: r
            .map(|_| Answer::Alive)
            .map_err(|e| Failure::from_request(&e)),
        trace: Some(Box::new(trace)),
        conditions: Vec::new(),
    }
}
