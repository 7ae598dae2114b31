//! Outputs: everything mcpmon serves, read from published snapshots only;
//! none touches a session.
//!
//! - [`router`]: the one router, the state its handlers read, the
//!   middleware.
//! - [`scrape`] (`/metrics`, rendered by [`metrics`]), [`health`]
//!   (`/health/*`), [`lifecycle`] (`/-/*`) and [`status`] (the HTML page):
//!   handlers by concern.
//! - [`render`]: whole-fleet pages rendered once and shared.
//! - [`web`]: the HTTP server itself (TLS, basic auth, limits) and its
//!   config file.
//! - [`otlp`]: the opt-in OTLP push of metrics and probe spans.
//! - [`families`]: every series mcpmon declares, once, under the names
//!   both [`metrics`] and [`otlp`] use.

pub mod badges;
pub mod families;
pub mod health;
pub mod history;
pub mod lifecycle;
pub mod metrics;
pub mod otlp;
pub mod render;
pub mod router;
pub mod scrape;
pub mod status;
pub mod web;
