//! Multi-node tests: several `sluice` processes on loopback sharing one PostgreSQL metastore
//! (`harness.rs`). Needs `SLUICE_TEST_POSTGRES_URL` (run through `scripts/test.sh`).

mod fanout;
mod harness;
#[path = "../http/common/heavy.rs"]
mod heavy;
mod membership;
mod metadata;
mod owner_loss;
mod relay;
mod scrolls;
mod shared_tier;
#[path = "../http/common/signal.rs"]
mod signal;
mod split;
#[path = "../http/common/stats.rs"]
mod stats;
