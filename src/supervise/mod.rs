//! Supervision: one task per server that opens its session and schedules
//! its probes ([`server`], on the one timer of `schedule`, reconnecting
//! with the state of `reconnect`), and the running
//! set, to which a new desired set of servers is applied as a diff
//! ([`reconcile`]).
//!
//! Supervisors talk to the state owner only through its messages.

pub mod reconcile;
mod reconnect;
mod schedule;
pub mod server;
#[cfg(test)]
mod tests;

pub use reconcile::{Supervisors, default_handshakes};
pub use server::CLOSE_GRACE;

/// How long stopping supervisors (a reload's removed servers, or shutdown)
/// waits for them to close their sessions.
pub const SHUTDOWN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
