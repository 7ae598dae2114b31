//! The resource probe: read a configured resource (`resources/read` of
//! its URI) the way a real client would, and check what it holds. A
//! resource the server no longer has is its own reason,
//! `resource_not_found`: `-32002` in the spec's first eras, `-32602` since
//! SEP-2164 (the only parameter is the URI).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::conditions::{self, Vars};
use super::{Answer, Cadence, Failure, FailureReason, Probe, ProbeKind, ProbeOutcome};
use crate::config::condition::Subject;
use crate::config::{ResourceProbe, ServerSpec};
use crate::transport::{BoxFuture, Era, RequestError, Session};

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
        let name = format!("resource {}", spec.resource_probes[index].uri);
        ResourceRead { spec, index, name }
    }

    fn probe(&self) -> &ResourceProbe {
        &self.spec.resource_probes[self.index]
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
    let start = Instant::now();
    let trace = super::trace::new();
    let params = serde_json::json!({
        "uri": spec.uri,
        "_meta": {"traceparent": trace.traceparent},
    });
    let answered = session
        .request_json("resources/read", params, deadline)
        .await;
    let mut checked = Vec::new();
    let result = match answered {
        Ok(result) if result.get("contents").is_some_and(Value::is_array) => {
            let vars = Vars {
                json: vec![("result", result)],
                duration: Some(start.elapsed()),
            };
            checked = conditions::check(&spec.conditions, Subject::ToolResult, vars).await;
            Ok(Answer::Alive)
        }
        Ok(_) => Err(Failure::from_request(&RequestError::Unexpected)),
        Err(e) => Err(failure(&e)),
    };
    ProbeOutcome {
        kind: ProbeKind::Resource,
        tool: Some(Arc::from(spec.uri.as_str())),
        duration: start.elapsed(),
        result: result.map_err(|f| f.traced(&trace.trace_id)),
        trace: Some(Box::new(trace)),
        conditions: checked,
    }
}

/// A failed read, classified: the codes a server answers a URI it does
/// not have with are `resource_not_found`.
fn failure(e: &RequestError) -> Failure {
    let mut f = Failure::from_request(e);
    if let RequestError::Rpc {
        code: -32002 | -32602,
        ..
    } = e
    {
        f.reason = FailureReason::ResourceNotFound;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_resource_is_its_own_reason_in_either_era() {
        for code in [-32002, -32602] {
            let e = RequestError::Rpc {
                code,
                message: "Resource not found".into(),
            };
            assert_eq!(failure(&e).reason, FailureReason::ResourceNotFound);
            assert_eq!(failure(&e).code, Some(code));
        }
        let other = RequestError::Rpc {
            code: -32603,
            message: "boom".into(),
        };
        assert_eq!(failure(&other).reason, FailureReason::RpcError);
        assert_eq!(failure(&RequestError::Closed).reason, FailureReason::Closed);
    }
}
