//! `highlight` over HTTP: the query's terms marked in each hit's fields, as OpenSearch's
//! default highlighter shows them for short values, with its options and its errors.

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

async fn books(node: &TestNode) {
    node.req(
        "PUT",
        "/books",
        Some(json!({"mappings": {"properties": {
            "title": {"type": "text"},
            "body": {"type": "text"},
            "tag": {"type": "keyword"}
        }}})),
    )
    .await;
    let long = format!(
        "{} The quick fox jumps over the lazy dog. {}",
        "Filler words come first here. ".repeat(6),
        "More filler follows after it. ".repeat(6)
    );
    node.bulk(
        "/_bulk?refresh=true",
        &[
            json!({"index": {"_index": "books", "_id": "1"}}),
            json!({"title": "The Quick Brown Fox", "body": long, "tag": "fox"}),
            json!({"index": {"_index": "books", "_id": "2"}}),
            json!({"title": "A slow turtle", "body": "Nothing quick here.", "tag": "turtle"}),
        ],
    )
    .await;
}

fn highlight_of<'a>(resp: &'a Value, id: &str) -> &'a Value {
    let hits = resp["hits"]["hits"].as_array().expect("hits");
    &hits.iter().find(|h| h["_id"] == id).expect("the hit")["highlight"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_highlight_marks_the_query_terms_in_each_field() {
    let node = TestNode::start().await;
    books(&node).await;
    let resp = node
        .search(
            "books",
            json!({"query": {"bool": {"should": [
                    {"match": {"title": "quick fox"}},
                    {"match": {"body": "fox"}},
                    {"term": {"tag": "fox"}}]}},
                   "highlight": {"fields": {"title": {}, "body": {}, "tag": {}}}}),
        )
        .await;
    let h = highlight_of(&resp, "1");
    assert_eq!(
        h["title"],
        json!(["The <em>Quick</em> Brown <em>Fox</em>"]),
        "{resp}"
    );
    // A long value: the sentence holding the match, not the whole value.
    assert_eq!(
        h["body"],
        json!(["The quick <em>fox</em> jumps over the lazy dog."]),
        "{resp}"
    );
    assert_eq!(h["tag"], json!(["<em>fox</em>"]), "{resp}");
    // Hit 2 matched on `quick` in the title only: `body` holds `quick` but was not queried for
    // it (require_field_match), so only the title is shown.
    let resp = node
        .search(
            "books",
            json!({"query": {"match": {"title": "quick slow"}},
                   "highlight": {"fields": {"*": {}}}}),
        )
        .await;
    assert_eq!(
        highlight_of(&resp, "2"),
        &json!({"title": ["A <em>slow</em> turtle"]}),
        "{resp}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_highlight_options_tags_whole_values_and_no_match_size() {
    let node = TestNode::start().await;
    books(&node).await;
    let resp = node
        .search(
            "books",
            json!({"query": {"match": {"title": "turtle"}},
                   "highlight": {"pre_tags": ["<b>"], "post_tags": ["</b>"],
                                 "require_field_match": false,
                                 "fields": [{"title": {"number_of_fragments": 0}},
                                            {"body": {"no_match_size": 7}}]}}),
        )
        .await;
    assert_eq!(
        highlight_of(&resp, "2"),
        &json!({"title": ["A slow <b>turtle</b>"], "body": ["Nothing"]}),
        "{resp}"
    );
    // No highlight asked, none given.
    let resp = node
        .search("books", json!({"query": {"match": {"title": "turtle"}}}))
        .await;
    assert!(resp["hits"]["hits"][0].get("highlight").is_none(), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_highlight_errors_name_the_option() {
    let node = TestNode::start().await;
    books(&node).await;
    for (body, says) in [
        (
            json!({"fields": {"title": {}}, "colour": "red"}),
            "unknown field [colour]",
        ),
        (
            json!({"fields": {"title": {"fragment_size": "big"}}}),
            "[fragment_size]",
        ),
        (json!({"fields": 5}), "[fields]"),
        (
            json!({"encoder": "xml", "fields": {"title": {}}}),
            "unknown encoder",
        ),
    ] {
        let resp = node
            .req(
                "POST",
                "/books/_search",
                Some(json!({"query": {"match_all": {}}, "highlight": body})),
            )
            .await;
        assert_error(&resp, 400, "parsing_exception");
        assert!(resp.1.to_string().contains(says), "{says}: {}", resp.1);
    }
}
