//! The verdict's vocabulary: the published [`State`]s and the bounded
//! [`Reason`]s (safe as label values), and how a lost session (a
//! transport's or a probe's failure) reads as a reason: the one place
//! that says so.

use serde::Serialize;
use strum::VariantArray;

use super::Loss;
use crate::probe::FailureReason;
use crate::transport::LinkFailure;

/// A server's health, as published.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum State {
    /// No verdict yet.
    Unknown,
    /// Answers promptly and reports itself fine.
    Healthy,
    /// Answers, but slowly, with some errors, or reports itself degraded.
    Degraded,
    /// Gone, stuck, failing, or reports itself unhealthy.
    Unhealthy,
}

impl State {
    /// Every state, in the order metrics list them.
    pub const ALL: [State; 4] = [
        State::Healthy,
        State::Degraded,
        State::Unhealthy,
        State::Unknown,
    ];

    /// The lowercase name used in JSON and labels.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether a server in this state counts as up (`mcpmon_server_up`):
    /// it answers, however slowly.
    pub fn is_up(self) -> bool {
        matches!(self, State::Healthy | State::Degraded)
    }

    /// How bad a state is, for picking the worst of several.
    pub fn severity(self) -> u8 {
        match self {
            State::Unknown => 0,
            State::Healthy => 1,
            State::Degraded => 2,
            State::Unhealthy => 3,
        }
    }
}

/// Why a server is in its state. A bounded set: safe as a label value.
/// Adding one is a variant here (and, for a transport failure, its
/// [`LinkFailure`] in `transport/error.rs`): its name, its series and its
/// place in the docs follow from the variant.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Reason {
    /// Not judged yet.
    Starting,
    /// Everything within thresholds.
    Ok,
    /// Median liveness latency (and the latest answer) above a threshold.
    Slow,
    /// Error ratio above a threshold.
    Errors,
    /// Liveness probes went unanswered in two or more separate episodes
    /// within the window, though the latest one was answered.
    Timeouts,
    /// The last liveness probe got no answer in time, transport still up,
    /// and no other sign of life.
    Unresponsive,
    /// Liveness answers are late, but the server shows signs of life
    /// (progress notifications, CPU time advancing): working, not dead.
    Busy,
    /// The stdio process is stopped (SIGSTOP) or traced.
    Stopped,
    /// No answer at all for `stuck_after`, transport still up.
    Stuck,
    /// The stdio child exited.
    Exited,
    /// Connection refused, reset, or DNS failure.
    Unreachable,
    /// Could not start or connect (spawn failure, HTTP error).
    ConnectFailed,
    /// The TLS handshake refused the server's certificate (expired, for
    /// another name, from an unknown authority).
    TlsFailed,
    /// The URL answers HTTP, but not as an MCP endpoint (an HTML page, a
    /// 404 or 405 without JSON-RPC, a body that is not JSON-RPC).
    NotMcp,
    /// The URL speaks the legacy HTTP+SSE transport (2024-11-05), not the
    /// one configured.
    WrongTransport,
    /// Connected, but the MCP handshake failed or timed out.
    HandshakeFailed,
    /// The server wants credentials, or refused the ones configured (401).
    Unauthenticated,
    /// The configured credentials lack a permission (403).
    Forbidden,
    /// The server asked to be called less (429, or 503 with `Retry-After`):
    /// it is there, so degraded, never unhealthy on that account alone.
    Throttled,
    /// A tool named in `expected_tools` is not listed.
    ToolsMissing,
    /// A condition the operator wrote does not hold (a tool's result, the
    /// health report, or the tool list).
    ConditionFailed,
    /// A tool probe's task stopped advancing (`lastUpdatedAt` unchanged)
    /// for its whole `ttl`: the server took the work and does none of it.
    TaskStuck,
    /// A tool probe's task asked for input (elicitation); a monitor has no
    /// one to ask, so it was cancelled.
    InputRequired,
    /// The server sent requests faster than a client can be asked to serve
    /// them; the session was dropped.
    RequestFlood,
    /// The server sent more messages or bytes than its inbound budget
    /// allows; the session was dropped.
    MessageFlood,
    /// The server's health_check said degraded.
    HealthCheckDegraded,
    /// The server's health_check said unhealthy.
    HealthCheckUnhealthy,
    /// The health_check tool returned an error.
    HealthCheckFailed,
    /// The health_check tool answered in a shape with no readable status.
    HealthCheckUnreadable,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: &'static [Reason] = <Reason as strum::VariantArray>::VARIANTS;

    /// The snake_case name used in JSON and labels.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The transport failure this reason names, if it is one: the reasons a
    /// session ends on or cannot open for.
    pub fn link_failure(self) -> Option<LinkFailure> {
        LinkFailure::VARIANTS
            .iter()
            .copied()
            .find(|f| Reason::from(*f) == self)
    }
}

impl From<LinkFailure> for Reason {
    fn from(f: LinkFailure) -> Self {
        match f {
            LinkFailure::Exited => Reason::Exited,
            LinkFailure::Unreachable => Reason::Unreachable,
            LinkFailure::ConnectFailed => Reason::ConnectFailed,
            LinkFailure::TlsFailed => Reason::TlsFailed,
            LinkFailure::NotMcp => Reason::NotMcp,
            LinkFailure::WrongTransport => Reason::WrongTransport,
            LinkFailure::HandshakeFailed => Reason::HandshakeFailed,
            LinkFailure::Unauthenticated => Reason::Unauthenticated,
            LinkFailure::Forbidden => Reason::Forbidden,
            LinkFailure::Throttled => Reason::Throttled,
            LinkFailure::RequestFlood => Reason::RequestFlood,
            LinkFailure::MessageFlood => Reason::MessageFlood,
        }
    }
}

impl From<Loss> for Reason {
    fn from(loss: Loss) -> Self {
        match loss {
            Loss::Link(f) => Reason::from(f),
            // Refused credentials, not the transport, are why: the link
            // was ended on the refusal.
            Loss::Probe {
                failure: FailureReason::Unauthenticated,
                ..
            } => Reason::Unauthenticated,
            Loss::Probe {
                failure: FailureReason::Forbidden,
                ..
            } => Reason::Forbidden,
            Loss::Probe { link, .. } => Reason::from(link),
            Loss::Stuck => Reason::Stuck,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FailureReason, LinkFailure, Loss, Reason};

    #[test]
    fn a_loss_reads_as_the_refusal_or_else_as_the_link() {
        use strum::VariantArray;
        for link in LinkFailure::VARIANTS.iter().copied() {
            assert_eq!(Reason::from(Loss::Link(link)), Reason::from(link));
            for failure in FailureReason::VARIANTS.iter().copied() {
                let expected = match failure {
                    FailureReason::Unauthenticated => Reason::Unauthenticated,
                    FailureReason::Forbidden => Reason::Forbidden,
                    _ => Reason::from(link),
                };
                assert_eq!(Reason::from(Loss::Probe { failure, link }), expected);
            }
        }
        assert_eq!(Reason::from(Loss::Stuck), Reason::Stuck);
    }

    #[test]
    fn every_reason_has_a_runbook_row_and_a_place_in_the_reference() {
        let runbook = include_str!("../../docs/runbook.md");
        // The verdict's own reasons, and the synthetic probes' beside
        // their configuration.
        let reference = [
            include_str!("../../docs/verdict.md"),
            include_str!("../../docs/configuration.md"),
        ]
        .concat();
        for r in Reason::ALL {
            let name = r.as_str();
            assert!(
                runbook.contains(&format!("\n| `{name}` | ")),
                "docs/runbook.md has no row for {name}"
            );
            if *r != Reason::Starting {
                assert!(
                    reference.contains(&format!("`{name}`")),
                    "neither docs/verdict.md nor docs/configuration.md names {name}"
                );
            }
        }
    }

    #[test]
    fn a_server_that_answers_is_up_however_slowly_and_only_then() {
        use super::State;
        let up: Vec<State> = [
            State::Unknown,
            State::Healthy,
            State::Degraded,
            State::Unhealthy,
        ]
        .into_iter()
        .filter(|s| s.is_up())
        .collect();
        assert_eq!(up, [State::Healthy, State::Degraded]);
    }
}
