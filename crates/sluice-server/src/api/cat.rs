//! The `_cat` table: typed cells and the parameters every `_cat` API takes, as OpenSearch's
//! `RestTable` reads them — `format=json`, `v` (header line), `h` (columns by name or alias,
//! wildcards allowed, unknown names skipped), `help` (the column list), `s` (sort by columns,
//! `:asc`/`:desc`, an unknown key refused), `bytes` (byte sizes in one unit) and `time`
//! (durations in one unit), the
//! `Accept` header standing for a missing `format` ([`accept_as_format`]). The parameter
//! readers ([`displayed`], [`wants_help`], [`wants_header`], [`wants_json`], [`help`]) also
//! serve tables that lay out their own rows (`_list/wlm_stats`); [`Table::respond_page`]
//! answers a page of the paginated `_list` tables (`_list/indices`, `_list/shards`).

use std::cmp::Ordering;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use sluice_engine::{EngineError, ErrorCode};
use sluice_wire::simple_match;

use crate::error::ApiResult;
use crate::http::{Params, reply};

/// A `_cat` or `_list` table's request with no `format` parameter answers in the type its
/// `Accept` header names (`application/json`, `application/yaml`; one media type, parameters
/// allowed), as OpenSearch's `RestTable` reads `request.param("format",
/// request.header("Accept"))`: the header becomes the `format` the handlers read (YAML is then
/// rendered by [`crate::http::format`], which reads the header itself). Any other header (a
/// browser's list, `text/plain`, `*/*`) leaves the text table.
///
/// # Cancel safety
/// Dropping the future drops the request, as for any handler.
pub async fn accept_as_format(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let table = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .is_some_and(|p| p.as_str().starts_with("/_cat/") || p.as_str().starts_with("/_list/"));
    let has_format = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.split('=').next() == Some("format"))
    });
    let named = crate::http::format::accept(req.headers()).and_then(|a| {
        let essence = a.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/json") {
            Some("json")
        } else if essence.eq_ignore_ascii_case(crate::http::format::YAML) {
            Some("yaml")
        } else {
            None
        }
    });
    if let (true, false, Some(format)) = (table, has_format, named) {
        let uri = req.uri();
        let path = uri.path();
        let rewritten = match uri.query() {
            Some(q) if !q.is_empty() => format!("{path}?{q}&format={format}"),
            _ => format!("{path}?format={format}"),
        };
        if let Ok(new) = rewritten.parse() {
            *req.uri_mut() = new;
        }
    }
    next.run(req).await
}

/// One column of a `_cat` table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The column's name.
    pub name: &'static str,
    /// Its short names, comma-separated (`h=` and `s=` accept them).
    pub aliases: &'static str,
    /// What it shows (`help`).
    pub desc: &'static str,
    /// Whether it is shown without `h=`.
    pub default: bool,
}

impl Column {
    /// A column shown by default.
    pub const fn new(name: &'static str, aliases: &'static str, desc: &'static str) -> Column {
        Column {
            name,
            aliases,
            desc,
            default: true,
        }
    }

    /// A column shown only when `h=` asks for it.
    pub const fn hidden(name: &'static str, aliases: &'static str, desc: &'static str) -> Column {
        Column {
            name,
            aliases,
            desc,
            default: false,
        }
    }

    fn answers_to(&self, key: &str) -> bool {
        self.name == key || self.aliases.split(',').any(|a| !a.is_empty() && a == key)
    }
}

/// One cell: sorted by its type, rendered by the request's parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Text, sorted as text.
    Text(String),
    /// A whole number, sorted as a number.
    Int(i64),
    /// A byte size, sorted as a number and rendered per `bytes=`.
    Bytes(u64),
    /// A duration, sorted as one and rendered per `time=` ([`render_time`]).
    Time(std::time::Duration),
    /// No value (sorts first).
    Null,
}

impl Cell {
    fn render(&self, units: Units<'_>) -> Option<String> {
        match self {
            Cell::Text(s) => Some(s.clone()),
            Cell::Int(n) => Some(n.to_string()),
            Cell::Bytes(n) => Some(render_bytes(*n, units.bytes)),
            Cell::Time(d) => Some(render_time(*d, units.time)),
            Cell::Null => None,
        }
    }

    fn cmp_cell(&self, other: &Cell) -> Ordering {
        match (self, other) {
            (Cell::Null, Cell::Null) => Ordering::Equal,
            (Cell::Null, _) => Ordering::Less,
            (_, Cell::Null) => Ordering::Greater,
            (Cell::Int(a), Cell::Int(b)) => a.cmp(b),
            (Cell::Bytes(a), Cell::Bytes(b)) => a.cmp(b),
            (Cell::Time(a), Cell::Time(b)) => a.cmp(b),
            (a, b) => a.render(Units::default()).cmp(&b.render(Units::default())),
        }
    }
}

/// The units a request asks cells in: `bytes=` and `time=`.
#[derive(Debug, Clone, Copy, Default)]
struct Units<'a> {
    bytes: Option<&'a str>,
    time: Option<&'a str>,
}

impl<'a> Units<'a> {
    fn of(params: &'a Params) -> Units<'a> {
        Units {
            bytes: params.get("bytes").map(String::as_str),
            time: params.get("time").map(String::as_str),
        }
    }
}

/// Renders a duration as OpenSearch's `RestTable` renders a `TimeValue`: whole units of the
/// one `time=` names (`nanos`, `micros`, `ms`, `s`, `m`, `h`, `d`; rounded down), else — no
/// `time=`, or a unit it does not know — as `TimeValue` prints itself (`1.5s`, `250.3micros`).
pub fn render_time(d: std::time::Duration, unit: Option<&str>) -> String {
    let nanos = d.as_nanos();
    let per = |unit_nanos: u128| (nanos / unit_nanos).to_string();
    match unit {
        Some("nanos") => per(1),
        Some("micros") => per(1_000),
        Some("ms") => per(1_000_000),
        Some("s") => per(1_000_000_000),
        Some("m") => per(60_000_000_000),
        Some("h") => per(3_600_000_000_000),
        Some("d") => per(86_400_000_000_000),
        _ => sluice_wire::format_time_value(d),
    }
}

/// Renders a byte size as OpenSearch's `ByteSizeValue`: in the unit `bytes=` names (whole
/// units, rounded down), else the largest unit that fits, with at most one decimal, cut, not
/// rounded, and `.0` dropped (`1.5kb`, `208b`, `2gb`).
pub fn render_bytes(n: u64, unit: Option<&str>) -> String {
    let div = |shift: u32| (n >> shift).to_string();
    match unit {
        Some("b") => return n.to_string(),
        Some("k" | "kb") => return div(10),
        Some("m" | "mb") => return div(20),
        Some("g" | "gb") => return div(30),
        Some("t" | "tb") => return div(40),
        Some("p" | "pb") => return div(50),
        _ => {}
    }
    const UNITS: [(&str, u32); 5] = [("pb", 50), ("tb", 40), ("gb", 30), ("mb", 20), ("kb", 10)];
    for (suffix, shift) in UNITS {
        if n >= 1u64 << shift {
            let value = n as f64 / (1u64 << shift) as f64;
            let tenths = (value * 10.0).floor() as u64;
            return if tenths.is_multiple_of(10) {
                format!("{}{suffix}", tenths / 10)
            } else {
                format!("{}.{}{suffix}", tenths / 10, tenths % 10)
            };
        }
    }
    format!("{n}b")
}

/// A `_cat` table: its columns and rows.
pub struct Table {
    columns: &'static [Column],
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &'static [Column]) -> Table {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column, in column order).
    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len(), "a row has a cell per column");
        self.rows.push(row);
    }

    /// The row order `s=` asks for (stable: equal rows keep their order).
    fn order(&self, params: &Params) -> ApiResult<Vec<usize>> {
        let mut order: Vec<usize> = (0..self.rows.len()).collect();
        let Some(s) = params.get("s") else {
            return Ok(order);
        };
        let mut keys = Vec::new();
        for key in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            let (name, desc) = match key.strip_suffix(":desc") {
                Some(n) => (n, true),
                None => (key.strip_suffix(":asc").unwrap_or(key), false),
            };
            let Some(col) = self.columns.iter().position(|c| c.answers_to(name)) else {
                // OpenSearch raises an UnsupportedOperationException (a 500); sluice keeps
                // its type and text but answers 400: it is the request that is wrong.
                return Err(EngineError::new(
                    ErrorCode::UnsupportedOperation,
                    format!("Unable to sort by unknown sort key `{name}`"),
                )
                .into());
            };
            keys.push((col, desc));
        }
        order.sort_by(|&a, &b| {
            for (col, desc) in &keys {
                let o = self.rows[a][*col].cmp_cell(&self.rows[b][*col]);
                let o = if *desc { o.reverse() } else { o };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        });
        Ok(order)
    }

    /// Answers the table as the request's parameters ask.
    pub fn respond(&self, params: &Params) -> ApiResult<Response> {
        self.respond_as(params, None)
    }

    /// Answers the table as one page of a `_list` API, as OpenSearch's `RestTable` answers a
    /// paginated table: the JSON form is `{"next_token": …, "<entity>": [rows]}`, and the text
    /// form ends with a `next_token <token>` line (`next_token null` on the last page).
    pub fn respond_page(&self, params: &Params, page: Page<'_>) -> ApiResult<Response> {
        self.respond_as(params, Some(page))
    }

    fn respond_as(&self, params: &Params, page: Option<Page<'_>>) -> ApiResult<Response> {
        if wants_help(params) {
            return Ok(text(help(self.columns)));
        }
        let display = displayed(self.columns, params);
        let order = self.order(params)?;
        let units = Units::of(params);
        if wants_json(params) {
            let rows: Vec<Value> = order
                .iter()
                .map(|&r| {
                    let obj: Map<String, Value> = display
                        .iter()
                        .map(|(c, shown)| {
                            let v = self.rows[r][*c]
                                .render(units)
                                .map_or(Value::Null, Value::String);
                            (shown.clone(), v)
                        })
                        .collect();
                    Value::Object(obj)
                })
                .collect();
            let body = match page {
                None => Value::Array(rows),
                Some(p) => {
                    let mut body = Map::new();
                    body.insert("next_token".into(), p.next_token.into());
                    body.insert(p.entity.into(), Value::Array(rows));
                    Value::Object(body)
                }
            };
            return Ok(reply(StatusCode::OK, body, params));
        }
        let mut lines: Vec<Vec<String>> = Vec::new();
        if wants_header(params) {
            lines.push(display.iter().map(|(_, shown)| shown.clone()).collect());
        }
        for &r in &order {
            lines.push(
                display
                    .iter()
                    .map(|(c, _)| self.rows[r][*c].render(units).unwrap_or_default())
                    .collect(),
            );
        }
        let mut body = crate::http::render_table(&lines);
        if let Some(p) = page {
            body.push_str("next_token ");
            body.push_str(p.next_token.unwrap_or("null"));
            body.push('\n');
        }
        Ok(text(body))
    }
}

/// A page of a `_list` table ([`Table::respond_page`]).
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The key the JSON form lists the rows under (`indices`, `shards`).
    pub entity: &'static str,
    /// The next page's token; `None` on the last page.
    pub next_token: Option<&'a str>,
}

/// The columns of `columns` that `h=` names (by name or alias, wildcards allowed, unknown
/// names skipped, each column once, in the order asked), else those shown by default; each
/// with the name to show it under (an alias asked for keeps its name).
pub fn displayed(columns: &[Column], params: &Params) -> Vec<(usize, String)> {
    let Some(h) = params.get("h") else {
        return columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.default)
            .map(|(i, c)| (i, c.name.to_string()))
            .collect();
    };
    let mut out: Vec<(usize, String)> = Vec::new();
    for wanted in h.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if wanted.contains('*') {
            for (i, c) in columns.iter().enumerate() {
                let hit = simple_match(wanted, c.name)
                    || c.aliases.split(',').any(|a| simple_match(wanted, a));
                if hit && !out.iter().any(|(j, _)| *j == i) {
                    out.push((i, c.name.to_string()));
                }
            }
        } else if let Some(i) = columns.iter().position(|c| c.answers_to(wanted))
            && !out.iter().any(|(j, _)| *j == i)
        {
            out.push((i, wanted.to_string()));
        }
    }
    out
}

/// Whether the request asks for the column list (`help`, `help=true`).
pub fn wants_help(params: &Params) -> bool {
    params
        .get("help")
        .is_some_and(|v| v.is_empty() || v == "true")
}

/// Whether the request asks for a header line (`v`, `v=true`).
pub fn wants_header(params: &Params) -> bool {
    params.get("v").is_some_and(|v| v.is_empty() || v == "true")
}

/// Whether the request asks for the rows as a document (`format=json`, or `format=yaml`, which
/// the node's outer layer renders from the JSON, [`crate::http::format`]); any other format is
/// answered as the text table, as OpenSearch's `RestTable` answers a format it does not know.
pub fn wants_json(params: &Params) -> bool {
    params
        .get("format")
        .is_some_and(|f| f == "json" || f.eq_ignore_ascii_case("yaml"))
}

/// The `help` text of `columns`: `name | aliases | description`, each padded to its column's
/// width.
pub fn help(columns: &[Column]) -> String {
    let width = |f: &dyn Fn(&Column) -> &str| {
        columns
            .iter()
            .map(|c| f(c).chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (
        width(&|c| c.name),
        width(&|c| c.aliases),
        width(&|c| c.desc),
    );
    let mut out = String::new();
    for c in columns {
        out.push_str(&format!(
            "{:w0$} | {:w1$} | {:w2$}\n",
            c.name, c.aliases, c.desc
        ));
    }
    out
}

/// A `text/plain` answer.
pub fn text(body: String) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=UTF-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_bytes_render_as_opensearch_byte_size_values() {
        assert_eq!(render_bytes(208, None), "208b");
        assert_eq!(render_bytes(1024, None), "1kb");
        assert_eq!(render_bytes(1597, None), "1.5kb");
        assert_eq!(render_bytes(3 << 30, None), "3gb");
        assert_eq!(render_bytes(1597, Some("b")), "1597");
        assert_eq!(render_bytes(1597, Some("kb")), "1");
        assert_eq!(render_bytes(1597, Some("mb")), "0");
        assert_eq!(render_bytes(1597, Some("bogus")), "1.5kb");
    }

    #[test]
    fn test_durations_render_as_opensearch_time_values() {
        let d = std::time::Duration::from_micros(1_534_250);
        assert_eq!(render_time(d, None), "1.5s");
        assert_eq!(render_time(d, Some("ms")), "1534");
        assert_eq!(render_time(d, Some("micros")), "1534250");
        assert_eq!(render_time(d, Some("s")), "1");
        assert_eq!(render_time(d, Some("m")), "0");
        assert_eq!(render_time(d, Some("bogus")), "1.5s");
    }
}
