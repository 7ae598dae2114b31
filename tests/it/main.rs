//! mcpmon's integration tests, in one binary (it links once): real
//! processes, real sockets on 127.0.0.1, real third-party servers and
//! tools. Each module is one concern; `support` holds what they share.
//!
//! The fast loop (unit and paused-time tests, under a minute) is
//! `cargo test --lib`; this binary is the rest.

#[macro_use]
mod support;

mod busy;
mod cli;
mod clients;
mod compat;
mod conditions;
mod config;
mod docs;
mod faults;
mod fuzz_regressions;
mod history;
mod hostile;
mod images;
mod kube_sd;
mod kubernetes;
mod layers;
mod load_balancers;
mod locations;
mod maintenance;
mod monitor;
mod otlp;
mod pid1;
mod prometheus;
mod proxy;
mod redaction;
mod registry;
mod reload;
mod security;
mod shape;
mod sharding;
mod slo;
mod startup;
mod status_page;
mod synthetic;
mod tasks;
mod third_party;
mod tls;
mod web;
