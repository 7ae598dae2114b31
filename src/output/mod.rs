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

pub mod health;
pub mod lifecycle;
pub mod metrics;
pub mod render;
pub mod router;
pub mod scrape;
pub mod status;
pub mod web;
