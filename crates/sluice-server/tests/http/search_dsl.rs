//! The search API over HTTP against the hand-made `books` data set: every query type of the
//! foundation, paging, sorting, `_source` filtering, `track_total_hits`, multi-index search,
//! `_count`, the result window, and the response shape. Expected ids come from the reference
//! model in `fixtures`.

use std::collections::BTreeSet;

use crate::common::{TestNode, assert_error, enc, hit_ids, sorted_ids};
use crate::fixtures::{
    BOOKS, Book, DAY_MS, NUM_BOOKS, days_from_civil, ids_where, load_books, now_ms,
};
use serde_json::{Value, json};

/// Starts a node with the books loaded.
async fn books_node() -> (TestNode, Vec<Book>) {
    let node = TestNode::start().await;
    let books = load_books(&node, now_ms()).await;
    (node, books)
}

/// Runs `query` on the books with room for every hit; asserts the total is exact and equals the
/// number of hits, and returns the ids in numeric order.
async fn ids_for(node: &TestNode, query: Value) -> Vec<String> {
    let resp = node
        .search(BOOKS, json!({"query": query.clone(), "size": 100}))
        .await;
    let ids = hit_ids(&resp);
    assert_eq!(resp["hits"]["total"]["relation"], "eq", "{query}: {resp}");
    assert_eq!(
        resp["hits"]["total"]["value"],
        ids.len() as u64,
        "{query}: {resp}"
    );
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "duplicate hits for {query}: {resp}"
    );
    sorted_ids(ids)
}

/// Asserts `query` matches exactly `expected` (ids in numeric order), which must not be empty
/// so that the assertion can tell a working query from one matching nothing.
async fn assert_matches(node: &TestNode, query: Value, expected: Vec<String>) {
    assert!(
        !expected.is_empty(),
        "a test query must match something: {query}"
    );
    assert_eq!(
        ids_for(node, query.clone()).await,
        expected,
        "query {query}"
    );
}

fn ids(ns: &[i64]) -> Vec<String> {
    ns.iter().map(i64::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_match_all_returns_every_document() {
    let (node, _) = books_node().await;
    let all: Vec<String> = (1..=NUM_BOOKS as i64).map(|n| n.to_string()).collect();
    assert_eq!(ids_for(&node, json!({"match_all": {}})).await, all);
    // No body at all is a match_all with ten hits.
    let (s, resp) = node.req("GET", "/books/_search", None).await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 30, "relation": "eq"})
    );
    assert_eq!(hit_ids(&resp).len(), 10);
    for hit in resp["hits"]["hits"].as_array().unwrap() {
        assert_eq!(
            hit["_score"].as_f64(),
            Some(1.0),
            "match_all scores 1.0: {hit}"
        );
    }
    assert_eq!(resp["hits"]["max_score"].as_f64(), Some(1.0));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_match_with_operator_and_minimum_should_match() {
    let (node, books) = books_node().await;
    let either = ids_where(&books, |b| b.title_has("quick") || b.title_has("fox"));
    assert_eq!(either, ids(&[1, 3, 4, 17, 23]));
    assert_matches(
        &node,
        json!({"match": {"title": "quick fox"}}),
        either.clone(),
    )
    .await;
    assert_matches(
        &node,
        json!({"match": {"title": {"query": "quick fox", "operator": "or"}}}),
        either,
    )
    .await;
    assert_matches(
        &node,
        json!({"match": {"title": {"query": "quick fox", "operator": "and"}}}),
        ids_where(&books, |b| b.title_has("quick") && b.title_has("fox")),
    )
    .await;
    let two_of_three = ids_where(&books, |b| {
        ["quick", "brown", "fox"]
            .iter()
            .filter(|w| b.title_has(w))
            .count()
            >= 2
    });
    assert_eq!(two_of_three, ids(&[1, 3, 4]));
    assert_matches(
        &node,
        json!({"match": {"title": {"query": "quick brown fox", "minimum_should_match": 2}}}),
        two_of_three,
    )
    .await;
    // Upper case in the query is analyzed away like in the documents.
    assert_matches(
        &node,
        json!({"match": {"title": "RUST"}}),
        ids_where(&books, |b| b.title_has("rust")),
    )
    .await;
    // The best match ranks first.
    let resp = node
        .search(
            BOOKS,
            json!({"query": {"match": {"title": "quick brown fox"}}}),
        )
        .await;
    assert_eq!(
        hit_ids(&resp)[0],
        "1",
        "the only title with all three words ranks first: {resp}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_match_phrase_requires_adjacent_words() {
    let (node, books) = books_node().await;
    let brown_fox = ids_where(&books, |b| b.title_has_phrase("brown fox"));
    assert_eq!(brown_fox, ids(&[1, 4]));
    assert_matches(
        &node,
        json!({"match_phrase": {"title": "brown fox"}}),
        brown_fox,
    )
    .await;
    assert_matches(
        &node,
        json!({"match_phrase": {"title": "lazy dog"}}),
        ids_where(&books, |b| b.title_has_phrase("lazy dog")),
    )
    .await;
    assert!(
        ids_for(&node, json!({"match_phrase": {"title": "fox brown"}}))
            .await
            .is_empty(),
        "order matters"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_multi_match_searches_every_listed_field() {
    let (node, books) = books_node().await;
    let expected = ids_where(&books, |b| {
        b.title_has("history") || b.summary_has("history")
    });
    assert_eq!(expected, ids(&[5, 13, 14, 15, 16, 17, 18, 19, 20]));
    assert_matches(
        &node,
        json!({"multi_match": {"query": "history", "fields": ["title", "summary"]}}),
        expected,
    )
    .await;
    // Only the title.
    assert_matches(
        &node,
        json!({"multi_match": {"query": "history", "fields": ["title"]}}),
        ids_where(&books, |b| b.title_has("history")),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_term_and_terms_match_exact_values() {
    let (node, books) = books_node().await;
    assert_matches(
        &node,
        json!({"term": {"category": "science"}}),
        ids_where(&books, |b| b.category == "science"),
    )
    .await;
    assert!(
        ids_for(&node, json!({"term": {"category": "Science"}}))
            .await
            .is_empty(),
        "keyword terms are exact"
    );
    assert_matches(
        &node,
        json!({"term": {"title.keyword": "rust in action"}}),
        ids(&[11]),
    )
    .await;
    assert_matches(
        &node,
        json!({"term": {"year": 2000}}),
        ids_where(&books, |b| b.year == 2000),
    )
    .await;
    assert_matches(
        &node,
        json!({"term": {"year": {"value": 2005}}}),
        ids_where(&books, |b| b.year == 2005),
    )
    .await;
    assert_matches(
        &node,
        json!({"term": {"rating": 1}}),
        ids_where(&books, |b| b.rating == 1),
    )
    .await;
    assert_matches(
        &node,
        json!({"term": {"in_stock": false}}),
        ids_where(&books, |b| !b.in_stock),
    )
    .await;
    assert_matches(
        &node,
        json!({"term": {"tags": "five"}}),
        ids_where(&books, |b| b.tags.contains(&"five")),
    )
    .await;
    assert_matches(
        &node,
        json!({"terms": {"author": ["alice", "carol", "nobody"]}}),
        ids_where(&books, |b| b.author == "alice" || b.author == "carol"),
    )
    .await;
    assert_matches(
        &node,
        json!({"terms": {"year": [1991, 2020]}}),
        ids_where(&books, |b| b.year == 1991 || b.year == 2020),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_range_on_numbers_uses_inclusive_and_exclusive_bounds() {
    let (node, books) = books_node().await;
    assert_matches(
        &node,
        json!({"range": {"year": {"gt": 2010}}}),
        ids_where(&books, |b| b.year > 2010),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"year": {"gte": 2010}}}),
        ids_where(&books, |b| b.year >= 2010),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"year": {"lt": 1995}}}),
        ids_where(&books, |b| b.year < 1995),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"year": {"lte": 1995}}}),
        ids_where(&books, |b| b.year <= 1995),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"year": {"gt": 2000, "lte": 2010}}}),
        ids_where(&books, |b| b.year > 2000 && b.year <= 2010),
    )
    .await;
    let cheap = ids_where(&books, |b| b.price >= 10.0 && b.price < 20.0);
    assert_eq!(cheap, ids(&[4, 5, 6, 7]));
    assert_matches(
        &node,
        json!({"range": {"price": {"gte": 10, "lt": 20}}}),
        cheap,
    )
    .await;
    assert_matches(&node, json!({"range": {"price": {"gt": 72.5}}}), ids(&[30])).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_range_on_dates_absolute_and_date_math() {
    let (node, books) = books_node().await;
    let march = days_from_civil(2024, 3, 1) * DAY_MS;
    let april = days_from_civil(2024, 4, 1) * DAY_MS;
    assert_matches(
        &node,
        json!({"range": {"published": {"gte": "2024-03-01", "lt": "2024-04-01"}}}),
        ids_where(&books, |b| {
            b.published_ms >= march && b.published_ms < april
        }),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"published": {"gte": march, "lt": april}}}),
        ids_where(&books, |b| {
            b.published_ms >= march && b.published_ms < april
        }),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"published": {"lt": "2024-01-16T00:00:00Z"}}}),
        ids_where(&books, |b| {
            b.published_ms < days_from_civil(2024, 1, 16) * DAY_MS
        }),
    )
    .await;
    // `updated` is now minus 1, 6, 11, … hours: books 1..=5 are within the last day, books
    // 11..=30 are more than two days old (with hours of margin either side).
    assert_matches(
        &node,
        json!({"range": {"updated": {"gte": "now-1d"}}}),
        ids(&[1, 2, 3, 4, 5]),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"updated": {"lt": "now-2d"}}}),
        (11..=30).map(|n: i64| n.to_string()).collect(),
    )
    .await;
    assert_matches(
        &node,
        json!({"range": {"updated": {"gte": "now-2d", "lt": "now-1d"}}}),
        ids(&[6, 7, 8, 9, 10]),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_exists_ids_prefix_and_wildcard() {
    let (node, books) = books_node().await;
    assert_matches(
        &node,
        json!({"exists": {"field": "isbn"}}),
        ids_where(&books, |b| b.isbn.is_some()),
    )
    .await;
    assert_matches(
        &node,
        json!({"ids": {"values": ["1", "5", "99"]}}),
        ids(&[1, 5]),
    )
    .await;
    assert_matches(
        &node,
        json!({"prefix": {"author": "ali"}}),
        ids_where(&books, |b| b.author.starts_with("ali")),
    )
    .await;
    assert_matches(
        &node,
        json!({"prefix": {"author": {"value": "bob"}}}),
        ids_where(&books, |b| b.author.starts_with("bob")),
    )
    .await;
    assert_matches(
        &node,
        json!({"wildcard": {"author": "bob*"}}),
        ids_where(&books, |b| b.author.starts_with("bob")),
    )
    .await;
    assert_matches(
        &node,
        json!({"wildcard": {"author": {"value": "c?rol"}}}),
        ids_where(&books, |b| b.author == "carol"),
    )
    .await;
    assert_matches(
        &node,
        json!({"wildcard": {"title.keyword": "*rust*"}}),
        ids_where(&books, |b| b.title.contains("rust")),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bool_clauses_combine_as_documented() {
    let (node, books) = books_node().await;
    assert_matches(
        &node,
        json!({"bool": {"must": [{"match": {"title": "physics"}}], "filter": [{"term": {"category": "science"}}]}}),
        ids_where(&books, |b| b.title_has("physics") && b.category == "science"),
    )
    .await;
    assert_matches(
        &node,
        json!({"bool": {"filter": [{"range": {"year": {"gte": 2000}}}], "must_not": [{"term": {"in_stock": false}}]}}),
        ids_where(&books, |b| b.year >= 2000 && b.in_stock),
    )
    .await;
    // should-only: at least one should clause.
    assert_matches(
        &node,
        json!({"bool": {"should": [{"term": {"author": "carol"}}, {"term": {"rating": 1}}]}}),
        ids_where(&books, |b| b.author == "carol" || b.rating == 1),
    )
    .await;
    // minimum_should_match over three clauses.
    assert_matches(
        &node,
        json!({"bool": {
            "should": [{"term": {"author": "alice"}}, {"term": {"author": "bob"}}, {"term": {"tags": "five"}}],
            "minimum_should_match": 2
        }}),
        ids_where(&books, |b| {
            [b.author == "alice", b.author == "bob", b.tags.contains(&"five")].iter().filter(|x| **x).count() >= 2
        }),
    )
    .await;
    // Nested bools.
    assert_matches(
        &node,
        json!({"bool": {
            "must": [{"bool": {"should": [{"term": {"category": "history"}}, {"term": {"category": "science"}}]}}],
            "must_not": [{"bool": {"filter": [{"range": {"price": {"lt": 50}}}]}}]
        }}),
        ids_where(&books, |b| (b.category == "history" || b.category == "science") && b.price >= 50.0),
    )
    .await;
    // must_not only: everything else.
    assert_matches(
        &node,
        json!({"bool": {"must_not": [{"term": {"category": "fiction"}}]}}),
        ids_where(&books, |b| b.category != "fiction"),
    )
    .await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_bool_should_beside_must_only_boosts_scores() {
    let (node, books) = books_node().await;
    let resp = node
        .search(
            BOOKS,
            json!({"query": {"bool": {"must": [{"term": {"category": "science"}}], "should": [{"term": {"author": "alice"}}]}},
                   "size": 100}),
        )
        .await;
    let hits = hit_ids(&resp);
    assert_eq!(
        sorted_ids(hits.clone()),
        ids_where(&books, |b| b.category == "science"),
        "should is optional: {resp}"
    );
    let boosted = ids_where(&books, |b| b.category == "science" && b.author == "alice");
    assert_eq!(boosted, ids(&[25, 30]));
    assert_eq!(
        sorted_ids(hits[..2].to_vec()),
        boosted,
        "matching should clauses rank first: {resp}"
    );
    let top = resp["hits"]["hits"][0]["_score"].as_f64().unwrap();
    let third = resp["hits"]["hits"][2]["_score"].as_f64().unwrap();
    assert!(top > third, "{resp}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_query_string_and_q_parameter() {
    let (node, books) = books_node().await;
    assert_matches(
        &node,
        json!({"query_string": {"query": "category:science"}}),
        ids_where(&books, |b| b.category == "science"),
    )
    .await;
    assert_matches(
        &node,
        json!({"query_string": {"query": "title:quick AND title:fox"}}),
        ids(&[1]),
    )
    .await;
    assert_matches(
        &node,
        json!({"query_string": {"query": "title:rust AND category:fiction"}}),
        ids_where(&books, |b| b.title_has("rust") && b.category == "fiction"),
    )
    .await;
    assert_matches(
        &node,
        json!({"query_string": {"query": "title:\"brown fox\""}}),
        ids(&[1, 4]),
    )
    .await;
    assert_matches(
        &node,
        json!({"query_string": {"query": "title:rome OR title:rust"}}),
        ids_where(&books, |b| b.title_has("rome") || b.title_has("rust")),
    )
    .await;
    assert_matches(
        &node,
        json!({"query_string": {"query": "quick", "default_field": "title"}}),
        ids_where(&books, |b| b.title_has("quick")),
    )
    .await;
    // Without a field, every field is searched.
    assert_matches(
        &node,
        json!({"query_string": {"query": "quick"}}),
        ids_where(&books, |b| b.title_has("quick")),
    )
    .await;

    for (q, expected) in [
        (
            "category:history",
            ids_where(&books, |b| b.category == "history"),
        ),
        ("author:alice", ids_where(&books, |b| b.author == "alice")),
        (
            "title:\"lazy dog\"",
            ids_where(&books, |b| b.title_has_phrase("lazy dog")),
        ),
        (
            "title:rust AND year:[2000 TO 2020]",
            ids_where(&books, |b| b.title_has("rust") && b.year >= 2000),
        ),
    ] {
        let (s, resp) = node
            .req(
                "GET",
                &format!("/books/_search?size=100&q={}", enc(q)),
                None,
            )
            .await;
        assert_eq!(s, 200, "q={q}: {resp}");
        assert!(!expected.is_empty());
        assert_eq!(sorted_ids(hit_ids(&resp)), expected, "q={q}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_source_parameter_is_the_body_of_a_search_or_count_without_one() {
    // OpenSearch reads `?source=` (with `source_content_type`) as the body of a request that
    // has none; sluice once ignored it and matched every document.
    let (node, books) = books_node().await;
    let science = ids_where(&books, |b| b.category == "science");
    assert!(!science.is_empty() && science.len() < books.len());
    let query = json!({"query": {"term": {"category": "science"}}, "size": 100}).to_string();
    let with_type = format!(
        "source={}&source_content_type=application/json",
        enc(&query)
    );
    let (s, resp) = node
        .req("GET", &format!("/books/_search?{with_type}"), None)
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(sorted_ids(hit_ids(&resp)), science);
    let count_query = json!({"query": {"term": {"category": "science"}}}).to_string();
    let count_source = format!(
        "source={}&source_content_type=application/json",
        enc(&count_query)
    );
    let (s, resp) = node
        .req("GET", &format!("/books/_count?{count_source}"), None)
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["count"], science.len(), "{resp}");
    // Without its content type, OpenSearch's 500.
    let resp = node
        .req(
            "GET",
            &format!("/books/_search?source={}", enc(&query)),
            None,
        )
        .await;
    assert_error(&resp, 500, "illegal_state_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "source and source_content_type parameters are required"
    );
    // A body wins over the parameter.
    let (s, resp) = node
        .req(
            "POST",
            &format!("/books/_count?{count_source}"),
            Some(json!({"query": {"match_all": {}}})),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["count"], books.len(), "{resp}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_from_size_pages_without_duplicates() {
    let (node, books) = books_node().await;
    // Sorted by a unique field: pages concatenate to the model order.
    let mut by_price = Vec::new();
    for from in (0..NUM_BOOKS).step_by(7) {
        let resp = node
            .search(
                BOOKS,
                json!({"from": from, "size": 7, "sort": [{"price": "asc"}]}),
            )
            .await;
        assert_eq!(resp["hits"]["total"]["value"], 30, "{resp}");
        by_price.extend(hit_ids(&resp));
    }
    let mut model: Vec<&Book> = books.iter().collect();
    model.sort_by(|a, b| a.price.total_cmp(&b.price));
    assert_eq!(by_price, model.iter().map(|b| b.id()).collect::<Vec<_>>());
    // Relevance order with ties: still every document exactly once.
    let mut seen = Vec::new();
    for from in (0..NUM_BOOKS).step_by(8) {
        let resp = node.search(BOOKS, json!({"from": from, "size": 8})).await;
        seen.extend(hit_ids(&resp));
    }
    assert_eq!(seen.len(), 30);
    assert_eq!(
        seen.iter().collect::<BTreeSet<_>>().len(),
        30,
        "no duplicates across pages: {seen:?}"
    );
    // URL parameters page too.
    let (s, resp) = node
        .req("GET", "/books/_search?from=28&size=5&sort=price:desc", None)
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(hit_ids(&resp), vec!["2", "1"]);
    // Past the end: no hits, the total unchanged.
    let resp = node.search(BOOKS, json!({"from": 40, "size": 5})).await;
    assert_eq!(hit_ids(&resp), Vec::<String>::new());
    assert_eq!(resp["hits"]["total"]["value"], 30);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sort_by_fields_returns_sort_values() {
    let (node, books) = books_node().await;
    // Keyword ascending, then price for ties.
    let resp = node
        .search(
            BOOKS,
            json!({"size": 30, "sort": [{"author": "asc"}, {"price": {"order": "asc"}}]}),
        )
        .await;
    let mut model: Vec<&Book> = books.iter().collect();
    model.sort_by(|a, b| a.author.cmp(b.author).then(a.price.total_cmp(&b.price)));
    assert_eq!(
        hit_ids(&resp),
        model.iter().map(|b| b.id()).collect::<Vec<_>>(),
        "{resp}"
    );
    for (hit, b) in resp["hits"]["hits"].as_array().unwrap().iter().zip(&model) {
        assert_eq!(hit["sort"], json!([b.author, b.price]), "{hit}");
        assert_eq!(
            hit["_score"],
            Value::Null,
            "no scores when sorting on fields: {hit}"
        );
    }
    assert_eq!(resp["hits"]["max_score"], Value::Null, "{resp}");

    // Keyword descending.
    let resp = node
        .search(
            BOOKS,
            json!({"size": 30, "sort": [{"author": "desc"}, {"price": "desc"}]}),
        )
        .await;
    model.sort_by(|a, b| b.author.cmp(a.author).then(b.price.total_cmp(&a.price)));
    assert_eq!(
        hit_ids(&resp),
        model.iter().map(|b| b.id()).collect::<Vec<_>>(),
        "{resp}"
    );

    // An integer field renders integer sort values.
    let resp = node
        .search(BOOKS, json!({"size": 5, "sort": [{"year": "desc"}]}))
        .await;
    model.sort_by_key(|b| std::cmp::Reverse(b.year));
    assert_eq!(
        hit_ids(&resp),
        model[..5].iter().map(|b| b.id()).collect::<Vec<_>>(),
        "{resp}"
    );
    for (hit, b) in resp["hits"]["hits"].as_array().unwrap().iter().zip(&model) {
        assert_eq!(hit["sort"], json!([b.year]), "{hit}");
    }

    // A short field ascending with the title keyword breaking ties.
    let resp = node
        .search(
            BOOKS,
            json!({"size": 30, "sort": ["rating", {"title.keyword": "asc"}]}),
        )
        .await;
    model.sort_by(|a, b| a.rating.cmp(&b.rating).then(a.title.cmp(b.title)));
    assert_eq!(
        hit_ids(&resp),
        model.iter().map(|b| b.id()).collect::<Vec<_>>(),
        "{resp}"
    );
    assert_eq!(
        resp["hits"]["hits"][0]["sort"],
        json!([model[0].rating, model[0].title])
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sort_by_score_and_by_doc() {
    let (node, _) = books_node().await;
    let resp = node
        .search(BOOKS, json!({"query": {"match": {"title": "quick brown fox"}}, "sort": ["_score"], "size": 10}))
        .await;
    let hits = resp["hits"]["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 5, "{resp}");
    let mut last = f64::INFINITY;
    for hit in hits {
        let score = hit["_score"]
            .as_f64()
            .expect("scores are kept when sorting by _score");
        let sort = hit["sort"][0].as_f64().expect("sort value");
        assert!(
            (score - sort).abs() < 1e-6,
            "sort value is the score: {hit}"
        );
        assert!(score <= last, "descending scores: {resp}");
        last = score;
    }
    assert_eq!(hits[0]["_id"], "1");

    // _doc order: every document exactly once across pages, sort values strictly increasing.
    let mut seen = Vec::new();
    let mut last_doc = -1_i64;
    for from in [0, 10, 20] {
        let resp = node
            .search(BOOKS, json!({"from": from, "size": 10, "sort": ["_doc"]}))
            .await;
        for hit in resp["hits"]["hits"].as_array().unwrap() {
            let d = hit["sort"][0]
                .as_i64()
                .unwrap_or_else(|| panic!("integer _doc sort value: {hit}"));
            assert!(d > last_doc, "{resp}");
            last_doc = d;
            seen.push(hit["_id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 30, "{seen:?}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_source_filtering() {
    let (node, books) = books_node().await;
    let q = json!({"ids": {"values": ["3"]}});
    let full = books[2].to_json();

    let resp = node
        .search(BOOKS, json!({"query": q, "_source": true}))
        .await;
    assert_eq!(resp["hits"]["hits"][0]["_source"], full);

    let resp = node
        .search(BOOKS, json!({"query": q, "_source": false}))
        .await;
    let hit = &resp["hits"]["hits"][0];
    assert_eq!(hit["_id"], "3");
    assert!(
        hit.get("_source").is_none(),
        "_source: false drops it: {hit}"
    );

    let resp = node
        .search(BOOKS, json!({"query": q, "_source": ["title", "year"]}))
        .await;
    assert_eq!(
        resp["hits"]["hits"][0]["_source"],
        json!({"title": full["title"], "year": full["year"]})
    );

    let resp = node
        .search(BOOKS, json!({"query": q, "_source": "title"}))
        .await;
    assert_eq!(
        resp["hits"]["hits"][0]["_source"],
        json!({"title": full["title"]})
    );

    let resp = node
        .search(BOOKS, json!({"query": q, "_source": {"includes": ["t*"]}}))
        .await;
    assert_eq!(
        resp["hits"]["hits"][0]["_source"],
        json!({"title": full["title"], "tags": full["tags"]})
    );

    let resp = node
        .search(
            BOOKS,
            json!({"query": q, "_source": {"excludes": ["tags", "summary", "isbn"]}}),
        )
        .await;
    let mut expected = full.clone();
    for k in ["tags", "summary", "isbn"] {
        expected.as_object_mut().unwrap().remove(k);
    }
    assert_eq!(resp["hits"]["hits"][0]["_source"], expected);

    let resp = node
        .search(
            BOOKS,
            json!({"query": q, "_source": {"includes": ["t*"], "excludes": ["tags"]}}),
        )
        .await;
    assert_eq!(
        resp["hits"]["hits"][0]["_source"],
        json!({"title": full["title"]})
    );

    let (s, resp) = node
        .req(
            "GET",
            "/books/_search?q=_id:3&_source_includes=year,price",
            None,
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(
        resp["hits"]["hits"][0]["_source"],
        json!({"year": full["year"], "price": full["price"]})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_track_total_hits_caps_exact_or_omits_the_total() {
    let node = TestNode::start().await;
    const DOCS: usize = 10_050;
    let mut lines = Vec::with_capacity(DOCS * 2);
    for i in 0..DOCS {
        lines.push(json!({"index": {"_id": i.to_string()}}));
        lines.push(json!({"n": i}));
    }
    let resp = node.bulk("/many/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], false);
    assert_eq!(resp["items"].as_array().map(Vec::len), Some(DOCS));

    let resp = node.search("many", json!({})).await;
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 10_000, "relation": "gte"}),
        "default cap: {}",
        resp["hits"]["total"]
    );
    assert_eq!(hit_ids(&resp).len(), 10);

    let resp = node
        .search("many", json!({"track_total_hits": true, "size": 0}))
        .await;
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": DOCS, "relation": "eq"})
    );
    assert_eq!(hit_ids(&resp).len(), 0);

    let resp = node
        .search("many", json!({"track_total_hits": false}))
        .await;
    assert!(
        resp["hits"].get("total").is_none(),
        "no total at all: {}",
        resp["hits"]
    );
    assert_eq!(hit_ids(&resp).len(), 10);

    let resp = node
        .search("many", json!({"track_total_hits": 500, "size": 1}))
        .await;
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 500, "relation": "gte"})
    );

    let resp = node
        .search(
            "many",
            json!({"track_total_hits": 500, "query": {"range": {"n": {"lt": 100}}}}),
        )
        .await;
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 100, "relation": "eq"}),
        "under the cap it is exact"
    );

    let (s, resp) = node
        .req("GET", "/many/_search?track_total_hits=true&size=0", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(resp["hits"]["total"]["value"], DOCS);

    assert_eq!(
        node.count("many", None).await,
        DOCS as u64,
        "_count is always exact"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_across_index_lists_and_wildcards() {
    let node = TestNode::start().await;
    for (index, n) in [("log-a", 3), ("log-b", 2), ("other", 4)] {
        let mut lines = Vec::new();
        for i in 0..n {
            lines.push(json!({"index": {"_id": format!("{index}-{i}")}}));
            lines.push(json!({"source": index, "i": i}));
        }
        node.bulk(&format!("/{index}/_bulk?refresh=true"), &lines)
            .await;
    }
    let indices_of = |resp: &Value| -> BTreeSet<String> {
        resp["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["_index"].as_str().unwrap().to_string())
            .collect()
    };
    let resp = node.search("log-*", json!({"size": 100})).await;
    assert_eq!(resp["hits"]["total"]["value"], 5, "{resp}");
    assert_eq!(
        indices_of(&resp),
        BTreeSet::from(["log-a".to_string(), "log-b".to_string()])
    );
    assert_eq!(resp["_shards"]["total"], 2, "one shard per index: {resp}");
    for hit in resp["hits"]["hits"].as_array().unwrap() {
        assert_eq!(
            hit["_source"]["source"], hit["_index"],
            "each hit names its own index: {hit}"
        );
    }

    let resp = node.search("log-a,other", json!({"size": 100})).await;
    assert_eq!(resp["hits"]["total"]["value"], 7, "{resp}");
    assert_eq!(
        indices_of(&resp),
        BTreeSet::from(["log-a".to_string(), "other".to_string()])
    );

    let (s, resp) = node
        .req("POST", "/_search", Some(json!({"size": 100})))
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["hits"]["total"]["value"], 9);
    assert_eq!(resp["_shards"]["total"], 3);

    let resp = node
        .search("log-*", json!({"query": {"term": {"i": 1}}}))
        .await;
    assert_eq!(sorted_ids(hit_ids(&resp)), vec!["log-a-1", "log-b-1"]);

    let resp = node.search("nomatch-*", json!({})).await;
    assert_eq!(
        resp["hits"]["total"]["value"], 0,
        "a wildcard matching nothing is an empty result: {resp}"
    );
    assert_eq!(resp["_shards"]["total"], 0);

    let resp = node
        .req("POST", "/log-a,absent/_search", Some(json!({})))
        .await;
    assert_error(&resp, 404, "index_not_found_exception");

    assert_eq!(node.count("log-*", None).await, 5);
    let (s, resp) = node.req("GET", "/_count", None).await;
    assert_eq!(s, 200);
    assert_eq!(resp["count"], 9);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_count_with_and_without_query() {
    let (node, books) = books_node().await;
    let (s, resp) = node.req("GET", "/books/_count", None).await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(
        resp,
        json!({"count": 30, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}})
    );
    let (s, resp) = node
        .req(
            "POST",
            "/books/_count",
            Some(json!({"query": {"term": {"category": "history"}}})),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(
        resp["count"],
        ids_where(&books, |b| b.category == "history").len()
    );
    let (s, resp) = node.req("GET", "/books/_count?q=author:bob", None).await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(
        resp["count"],
        ids_where(&books, |b| b.author == "bob").len()
    );
    let resp = node
        .req("POST", "/books/_count", Some(json!({"size": 3})))
        .await;
    assert_eq!(resp.0, 400, "_count takes no size: {}", resp.1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_result_window_over_ten_thousand_is_rejected() {
    let (node, _) = books_node().await;
    let resp = node
        .req(
            "POST",
            "/books/_search",
            Some(json!({"from": 9_995, "size": 10})),
        )
        .await;
    assert_eq!(resp.0, 400, "{}", resp.1);
    assert_eq!(resp.1["status"], 400);
    let root = &resp.1["error"]["root_cause"][0];
    assert_eq!(root["type"], "illegal_argument_exception", "{}", resp.1);
    let reason = root["reason"].as_str().unwrap();
    assert!(reason.contains("Result window is too large, from + size must be less than or equal to: [10000] but was [10005]"), "{reason}");
    // Exactly at the limit is fine.
    let resp = node.search(BOOKS, json!({"from": 9_990, "size": 10})).await;
    assert_eq!(hit_ids(&resp).len(), 0);
    let (s, _) = node
        .req("GET", "/books/_search?from=10000&size=1", None)
        .await;
    assert_eq!(s, 400);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_response_has_opensearch_shape() {
    let (node, _) = books_node().await;
    let resp = node
        .search(
            BOOKS,
            json!({"query": {"match": {"title": "cooking"}}, "size": 2}),
        )
        .await;
    let top: BTreeSet<&str> = resp
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        top,
        BTreeSet::from(["took", "timed_out", "_shards", "hits"]),
        "{resp}"
    );
    assert!(resp["took"].is_u64(), "{resp}");
    assert_eq!(resp["timed_out"], false);
    assert_eq!(
        resp["_shards"],
        json!({"total": 1, "successful": 1, "skipped": 0, "failed": 0})
    );
    let hits_keys: BTreeSet<&str> = resp["hits"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        hits_keys,
        BTreeSet::from(["total", "max_score", "hits"]),
        "{resp}"
    );
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 3, "relation": "eq"}),
        "three cooking titles: {resp}"
    );
    let max = resp["hits"]["max_score"]
        .as_f64()
        .expect("max_score is a number");
    let hits = resp["hits"]["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    for hit in hits {
        let k: BTreeSet<&str> = hit
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            k,
            BTreeSet::from(["_index", "_id", "_score", "_source"]),
            "{hit}"
        );
        assert_eq!(hit["_index"], BOOKS);
        let score = hit["_score"].as_f64().unwrap();
        assert!(score > 0.0 && score <= max + 1e-6, "{hit}");
        assert!(
            hit["_source"]["title"]
                .as_str()
                .unwrap()
                .contains("cooking")
        );
    }
    assert!(
        (hits[0]["_score"].as_f64().unwrap() - max).abs() < 1e-6,
        "the first hit has the max score"
    );

    // No match: total 0, max_score null, empty hits.
    let resp = node
        .search(BOOKS, json!({"query": {"term": {"category": "poetry"}}}))
        .await;
    assert_eq!(
        resp["hits"],
        json!({"total": {"value": 0, "relation": "eq"}, "max_score": null, "hits": []})
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_fuzzy_query_matches_within_edit_distance_with_constant_score() {
    let node = TestNode::start().await;
    let (s, b) = node
        .req(
            "PUT",
            "/movies",
            Some(json!({"mappings": {"properties": {"title": {"type": "text"}}}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = node
        .req(
            "POST",
            "/movies/_doc/1?refresh=true",
            Some(json!({"title": "Brave"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let resp = node
        .search(
            "movies",
            json!({"query": {"fuzzy": {"title": {"value": "bake", "fuzziness": 2,
                "max_expansions": 40, "prefix_length": 0, "transpositions": true,
                "rewrite": "constant_score"}}}}),
        )
        .await;
    assert_eq!(resp["hits"]["total"]["value"], 1, "{resp}");
    assert_eq!(resp["hits"]["max_score"], 1.0, "{resp}");
    assert_eq!(
        resp["hits"]["hits"][0]["_source"],
        json!({"title": "Brave"})
    );
    let resp = node
        .search("movies", json!({"query": {"fuzzy": {"title": "bake"}}}))
        .await;
    assert_eq!(
        resp["hits"]["total"]["value"], 0,
        "AUTO allows one edit: {resp}"
    );
    let resp = node
        .req(
            "POST",
            "/movies/_search",
            Some(json!({"query": {"fuzzy": {"title": {"value": "bake", "fuzziness": "lots"}}}})),
        )
        .await;
    assert_error(&resp, 400, "parsing_exception");
    node.stop().await;
}

/// Indexes `docs` into a fresh `index` (with `mappings`), one refresh per document so that
/// each lands in its own segment, in the given order.
async fn index_one_by_one(node: &TestNode, index: &str, mappings: Value, docs: &[Value]) {
    let (s, resp) = node
        .req(
            "PUT",
            &format!("/{index}"),
            Some(json!({"mappings": mappings})),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    for doc in docs {
        let (s, resp) = node
            .req(
                "POST",
                &format!("/{index}/_doc?refresh=true"),
                Some(doc.clone()),
            )
            .await;
        assert_eq!(s, 201, "{resp}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_scores_render_as_shortest_f32() {
    let node = TestNode::start().await;
    index_one_by_one(
        &node,
        "movies",
        json!({"properties": {"genre": {"type": "keyword"}}}),
        &[json!({"genre": "adventure"})],
    )
    .await;
    let query = json!({"terms": {"boost": 1.6, "genre": ["adventure"]}});
    let resp = node.search("movies", json!({"query": query})).await;
    assert_eq!(
        resp["hits"]["hits"][0]["_score"].as_f64(),
        Some(1.6),
        "{resp}"
    );
    assert_eq!(resp["hits"]["max_score"].as_f64(), Some(1.6), "{resp}");
    // A `_score` sort value is the same float.
    let resp = node
        .search("movies", json!({"query": query, "sort": ["_score"]}))
        .await;
    assert_eq!(
        resp["hits"]["hits"][0]["sort"][0].as_f64(),
        Some(1.6),
        "{resp}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_max_score_is_null_without_top_hits() {
    let node = TestNode::start().await;
    index_one_by_one(&node, "movies", json!({}), &[json!({"title": "Moneyball"})]).await;
    let resp = node.search("movies", json!({"size": 0})).await;
    assert_eq!(resp["hits"]["total"]["value"], 1, "{resp}");
    assert!(
        resp["hits"].as_object().unwrap()["max_score"].is_null(),
        "size 0 has max_score null: {resp}"
    );
    let resp = node.search("movies", json!({"size": 1})).await;
    assert_eq!(resp["hits"]["max_score"].as_f64(), Some(1.0), "{resp}");
    // Sorted on a field without track_scores: no scores, so no maximum either.
    let resp = node
        .search("movies", json!({"sort": [{"title.keyword": "asc"}]}))
        .await;
    assert!(resp["hits"]["max_score"].is_null(), "{resp}");
    assert!(resp["hits"]["hits"][0]["_score"].is_null(), "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_seq_no_primary_term_and_version_on_hits() {
    let node = TestNode::start().await;
    index_one_by_one(
        &node,
        "movies",
        json!({}),
        &[json!({"title": "Moneyball"}), json!({"title": "Drive"})],
    )
    .await;
    let (s, resp) = node
        .req(
            "POST",
            "/movies/_search?seq_no_primary_term=true",
            Some(json!({"sort": [{"title.keyword": "asc"}]})),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    let hits = resp["hits"]["hits"].as_array().unwrap();
    // Drive was indexed second.
    assert_eq!(hits[0]["_seq_no"], 1, "{resp}");
    assert_eq!(hits[1]["_seq_no"], 0, "{resp}");
    assert!(hits.iter().all(|h| h["_primary_term"] == 1), "{resp}");
    assert!(hits.iter().all(|h| h.get("_version").is_none()), "{resp}");
    // The body form, and `version`.
    let resp = node
        .search(
            "movies",
            json!({"seq_no_primary_term": true, "version": true, "query": {"match": {"title": "drive"}}}),
        )
        .await;
    let hit = &resp["hits"]["hits"][0];
    assert_eq!(
        (&hit["_version"], &hit["_seq_no"], &hit["_primary_term"]),
        (&json!(1), &json!(1), &json!(1)),
        "{resp}"
    );
    // Without them a hit carries none of the three.
    let resp = node.search("movies", json!({})).await;
    let hit = resp["hits"]["hits"][0].as_object().unwrap();
    assert!(
        !hit.contains_key("_seq_no") && !hit.contains_key("_primary_term"),
        "{resp}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_rest_total_hits_as_int_renders_a_number() {
    let node = TestNode::start().await;
    index_one_by_one(
        &node,
        "movies",
        json!({}),
        &[json!({"order": 1}), json!({"order": 2})],
    )
    .await;
    let (s, resp) = node
        .req(
            "POST",
            "/movies/_search?rest_total_hits_as_int=true",
            Some(json!({})),
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["hits"]["total"], json!(2), "{resp}");
    // Untracked totals are -1.
    let (_, resp) = node
        .req(
            "POST",
            "/movies/_search?rest_total_hits_as_int=true",
            Some(json!({"track_total_hits": false})),
        )
        .await;
    assert_eq!(resp["hits"]["total"], json!(-1), "{resp}");
    // A threshold cannot be rendered as a number.
    let resp = node
        .req(
            "POST",
            "/movies/_search?rest_total_hits_as_int=true",
            Some(json!({"track_total_hits": 1})),
        )
        .await;
    assert_error(&resp, 400, "illegal_argument_exception");
    assert_eq!(
        resp.1["error"]["reason"],
        "[rest_total_hits_as_int] cannot be used if the tracking of total hits is not accurate, got 1",
        "{}",
        resp.1
    );
    // false keeps the object.
    let (_, resp) = node
        .req(
            "POST",
            "/movies/_search?rest_total_hits_as_int=false",
            Some(json!({"track_total_hits": 1})),
        )
        .await;
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 1, "relation": "gte"}),
        "{resp}"
    );
    // _msearch items.
    let (s, resp) = node
        .raw(
            "POST",
            "/_msearch?rest_total_hits_as_int=true",
            "{\"index\": \"movies\"}\n{}\n",
        )
        .await;
    assert_eq!(s, 200, "{resp}");
    assert_eq!(resp["responses"][0]["hits"]["total"], json!(2), "{resp}");
    // Scroll continuations.
    let (_, first) = node
        .req(
            "POST",
            "/movies/_search?scroll=1m&rest_total_hits_as_int=true",
            Some(json!({"size": 1})),
        )
        .await;
    assert_eq!(first["hits"]["total"], json!(2), "{first}");
    let (s, page) = node
        .req(
            "POST",
            "/_search/scroll?rest_total_hits_as_int=true",
            Some(json!({"scroll_id": first["_scroll_id"]})),
        )
        .await;
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["hits"]["total"], json!(2), "{page}");
}

/// Titles in indexing order, for the tie tests.
const TIED: [&str; 8] = [
    "Monopoly",
    "Cyberpunk",
    "Drive",
    "Frozen",
    "Moneyball",
    "Cruise",
    "Lion",
    "Beast",
];

fn titles(resp: &Value) -> Vec<String> {
    resp["hits"]["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits in {resp}"))
        .iter()
        .map(|h| {
            h["_source"]["title"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_equal_hits_come_in_indexing_order() {
    let node = TestNode::start().await;
    // One segment per document: tantivy orders segments by their random ids.
    let docs: Vec<Value> = TIED
        .iter()
        .map(|t| json!({"title": t, "genre": "RPG", "year": 2011}))
        .collect();
    index_one_by_one(
        &node,
        "games",
        json!({"properties": {"genre": {"type": "keyword"}}}),
        &docs,
    )
    .await;
    let expected: Vec<String> = TIED.iter().map(|t| t.to_string()).collect();
    for body in [
        json!({"query": {"terms": {"genre": ["RPG"]}}}),
        json!({"query": {"match_all": {}}}),
        json!({"sort": [{"year": "asc"}]}),
        json!({"sort": [{"genre": "desc"}, "_score"]}),
    ] {
        let resp = node.search("games", body.clone()).await;
        assert_eq!(titles(&resp), expected, "{body}: {resp}");
    }
    // And in one bulk, refreshed once.
    let mut lines = Vec::new();
    for d in &docs {
        lines.push(json!({"index": {"_index": "bulk"}}));
        lines.push(d.clone());
    }
    node.bulk("/_bulk?refresh=true", &lines).await;
    let resp = node.search("bulk", json!({})).await;
    assert_eq!(titles(&resp), expected, "{resp}");
    // Across scroll pages of one hit.
    let (s, mut page) = node
        .req("POST", "/games/_search?scroll=1m", Some(json!({"size": 1})))
        .await;
    assert_eq!(s, 200, "{page}");
    let mut seen = titles(&page);
    for _ in 1..TIED.len() {
        let (s, next) = node
            .req(
                "POST",
                "/_search/scroll",
                Some(json!({"scroll": "1m", "scroll_id": page["_scroll_id"]})),
            )
            .await;
        assert_eq!(s, 200, "{next}");
        seen.extend(titles(&next));
        page = next;
    }
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_after_pages_through_a_sort() {
    let node = TestNode::start().await;
    index_one_by_one(
        &node,
        "movies",
        json!({"properties": {"title": {"type": "keyword"}}}),
        &[
            json!({"title": "The Cruise", "year": 1998}),
            json!({"title": "Drive", "year": 1960}),
            json!({"title": "Frozen", "year": 2013}),
            json!({"title": "Moneyball", "year": 2011}),
            json!({"title": "Heat", "year": 2011}),
        ],
    )
    .await;
    let resp = node
        .search(
            "movies",
            json!({"sort": [{"year": "asc"}], "search_after": [1960]}),
        )
        .await;
    assert_eq!(
        titles(&resp),
        ["The Cruise", "Moneyball", "Heat", "Frozen"],
        "{resp}"
    );
    // Page by page with two sort keys, feeding back each page's last sort values.
    let mut all = Vec::new();
    let mut after: Option<Value> = None;
    loop {
        let mut body = json!({"size": 2, "sort": [{"year": "desc"}, {"title": "asc"}]});
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let resp = node.search("movies", body).await;
        let page = titles(&resp);
        if page.is_empty() {
            break;
        }
        all.extend(page);
        after = resp["hits"]["hits"]
            .as_array()
            .unwrap()
            .last()
            .map(|h| h["sort"].clone());
    }
    assert_eq!(all, ["Frozen", "Heat", "Moneyball", "The Cruise", "Drive"]);
    // Values equal to a hit's skip it: a string sort value works too.
    let resp = node
        .search(
            "movies",
            json!({"sort": [{"title": "asc"}], "search_after": ["Heat"]}),
        )
        .await;
    assert_eq!(titles(&resp), ["Moneyball", "The Cruise"], "{resp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_after_with_an_id_tie_breaker_returns_each_doc_once() {
    let node = TestNode::start().await;
    // Twelve documents, four per `ts`, ids whose string order is not indexing order.
    let mut lines = Vec::new();
    for n in 0..12 {
        lines.push(json!({"index": {"_index": "events", "_id": format!("e{n}")}}));
        lines.push(json!({"ts": n % 3}));
    }
    let resp = node.bulk("/_bulk?refresh=true", &lines).await;
    assert_eq!(resp["errors"], false, "{resp}");
    let mut expected: Vec<(i64, String)> = (0..12).map(|n| (n % 3, format!("e{n}"))).collect();
    expected.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();
    // The usual opensearch-py paging loop: `[field, _id]`, feeding back the last sort values.
    let mut all = Vec::new();
    let mut after: Option<Value> = None;
    loop {
        let mut body = json!({"size": 5, "sort": [{"ts": "desc"}, {"_id": "asc"}]});
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let resp = node.search("events", body).await;
        let hits = resp["hits"]["hits"].as_array().expect("hits").clone();
        let Some(last) = hits.last() else { break };
        let first = &hits[0];
        assert_eq!(
            first["sort"],
            json!([first["_source"]["ts"], first["_id"]]),
            "{resp}"
        );
        after = Some(last["sort"].clone());
        all.extend(hit_ids(&resp));
        assert!(all.len() <= 12, "paging never ends: {all:?}");
    }
    assert_eq!(all, expected);
    // The string form sorts ascending on `_id` as well.
    let resp = node
        .search("events", json!({"size": 3, "sort": ["_id"]}))
        .await;
    assert_eq!(hit_ids(&resp), ["e0", "e1", "e10"], "{resp}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_search_after_errors_say_what_is_wrong() {
    let node = TestNode::start().await;
    index_one_by_one(&node, "movies", json!({}), &[json!({"year": 1998})]).await;
    let cases = [
        (
            json!({"sort": [{"year": "asc"}], "search_after": [1, 2]}),
            400,
            "search_after has 2 value(s) but sort has 1.",
        ),
        (
            json!({"search_after": [1]}),
            400,
            "Sort must contain at least one field.",
        ),
        (
            json!({"sort": [{"year": "asc"}], "search_after": ["toto"]}),
            400,
            "Failed to parse search_after value for field [year].",
        ),
        (
            json!({"sort": [{"year": "asc"}], "search_after": [1], "from": 1}),
            400,
            "`from` parameter must be set to 0 when `search_after` is used.",
        ),
        (
            json!({"sort": [{"year": "asc"}], "search_after": [{}]}),
            400,
            "Expected [VALUE_STRING] or [VALUE_NUMBER] or [VALUE_BOOLEAN] or [VALUE_NULL] but found [START_OBJECT] inside search_after.",
        ),
    ];
    for (body, status, reason) in cases {
        let resp = node
            .req("POST", "/movies/_search", Some(body.clone()))
            .await;
        assert_eq!(resp.0, status, "{body}: {}", resp.1);
        assert_eq!(
            resp.1["error"]["root_cause"][0]["reason"], reason,
            "{body}: {}",
            resp.1
        );
    }
    let resp = node
        .req(
            "POST",
            "/movies/_search?scroll=1m",
            Some(json!({"sort": [{"year": "asc"}], "search_after": [1]})),
        )
        .await;
    assert_error(&resp, 400, "search_phase_execution_exception");
    assert_eq!(
        resp.1["error"]["root_cause"][0]["reason"],
        "`search_after` cannot be used in a scroll context."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sorting_on_an_ip_field_shows_addresses_and_pages_after_them() {
    let node = TestNode::start().await;
    let mappings = json!({"mappings": {"properties": {"addr": {"type": "ip"}}}});
    assert_eq!(node.req("PUT", "/hosts", Some(mappings)).await.0, 200);
    for (id, addr) in [
        ("a", "10.0.0.2"),
        ("b", "::1"),
        ("c", "10.0.0.10"),
        ("d", "192.168.1.1"),
    ] {
        let path = format!("/hosts/_doc/{id}?refresh=true");
        assert_eq!(
            node.req("PUT", &path, Some(json!({"addr": addr}))).await.0,
            201
        );
    }
    let body = json!({"sort": [{"addr": "asc"}], "size": 2});
    let (s, b) = node.req("POST", "/hosts/_search", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    let sorts: Vec<Value> = b["hits"]["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["sort"][0].clone())
        .collect();
    // Address order: ::1 (IPv6) sorts before every IPv4-mapped address.
    assert_eq!(sorts, [json!("::1"), json!("10.0.0.2")], "{b}");
    let body = json!({"sort": [{"addr": "asc"}], "size": 2, "search_after": ["10.0.0.2"]});
    let (s, b) = node.req("POST", "/hosts/_search", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(hit_ids(&b), ["c", "d"], "{b}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_epoch_second_date_format_in_mapping_and_range() {
    let node = TestNode::start().await;
    // The `http_logs` mapping of opensearch-benchmark.
    let mappings = json!({"mappings": {"properties": {"@timestamp": {
        "type": "date", "format": "strict_date_optional_time||epoch_second"
    }}}});
    assert_eq!(node.req("PUT", "/logs", Some(mappings)).await.0, 200);
    for (id, ts) in [
        ("a", json!(1_420_070_400)),
        ("b", json!("1420070460")),
        ("c", json!("2015-01-01T00:02:00Z")),
    ] {
        let path = format!("/logs/_doc/{id}?refresh=true");
        let (s, b) = node
            .req("PUT", &path, Some(json!({"@timestamp": ts})))
            .await;
        assert_eq!(s, 201, "{b}");
    }
    // Bounds in seconds (the field's format) and in a date-time find the same documents.
    let body = json!({"query": {"range": {"@timestamp": {"gt": 1_420_070_400, "lte": "1420070520"}}},
                      "sort": [{"@timestamp": "asc"}]});
    let (s, b) = node.req("POST", "/logs/_search", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(hit_ids(&b), ["b", "c"], "{b}");
    // Sort values are epoch milliseconds, as OpenSearch renders a date sort.
    assert_eq!(
        b["hits"]["hits"][0]["sort"],
        json!([1_420_070_460_000i64]),
        "{b}"
    );
    let body = json!({"query": {"range": {"@timestamp": {
        "gte": "2015-01-01T00:01:00Z", "format": "strict_date_optional_time"
    }}}});
    let (s, b) = node.req("POST", "/logs/_search", Some(body)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(sorted_ids(hit_ids(&b)), ["b", "c"], "{b}");
    // A value that is neither seconds nor a date-time is refused as OpenSearch refuses it.
    let resp = node
        .req("PUT", "/logs/_doc/d", Some(json!({"@timestamp": "soon"})))
        .await;
    assert_error(&resp, 400, "mapper_parsing_exception");
    node.stop().await;
}

/// The sum of a profile breakdown's timings (the keys without `_count`).
fn breakdown_time(breakdown: &Value) -> u64 {
    breakdown
        .as_object()
        .unwrap_or_else(|| panic!("no breakdown: {breakdown}"))
        .iter()
        .filter(|(k, _)| !k.ends_with("_count"))
        .map(|(_, v)| v.as_u64().unwrap_or_else(|| panic!("{v} is not a count")))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_profile_reports_query_collector_and_aggregation_timings() {
    let (node, books) = books_node().await;
    let query = json!({"term": {"category": "fiction"}});
    let aggs = json!({
        "by_rating": {"terms": {"field": "rating"}, "aggs": {"top": {"max": {"field": "price"}}}},
        "avg_price": {"avg": {"field": "price"}}
    });
    let plain = node
        .search(BOOKS, json!({"query": query, "aggs": aggs, "size": 3}))
        .await;
    assert!(
        plain.get("profile").is_none(),
        "no profile unless asked: {plain}"
    );
    let resp = node
        .search(
            BOOKS,
            json!({"query": query, "aggs": aggs, "size": 3, "profile": true}),
        )
        .await;
    // Profiling collects each aggregation on its own: the answers are the same.
    assert_eq!(resp["aggregations"], plain["aggregations"]);
    assert_eq!(resp["hits"]["hits"], plain["hits"]["hits"]);
    let fiction = ids_where(&books, |b| b.category == "fiction").len() as u64;
    let (_, info) = node.req("GET", "/_nodes/_local", None).await;
    let node_id = info["nodes"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();

    let shards = resp["profile"]["shards"]
        .as_array()
        .expect("profile.shards");
    assert_eq!(shards.len(), 1, "{resp}");
    let shard = &shards[0];
    assert_eq!(shard["id"], format!("[{node_id}][{BOOKS}][0]"));
    let search = &shard["searches"][0];
    let q = &search["query"][0];
    assert_eq!(q["type"], "TermQuery");
    assert!(
        q["description"].as_str().unwrap().contains("fiction"),
        "{q}"
    );
    let breakdown = &q["breakdown"];
    assert_eq!(q["time_in_nanos"].as_u64(), Some(breakdown_time(breakdown)));
    assert_eq!(breakdown["create_weight_count"], 1);
    assert!(
        breakdown["build_scorer_count"].as_u64().unwrap() >= 1,
        "{breakdown}"
    );
    // One score per match (hits sort by score), one next_doc per match.
    assert_eq!(breakdown["score_count"].as_u64(), Some(fiction));
    assert_eq!(breakdown["next_doc_count"].as_u64(), Some(fiction));
    for step in [
        "match",
        "shallow_advance",
        "compute_max_score",
        "set_min_competitive_score",
    ] {
        assert_eq!(breakdown[step], 0, "tantivy has no {step}");
    }
    assert!(search["rewrite_time"].is_u64(), "{search}");
    let collector = &search["collector"][0];
    assert_eq!(collector["name"], "MultiCollector");
    assert_eq!(
        collector["children"][0]["name"],
        "SimpleTopScoreDocCollector"
    );
    assert_eq!(collector["children"][1]["reason"], "aggregation");
    assert_eq!(
        collector["time_in_nanos"].as_u64(),
        Some(
            collector["children"][0]["time_in_nanos"].as_u64().unwrap()
                + collector["children"][1]["time_in_nanos"].as_u64().unwrap()
        )
    );

    let aggs = shard["aggregations"].as_array().expect("aggregations");
    let described: Vec<(&str, &str)> = aggs
        .iter()
        .map(|a| {
            (
                a["description"].as_str().unwrap(),
                a["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        described,
        vec![
            ("by_rating", "NumericTermsAggregator"),
            ("avg_price", "AvgAggregator")
        ]
    );
    for a in aggs {
        let b = &a["breakdown"];
        assert_eq!(a["time_in_nanos"].as_u64(), Some(breakdown_time(b)), "{a}");
        assert_eq!(b["collect_count"].as_u64(), Some(fiction), "{a}");
        assert_eq!(b["reduce"], 0);
        assert_eq!(
            b["build_leaf_collector_count"], b["post_collection_count"],
            "one leaf collector per segment, harvested once: {a}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_profile_without_aggregations_names_the_hits_collector() {
    let (node, _) = books_node().await;
    let sorted = node
        .search(
            BOOKS,
            json!({"profile": true, "sort": [{"year": "asc"}], "size": 2}),
        )
        .await;
    let shard = &sorted["profile"]["shards"][0];
    assert_eq!(shard["aggregations"], json!([]));
    let collector = &shard["searches"][0]["collector"][0];
    assert_eq!(collector["name"], "SimpleFieldCollector");
    assert_eq!(collector["reason"], "search_top_hits");
    // Sorting on a field computes no scores.
    assert_eq!(
        shard["searches"][0]["query"][0]["breakdown"]["score_count"],
        0
    );
    let counted = node
        .search(BOOKS, json!({"profile": true, "size": 0}))
        .await;
    let collector = &counted["profile"]["shards"][0]["searches"][0]["collector"][0];
    assert_eq!(collector["name"], "TotalHitCountCollector");
    assert_eq!(collector["reason"], "search_count");
    let resp = node
        .req(
            "POST",
            &format!("/{BOOKS}/_search"),
            Some(json!({"profile": "yes"})),
        )
        .await;
    assert_eq!(resp.0, 400, "{}", resp.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_the_url_index_parameter_names_the_indices_when_the_path_names_none() {
    // OpenSearch's search, count and msearch handlers read `request.param("index")`: the
    // URL's `index` when the path has none. Through a gateway, forwarded as it came.
    let node = TestNode::start().await;
    for (index, n) in [("ix-a", 2), ("ix-b", 3)] {
        for i in 0..n {
            let path = format!("/{index}/_doc/{i}");
            let (s, b) = node.req("PUT", &path, Some(json!({"n": i}))).await;
            assert!(s == 200 || s == 201, "{b}");
        }
        node.refresh(index).await;
    }
    let total = |v: &Value| v["hits"]["total"]["value"].as_u64();
    let (s, v) = node.req("GET", "/_search?index=ix-a", None).await;
    assert_eq!((s, total(&v)), (200, Some(2)), "{v}");
    let (s, v) = node.req("GET", "/_search?index=ix-a,ix-b", None).await;
    assert_eq!((s, total(&v)), (200, Some(5)), "{v}");
    let (s, v) = node.req("GET", "/_count?index=ix-b", None).await;
    assert_eq!((s, v["count"].as_u64()), (200, Some(3)), "{v}");
    // The path's index wins over the parameter.
    let (s, v) = node.req("GET", "/ix-a/_count?index=ix-b", None).await;
    assert_eq!((s, v["count"].as_u64()), (200, Some(2)), "{v}");
    // An item that names no index takes the URL's.
    let body = crate::common::ndjson(&[json!({}), json!({"query": {"match_all": {}}})]);
    let (s, v) = node.raw("POST", "/_msearch?index=ix-b", body).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(total(&v["responses"][0]), Some(3), "{v}");
    node.stop().await;
}
