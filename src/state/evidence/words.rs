//! The words of the evidence: the detail published with each reason is
//! the text of that reason's own evidence, never whatever was said last (a
//! stopped process read "no liveness answer within 2s"). One arm per
//! reason, and a test holds every reason to an arm of its own.

use std::time::Duration;

use tokio::time::Instant;

use super::{Link, Tracker};
use crate::state::verdict::Reason;
use crate::state::window::LATENCY_SAMPLES;

impl Tracker {
    /// What the evidence says is wrong right now, before hysteresis, in
    /// words: the detail of the judgement's reason.
    pub fn problem(&self, now: Instant) -> String {
        self.detail_for(self.judgement(now).reason, now)
    }

    /// The text that explains `reason`, from its own evidence.
    pub(super) fn detail_for(&self, reason: Reason, now: Instant) -> String {
        let p = &self.problems;
        let text = match reason {
            Reason::Ok => String::new(),
            // Empty until a first attempt failed.
            Reason::Starting => p.link.clone(),
            Reason::Stopped => "process is stopped (SIGSTOP or traced)".to_owned(),
            Reason::Stuck => format!(
                "no answer or sign of life for {:?}",
                self.thresholds.stuck_after
            ),
            Reason::Busy => format!(
                "{}; the server shows signs of life (progress or CPU)",
                p.liveness
            ),
            Reason::Unresponsive | Reason::Timeouts => p.liveness.clone(),
            Reason::Errors => p.failure.clone(),
            Reason::Slow => {
                let w = self.window.stats(now);
                let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis());
                format!(
                    "liveness answers take {} ms (median of the last {}; {} ms the latest)",
                    ms(w.median_latency),
                    LATENCY_SAMPLES,
                    ms(w.latest_latency)
                )
            }
            Reason::Throttled if self.link == Link::Up => p.throttle.clone(),
            Reason::ToolsMissing => format!(
                "expected tools missing: {}",
                (self.status.tools.as_ref()).map_or(String::new(), |t| t.missing.join(", "))
            ),
            Reason::ConditionFailed => self.scrub(&self.conditions.detail()),
            Reason::TaskStuck | Reason::InputRequired => self.tasks.detail(reason),
            Reason::HealthCheckDegraded => "health_check said degraded".to_owned(),
            Reason::HealthCheckUnhealthy => "health_check said unhealthy".to_owned(),
            Reason::HealthCheckFailed | Reason::HealthCheckUnreadable => p.health.clone(),
            // Every reason a link fails for is told by the link's own words
            // (a test holds each other reason to an arm of its own).
            r => {
                debug_assert!(r.link_failure().is_some(), "{r:?} has no detail");
                p.link.clone()
            }
        };
        if self.awaiting_liveness && self.link == Link::Up && !text.is_empty() {
            return format!("{text}; a new session is open, waiting for its first liveness answer");
        }
        text
    }
}
