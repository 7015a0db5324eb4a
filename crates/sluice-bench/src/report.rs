//! The benchmark's results, rendered as a Markdown table and as JSON.

use std::fmt::Write as _;

use crate::load::LoadSummary;
use crate::measure::Summary;
use crate::queries::QueryShape;

/// Everything one benchmark run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// Seed of the documents and query bodies.
    pub seed: u64,
    /// Documents loaded into each target.
    pub num_docs: u64,
    /// The HTTP target, if HTTP was measured.
    pub url: Option<String>,
    /// Measured seconds per shape and concurrency, after the warm-up.
    pub duration_secs: f64,
    /// Unrecorded warm-up seconds before each measurement.
    pub warmup_secs: f64,
    /// Loading through `POST /_bulk`, if the run loaded over HTTP.
    pub http_load: Option<LoadSummary>,
    /// Loading through the engine API, if the run measured in-process.
    pub in_process_load: Option<LoadSummary>,
    /// One row per shape and concurrency, in the order they ran.
    pub rows: Vec<Row>,
    /// Result-count mismatches between HTTP and in-process answers of the same body.
    pub mismatches: Vec<String>,
}

/// The measurements of one shape at one concurrency.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    /// The query shape.
    pub shape: QueryShape,
    /// Concurrent requests in flight.
    pub concurrency: usize,
    /// Over HTTP, if measured.
    pub http: Option<Summary>,
    /// Through the engine API, if measured.
    pub in_process: Option<Summary>,
}

impl Row {
    /// Returns HTTP QPS as a fraction of in-process QPS, when both were measured.
    pub fn http_to_in_process_qps(&self) -> Option<f64> {
        match (&self.http, &self.in_process) {
            (Some(http), Some(in_process)) if in_process.qps > 0.0 => {
                Some(http.qps / in_process.qps)
            }
            _ => None,
        }
    }
}

impl Report {
    /// Renders the load throughput and one table row per shape and concurrency.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Documents: {} (seed {})", self.num_docs, self.seed);
        for (label, load) in [
            ("HTTP `_bulk`", &self.http_load),
            ("in-process bulk", &self.in_process_load),
        ] {
            if let Some(load) = load {
                let _ = writeln!(
                    out,
                    "{label}: {:.0} docs/s ({} docs in {:.2} s, refresh {:.2} s)",
                    load.docs_per_sec, load.num_docs, load.load_secs, load.refresh_secs
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| shape | concurrency | HTTP QPS | HTTP p50 ms | HTTP p99 ms | HTTP errors | in-process QPS | in-process p50 ms | in-process p99 ms | HTTP/in-process |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &self.rows {
            let _ = write!(out, "| {} | {} ", row.shape.name(), row.concurrency);
            match &row.http {
                Some(http) => {
                    let _ = write!(
                        out,
                        "| {:.0} | {:.2} | {:.2} | {} ",
                        http.qps, http.p50_ms, http.p99_ms, http.num_errors
                    );
                }
                None => out.push_str("| – | – | – | – "),
            }
            match &row.in_process {
                Some(in_process) => {
                    let _ = write!(
                        out,
                        "| {:.0} | {:.2} | {:.2} ",
                        in_process.qps, in_process.p50_ms, in_process.p99_ms
                    );
                }
                None => out.push_str("| – | – | – "),
            }
            match row.http_to_in_process_qps() {
                Some(ratio) => {
                    let _ = writeln!(out, "| {ratio:.2} |");
                }
                None => out.push_str("| – |\n"),
            }
        }
        for mismatch in &self.mismatches {
            let _ = writeln!(out, "\nWarning: {mismatch}");
        }
        out
    }

    /// Returns the report as JSON, with each row's ratio included.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value =
            serde_json::to_value(self).expect("the report holds only serialisable values");
        if let Some(rows) = value["rows"].as_array_mut() {
            for (row, source) in rows.iter_mut().zip(&self.rows) {
                row["http_to_in_process_qps"] = source.http_to_in_process_qps().into();
            }
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(qps: f64) -> Summary {
        Summary {
            num_requests: 100,
            num_errors: 1,
            elapsed_secs: 1.0,
            qps,
            mean_ms: 2.0,
            p50_ms: 1.5,
            p90_ms: 4.0,
            p99_ms: 9.25,
            max_ms: 12.0,
            first_error: None,
        }
    }

    fn report() -> Report {
        Report {
            seed: 42,
            num_docs: 1000,
            url: Some("http://127.0.0.1:9200/".into()),
            duration_secs: 10.0,
            warmup_secs: 1.0,
            http_load: Some(LoadSummary::new(
                1000,
                std::time::Duration::from_secs(2),
                std::time::Duration::ZERO,
            )),
            in_process_load: None,
            rows: vec![
                Row {
                    shape: QueryShape::Term,
                    concurrency: 8,
                    http: Some(summary(400.0)),
                    in_process: Some(summary(1000.0)),
                },
                Row {
                    shape: QueryShape::TermsAgg,
                    concurrency: 1,
                    http: Some(summary(50.0)),
                    in_process: None,
                },
            ],
            mismatches: vec![],
        }
    }

    #[test]
    fn test_markdown_has_one_row_per_measurement_with_the_ratio() {
        let markdown = report().to_markdown();
        assert!(markdown.contains("HTTP `_bulk`: 500 docs/s"), "{markdown}");
        let rows: Vec<&str> = markdown
            .lines()
            .filter(|l| l.starts_with("| term") || l.starts_with("| terms_agg"))
            .collect();
        assert_eq!(
            rows[0],
            "| term | 8 | 400 | 1.50 | 9.25 | 1 | 1000 | 1.50 | 9.25 | 0.40 |"
        );
        assert_eq!(
            rows[1],
            "| terms_agg | 1 | 50 | 1.50 | 9.25 | 1 | – | – | – | – |"
        );
    }

    #[test]
    fn test_json_carries_rows_and_ratios() {
        let json = report().to_json();
        assert_eq!(json["rows"][0]["shape"], "term");
        assert_eq!(json["rows"][0]["http"]["qps"], 400.0);
        assert_eq!(json["rows"][0]["http_to_in_process_qps"], 0.4);
        assert!(json["rows"][1]["http_to_in_process_qps"].is_null());
        assert_eq!(json["http_load"]["docs_per_sec"], 500.0);
    }
}
