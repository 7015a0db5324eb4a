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
//! - P5 — a gateway remembers the product across restarts ([`FILE`] in its data folder, written
//!   when a `GET /` names one, removed when one names none): started while its upstream is
//!   down, it answers with the product it last learned until the upstream's `GET /` answers,
//!   whose word then stands (P3). Otherwise an Elasticsearch 8 client's first call to
//!   `_wlm/stats` or `_tasks` on a gateway restarted during an outage — routes that stay
//!   readable then — got a 200 it turned into `UnsupportedProductError` (an outside trial).
//!   Tested by `test_a_restarted_gateway_remembers_its_upstreams_product` and
//!   `test_a_remembered_product_gives_way_to_the_upstreams_answer`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use sluice_wire::Dialect;

/// Elasticsearch's product header.
pub static PRODUCT_HEADER: HeaderName = HeaderName::from_static("x-elastic-product");

/// The product header's value that names Elasticsearch.
const ELASTICSEARCH: &[u8] = b"Elasticsearch";

/// Where in its data folder a gateway remembers its upstream's product (P5).
pub const FILE: &str = "upstream_product.json";

/// The product the upstream names itself by, once its `GET /` said so (P3), or as an earlier
/// run of the gateway learned it until then (P5).
#[derive(Debug, Default)]
pub struct Product {
    /// What this run's first `GET /` naming a product said.
    learned: OnceLock<Learned>,
    /// Whether a `GET /` answered in this run: the remembered product no longer counts.
    answered: AtomicBool,
    /// What an earlier run learned, read from [`FILE`] at start.
    remembered: Option<Learned>,
    /// The file to remember in; `None` in tests.
    file: Option<PathBuf>,
    /// Whether this run has brought the file up to date.
    saved: AtomicBool,
}

/// What the upstream's `GET /` said of itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Learned {
    /// Its product header's value.
    #[serde(with = "http_serde_header")]
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

/// A product header's value in [`FILE`]: as text (a value that is not is not remembered).
mod http_serde_header {
    use http::HeaderValue;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &HeaderValue, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.to_str().map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HeaderValue, D::Error> {
        let text = String::deserialize(d)?;
        HeaderValue::from_str(&text).map_err(serde::de::Error::custom)
    }
}

impl Product {
    /// A gateway's product, remembered in `data`'s [`FILE`] (P5): what an earlier run learned
    /// counts until the upstream answers. A file that cannot be read is warned of and
    /// ignored (the gateway learns the product again).
    pub fn remembered_in(data: &Path) -> Product {
        let file = data.join(FILE);
        let remembered = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<Learned>(&bytes) {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(file = %file.display(), "the upstream's product remembered from an earlier run cannot be read ({e}); it is learned again from the upstream's GET /");
                    None
                }
            },
            Err(_) => None,
        };
        Product {
            remembered,
            file: Some(file),
            ..Product::default()
        }
    }

    /// Learns the product from the upstream's `GET /` answer: its headers, and its body (the
    /// version its `Warning` headers name, P4).
    pub fn learn(&self, headers: &HeaderMap, body: &Value) {
        if let Some(v) = headers.get(&PRODUCT_HEADER) {
            let text = |key: &str| body["version"][key].as_str().map(str::to_string);
            let _ = self.learned.set(Learned {
                header: v.clone(),
                version: text("number"),
                build_hash: text("build_hash"),
            });
        }
        self.answered.store(true, Ordering::Release);
    }

    /// Brings [`FILE`] up to date with what this run learned, once a run (P5): written when a
    /// `GET /` named a product other than the remembered one, removed when it named none.
    /// Written whole to a temporary file first, so a crash leaves the old file or the new.
    pub async fn save(&self) {
        let Some(file) = &self.file else { return };
        if !self.answered.load(Ordering::Acquire) || self.saved.swap(true, Ordering::AcqRel) {
            return;
        }
        let learned = self.learned.get();
        if learned == self.remembered.as_ref() {
            return;
        }
        let result = match learned {
            None => match tokio::fs::remove_file(file).await {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
            Some(l) => match serde_json::to_vec(l) {
                Ok(bytes) => {
                    let tmp = file.with_extension("json.tmp");
                    match tokio::fs::write(&tmp, bytes).await {
                        Ok(()) => tokio::fs::rename(&tmp, file).await,
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(std::io::Error::other(e)),
            },
        };
        if let Err(e) = result {
            tracing::warn!(file = %file.display(), "cannot remember the upstream's product for the next start: {e}");
        }
    }

    /// What counts: this run's answer once the upstream answered, else the remembered.
    fn current(&self) -> Option<&Learned> {
        match self.answered.load(Ordering::Acquire) {
            true => self.learned.get(),
            false => self.remembered.as_ref(),
        }
    }

    /// The product header's value, once learned (or remembered, P5).
    pub fn get(&self) -> Option<&HeaderValue> {
        self.current().map(|l| &l.header)
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
        self.current()
            .filter(|_| self.is_elasticsearch())
            .and_then(|l| l.version.as_deref())
    }

    /// The agent a `Warning` header of the gateway's own names in front of Elasticsearch (P4):
    /// `Elasticsearch-<version>-<build hash>`, Elasticsearch's format (`HeaderWarning`); the
    /// build hash `unknown` when the upstream gave none that is one (7 or 40 hex digits, as
    /// its clients' pattern reads it), the version `0.0.0` when it gave none (a form the
    /// pattern still reads). `None` elsewhere: OpenSearch's agent is sluice's own.
    pub fn warning_agent(&self) -> Option<String> {
        let learned = self.current().filter(|_| self.is_elasticsearch())?;
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

    /// An Elasticsearch `GET /` answer's body of `version`.
    fn root(version: &str) -> Value {
        serde_json::json!({"version": {"number": version, "build_hash": "1a77947"}})
    }

    #[tokio::test]
    async fn test_a_restarted_gateway_remembers_its_upstreams_product() {
        let data = tempfile::tempdir().unwrap();
        let first = Product::remembered_in(data.path());
        assert!(first.get().is_none(), "nothing remembered yet");
        first.learn(&named("Elasticsearch"), &root("8.15.1"));
        first.save().await;
        // The next run, before its upstream answers: what the last one learned.
        let next = Product::remembered_in(data.path());
        assert_eq!(next.get().unwrap(), "Elasticsearch");
        assert_eq!(
            next.warning_agent().as_deref(),
            Some("Elasticsearch-8.15.1-1a77947")
        );
        assert_eq!(next.dialect(), Dialect::Elasticsearch);
    }

    #[tokio::test]
    async fn test_a_remembered_product_gives_way_to_the_upstreams_answer() {
        let data = tempfile::tempdir().unwrap();
        std::fs::write(
            data.path().join(FILE),
            br#"{"header":"Elasticsearch","version":"8.15.1","build_hash":null}"#,
        )
        .unwrap();
        let product = Product::remembered_in(data.path());
        assert_eq!(product.get().unwrap(), "Elasticsearch");
        // The gateway now fronts OpenSearch: its answer, naming no product, stands, and the
        // file is removed so the next start does not remember Elasticsearch.
        product.learn(&HeaderMap::new(), &Value::Null);
        assert!(product.get().is_none());
        assert_eq!(product.dialect(), Dialect::OpenSearch);
        product.save().await;
        assert!(!data.path().join(FILE).exists());
        assert!(Product::remembered_in(data.path()).get().is_none());
    }

    #[test]
    fn test_an_unreadable_remembered_product_is_ignored() {
        let data = tempfile::tempdir().unwrap();
        std::fs::write(data.path().join(FILE), b"{not json").unwrap();
        assert!(Product::remembered_in(data.path()).get().is_none());
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
