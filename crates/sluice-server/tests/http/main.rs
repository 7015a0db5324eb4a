//! The node's HTTP tests, one binary: each module starts real nodes on ephemeral ports and
//! drives them with reqwest. One binary instead of one per file keeps a clean build to one
//! link of the server and its dependencies (each test binary carries all of them).

mod common;
mod fixtures;

mod aggregations;
mod aliases;
mod auth;
mod authz;
mod benchmark_compat;
mod by_query;
mod client_compat;
mod cluster_settings;
mod dashboard;
mod documents;
mod dry_run;
mod enforcement;
mod errors;
mod formats;
mod gateway;
mod highlight;
mod index_ops;
mod indices;
mod list;
mod logs;
mod metastore_pg;
mod metrics;
mod msearch;
mod publish;
mod queue_stress;
mod queueing;
mod request_errors;
mod robustness;
mod rules;
mod scroll;
mod search_dsl;
mod search_gaps;
mod settings_compat;
mod smoke;
mod tasks;
mod tasks_compat;
mod throttling;
mod throttling_stress;
mod time_values;
mod versioning;
mod wlm_groups;
mod wlm_stats;
mod wlm_tagging;
