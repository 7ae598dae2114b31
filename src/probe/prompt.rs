//! The prompt probe: get a configured prompt (`prompts/get` of its name,
//! with its arguments) the way a client filling a prompt menu would, and
//! check the messages it renders. A server that refuses the prompt as
//! configured answers `-32602` (no prompt of that name, or arguments it no
//! longer takes): its own reason, `prompt_rejected`, since that is a
//! fleet file out of step with the server rather than a server in trouble.

use super::request::{Read, Request};
use super::{Cadence, FailureReason, ProbeKind};
use crate::config::ServerSpec;
use crate::config::probes::PromptProbe;

/// Prompt gets, one per configured prompt.
pub struct PromptGet;

impl Read for PromptGet {
    type Item = PromptProbe;
    const KIND: ProbeKind = ProbeKind::Prompt;

    fn items(spec: &ServerSpec) -> &[PromptProbe] {
        &spec.probes.prompts
    }

    fn target(item: &PromptProbe) -> &str {
        &item.name
    }

    fn cadence(item: &PromptProbe) -> Cadence {
        Cadence::synthetic(item.interval, item.request_timeout)
    }

    /// Its conditions see the get's result as `result`.
    fn request(item: &PromptProbe) -> Request<'_> {
        let mut params = serde_json::Map::new();
        params.insert("name".into(), item.name.clone().into());
        if !item.arguments.is_empty() {
            let arguments = (item.arguments.iter())
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            params.insert("arguments".into(), serde_json::Value::Object(arguments));
        }
        Request {
            kind: Self::KIND,
            target: &item.name,
            params,
            holds: "messages",
            conditions: &item.conditions,
            refused: (&[-32602], FailureReason::PromptRejected),
        }
    }
}
