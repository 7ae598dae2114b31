//! The liveness probe: `ping` in the legacy era, `server/discover` in the
//! modern one (where `ping` is gone). It answers "can the peer still answer
//! a message?", nothing more.

use std::time::Duration;

use tokio::time::Instant;

use super::{Answer, Cadence, Failure, Probe, ProbeKind, ProbeOutcome};
use crate::config::Settings;
use crate::transport::{BoxFuture, Era, Session};

/// The liveness probe of a server.
pub struct Liveness(Cadence);

impl Liveness {
    /// Every `ping_interval`, late after `ping_timeout`. The request
    /// itself may stay in flight past `stuck_after`: the owner judges
    /// stuck from silence, and the answer must never race that judgement.
    pub fn of(s: &Settings) -> Self {
        Liveness(Cadence {
            every: s.ping_interval.0,
            deadline: s.stuck_after.0 * 2,
            late_after: Some(s.ping_timeout.0),
            needs_listing: false,
        })
    }
}

impl Probe for Liveness {
    fn kind(&self, era: Era) -> ProbeKind {
        kind(era)
    }

    fn cadence(&self) -> Cadence {
        self.0
    }

    fn run<'a>(
        &'a self,
        session: &'a dyn Session,
        deadline: Duration,
    ) -> BoxFuture<'a, ProbeOutcome> {
        Box::pin(run(session, deadline))
    }
}

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
