//! Responses: JSON honouring `?filter_path` and `?pretty`, and `_cat`-style text tables.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sluice_wire::filter_path::FilterPath;

use super::Params;

/// Serializes `body` as the response, pretty when the client asked `?pretty`.
pub fn json_response(status: StatusCode, body: &Value, pretty: bool) -> Response {
    let bytes = if pretty {
        serde_json::to_vec_pretty(body)
    } else {
        serde_json::to_vec(body)
    }
    .unwrap_or_default();
    let mut resp = (status, bytes).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// A JSON response honouring `?filter_path` and `?pretty`. Errors are built elsewhere
/// ([`crate::error`]) and never filtered, as OpenSearch builds them.
pub fn reply(status: StatusCode, body: Value, params: &Params) -> Response {
    let pretty = params
        .get("pretty")
        .is_some_and(|v| v.is_empty() || v == "true");
    let body = match params.get("filter_path").and_then(|f| FilterPath::parse(f)) {
        Some(filter) => filter.apply(body),
        None => body,
    };
    json_response(status, &body, pretty)
}

/// Renders rows as a `_cat`-style text table: columns left-aligned to their widest cell,
/// separated by one space, trailing spaces trimmed, one line per row.
pub fn render_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{v:<w$}", w = widths[i]))
            .collect();
        text.push_str(line.join(" ").trim_end());
        text.push('\n');
    }
    text
}
