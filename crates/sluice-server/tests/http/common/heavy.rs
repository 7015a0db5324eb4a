//! The heavy index: 60,000 documents that a query sorting on a unique keyword and bucketing
//! every document takes seconds to search in a test build, so a test has a running search to
//! hold a permit with, see in `_tasks` and cancel.
//!
//! Indexing it costs seconds of CPU too, and some seventy tests need it: each test process
//! builds it once, on a node of its own, and every node that needs it starts on a copy
//! ([`seed_heavy`]). Shared by the HTTP suites and the cluster suite (whose nodes are child
//! processes: they get the copy in their data folders before they start).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sluice_server::config::{Config, gather};
use sluice_server::server::Node;
use tokio::sync::{OnceCell, oneshot};

/// Docs in the heavy index: enough that the heavy query below runs for a long while in a test
/// build, so cancellation has something to stop.
pub const HEAVY_DOCS: usize = 60_000;

/// A query that visits every document, sorts on a unique keyword and builds a bucket per
/// document: seconds of work on the heavy index.
pub fn heavy_query() -> Value {
    json!({
        "size": 10000,
        "track_total_hits": true,
        "sort": [{"k": "desc"}],
        "aggs": {"each": {"terms": {"field": "k", "size": 60000}}}
    })
}

/// Builds the heavy index on the node at `base` (`http://host:port`) sending `headers`
/// (credentials on nodes that authenticate).
pub async fn heavy_index_at(client: &reqwest::Client, base: &str, headers: &[(&str, &str)]) {
    let mapping =
        json!({"mappings": {"properties": {"k": {"type": "keyword"}, "n": {"type": "long"}}}});
    let mut rb = client
        .put(format!("{base}/heavy"))
        .header("content-type", "application/json")
        .body(mapping.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.expect("sent");
    assert_eq!(resp.status().as_u16(), 200, "create heavy");
    let mut body = String::new();
    for i in 0..HEAVY_DOCS {
        body.push_str("{\"index\":{}}\n");
        body.push_str(&format!("{{\"k\":\"key-{i:08}\",\"n\":{i}}}\n"));
    }
    let mut rb = client
        .post(format!("{base}/heavy/_bulk?refresh=true"))
        .header("content-type", "application/x-ndjson")
        .body(body);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.expect("sent");
    assert_eq!(resp.status().as_u16(), 200, "bulk into heavy");
    let b: Value = resp.json().await.expect("json");
    assert_eq!(b["errors"], false);
}

/// Puts a copy of the heavy index into the data folder `data` of a node about to start (in
/// gateway mode, the embedded upstream's: it reads the same folder).
pub async fn seed_heavy(data: &Path) {
    let template = TEMPLATE.get_or_init(build_template).await;
    copy_dir(template, &data.join("indices"));
}

/// The `indices` folder of a stopped embedded node that holds only the heavy index.
static TEMPLATE: OnceCell<PathBuf> = OnceCell::const_new();

/// Starts an embedded node in the target's temporary folder (one folder per test process),
/// indexes the heavy index through its API, merges it and stops the node: a copy of its
/// files is a whole, committed index. Folders left by test processes that ended are removed.
async fn build_template() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    remove_templates_of_ended_processes(&root);
    let dir = root.join(format!("heavy-index-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let flags = [
        "http.port=0".to_string(),
        "transport.port=0".to_string(),
        format!("path.data={}", dir.display()),
    ];
    let raw = gather(None, std::iter::empty(), &flags).expect("valid template settings");
    let config = Config::from_raw(&raw).expect("valid template config");
    let node = Node::start(config).await.expect("template node starts");
    let base = format!("http://{}", node.local_addr().expect("bound"));
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(node.serve(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    heavy_index_at(&client, &base, &[]).await;
    // One segment: no background merge of tantivy's is left to write files while they are
    // copied.
    let merged = client
        .post(format!("{base}/heavy/_forcemerge?max_num_segments=1"))
        .send()
        .await
        .expect("sent");
    assert_eq!(merged.status().as_u16(), 200, "force merge of heavy");
    let _ = stop.send(());
    serving
        .await
        .expect("template node task")
        .expect("template node stopped cleanly");
    dir.join("indices")
}

fn remove_templates_of_ended_processes(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("heavy-index-")) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a folder of the heavy index copy");
    for entry in std::fs::read_dir(from).expect("read the heavy index template") {
        let entry = entry.expect("a template entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("an entry's type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a heavy index file");
        }
    }
}
