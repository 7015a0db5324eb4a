//! The sluice node: the OpenSearch-compatible HTTP API, admission, and the backend that runs
//! admitted work (the embedded engine).
//!
//! [`config`] gathers settings from the config file, environment and `-E` flags;
//! [`server::Node`] opens the data folder, binds the port and serves the [`api`] router behind
//! the [`http`] middleware (authentication → [`http::RequestMeta`]). Search-class handlers pass
//! [`admission::admit`] (task → tag → resource share → throttle) and run the admitted work on
//! a [`backend::Backend`]; the data APIs call the embedded engine on the blocking pool.
//! [`workload`] holds the groups, rules and stats; [`tasks`] the task registry;
//! [`enforcement`] the loop that measures usage and cancels; [`settings`] the cluster settings.

pub mod accounting;
pub mod admission;
pub mod api;
pub mod auth;
pub mod backend;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod dashboard;
pub mod deadline;
pub mod enforcement;
pub mod error;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod node_usage;
pub mod pool;
pub mod server;
pub mod settings;
pub mod state;
pub mod tasks;
pub mod workload;
