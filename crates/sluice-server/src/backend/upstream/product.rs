//! The upstream's product header on the answers a gateway builds itself.
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

use std::sync::OnceLock;

use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue};

/// Elasticsearch's product header.
pub static PRODUCT_HEADER: HeaderName = HeaderName::from_static("x-elastic-product");

/// The product the upstream names itself by, once its `GET /` said so (P3).
#[derive(Debug, Default)]
pub struct Product(OnceLock<HeaderValue>);

impl Product {
    /// Learns the product from the headers of the upstream's `GET /` answer.
    pub fn learn(&self, headers: &HeaderMap) {
        if let Some(v) = headers.get(&PRODUCT_HEADER) {
            let _ = self.0.set(v.clone());
        }
    }

    /// The product header's value, once learned.
    pub fn get(&self) -> Option<&HeaderValue> {
        self.0.get()
    }

    /// Whether the upstream named itself Elasticsearch.
    pub fn is_elasticsearch(&self) -> bool {
        self.get().is_some_and(|v| v.as_bytes() == b"Elasticsearch")
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

        product.learn(&named("Elasticsearch"));
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
    fn test_the_first_product_learned_stays() {
        let product = Product::default();
        product.learn(&HeaderMap::new());
        assert!(
            product.get().is_none(),
            "an answer without the header names none"
        );
        product.learn(&named("Elasticsearch"));
        product.learn(&named("Other"));
        assert_eq!(product.get().unwrap(), "Elasticsearch");
    }
}
