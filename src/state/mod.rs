//! Fleet state: the evidence, the verdict, and the one owner that publishes
//! snapshots. Supervisors send typed [`Msg`]s; the owner runs each server's
//! evidence tracker and the verdict (handing them `now`), keeps its
//! counters, and publishes one numbered [`Snapshot`] that `/metrics`,
//! `/health/*` and the status page all render from.
//!
//! - [`verdict`]: the pure judgment (thresholds, hysteresis).
//! - [`window`]: the rolling window of probe outcomes it is judged from.
//! - [`conditions`]: the latest outcome of each condition users wrote.
//! - [`evidence`]: per-server evidence turned into verdict input, status and timeline.
//! - [`series`]: per-server counters and histograms, as data.
//! - `entry`: what one observation changes for its server, told apart in
//!   one place.
//! - [`owner`]: the task that applies messages and publishes snapshots.
//! - [`reader`]: how snapshots reach readers: published news, or asked for.
//! - [`operations`]: what the owner tells an operations sink (OTLP) per probe.
//!
//! This layer imports config, transport and probe types, never outputs or
//! supervisors.

pub mod conditions;
mod entry;
pub mod evidence;
pub mod operations;
pub mod owner;
pub mod reader;
pub mod reason;
pub mod series;
pub mod servers;
pub mod snapshot;
pub mod tasks;
#[cfg(test)]
pub mod testing;
pub mod verdict;
pub mod window;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use reader::Reader;
pub use snapshot::{ServerRecord, Snapshot, Summary};

use crate::config::{FleetPolicy, ServerSpec};
use crate::probe::{FailureReason, ProbeKind, ProbeOutcome};
use crate::transport::{Era, LinkFailure, ProcessSample, Progress, ServerInfo};

/// A message to the state owner.
#[derive(Debug)]
pub enum Msg {
    /// A server joins (or restarts with new settings: its record starts
    /// afresh). `stuck` is where the owner asks its supervisor to rebuild
    /// a stuck session, by the session's number.
    Add {
        /// The server.
        spec: Arc<ServerSpec>,
        /// Rebuild requests to its supervisor.
        stuck: watch::Sender<u64>,
    },
    /// A server left the fleet.
    Remove(Arc<str>),
    /// What its operator says of a server changed (its session stays).
    Said(Arc<str>, Option<crate::config::OperatorWord>),
    /// A new fleet policy (after a reload).
    Policy(FleetPolicy),
    /// The maintenance windows (at start and after a reload).
    Maintenance(Arc<[crate::config::maintenance::Window]>),
    /// What discovery found (its series are the owner's to write, too).
    Discovery(DiscoveryNews),
    /// Something happened to one server.
    Server(Arc<str>, Observation),
}

/// What discovery reports, counted in the snapshot's [`snapshot::DiscoverySeries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscoveryNews {
    /// A refresh of this mechanism failed.
    Failed(crate::discovery::Mechanism),
    /// Entries left out.
    Rejected(crate::discovery::Mechanism, crate::config::Rejection, u64),
    /// Valid servers this mechanism returns now.
    Servers(crate::discovery::Mechanism, usize),
}

/// Why a session ended or could not open, as its supervisor saw it: the
/// transport's and the probe's failures carried as they are. What a loss
/// means for the verdict is said once, by `Reason::from` in
/// [`reason`]; a supervisor reports, it never picks a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// The transport failed: opening, while open, or by the server
    /// breaking the session's limits.
    Link(LinkFailure),
    /// A probe's failure ended the session: what the probe saw, and the
    /// transport's own account of the link beside it.
    Probe {
        /// How the probe failed.
        failure: FailureReason,
        /// What the transport says of the link.
        link: LinkFailure,
    },
    /// The owner judged the session stuck, and its supervisor closed it.
    Stuck,
}

/// What a supervisor observed about its server.
#[derive(Debug)]
pub enum Observation {
    /// A connection attempt starts; `after` is why the last session or
    /// attempt ended, if this is a retry.
    Connecting {
        /// Why the previous one ended.
        after: Option<Loss>,
    },
    /// A session opened (numbered from 1, per server).
    Opened {
        /// Era spoken.
        era: Era,
        /// Who the server says it is.
        info: ServerInfo,
        /// The tool surface, if `tools/list` answered.
        tools: Option<crate::transport::tools::ToolSurface>,
        /// Spawn or connect plus handshake.
        handshake: Duration,
        /// Whether the tools include the configured health tool.
        health_check: bool,
    },
    /// The session was lost, or could not be opened: definitive.
    Down {
        /// Why.
        loss: Loss,
        /// What happened (scrubbed by the owner).
        detail: String,
        /// Whether a session had been open.
        was_open: bool,
        /// The server said why in its own words (a child's last lines on
        /// stderr as it exited): judged at once, with no second attempt.
        said_why: bool,
    },
    /// The session was closed on purpose (shutdown, removal).
    Closed,
    /// A probe tick found the previous probe of its kind still in flight.
    Skipped(ProbeKind),
    /// The liveness probe in flight passed its timeout; it stays in flight.
    /// A probe's start is not told: its run is counted by this or by its
    /// end, whichever comes first, so a ping costs the owner one message.
    Late(ProbeKind, Duration),
    /// A probe ended; `was_late` if [`Observation::Late`] was sent for it.
    Probe {
        /// What it found.
        outcome: ProbeOutcome,
        /// Whether it had been reported late.
        was_late: bool,
    },
    /// A sample of the stdio process tree.
    Process(ProcessSample),
    /// The tools were listed again (on `list_changed` or `tools_interval`).
    Tools {
        /// The new listing.
        tools: crate::transport::tools::ToolSurface,
        /// Whether it includes the configured health tool.
        health_check: bool,
    },
    /// When the session's credentials expire (sent when it changes).
    Credentials(Option<crate::transport::Credentials>),
    /// The certificate chain an HTTPS server presented (sent when it
    /// changes, after a connection attempt).
    Certificate(crate::transport::tls::PeerCertificate),
    /// Progress notifications collected from the session.
    Progress(Progress),
    /// A task probe polled its task.
    Task(Box<crate::probe::task::TaskSeen>),
    /// The tool list's conditions, evaluated on a new listing.
    Checked(Vec<crate::probe::conditions::Checked>),
    /// Nothing new; judge again (time passing can make a server stuck).
    Tick,
}
