//! The upstream's product on the answers a gateway builds itself: its header, and its names.
//!
//! Elasticsearch (7.14 and later) sends `X-Elastic-Product: Elasticsearch` on its answers, and
//! its official clients check for it: the 8.x clients raise `UnsupportedProductError` on a
//! successful answer without it until one answer with it has come. A gateway in front of
//! Elasticsearch relays the upstream's answers with the header, but the answers it builds
//! itself — a merged `_msearch`, `_bulk` or `_mget`, sluice's `_wlm`, `_tasks`, `_rules` and
//! settings routes, a 429, a 502 — had none, so an application whose first call was an
//! `_msearch` through the gateway failed in the client. The gateway learns the header from the
//! upstream's `GET /` (at start, and again whenever that is asked) and puts it on each answer
//! of its own. OpenSearch sends no product header, and then nothing is added.
//!
//! # Invariants
//! - P1 — a relayed answer (marked [`crate::http::pretty::Relayed`] on the general path; the
//!   lane's relays never pass here) keeps the upstream's headers as they came: none is added
//!   to it. Tested by `test_own_answers_carry_the_upstreams_product_header` (a relayed answer
//!   without the header stays without) and `test_stamp_leaves_relayed_and_named_answers`.
//! - P2 — once the upstream's `GET /` named a product, every answer the gateway builds on
//!   either path (the general path's outer layer, the lane's own answers) carries it, a header
//!   it already has aside. Tested by `test_own_answers_carry_the_upstreams_product_header`
//!   (merged `_msearch`, `_wlm/stats`, a 429 on the lane, an unknown route's error).
//! - P3 — the first product learned stays: the header is read without a lock on every answer,
//!   and an upstream does not turn into another product while the gateway runs (a gateway
//!   moved to another cluster is restarted). Tested by `test_the_first_product_learned_stays`.
//! - P4 — in front of Elasticsearch, the gateway's own answers use Elasticsearch's names where
//!   they differ from OpenSearch's ([`Product::dialect`], [`sluice_wire::Dialect`]): an error
//!   of its own is re-rendered so ([`Product::restyle`]: a 429 is
//!   `es_rejected_execution_exception`, as Elasticsearch's own is), as are the error items of
//!   a merged `_msearch`; its `Warning` headers name Elasticsearch and the upstream's version
//!   and build hash (`299 Elasticsearch-8.15.1-<hash or unknown> "…"`, Elasticsearch's
//!   format, which its clients' strict deprecation checks parse: [`Product::warning_agent`]);
//!   and its `_nodes/…/http` answer describes its nodes as Elasticsearch's does (the
//!   upstream's version, no `distribution`). In front of OpenSearch, and on an embedded node,
//!   nothing changes. The product is data of the gateway's state, passed to each place that
//!   names something. Tested by `test_own_answers_speak_elasticsearch_in_front_of_it`.

use std::sync::OnceLock;

use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use sluice_wire::Dialect;

/// Elasticsearch's product header.
pub static PRODUCT_HEADER: HeaderName = HeaderName::from_static("x-elastic-product");

/// The product header's value that names Elasticsearch.
const ELASTICSEARCH: &[u8] = b"Elasticsearch";

/// The product the upstream names itself by, once its `GET /` said so (P3).
#[derive(Debug, Default)]
pub struct Product(OnceLock<Learned>);

/// What the upstream's `GET /` said of itself.
#[derive(Debug)]
struct Learned {
    /// Its product header's value.
    header: HeaderValue,
    /// Its `version.number`, if it gave one.
    version: Option<String>,
    /// Its `version.build_hash`, if it gave one.
    build_hash: Option<String>,
}

/// An error answer's error, as sluice rendered it (OpenSearch's names), kept on the response
/// so a gateway in front of Elasticsearch can render it in Elasticsearch's names (P4).
#[derive(Debug, Clone)]
pub struct OwnError(pub sluice_engine::EngineError);

impl Product {
    /// Learns the product from the upstream's `GET /` answer: its headers, and its body (the
    /// version its `Warning` headers name, P4).
    pub fn learn(&self, headers: &HeaderMap, body: &Value) {
        if let Some(v) = headers.get(&PRODUCT_HEADER) {
            let text = |key: &str| body["version"][key].as_str().map(str::to_string);
            let _ = self.0.set(Learned {
                header: v.clone(),
                version: text("number"),
                build_hash: text("build_hash"),
            });
        }
    }

    /// The product header's value, once learned.
    pub fn get(&self) -> Option<&HeaderValue> {
        self.0.get().map(|l| &l.header)
    }

    /// Whether the upstream named itself Elasticsearch.
    pub fn is_elasticsearch(&self) -> bool {
        self.get().is_some_and(|v| v.as_bytes() == ELASTICSEARCH)
    }

    /// Whose names the gateway's own answers use (P4).
    pub fn dialect(&self) -> Dialect {
        if self.is_elasticsearch() {
            Dialect::Elasticsearch
        } else {
            Dialect::OpenSearch
        }
    }

    /// The upstream's version, as its `GET /` gave it, in front of Elasticsearch.
    pub fn elasticsearch_version(&self) -> Option<&str> {
        self.0
            .get()
            .filter(|_| self.is_elasticsearch())
            .and_then(|l| l.version.as_deref())
    }

    /// The agent a `Warning` header of the gateway's own names in front of Elasticsearch (P4):
    /// `Elasticsearch-<version>-<build hash>`, Elasticsearch's format (`HeaderWarning`); the
    /// build hash `unknown` when the upstream gave none that is one (7 or 40 hex digits, as
    /// its clients' pattern reads it), the version `0.0.0` when it gave none (a form the
    /// pattern still reads). `None` elsewhere: OpenSearch's agent is sluice's own.
    pub fn warning_agent(&self) -> Option<String> {
        let learned = self.0.get().filter(|_| self.is_elasticsearch())?;
        let hash = learned
            .build_hash
            .as_deref()
            .filter(|h| matches!(h.len(), 7 | 40) && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or("unknown");
        let version = learned.version.as_deref().unwrap_or("0.0.0");
        Some(format!("Elasticsearch-{version}-{hash}"))
    }

    /// Renders an error answer the gateway built ([`OwnError`]) in Elasticsearch's names,
    /// in front of Elasticsearch (P4); any other answer is left as it is. Before any
    /// rendering of the body for the client (`?pretty`, YAML), which starts from this one.
    pub fn restyle(&self, resp: &mut Response) {
        if !self.is_elasticsearch()
            || resp
                .extensions()
                .get::<crate::http::pretty::Relayed>()
                .is_some()
        {
            return;
        }
        let Some(OwnError(e)) = resp.extensions_mut().remove::<OwnError>() else {
            return;
        };
        let status = resp.status();
        let body = serde_json::json!({
            "error": sluice_wire::render_error_in(&e, Dialect::Elasticsearch),
            "status": status.as_u16(),
        });
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        resp.headers_mut().remove(http::header::CONTENT_LENGTH);
        *resp.body_mut() = axum::body::Body::from(bytes);
    }

    /// Puts the product header on an answer the gateway built (P2), unless it is relayed
    /// (P1) or already has one.
    pub fn stamp(&self, resp: &mut Response) {
        let Some(v) = self.get() else { return };
        if resp
            .extensions()
            .get::<crate::http::pretty::Relayed>()
            .is_some()
            || resp.headers().contains_key(&PRODUCT_HEADER)
        {
            return;
        }
        resp.headers_mut().insert(PRODUCT_HEADER.clone(), v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(PRODUCT_HEADER.clone(), HeaderValue::from_static(value));
        h
    }

    #[test]
    fn test_stamp_leaves_relayed_and_named_answers() {
        let product = Product::default();
        let mut own = Response::new(axum::body::Body::empty());
        product.stamp(&mut own);
        assert!(
            own.headers().get(&PRODUCT_HEADER).is_none(),
            "nothing learned yet"
        );

        product.learn(&named("Elasticsearch"), &Value::Null);
        product.stamp(&mut own);
        assert_eq!(own.headers()[&PRODUCT_HEADER], "Elasticsearch");

        let mut relayed = Response::new(axum::body::Body::empty());
        relayed
            .extensions_mut()
            .insert(crate::http::pretty::Relayed);
        product.stamp(&mut relayed);
        assert!(relayed.headers().get(&PRODUCT_HEADER).is_none(), "P1");

        let mut already = Response::new(axum::body::Body::empty());
        already
            .headers_mut()
            .insert(PRODUCT_HEADER.clone(), HeaderValue::from_static("Other"));
        product.stamp(&mut already);
        let values: Vec<_> = already.headers().get_all(&PRODUCT_HEADER).iter().collect();
        assert_eq!(values, ["Other"]);
    }

    #[test]
    fn test_the_warning_agent_is_elasticsearchs_format() {
        let version = |v: Value| {
            let product = Product::default();
            product.learn(
                &named("Elasticsearch"),
                &serde_json::json!({ "version": v }),
            );
            product.warning_agent()
        };
        let hash = "1a77947f34deddb41af25e6f0ddb8e830159c179";
        assert_eq!(
            version(serde_json::json!({"number": "8.15.1", "build_hash": hash})).as_deref(),
            Some(format!("Elasticsearch-8.15.1-{hash}").as_str())
        );
        assert_eq!(
            version(serde_json::json!({"number": "8.15.1", "build_hash": "not-a-hash"})).as_deref(),
            Some("Elasticsearch-8.15.1-unknown")
        );
        assert_eq!(
            version(Value::Null).as_deref(),
            Some("Elasticsearch-0.0.0-unknown")
        );
        let other = Product::default();
        other.learn(
            &named("Other"),
            &serde_json::json!({"version": {"number": "1.0.0"}}),
        );
        assert_eq!(other.warning_agent(), None);
        assert_eq!(other.dialect(), Dialect::OpenSearch);
    }

    #[test]
    fn test_the_first_product_learned_stays() {
        let product = Product::default();
        product.learn(&HeaderMap::new(), &Value::Null);
        assert!(
            product.get().is_none(),
            "an answer without the header names none"
        );
        product.learn(&named("Elasticsearch"), &Value::Null);
        product.learn(&named("Other"), &Value::Null);
        assert_eq!(product.get().unwrap(), "Elasticsearch");
    }
}
