//! The prompt probe: get a configured prompt (`prompts/get` of its name,
//! with its arguments) the way a client filling a prompt menu would, and
//! check the messages it renders. A server that refuses the prompt as
//! configured answers `-32602` (no prompt of that name, or arguments it no
//! longer takes): its own reason, `prompt_rejected`, since that is a
//! fleet file out of step with the server rather than a server in trouble.

use std::sync::Arc;
use std::time::Duration;

use super::request::{self, Request};
use super::{Cadence, FailureReason, Probe, ProbeKind, ProbeOutcome};
use crate::config::ServerSpec;
use crate::config::probes::PromptProbe;
use crate::transport::{BoxFuture, Era, Session};

/// One configured prompt probe of a server.
pub struct PromptGet {
    spec: Arc<ServerSpec>,
    index: usize,
    /// `prompt <name>`, for details and logs.
    name: String,
}

impl PromptGet {
    /// Prompt probe `index` of `spec`.
    pub fn of(spec: Arc<ServerSpec>, index: usize) -> Self {
        let name = format!("prompt {}", spec.probes.prompts[index].name);
        PromptGet { spec, index, name }
    }

    fn probe(&self) -> &PromptProbe {
        &self.spec.probes.prompts[self.index]
    }
}

impl Probe for PromptGet {
    fn kind(&self, _: Era) -> ProbeKind {
        ProbeKind::Prompt
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
        Box::pin(get(session, self.probe(), deadline))
    }
}

/// Get prompt `spec.name` under `deadline`; its conditions see the result
/// as `result`.
pub async fn get(session: &dyn Session, spec: &PromptProbe, deadline: Duration) -> ProbeOutcome {
    let mut params = serde_json::Map::new();
    params.insert("name".into(), spec.name.clone().into());
    if !spec.arguments.is_empty() {
        let arguments = (spec.arguments.iter())
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        params.insert("arguments".into(), serde_json::Value::Object(arguments));
    }
    let get = Request {
        kind: ProbeKind::Prompt,
        target: &spec.name,
        params,
        holds: "messages",
        conditions: &spec.conditions,
        refused: (&[-32602], FailureReason::PromptRejected),
    };
    request::send(session, get, deadline).await
}
