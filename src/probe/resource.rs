//! The resource probe: read a configured resource (`resources/read` of
//! its URI) the way a real client would, and check what it holds. A
//! resource the server no longer has is its own reason,
//! `resource_not_found`: `-32002` in the spec's first eras, `-32602` since
//! SEP-2164 (the only parameter is the URI).

use std::sync::Arc;
use std::time::Duration;

use super::request::{self, Request};
use super::{Cadence, FailureReason, Probe, ProbeKind, ProbeOutcome};
use crate::config::ServerSpec;
use crate::config::probes::ResourceProbe;
use crate::transport::{BoxFuture, Era, Session};

/// One configured resource probe of a server.
pub struct ResourceRead {
    spec: Arc<ServerSpec>,
    index: usize,
    /// `resource <uri>`, for details and logs.
    name: String,
}

impl ResourceRead {
    /// Resource probe `index` of `spec`.
    pub fn of(spec: Arc<ServerSpec>, index: usize) -> Self {
        let name = format!("resource {}", spec.probes.resources[index].uri);
        ResourceRead { spec, index, name }
    }

    fn probe(&self) -> &ResourceProbe {
        &self.spec.probes.resources[self.index]
    }
}

impl Probe for ResourceRead {
    fn kind(&self, _: Era) -> ProbeKind {
        ProbeKind::Resource
    }

    fn cadence(&self) -> Cadence {
        let p = self.probe();
        Cadence::synthetic(p.interval, p.request_timeout)
    }

    fn name(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn run<'a>(
        &'a self,
        session: &'a dyn Session,
        deadline: Duration,
    ) -> BoxFuture<'a, ProbeOutcome> {
        Box::pin(read(session, self.probe(), deadline))
    }
}

/// Read `spec.uri` under `deadline`; its conditions see the result as
/// `result`.
pub async fn read(session: &dyn Session, spec: &ResourceProbe, deadline: Duration) -> ProbeOutcome {
    let mut params = serde_json::Map::new();
    params.insert("uri".into(), spec.uri.clone().into());
    let read = Request {
        kind: ProbeKind::Resource,
        target: &spec.uri,
        params,
        holds: "contents",
        conditions: &spec.conditions,
        refused: (&[-32002, -32602], FailureReason::ResourceNotFound),
    };
    request::send(session, read, deadline).await
}
