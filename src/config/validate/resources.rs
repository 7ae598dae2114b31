//! Resource probes as configured: a `resource_probes` item's checks, and
//! the spec it becomes.

use super::*;
use crate::config::condition::{Condition, Subject};
use crate::config::raw::ResourceProbeFile;

/// A `resources/read` of a named resource made on a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceProbe {
    /// The resource's URI (a config value, so safe as a label).
    pub uri: String,
    /// How often it is read; an overdue read is skipped, never stacked.
    pub interval: Duration,
    /// The read's deadline.
    pub request_timeout: Duration,
    /// What its contents must satisfy (`result` is the read's result,
    /// `contents` and all).
    pub conditions: Vec<Condition>,
}

/// Longest URI read: it is a label value.
const MAX_URI: usize = 512;

impl Validator<'_> {
    /// One `resource_probes` item, its timeout defaulting to the server's
    /// `request_timeout`.
    pub(super) fn resource_probe(
        &mut self,
        rp: &ResourceProbeFile,
        settings: &Settings,
        p: &[Seg],
    ) -> ResourceProbe {
        let uri = &rp.uri;
        if uri.is_empty() || uri.len() > MAX_URI || uri.chars().any(char::is_control) {
            let why =
                format!("resource probe uri {uri:?}: 1 to {MAX_URI} bytes, no control characters");
            self.error(&under(p, "uri"), why);
        } else if !uri.contains(':') {
            let why = format!("resource probe uri {uri:?} has no scheme (file:///…, https://…)");
            self.error(&under(p, "uri"), why);
        }
        let mut interval = rp.interval.0;
        if interval.is_zero() {
            let why = format!("resource probe {uri:?}: interval must be greater than zero");
            self.error(&under(p, "interval"), why);
        }
        if matches!(self.trust, Trust::Remote { .. }) && interval < REMOTE_TOOL_INTERVAL {
            interval = REMOTE_TOOL_INTERVAL;
            let show = humantime::format_duration(interval);
            let why = format!(
                "resource probe {uri:?}: interval raised to {show}, the least an http_sd entry may set"
            );
            self.warn(p, why);
        }
        ResourceProbe {
            uri: uri.clone(),
            interval,
            request_timeout: rp.request_timeout.unwrap_or(settings.request_timeout).0,
            conditions: self.conditions(
                &rp.conditions,
                Subject::ToolResult,
                &under(p, "conditions"),
            ),
        }
    }
}
