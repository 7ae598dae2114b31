//! What the read-only synthetic kinds share: one request sent under a
//! fresh `traceparent`, its result's shape checked, its conditions run on
//! it as `result`, and the server's refusal of the probe's target read as
//! the kind's own reason.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::conditions::{self, Vars};
use super::{Answer, Cadence, Failure, FailureReason, Probe, ProbeKind, ProbeOutcome};
use crate::config::ServerSpec;
use crate::config::condition::{Condition, Subject};
use crate::transport::{BoxFuture, Era, RequestError, Session};

/// A read-only kind: the items of it a server is configured with, and the
/// request each one sends.
pub trait Read: 'static {
    /// One configured item.
    type Item;
    /// The kind: the `probe` label and the method.
    const KIND: ProbeKind;
    /// A server's configured items of this kind.
    fn items(spec: &ServerSpec) -> &[Self::Item];
    /// What an item names (a URI, a prompt), for details and logs.
    fn target(item: &Self::Item) -> &str;
    /// How often it runs and its deadline.
    fn cadence(item: &Self::Item) -> Cadence;
    /// The request it sends.
    fn request(item: &Self::Item) -> Request<'_>;
}

/// Item `index` of kind `K` of a server, as a probe.
pub struct Scheduled<K> {
    spec: Arc<ServerSpec>,
    index: usize,
    /// `<kind> <target>`, for details and logs.
    name: String,
    kind: PhantomData<fn() -> K>,
}

impl<K: Read> Scheduled<K> {
    /// Every configured item of kind `K` of `spec`, as probes.
    pub fn all(spec: &Arc<ServerSpec>) -> impl Iterator<Item = Box<dyn Probe>> + '_ {
        (0..K::items(spec).len()).map(|index| {
            let name = format!("{} {}", K::KIND.as_str(), K::target(&K::items(spec)[index]));
            let probe = Scheduled::<K> {
                spec: spec.clone(),
                index,
                name,
                kind: PhantomData,
            };
            Box::new(probe) as Box<dyn Probe>
        })
    }

    fn item(&self) -> &K::Item {
        &K::items(&self.spec)[self.index]
    }
}

impl<K: Read> Probe for Scheduled<K> {
    fn kind(&self, _: Era) -> ProbeKind {
        K::KIND
    }

    fn cadence(&self) -> Cadence {
        K::cadence(self.item())
    }

    fn name(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn run<'a>(
        &'a self,
        session: &'a dyn Session,
        deadline: Duration,
    ) -> BoxFuture<'a, ProbeOutcome> {
        Box::pin(send(session, K::request(self.item()), deadline))
    }
}

/// One request of a synthetic probe.
pub struct Request<'a> {
    /// Its kind: the `probe` label, and the method sent.
    pub kind: ProbeKind,
    /// What it names (a URI, a prompt): in the outcome and its detail.
    pub target: &'a str,
    /// Its params, without `_meta` (added here).
    pub params: serde_json::Map<String, Value>,
    /// The result's member that must be a list (`contents`, `messages`).
    pub holds: &'static str,
    /// What the result must satisfy.
    pub conditions: &'a [Condition],
    /// The JSON-RPC codes that mean the server has no such target, and the
    /// reason they count under.
    pub refused: (&'a [i32], FailureReason),
}

/// Send `r` under `deadline`.
pub async fn send(session: &dyn Session, r: Request<'_>, deadline: Duration) -> ProbeOutcome {
    let start = Instant::now();
    let trace = super::trace::new();
    let mut params = r.params;
    params.insert(
        "_meta".into(),
        serde_json::json!({"traceparent": trace.traceparent()}),
    );
    let answered = session
        .request_json(r.kind.method(), Value::Object(params), deadline)
        .await;
    let mut checked = Vec::new();
    let result = match answered {
        Ok(result) if result.get(r.holds).is_some_and(Value::is_array) => {
            let vars = Vars {
                json: vec![("result", result)],
                duration: Some(start.elapsed()),
            };
            checked = conditions::check(r.conditions, Subject::ToolResult, vars).await;
            Ok(Answer::Alive)
        }
        Ok(_) => Err(Failure::from_request(&RequestError::Unexpected)),
        Err(e) => Err(failure(&e, r.refused)),
    };
    ProbeOutcome {
        kind: r.kind,
        tool: Some(Arc::from(r.target)),
        duration: start.elapsed(),
        result: result.map_err(|f| f.traced(&trace.trace_hex())),
        trace: Some(Box::new(trace)),
        conditions: checked,
    }
}

/// A failed request, classified: the codes that refuse the target count
/// under the kind's reason.
fn failure(e: &RequestError, (codes, reason): (&[i32], FailureReason)) -> Failure {
    let mut f = Failure::from_request(e);
    if let RequestError::Rpc { code, .. } = e
        && codes.contains(code)
    {
        f.reason = reason;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusing_code_is_the_kinds_reason_and_any_other_is_not() {
        let refused: (&[i32], _) = (&[-32002, -32602], FailureReason::ResourceNotFound);
        for code in [-32002, -32602] {
            let e = RequestError::Rpc {
                code,
                message: "Resource not found".into(),
            };
            assert_eq!(failure(&e, refused).reason, FailureReason::ResourceNotFound);
            assert_eq!(failure(&e, refused).code, Some(code));
        }
        let other = RequestError::Rpc {
            code: -32603,
            message: "boom".into(),
        };
        assert_eq!(failure(&other, refused).reason, FailureReason::RpcError);
        assert_eq!(
            failure(&RequestError::Closed, refused).reason,
            FailureReason::Closed
        );
    }
}
