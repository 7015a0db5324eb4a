//! The paginated tables over HTTP: `_list/indices` and `_list/shards` (and `_cat/shards`, whose
//! rows `_list/shards` pages): walks with small pages see every index once in creation order,
//! also when indices are created or deleted between pages; `sort=desc`; the JSON and text
//! shapes; `health=`, `h=` and `help`; OpenSearch's 400s for a bad `size`, `sort` or
//! `next_token`. In gateway mode the gateway forwards these routes and the upstream, an
//! embedded node, answers them.

use std::collections::HashSet;

use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};

/// Creates `name` with `shards` primaries and `replicas` replicas each.
async fn create(node: &TestNode, name: &str, shards: u32, replicas: u32) {
    let body = json!({"settings": {"number_of_shards": shards, "number_of_replicas": replicas}});
    let (s, b) = node.req("PUT", &format!("/{name}"), Some(body)).await;
    assert_eq!(s, 200, "create {name}: {b}");
}

async fn delete(node: &TestNode, name: &str) {
    let (s, b) = node.req("DELETE", &format!("/{name}"), None).await;
    assert_eq!(s, 200, "delete {name}: {b}");
}

/// The indices `pattern` names, oldest first (creation date, then name), as `_cat/indices`
/// dates them.
async fn by_creation(node: &TestNode, pattern: &str) -> Vec<String> {
    let (s, rows) = node
        .req(
            "GET",
            &format!("/_cat/indices/{pattern}?h=index,creation.date&format=json"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{rows}");
    let mut keyed: Vec<(i64, String)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let created = r["creation.date"].as_str().unwrap().parse().unwrap();
            (created, r["index"].as_str().unwrap().to_string())
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, name)| name).collect()
}

/// Creates `{prefix}-0` … `{prefix}-{count - 1}` (one shard, `replicas(n)` replicas) and
/// answers them oldest first.
async fn create_many(
    node: &TestNode,
    prefix: &str,
    count: u32,
    replicas: fn(u32) -> u32,
) -> Vec<String> {
    for n in 0..count {
        create(node, &format!("{prefix}-{n}"), 1, replicas(n)).await;
    }
    by_creation(node, &format!("{prefix}-*")).await
}

/// One JSON page of `path` (which has a query): its rows under `entity` and its token, after
/// checking the 200 and the shape `{"next_token", entity}`.
async fn json_page(
    node: &TestNode,
    path: &str,
    entity: &str,
    token: Option<&str>,
) -> (Vec<Value>, Option<String>) {
    let url = match token {
        Some(t) => format!("{path}&format=json&next_token={t}"),
        None => format!("{path}&format=json"),
    };
    let (s, body) = node.req("GET", &url, None).await;
    assert_eq!(s, 200, "{url}: {body}");
    let keys: Vec<&String> = body.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["next_token", entity], "{body}");
    let rows = body[entity].as_array().expect("rows").clone();
    let next = match &body["next_token"] {
        Value::Null => None,
        Value::String(t) => Some(t.clone()),
        other => panic!("next_token {other}"),
    };
    (rows, next)
}

/// The most pages a walk in these tests takes: more is a walk that does not end.
const MAX_PAGES: usize = 50;

/// Follows `path`'s JSON pages from `token` to the last, each of at most `size` rows: every
/// row, and how many pages.
async fn walk(
    node: &TestNode,
    path: &str,
    entity: &str,
    size: usize,
    mut token: Option<String>,
) -> (Vec<Value>, usize) {
    let mut rows = Vec::new();
    let mut pages = 0;
    loop {
        let (page, next) = json_page(node, path, entity, token.as_deref()).await;
        assert!(page.len() <= size, "{path}: {} rows", page.len());
        rows.extend(page);
        pages += 1;
        assert!(pages <= MAX_PAGES, "{path}: the pages do not end");
        match next {
            Some(t) => token = Some(t),
            None => return (rows, pages),
        }
    }
}

/// The `index` cells of `rows`.
fn names(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["index"].as_str().expect("index").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_list_indices_pages_see_every_index_once_in_creation_order() {
    let node = TestNode::start().await;
    // Names out of creation order: the pages follow creation, not names.
    for n in [7, 2, 11, 5, 0, 9, 3, 10, 1, 8, 4, 6] {
        create(&node, &format!("lst-{n:02}"), 1, 0).await;
    }
    let expected = by_creation(&node, "lst-*").await;
    assert_eq!(expected.len(), 12);

    for (sort, want) in [
        ("asc", expected.clone()),
        ("desc", expected.iter().rev().cloned().collect()),
    ] {
        let path = format!("/_list/indices?size=5&sort={sort}");
        let (rows, pages) = walk(&node, &path, "indices", 5, None).await;
        assert_eq!(names(&rows), want, "sort={sort}");
        assert_eq!(pages, 3, "5 + 5 + 2, the last page without a token");
    }

    // The default page (500) holds them all, with a null token.
    let (rows, next) = json_page(&node, "/_list/indices/lst-*?v", "indices", None).await;
    assert_eq!((names(&rows), next), (expected, None));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_list_indices_pages_hold_while_indices_come_and_go() {
    let node = TestNode::start().await;
    let order = create_many(&node, "churn", 10, |_| 0).await;
    let path = "/_list/indices/churn-*?size=4";

    let (rows, token) = json_page(&node, path, "indices", None).await;
    let mut seen = names(&rows);
    assert_eq!(seen, order[..4]);
    // Between pages: the page's last index (the one its token names), an index already seen
    // and one not yet seen are deleted, and a new index is created.
    delete(&node, &order[3]).await;
    delete(&node, &order[0]).await;
    delete(&node, &order[6]).await;
    create(&node, "churn-new", 1, 0).await;

    let (rows, _) = walk(&node, path, "indices", 4, token).await;
    seen.extend(names(&rows));
    let mut want: Vec<String> = order.iter().filter(|n| **n != order[6]).cloned().collect();
    want.push("churn-new".into());
    assert_eq!(seen, want, "each index once, the new one last");
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_list_indices_text_pages_end_with_their_token() {
    let node = TestNode::start().await;
    let order = create_many(&node, "txt", 3, |_| 0).await;

    let (s, text) = node.req("GET", "/_list/indices/txt-*?v&size=2", None).await;
    assert_eq!(s, 200, "{text}");
    let text = text.as_str().expect("plain text").to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "header, two rows, the token: {text:?}");
    assert!(lines[0].starts_with("health status index"), "{text:?}");
    assert!(lines[1].contains(&order[0]) && lines[2].contains(&order[1]));
    let token = lines[3].strip_prefix("next_token ").expect("token line");
    assert_ne!(token, "null");

    let (s, text) = node
        .req(
            "GET",
            &format!("/_list/indices/txt-*?size=2&h=index,docs.count&next_token={token}"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(
        text.as_str().expect("plain text"),
        format!("{} 0\nnext_token null\n", order[2])
    );

    // `s=` sorts the rows of the page; the page is cut in creation order first.
    let (_, text) = node
        .req(
            "GET",
            "/_list/indices/txt-*?size=2&h=index&s=index:desc",
            None,
        )
        .await;
    let mut first_two = order[..2].to_vec();
    first_two.sort();
    let text = text.as_str().expect("plain text");
    let rows: Vec<&str> = text.lines().take(2).collect();
    assert_eq!(
        rows,
        [first_two[1].as_str(), first_two[0].as_str()],
        "{text:?}"
    );

    // `help` lists `_cat/indices`' columns, before any page parameter is read.
    let (_, cat_help) = node.req("GET", "/_cat/indices?help", None).await;
    let (s, list_help) = node.req("GET", "/_list/indices?help&size=0", None).await;
    assert_eq!(s, 200, "{list_help}");
    assert_eq!(list_help, cat_help);
    assert!(list_help.as_str().unwrap().contains("docs.count"));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_list_indices_health_filters_the_cut_page() {
    let node = TestNode::start().await;
    // Alternately green (no replica) and yellow (a replica no node holds).
    let order = create_many(&node, "hl", 4, |n| n % 2).await;
    let green: Vec<String> = order
        .iter()
        .filter(|n| ["hl-0", "hl-2"].contains(&n.as_str()))
        .cloned()
        .collect();
    let path = "/_list/indices/hl-*?size=2&health=green";
    let (rows, pages) = walk(&node, path, "indices", 2, None).await;
    assert!(rows.iter().all(|r| r["health"] == "green"), "{rows:?}");
    assert_eq!(names(&rows), green);
    assert_eq!(pages, 2, "the pages are cut over all four, then filtered");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_list_apis_refuse_a_bad_size_sort_or_token() {
    let node = TestNode::start().await;
    create(&node, "bad-0", 1, 0).await;
    create(&node, "bad-1", 1, 0).await;
    let (_, shard_token) = json_page(&node, "/_list/shards?size=2000", "shards", None).await;
    assert_eq!(shard_token, None);
    let (_, index_token) = json_page(&node, "/_list/indices?size=1", "indices", None).await;
    let index_token = index_token.expect("a second page");

    let cases: Vec<(String, &str, &str)> = vec![
        (
            "/_list/indices?size=0".into(),
            "illegal_argument_exception",
            "size must be greater than zero",
        ),
        (
            "/_list/indices?size=ten".into(),
            "illegal_argument_exception",
            "Failed to parse int parameter [size] with value [ten]",
        ),
        (
            "/_list/indices?size=5001".into(),
            "illegal_argument_exception",
            "size should be less than [5000]",
        ),
        (
            "/_list/indices?sort=up".into(),
            "illegal_argument_exception",
            "value of sort can either be asc or desc",
        ),
        (
            "/_list/indices?next_token=bm9wZQ".into(),
            "parse_exception",
            "Parameter [next_token] has been tainted and is incorrect. Please provide a valid [next_token].",
        ),
        (
            "/_list/indices?next_token=".into(),
            "parse_exception",
            "Parameter [next_token]",
        ),
        (
            "/_list/shards?size=1999".into(),
            "illegal_argument_exception",
            "size should at least be [2000]",
        ),
        (
            "/_list/shards?size=20001".into(),
            "illegal_argument_exception",
            "size should be less than [20000]",
        ),
        (
            "/_list/shards?sort=newest".into(),
            "illegal_argument_exception",
            "value of sort can either be asc or desc",
        ),
        // An index page's token is no shard page's.
        (
            format!("/_list/shards?next_token={index_token}"),
            "parse_exception",
            "Parameter [next_token]",
        ),
        (
            "/_list/indices?health=blue".into(),
            "illegal_argument_exception",
            "unknown cluster health status [blue]",
        ),
    ];
    for (path, ty, reason) in cases {
        let resp = node.req("GET", &path, None).await;
        assert_error(&resp, 400, ty);
        let got = resp.1["error"]["reason"].as_str().unwrap_or_default();
        assert!(got.starts_with(reason), "{path}: {}", resp.1);
    }
    // A text request is refused in JSON too.
    let resp = node.req("GET", "/_list/indices?v&size=-1", None).await;
    assert_error(&resp, 400, "illegal_argument_exception");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cat_shards_lists_each_copy_of_each_shard() {
    let node = TestNode::start().await;
    create(&node, "sh-a", 2, 1).await;
    node.bulk(
        "/sh-a/_bulk?refresh=true",
        &[json!({"index": {"_id": "1"}}), json!({"v": 1})],
    )
    .await;

    let (s, rows) = node.req("GET", "/_cat/shards/sh-a?format=json", None).await;
    assert_eq!(s, 200, "{rows}");
    let rows = rows.as_array().expect("rows");
    let cells: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["shard"].as_str().unwrap(),
                r["prirep"].as_str().unwrap(),
                r["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cells,
        [
            ("0", "p", "STARTED"),
            ("0", "r", "UNASSIGNED"),
            ("1", "p", "STARTED"),
            ("1", "r", "UNASSIGNED")
        ]
    );
    assert_eq!(rows[0]["docs"], "1", "the index's documents on shard 0");
    assert!(rows[0]["store"].is_string() && rows[0]["node"].is_string());
    assert_eq!(rows[2]["docs"], "0");
    assert_eq!(
        (&rows[1]["docs"], &rows[1]["node"]),
        (&Value::Null, &Value::Null)
    );

    let (s, text) = node.req("GET", "/_cat/shards?v", None).await;
    assert_eq!(s, 200, "{text}");
    let text = text.as_str().expect("plain text");
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "index", "shard", "prirep", "state", "docs", "store", "ip", "node"
        ]
    );
    assert_eq!(text.lines().count(), 5, "{text:?}");
    node.stop().await;
}

/// The `(index, shard, prirep)` of shard rows.
fn copies(rows: &[Value]) -> Vec<(String, u64, String)> {
    rows.iter()
        .map(|r| {
            (
                r["index"].as_str().unwrap().to_string(),
                r["shard"].as_str().unwrap().parse().unwrap(),
                r["prirep"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every copy of `index`'s `shards` shards (a primary and one replica each), in order.
fn all_copies(index: &str, shards: u64) -> Vec<(String, u64, String)> {
    (0..shards)
        .flat_map(|s| {
            ["p", "r"]
                .into_iter()
                .map(move |c| (index.to_string(), s, c.to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_list_shards_pages_by_shard_rows_while_indices_come_and_go() {
    let node = TestNode::start().await;
    // 700 shards of a primary and a replica: 1400 rows an index, so 2000-row pages (the
    // smallest OpenSearch takes) stop inside an index.
    for name in ["ls-b", "ls-a", "ls-c"] {
        create(&node, name, 700, 1).await;
    }
    let order = by_creation(&node, "ls-*").await;

    let path = "/_list/shards/ls-*?size=2000";
    let (rows, token) = json_page(&node, path, "shards", None).await;
    let mut seen = copies(&rows);
    assert_eq!(rows.len(), 2000);
    let mut want = all_copies(&order[0], 700);
    want.extend(all_copies(&order[1], 300));
    assert_eq!(
        seen, want,
        "the first index whole, then 300 shard ids of the second"
    );

    // Between pages: the last index is deleted, a new one created.
    delete(&node, &order[2]).await;
    create(&node, "ls-new", 100, 1).await;
    let (rows, pages) = walk(&node, path, "shards", 2000, token).await;
    seen.extend(copies(&rows));
    let mut want = all_copies(&order[0], 700);
    want.extend(all_copies(&order[1], 700));
    want.extend(all_copies("ls-new", 100));
    assert_eq!(seen, want, "every copy once, in order");
    assert_eq!(pages, 1, "800 + 200 rows fit the second page");

    // Newest first.
    let (rows, _) = json_page(&node, "/_list/shards/ls-*?sort=desc", "shards", None).await;
    let mut want = all_copies("ls-new", 100);
    want.extend(all_copies(&order[1], 700));
    want.extend(all_copies(&order[0], 700));
    want.truncate(2000);
    assert_eq!(copies(&rows), want);

    // Text: the rows, then the token line; `h=` picks the columns as on `_cat/shards`.
    let (s, text) = node
        .req(
            "GET",
            "/_list/shards/ls-new?h=index,shard,prirep,state",
            None,
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let text = text.as_str().expect("plain text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 201, "{}", &text[..200]);
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ls-new", "0", "p", "STARTED"]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["ls-new", "0", "r", "UNASSIGNED"]
    );
    assert_eq!(lines[200], "next_token null");
    let (_, cat_help) = node.req("GET", "/_cat/shards?help", None).await;
    let (_, list_help) = node.req("GET", "/_list/shards?help&size=1", None).await;
    assert_eq!(list_help, cat_help);
    node.stop().await;
}
