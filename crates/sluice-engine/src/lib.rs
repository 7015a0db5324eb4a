//! The embedded search engine of sluice, on tantivy.
//!
//! An [`Engine`] owns the indices under a data directory. Each index keeps its OpenSearch
//! [`Mapping`](mapping::Mapping) and settings next to a tantivy index whose fixed
//! [schema] stores every user field as a path inside two JSON fields. Documents come in
//! through [`Engine::bulk`] and friends, are written to a per-index translog before they are
//! acknowledged, and become searchable at the next refresh. [`Engine::search`] runs a
//! [`SearchRequest`] through [`search`]: the request parsed (`search/request.rs`), the query DSL
//! ([`query`]) and aggregations ([`aggs`]) built per index, one collection loop over every
//! segment (`search/collect.rs`) that keeps the top hits by the sort spec and its tie-break
//! (`search/sort.rs`) and checks the request's [`SearchContext`] (`search/context.rs`) for
//! cancellation and its deadline, then the hits fetched and the response rendered
//! (`search/render.rs`). A [`ScrollStore`] keeps the searcher snapshots and cursors of open
//! scrolls between their pages ([`scroll`]).
//! A `terms` query may take its values from documents of another index ([`lookup`]); a lookup
//! by query runs a nested search, which the engine announces through the context's
//! [`NestedSearchHook`] so that the server can make it a child task that passes admission.
//!
//! The engine knows nothing of workload groups: the server decides whether a search may run and
//! hands it a context to stop it.
//!
//! Failures are [`EngineError`]s: `sluice-wire`'s OpenSearch error under the engine's name, so
//! the engine, the core and the server classify and render errors one way; time values,
//! wildcards and Java number formats are the wire crate's too.

pub mod aggs;
pub mod aliases;
pub mod by_query;
pub mod date;
pub mod engine;
pub mod error;
pub mod index;
pub mod index_stats;
pub mod ip;
pub mod lookup;
pub mod mapping;
pub mod query;
pub mod resolve;
pub mod schema;
pub mod scroll;
pub mod search;
pub mod settings;
pub mod translog;
pub mod versioning;

pub use engine::{Engine, now_millis, parse_time_value};
pub use error::{EngineError, ErrorCode, Result};
pub use lookup::TermsLookups;
pub use scroll::{ScrollLimits, ScrollStore};
pub use search::{NestedScope, NestedSearchHook, SearchContext, SearchRequest};
