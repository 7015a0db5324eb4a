//! The index under test on a server, over HTTP: creating it, loading it, refreshing, counting.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use reqwest::Url;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use sluice_datagen::{bulk_body_with_ids, index_mapping};

use crate::load::Batches;

/// Content type of search and index-admin bodies.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// Content type of `_bulk` bodies, as OpenSearch clients send them.
pub const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";

/// The index under test on a sluice server, driven over HTTP.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    /// Client used for every request; its timeout bounds each `_bulk`.
    pub client: reqwest::Client,
    /// Root of the server, such as `http://127.0.0.1:9200/`.
    pub base_url: Url,
    /// Index the documents go to.
    pub index: String,
}

impl HttpTarget {
    /// Returns the URL of `path` on the server.
    pub fn url(&self, path: &str) -> Url {
        self.base_url
            .join(path)
            .expect("paths built from an index name make valid URLs")
    }

    /// Deletes the resource at `path`; one that does not exist (404) is fine.
    pub async fn delete_if_exists(&self, path: &str) -> Result<()> {
        let url = self.url(path);
        let response = self
            .client
            .delete(url.clone())
            .send()
            .await
            .with_context(|| format!("DELETE {url} failed"))?;
        let status = response.status();
        if !status.is_success() && status != reqwest::StatusCode::NOT_FOUND {
            bail!(
                "DELETE {url} answered {status}: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Deletes `index` if it exists and creates it with the generated documents' mapping.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the index deleted and not yet re-created.
    pub async fn recreate_index(&self) -> Result<()> {
        self.delete_if_exists(&self.index).await?;
        let url = self.url(&self.index);
        let response = self
            .client
            .put(url.clone())
            .json(&json!({ "mappings": index_mapping() }))
            .send()
            .await
            .with_context(|| format!("PUT {url} failed"))?;
        let status = response.status();
        if !status.is_success() {
            bail!(
                "PUT {url} answered {status}: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Sends every batch with `num_loaders` concurrent requests and returns the time taken.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future aborts the in-flight requests; the index holds a partial load.
    pub async fn load(&self, mut batches: Batches, num_loaders: usize) -> Result<Duration> {
        let mut elapsed = Duration::ZERO;
        while let Some(round) = batches.next_round(|first_id, docs| {
            Bytes::from(bulk_body_with_ids(&self.index, &docs, first_id))
        }) {
            let round: Arc<[Bytes]> = round.into();
            let cursor = Arc::new(AtomicUsize::new(0));
            let started = Instant::now();
            let mut loaders = tokio::task::JoinSet::new();
            for _ in 0..num_loaders {
                let (loader, round, cursor) = (self.clone(), round.clone(), cursor.clone());
                loaders.spawn(async move {
                    // Relaxed suffices: the counter only hands out distinct indices; the bodies
                    // were written before the tasks were spawned.
                    while let Some(body) = round.get(cursor.fetch_add(1, Ordering::Relaxed)) {
                        loader.send_bulk(body.clone()).await?;
                    }
                    anyhow::Ok(())
                });
            }
            while let Some(result) = loaders.join_next().await {
                result.context("a bulk loader task panicked")??;
            }
            elapsed += started.elapsed();
        }
        Ok(elapsed)
    }

    /// Sends one `_bulk` body and fails if the request or any item failed.
    async fn send_bulk(&self, body: Bytes) -> Result<()> {
        let url = self.url("_bulk");
        let response = self
            .client
            .post(url.clone())
            .header(CONTENT_TYPE, NDJSON_CONTENT_TYPE)
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {url} failed"))?;
        let status = response.status();
        let answer = response
            .bytes()
            .await
            .with_context(|| format!("reading the answer of POST {url} failed"))?;
        if !status.is_success() {
            bail!(
                "POST {url} answered {status}: {}",
                String::from_utf8_lossy(&answer)
            );
        }
        check_bulk_answer(&answer)
    }

    /// Makes the loaded documents searchable and returns how long that took.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the request; the refresh may still complete on the server.
    pub async fn refresh(&self) -> Result<Duration> {
        let url = self.url(&format!("{}/_refresh", self.index));
        let started = Instant::now();
        let response = self
            .client
            .post(url.clone())
            .send()
            .await
            .with_context(|| format!("POST {url} failed"))?;
        let status = response.status();
        if !status.is_success() {
            bail!(
                "POST {url} answered {status}: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(started.elapsed())
    }

    /// Returns the URL of the index's `_search` endpoint.
    pub fn search_url(&self) -> Url {
        self.url(&format!("{}/_search", self.index))
    }

    /// Runs one search and returns its answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the request; nothing else is affected.
    pub async fn search(&self, body: &Value) -> Result<Value> {
        let url = self.search_url();
        let response = self
            .client
            .post(url.clone())
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {url} failed"))?;
        let status = response.status();
        if !status.is_success() {
            bail!(
                "POST {url} answered {status}: {}",
                response.text().await.unwrap_or_default()
            );
        }
        response
            .json()
            .await
            .with_context(|| format!("POST {url} did not answer JSON"))
    }

    /// Returns the CPU time the server's process has used since it started, in milliseconds,
    /// from `GET _nodes/_local/stats/process` (`process.cpu.total_in_millis`).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the request; nothing else is affected.
    pub async fn process_cpu_millis(&self) -> Result<u64> {
        let (url, answer) = self.get_json("_nodes/_local/stats/process").await?;
        cpu_millis_of(&answer).with_context(|| format!("GET {url} answered {answer}"))
    }

    /// Returns how many documents the index holds, from `GET <index>/_count`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the request; nothing else is affected.
    pub async fn count(&self) -> Result<u64> {
        let (url, answer) = self.get_json(&format!("{}/_count", self.index)).await?;
        answer["count"]
            .as_u64()
            .with_context(|| format!("GET {url} answered no count: {answer}"))
    }

    /// `GET <path>`: its URL, for messages, and its JSON answer; fails unless it is 2xx JSON.
    async fn get_json(&self, path: &str) -> Result<(Url, Value)> {
        let url = self.url(path);
        let answer = self
            .client
            .get(url.clone())
            .send()
            .await
            .with_context(|| format!("GET {url} failed"))?
            .error_for_status()
            .with_context(|| format!("GET {url} failed"))?
            .json()
            .await
            .with_context(|| format!("GET {url} did not answer JSON"))?;
        Ok((url, answer))
    }
}

/// Fails with the first item error if a `_bulk` answer reports `"errors": true`.
fn check_bulk_answer(answer: &[u8]) -> Result<()> {
    /// The one field needed on the happy path; serde skips the items without building them.
    #[derive(serde::Deserialize)]
    struct BulkAnswer {
        errors: bool,
    }
    let parsed: BulkAnswer =
        serde_json::from_slice(answer).context("the _bulk answer has no boolean `errors` field")?;
    if !parsed.errors {
        return Ok(());
    }
    let full: Value = serde_json::from_slice(answer).context("the _bulk answer is not JSON")?;
    let items = full["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let num_failed = items
        .iter()
        .filter(|item| item_error(item).is_some())
        .count();
    let first = items
        .iter()
        .find_map(item_error)
        .cloned()
        .unwrap_or(Value::Null);
    bail!(
        "{num_failed} of {} bulk items failed; the first: {first}",
        items.len()
    )
}

/// Returns the `error` of a `_bulk` answer item, whatever its action.
fn item_error(item: &Value) -> Option<&Value> {
    item.as_object()?.values().next()?.get("error")
}

/// Reads `process.cpu.total_in_millis` of the one node of a `_nodes/_local/stats/process`
/// answer.
fn cpu_millis_of(answer: &Value) -> Result<u64> {
    let nodes = answer["nodes"]
        .as_object()
        .context("the answer has no `nodes` object")?;
    let [(_, node)] = nodes.iter().collect::<Vec<_>>()[..] else {
        bail!("the answer lists {} nodes, not the local one", nodes.len());
    };
    node["process"]["cpu"]["total_in_millis"]
        .as_u64()
        .context("the node has no `process.cpu.total_in_millis`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_cpu_millis_is_read_from_the_one_local_node() {
        let answer = json!({
            "_nodes": {"total": 1},
            "nodes": {"abc": {"name": "n1", "process": {"cpu": {"percent": 3, "total_in_millis": 56990}}}}
        });
        assert_eq!(cpu_millis_of(&answer).unwrap(), 56990);
        let two = json!({"nodes": {"a": {}, "b": {}}});
        assert!(
            cpu_millis_of(&two)
                .unwrap_err()
                .to_string()
                .contains("2 nodes")
        );
        let bare = json!({"nodes": {"a": {"process": {}}}});
        assert!(
            cpu_millis_of(&bare)
                .unwrap_err()
                .to_string()
                .contains("total_in_millis")
        );
    }

    #[test]
    fn test_check_bulk_answer_reports_the_first_failed_item() {
        check_bulk_answer(br#"{"took":3,"errors":false,"items":[{"index":{"status":201}}]}"#)
            .unwrap();
        let answer = br#"{"took":3,"errors":true,"items":[
            {"index":{"status":201}},
            {"index":{"status":400,"error":{"type":"mapper_parsing_exception","reason":"bad"}}},
            {"create":{"status":409,"error":{"type":"version_conflict_engine_exception"}}}]}"#;
        let error = check_bulk_answer(answer).unwrap_err().to_string();
        assert!(error.starts_with("2 of 3 bulk items failed"), "{error}");
        assert!(error.contains("mapper_parsing_exception"), "{error}");
    }

    #[test]
    fn test_check_bulk_answer_rejects_a_non_bulk_answer() {
        assert!(check_bulk_answer(br#"{"acknowledged":true}"#).is_err());
    }
}
