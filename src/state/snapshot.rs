//! What the state owner publishes: immutable [`Snapshot`]s of the fleet,
//! one [`ServerRecord`] (status and counters together) per server, and the
//! [`ServerStatus`] every output renders. `/metrics`, `/health/*` and the
//! status page all read these, and nothing else of the state layer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::series::Series;
use super::verdict::{Reason, Reported, State};
use crate::config::{FleetPolicy, Rejection};
use crate::discovery::Mechanism;

/// What a snapshot publishes of the layers below it, named here: outputs
/// read these as the snapshot's own vocabulary and import nothing of the
/// probes or the transports.
pub use crate::probe::task::TaskSeen;
pub use crate::transport::tools::ToolSurface;
pub use crate::transport::{Era, ServerInfo};

/// Events kept per server for the timeline.
pub const MAX_EVENTS: usize = 32;

/// What a timeline entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum EventKind {
    /// A session opened.
    SessionOpened,
    /// An open session was lost.
    SessionClosed,
    /// An attempt to open one failed.
    ConnectFailed,
    /// The published state changed.
    StateChanged,
    /// The tool surface differs from the last listing.
    ToolsChanged,
}

impl EventKind {
    /// The snake_case name, as JSON carries it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One entry of a server's timeline.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineEntry {
    /// When.
    #[serde(serialize_with = "ser_time")]
    pub at: SystemTime,
    /// What.
    pub kind: EventKind,
    /// Bounded reason.
    pub reason: Reason,
    /// Human-readable detail.
    pub detail: String,
}

/// What the health_check tool last said.
#[derive(Clone, Debug, Serialize)]
pub struct HealthCheckStatus {
    /// The reported status, if readable.
    pub status: Option<Reported>,
    /// Numeric fields.
    pub fields: Vec<(String, f64)>,
    /// Whether the call failed.
    pub failed: bool,
    /// When.
    #[serde(serialize_with = "ser_time")]
    pub at: SystemTime,
}

/// Everything published about one server.
#[derive(Clone, Debug)]
pub struct ServerStatus {
    /// Server id. Shared, as are the other strings a ping does not change:
    /// every judged observation after a publish copies the status.
    pub id: Arc<str>,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The operator's labels from the config.
    pub labels: Arc<[crate::config::Label]>,
    /// Published state.
    pub status: State,
    /// Bounded reason.
    pub reason: Reason,
    /// Human-readable detail (error text, secrets scrubbed).
    pub detail: String,
    /// When the state last changed.
    pub since: SystemTime,
    /// The last change of state, if there was one.
    pub last_transition: Option<Change>,
    /// When the last probe result arrived.
    pub last_check: Option<SystemTime>,
    /// Latency of the last answered liveness probe.
    pub response_time_ms: Option<f64>,
    /// Era of the current session.
    pub era: Option<Era>,
    /// Server identity of the current session.
    pub server_info: Option<Arc<ServerInfo>>,
    /// When the current session opened (or the last one, while none is).
    pub session_started: Option<SystemTime>,
    /// Whether a session is open now. When not, `era`, `server_info`, the
    /// tools and the latency are the last session's, ended at
    /// `session_ended`.
    pub session_open: bool,
    /// When the last session ended, while none is open.
    pub session_ended: Option<SystemTime>,
    /// How long the last handshake took (spawn or connect included).
    pub handshake_ms: Option<f64>,
    /// Sessions opened so far.
    pub sessions: u64,
    /// Failures in a row: liveness probes and connection attempts, until
    /// a liveness answer.
    pub consecutive_failures: u32,
    /// The latest tool listing, kept across sessions so a redeploy that
    /// changes it is seen; the one copy of it mcpmon keeps.
    pub tools: Option<Arc<ToolsSeen>>,
    /// The last health_check result.
    pub health_check: Option<HealthCheckStatus>,
    /// Recent timeline, oldest first. Shared: publishing a status on every
    /// probe copies a pointer, and only a new event copies the timeline.
    pub events: Arc<VecDeque<TimelineEntry>>,
    /// The maintenance window the server is in, if one is open: its
    /// probes go on, its verdict stays, and it counts neither for nor
    /// against the fleet policy.
    pub maintenance: Option<InMaintenance>,
    /// The states of the last hour (and the one before it), as
    /// (since, state), oldest first: the status page's history strip.
    pub history: Arc<VecDeque<(SystemTime, State)>>,
    /// Each task probe's latest task: the busy evidence while one works.
    pub tasks: Vec<TaskSeen>,
    /// What the operator that runs it says, beside the verdict: "the
    /// operator says Ready, mcpmon says unhealthy" is one look (and one
    /// alert). Discovery keeps it current without a restart.
    pub operator: Option<crate::config::OperatorWord>,
}

impl ServerStatus {
    /// The status of a server not yet judged.
    pub fn new(spec: &crate::config::ServerSpec) -> ServerStatus {
        ServerStatus {
            id: spec.id.as_str().into(),
            transport: spec.transport.kind(),
            labels: spec.labels.clone().into(),
            status: State::Unknown,
            reason: Reason::Starting,
            detail: String::new(),
            since: SystemTime::now(),
            last_transition: None,
            last_check: None,
            response_time_ms: None,
            era: None,
            server_info: None,
            session_started: None,
            session_open: false,
            session_ended: None,
            handshake_ms: None,
            sessions: 0,
            consecutive_failures: 0,
            tools: None,
            health_check: None,
            events: Arc::new(VecDeque::new()),
            maintenance: None,
            tasks: Vec::new(),
            operator: spec.operator.clone(),
            history: Arc::new(VecDeque::from([(SystemTime::now(), State::Unknown)])),
        }
    }
}

/// A tool listing as judged: the surface, and what the config expected
/// of it. Shared: publishing a status copies a pointer.
#[derive(Debug)]
pub struct ToolsSeen {
    /// The tools, their hash and the listing's bounds.
    pub surface: ToolSurface,
    /// Tools in `expected_tools` the listing lacks.
    pub missing: Vec<String>,
}

impl ToolsSeen {
    /// `surface`, against the tools the config expects.
    pub fn new(surface: ToolSurface, expected: &[String]) -> ToolsSeen {
        let missing = expected
            .iter()
            .filter(|want| !surface.names().any(|n| n == want.as_str()))
            .cloned()
            .collect();
        ToolsSeen { surface, missing }
    }

    /// Listed tools that break the spec's rules, and why: a warning only.
    pub fn invalid(&self) -> impl Iterator<Item = (&str, &str)> {
        (self.surface.tools.iter()).filter_map(|t| Some((t.name.as_str(), t.problem.as_deref()?)))
    }
}

/// An open maintenance window, as a server's status holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InMaintenance {
    /// The window's name.
    pub window: Arc<str>,
    /// When it closes.
    pub until: SystemTime,
}

/// A change of published state.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Change {
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// Why.
    pub reason: Reason,
    /// When.
    #[serde(serialize_with = "ser_time")]
    pub at: SystemTime,
}

/// Longest history kept for the status page.
pub const HISTORY: Duration = Duration::from_secs(3600);
/// Most state changes kept for it (a flapping server keeps its last ones).
pub(super) const HISTORY_MAX: usize = 128;

/// Counts per state.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Servers.
    pub total: usize,
    /// Healthy servers.
    pub healthy: usize,
    /// Degraded servers.
    pub degraded: usize,
    /// Unhealthy servers.
    pub unhealthy: usize,
    /// Servers with no verdict yet.
    pub unknown: usize,
    /// Servers in a maintenance window (not in `total` nor any state).
    pub maintenance: usize,
    /// Healthy share, percent.
    pub health_percentage: f64,
}

/// One server as published: its status and its counters, always together.
#[derive(Clone, Debug)]
pub struct ServerRecord {
    /// State, reason, session and timeline. Shared: an observation that
    /// moves only counters copies the series, not the status.
    pub status: Arc<ServerStatus>,
    /// Counters and histograms.
    pub series: Series,
}

/// Discovery's counters, written by the owner from [`super::DiscoveryNews`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscoverySeries {
    /// Valid servers each mechanism returns now.
    pub servers: std::collections::BTreeMap<Mechanism, usize>,
    /// Refreshes that failed.
    pub failures: std::collections::BTreeMap<Mechanism, u64>,
    /// Entries left out, by why.
    pub rejected: std::collections::BTreeMap<(Mechanism, Rejection), u64>,
}

impl DiscoverySeries {
    /// Count `news`.
    pub fn record(&mut self, news: super::DiscoveryNews) {
        use super::DiscoveryNews::*;
        match news {
            Failed(m) => *self.failures.entry(m).or_default() += 1,
            Rejected(m, r, n) => *self.rejected.entry((m, r)).or_default() += n,
            Servers(m, n) => {
                self.servers.insert(m, n);
            }
        }
    }
}

/// An immutable picture of the fleet.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Servers by id, in id order, shared with the owner's next
    /// snapshots until it writes them ([`super::servers`]).
    pub servers: super::servers::Servers<ServerRecord>,
    /// The policy in force.
    pub policy: FleetPolicy,
    /// True once every server has a verdict or the startup grace passed (latched).
    pub ready: bool,
    /// Increases with every published snapshot; every output carries it.
    pub generation: u64,
    /// What discovery found.
    pub discovery: DiscoverySeries,
    /// Servers per state, kept by the owner as each record changes (the
    /// healthy share is left to [`Snapshot::summary`]).
    pub counts: Summary,
}

impl Snapshot {
    /// Counts per state, and the healthy share.
    pub fn summary(&self) -> Summary {
        let mut s = self.counts.clone();
        s.health_percentage = if s.total == 0 {
            100.0
        } else {
            // Two decimals are plenty for a percentage and keep JSON tidy.
            (s.healthy as f64 * 10000.0 / s.total as f64).round() / 100.0
        };
        s
    }

    /// The counts walked from the records: what the owner's running
    /// counts must equal, and what a snapshot built by hand starts from.
    #[cfg(test)]
    pub fn counted(mut self) -> Self {
        let mut s = Summary::default();
        for r in self.servers.values() {
            if r.status.maintenance.is_some() {
                s.maintenance += 1;
                continue;
            }
            s.total += 1;
            match r.status.status {
                State::Healthy => s.healthy += 1,
                State::Degraded => s.degraded += 1,
                State::Unhealthy => s.unhealthy += 1,
                State::Unknown => s.unknown += 1,
            }
        }
        self.counts = s;
        self
    }

    /// Share (0-1) of servers available under the policy; 1 for an empty fleet.
    pub fn available_ratio(&self) -> f64 {
        self.available_ratio_of(&self.summary())
    }

    /// Servers available under the policy, from counts already made.
    pub fn available_of(&self, s: &Summary) -> usize {
        s.healthy
            + if self.policy.degraded_is_available {
                s.degraded
            } else {
                0
            }
    }

    /// [`Snapshot::available_ratio`] from counts already made.
    pub fn available_ratio_of(&self, s: &Summary) -> f64 {
        if s.total == 0 {
            1.0
        } else {
            self.available_of(s) as f64 / s.total as f64
        }
    }

    /// Fleet status and whether the policy is met.
    pub fn verdict(&self) -> (State, bool) {
        let s = self.summary();
        let meets = self.available_ratio() * 100.0 + 1e-9 >= self.policy.min_available_percentage;
        let state = if s.total > 0 && s.unknown == s.total {
            State::Unknown
        } else if s.healthy == s.total {
            State::Healthy
        } else if meets {
            State::Degraded
        } else {
            State::Unhealthy
        };
        (state, meets)
    }
}

pub(super) fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

/// RFC 3339 in UTC with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
