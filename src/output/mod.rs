//! Outputs: everything mcpmon serves. [`metrics`] renders the Prometheus
//! text exposition, [`api`] the health JSON and lifecycle endpoints, and
//! [`web`] runs the HTTP server (TLS, basic auth, limits) with the settings
//! [`web_config`] reads. All of them read
//! published snapshots only; none touches a session.

pub mod api;
pub mod auth;
pub mod metrics;
pub mod status;
pub mod web;
pub mod web_config;
