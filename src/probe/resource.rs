//! The resource probe: read a configured resource (`resources/read` of
//! its URI) the way a real client would, and check what it holds. A
//! resource the server no longer has is its own reason,
//! `resource_not_found`: `-32002` in the spec's first eras, `-32602` since
//! SEP-2164 (the only parameter is the URI).

use super::request::{Read, Request};
use super::{Cadence, FailureReason, ProbeKind};
use crate::config::ServerSpec;
use crate::config::probes::ResourceProbe;

/// Resource reads, one per configured URI.
pub struct ResourceRead;

impl Read for ResourceRead {
    type Item = ResourceProbe;
    const KIND: ProbeKind = ProbeKind::Resource;

    fn items(spec: &ServerSpec) -> &[ResourceProbe] {
        &spec.probes.resources
    }

    fn target(item: &ResourceProbe) -> &str {
        &item.uri
    }

    fn cadence(item: &ResourceProbe) -> Cadence {
        Cadence::synthetic(item.interval, item.request_timeout)
    }

    /// Its conditions see the read's result as `result`.
    fn request(item: &ResourceProbe) -> Request<'_> {
        let mut params = serde_json::Map::new();
        params.insert("uri".into(), item.uri.clone().into());
        Request {
            kind: Self::KIND,
            target: &item.uri,
            params,
            holds: "contents",
            conditions: &item.conditions,
            refused: (&[-32002, -32602], FailureReason::ResourceNotFound),
        }
    }
}
