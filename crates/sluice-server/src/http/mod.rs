//! The HTTP layer, free of domain logic: request metadata and its middleware ([`meta`]), a
//! request's header lines wherever they are kept ([`header_lines`]), body
//! extraction ([`body`]), path and query extraction ([`extract`]), the check of a body's
//! `Content-Type` ([`content_type`]), response rendering ([`reply`](mod@reply)), the `?pretty`
//! rendering of error answers ([`pretty`]) and YAML answers ([`format`](mod@format)), the check of unknown
//! URL parameters ([`unrecognized`]) and of the action timeouts
//! ([`timeouts`]), OpenSearch's answers for unknown routes
//! and methods ([`fallback`]), the accept loop that serves connections ([`serve`]), the watch
//! of its clients leaving ([`leaving`]) and of quiet ones ([`read_timeout`]), the reading of
//! HTTP/1 request heads ahead of hyper ([`heads`]: unencoded targets, [`target`], and heads
//! too long), and a gateway's fast lane ([`lane`]) with its threads ([`threads`]).
//! The routes themselves are in [`crate::api`].

pub mod body;
pub mod closing;
pub mod content_type;
pub mod extract;
pub mod fallback;
pub mod format;
pub mod header_lines;
pub mod heads;
pub mod lane;
pub mod leaving;
pub mod meta;
pub mod pretty;
pub mod read_timeout;
pub mod reply;
pub mod serve;
pub mod target;
pub mod threads;
pub mod timeouts;
pub mod unrecognized;
pub mod url_index;

use std::collections::HashMap;

pub use body::{Body, BodyLimit, parse_json};
pub use extract::{Path, Query};
pub use meta::{RequestMeta, Warnings};
pub use reply::{json_response, render_table, reply};

/// Query-string parameters of a request.
pub type Params = HashMap<String, String>;

/// Request parameters made of `pairs`, for tests.
#[cfg(test)]
pub(crate) fn params_of(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
