//! The sluice node: the OpenSearch-compatible HTTP API over the embedded engine.
//!
//! [`config`] gathers settings from the config file, environment and `-E` flags;
//! [`server::Node`] opens the data folder, binds the port and serves the [`api`] router, whose
//! handlers parse requests, run engine work on the blocking pool and render OpenSearch-shaped
//! responses and [`error`]s from shared [`state`].

pub mod accounting;
pub mod admission;
pub mod api;
pub mod auth;
pub mod config;
pub mod enforcement;
pub mod error;
pub mod node_usage;
pub mod pool;
pub mod server;
pub mod settings;
pub mod state;
pub mod tasks;
pub mod workload;
