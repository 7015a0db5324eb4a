//! [`LogGenerator`]: the seeded stream of log documents.

use std::fmt::Write as _;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use crate::field;
use crate::sample::{ZipfTable, pick_weighted, standard_normal_pair, total_weight};
use crate::vocabulary::{HOST_PREFIXES, HOSTS_PER_PREFIX, NUM_USERS, SERVICES, VOCABULARY};

/// Start of the generated time line used by benchmarks and demos: 2026-11-01T10:00:00Z.
///
/// A fixed, recent-looking instant, so that date ranges in examples stay valid across runs.
pub const DEFAULT_START_EPOCH_MILLIS: i64 = 1_793_527_200_000;

/// Largest accepted start instant: 9000-01-01T00:00:00Z.
///
/// Timestamps are printed with a four-digit year, which ends at 9999-12-31. Starting at most in
/// the year 9000 leaves a thousand years of headroom, more than 10^12 documents at the largest
/// step of [`MAX_STEP_MILLIS`].
pub const MAX_START_EPOCH_MILLIS: i64 = 221_845_392_000_000;

/// Largest gap between two consecutive documents' timestamps.
///
/// Steps are uniform in `1..=20` ms, about 95 documents per second of log time: one million
/// documents span close to three hours, a useful width for date-range queries.
pub const MAX_STEP_MILLIS: i64 = 20;

/// Fewest words in a `message`; with [`MAX_MESSAGE_WORDS`] the length of typical log lines,
/// long enough for two-word match queries to hit often.
pub const MIN_MESSAGE_WORDS: usize = 8;

/// Most words in a `message`; lengths are uniform in `MIN_MESSAGE_WORDS..=MAX_MESSAGE_WORDS`.
pub const MAX_MESSAGE_WORDS: usize = 20;

/// Zipf exponent of the message words.
///
/// Slightly above 1, as measured on English text: the top word is in most messages while the
/// rarest appear in well under one percent of documents.
const WORD_EXPONENT: f64 = 1.07;

/// Zipf exponent of the services: the busiest service gets about a quarter of the traffic.
const SERVICE_EXPONENT: f64 = 1.0;

/// Zipf exponent of the hosts: mild, since load balancers spread traffic fairly evenly.
const HOST_EXPONENT: f64 = 0.3;

/// Zipf exponent of the users: a few heavy users and a long tail, as in real tenants.
const USER_EXPONENT: f64 = 1.0;

/// Multiplier that scatters user ranks over the user names, so that busy users are not simply
/// the lowest numbers. It is prime and does not divide [`NUM_USERS`], so
/// `rank * USER_SCATTER + USER_OFFSET` modulo `NUM_USERS` is a permutation.
const USER_SCATTER: usize = 2477;

/// Name number of the busiest user: `user_0042`, the name used in the crate's examples.
const USER_OFFSET: usize = 42;

/// Multiplier that scatters host ranks over the host names; coprime with the 200 hosts.
const HOST_SCATTER: usize = 67;

/// Host index of the busiest host: 16, named `web-017`, the name used in the crate's examples.
const HOST_OFFSET: usize = 16;

/// HTTP status codes and their weights in ten-thousandths: mostly 200, a few percent client
/// errors, about one percent server errors.
const STATUS_WEIGHTS: &[(u16, u32)] = &[
    (200, 8_450),
    (201, 300),
    (204, 200),
    (301, 50),
    (302, 100),
    (304, 150),
    (400, 150),
    (401, 100),
    (403, 60),
    (404, 250),
    (429, 90),
    (500, 60),
    (502, 20),
    (503, 20),
];
/// Sum of [`STATUS_WEIGHTS`], computed once at compile time.
const STATUS_TOTAL: u32 = total_weight(STATUS_WEIGHTS);

/// Levels of successful requests, in ten-thousandths. Failed requests are logged at WARN (4xx)
/// or ERROR (5xx) instead, so overall about 73 % INFO, 15 % DEBUG, 10 % WARN, 2 % ERROR.
const LEVEL_WEIGHTS_OK: &[(&str, u32)] = &[
    ("INFO", 8_000),
    ("DEBUG", 1_600),
    ("WARN", 300),
    ("ERROR", 100),
];
/// Sum of [`LEVEL_WEIGHTS_OK`], computed once at compile time.
const LEVEL_TOTAL_OK: u32 = total_weight(LEVEL_WEIGHTS_OK);

/// Natural logarithm of the median latency, 20 ms.
const LATENCY_LN_MEDIAN: f64 = 2.995_732_273_553_991;

/// Spread of the latency's logarithm: p99 is about ten times the median, as in web services.
const LATENCY_LN_SIGMA: f64 = 1.0;

/// How much slower server errors are than other requests (timeouts dominate them).
const SERVER_ERROR_SLOWDOWN: f64 = 4.0;

/// Natural logarithm of the median response size, 2 KiB.
const BYTES_LN_MEDIAN: f64 = 7.624_618_986_159_398;

/// Spread of the response size's logarithm: most responses are a few KiB, some hundreds.
const BYTES_LN_SIGMA: f64 = 1.2;

/// A deterministic, infinite stream of log-like documents.
///
/// Each document is a JSON object with the fields named in [`crate::field`]. The stream depends
/// only on the seed and the start instant: two generators built with the same arguments yield
/// identical documents. (Across platforms, a libm that rounds `exp` or `powf` differently in the
/// last bit could in principle flip a value that lies exactly on a rounding boundary.)
///
/// # Invariants
///
/// `epoch_millis` only grows, and only by `1..=MAX_STEP_MILLIS` per document, so timestamps are
/// strictly increasing. Checked by `debug_assert!` in [`LogGenerator::next_doc`].
#[derive(Debug, Clone)]
pub struct LogGenerator {
    rng: ChaCha8Rng,
    /// Timestamp of the last generated document, or the start instant before the first.
    epoch_millis: i64,
    words: ZipfTable,
    services: ZipfTable,
    hosts: ZipfTable,
    users: ZipfTable,
    /// Reused buffer the message is built in before it is copied into the document.
    message: String,
}

impl LogGenerator {
    /// Creates a generator whose first document is stamped shortly after `start_epoch_millis`.
    ///
    /// # Panics
    ///
    /// If `start_epoch_millis` is negative or after [`MAX_START_EPOCH_MILLIS`].
    pub fn new(seed: u64, start_epoch_millis: i64) -> Self {
        assert!(
            (0..=MAX_START_EPOCH_MILLIS).contains(&start_epoch_millis),
            "start_epoch_millis must be between 0 and {MAX_START_EPOCH_MILLIS}, got {start_epoch_millis}"
        );
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            epoch_millis: start_epoch_millis,
            words: ZipfTable::new(VOCABULARY.len(), WORD_EXPONENT),
            services: ZipfTable::new(SERVICES.len(), SERVICE_EXPONENT),
            hosts: ZipfTable::new(HOST_PREFIXES.len() * HOSTS_PER_PREFIX, HOST_EXPONENT),
            users: ZipfTable::new(NUM_USERS, USER_EXPONENT),
            message: String::with_capacity(256),
        }
    }

    /// Returns the timestamp of the last generated document, or the start instant before the first.
    pub fn epoch_millis(&self) -> i64 {
        self.epoch_millis
    }

    /// Generates the next document.
    pub fn next_doc(&mut self) -> Value {
        let step = self.rng.random_range(1..=MAX_STEP_MILLIS);
        let previous = self.epoch_millis;
        self.epoch_millis += step;
        debug_assert!(
            self.epoch_millis > previous && self.epoch_millis - previous <= MAX_STEP_MILLIS
        );

        let status = pick_weighted(&mut self.rng, STATUS_WEIGHTS, STATUS_TOTAL);
        let level = match status {
            500.. => "ERROR",
            400.. => "WARN",
            _ => pick_weighted(&mut self.rng, LEVEL_WEIGHTS_OK, LEVEL_TOTAL_OK),
        };
        let service = SERVICES[self.services.sample(&mut self.rng)];
        let host = self.host_name();
        self.fill_message();
        let user = self.user_name();

        let (latency_z, bytes_z) = standard_normal_pair(&mut self.rng);
        let mut latency_ms = (LATENCY_LN_MEDIAN + LATENCY_LN_SIGMA * latency_z).exp();
        if status >= 500 {
            latency_ms *= SERVER_ERROR_SLOWDOWN;
        }
        // Three decimals, as a log line would print microsecond-resolution timings.
        let latency_ms = (latency_ms * 1000.0).round() / 1000.0;
        let bytes = match status {
            204 | 304 => 0,
            _ => (BYTES_LN_MEDIAN + BYTES_LN_SIGMA * bytes_z).exp().round() as i64,
        };

        let mut doc = Map::with_capacity(9);
        doc.insert(
            field::TIMESTAMP.to_owned(),
            Value::String(format_timestamp(self.epoch_millis)),
        );
        doc.insert(field::LEVEL.to_owned(), Value::from(level));
        doc.insert(field::SERVICE.to_owned(), Value::from(service));
        doc.insert(field::HOST.to_owned(), Value::String(host));
        doc.insert(
            field::MESSAGE.to_owned(),
            Value::from(self.message.as_str()),
        );
        doc.insert(field::STATUS.to_owned(), Value::from(status));
        doc.insert(field::LATENCY_MS.to_owned(), Value::from(latency_ms));
        doc.insert(field::USER.to_owned(), Value::String(user));
        doc.insert(field::BYTES.to_owned(), Value::from(bytes));
        Value::Object(doc)
    }

    /// Draws a host and returns its name, such as `web-017`.
    fn host_name(&mut self) -> String {
        let index = (self.hosts.sample(&mut self.rng) * HOST_SCATTER + HOST_OFFSET)
            % self.hosts.num_ranks();
        let prefix = HOST_PREFIXES[index / HOSTS_PER_PREFIX];
        let mut name = String::with_capacity(prefix.len() + 4);
        // Writing to a String cannot fail.
        let _ = write!(name, "{prefix}-{:03}", index % HOSTS_PER_PREFIX + 1);
        name
    }

    /// Draws a user and returns its name, such as `user_0042`.
    fn user_name(&mut self) -> String {
        let index = (self.users.sample(&mut self.rng) * USER_SCATTER + USER_OFFSET) % NUM_USERS;
        let mut name = String::with_capacity(9);
        let _ = write!(name, "user_{index:04}");
        name
    }

    /// Replaces `self.message` with a fresh sentence: capitalised first word, final full stop.
    fn fill_message(&mut self) {
        self.message.clear();
        let num_words = self.rng.random_range(MIN_MESSAGE_WORDS..=MAX_MESSAGE_WORDS);
        for i in 0..num_words {
            let word = VOCABULARY[self.words.sample(&mut self.rng)];
            if i == 0 {
                // Vocabulary words are non-empty lowercase ASCII (tested in `vocabulary`).
                self.message
                    .push(word.as_bytes()[0].to_ascii_uppercase() as char);
                self.message.push_str(&word[1..]);
            } else {
                self.message.push(' ');
                self.message.push_str(word);
            }
        }
        self.message.push('.');
    }
}

impl Iterator for LogGenerator {
    type Item = Value;

    /// Generates the next document; never returns `None`.
    fn next(&mut self) -> Option<Value> {
        Some(self.next_doc())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}

/// Formats milliseconds since the Unix epoch as ISO-8601 UTC with millis: `2026-11-01T10:00:00.123Z`.
///
/// # Panics
///
/// If the instant is before 1970 or after the year 9999.
pub fn format_timestamp(epoch_millis: i64) -> String {
    assert!(
        epoch_millis >= 0,
        "epoch_millis must be >= 0, got {epoch_millis}"
    );
    let instant =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(epoch_millis) * 1_000_000)
            .unwrap_or_else(|_| {
                panic!("epoch_millis {epoch_millis} is outside the years 1970..=9999")
            });
    let (year, month, day) = instant.to_calendar_date();
    let (hour, minute, second, milli) = instant.to_hms_milli();
    assert!(
        year <= 9999,
        "epoch_millis {epoch_millis} is after the year 9999"
    );
    let mut out = String::with_capacity(24);
    let _ = write!(
        out,
        "{year:04}-{:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z",
        u8::from(month)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn ndjson(seed: u64, num_docs: usize) -> String {
        let mut out = String::new();
        for doc in LogGenerator::new(seed, DEFAULT_START_EPOCH_MILLIS).take(num_docs) {
            out.push_str(&serde_json::to_string(&doc).unwrap());
            out.push('\n');
        }
        out
    }

    fn sample_docs(num_docs: usize) -> Vec<Value> {
        LogGenerator::new(42, DEFAULT_START_EPOCH_MILLIS)
            .take(num_docs)
            .collect()
    }

    #[test]
    fn test_same_seed_yields_byte_identical_ndjson() {
        let first = ndjson(42, 1000);
        let second = ndjson(42, 1000);
        assert_eq!(first.lines().count(), 1000);
        assert!(first == second, "two generators with seed 42 diverged");
    }

    #[test]
    fn test_different_seeds_yield_different_documents() {
        let a = ndjson(1, 1000);
        let b = ndjson(2, 1000);
        let num_equal_lines = a.lines().zip(b.lines()).filter(|(x, y)| x == y).count();
        assert_eq!(
            num_equal_lines, 0,
            "seeds 1 and 2 share {num_equal_lines} documents"
        );
    }

    #[test]
    fn test_output_is_stable_across_builds() {
        // Pins the format and the random stream: a change here changes every benchmark's data
        // set, so make it on purpose and update the expected text.
        let doc = LogGenerator::new(42, DEFAULT_START_EPOCH_MILLIS).next_doc();
        assert_eq!(
            doc.to_string(),
            r#"{"@timestamp":"2026-11-01T10:00:00.014Z","level":"DEBUG","service":"catalog","host":"worker-038","message":"By to the token value on user cache logout host to syscall the request request circuit service.","status":200,"latency_ms":7.386,"user":"user_4904","bytes":7204}"#
        );
    }

    #[test]
    fn test_timestamps_strictly_increase_by_small_steps() {
        let mut generator = LogGenerator::new(5, DEFAULT_START_EPOCH_MILLIS);
        let mut previous_millis = generator.epoch_millis();
        let mut previous_text = format_timestamp(previous_millis);
        for _ in 0..10_000 {
            let doc = generator.next_doc();
            let text = doc[field::TIMESTAMP].as_str().unwrap().to_owned();
            let millis = generator.epoch_millis();
            assert!((1..=MAX_STEP_MILLIS).contains(&(millis - previous_millis)));
            assert_eq!(text, format_timestamp(millis));
            // Fixed-width ISO-8601 sorts like the instant it names.
            assert!(
                text > previous_text,
                "{text} does not follow {previous_text}"
            );
            (previous_millis, previous_text) = (millis, text);
        }
    }

    #[test]
    fn test_format_timestamp_prints_iso_8601_utc_with_millis() {
        assert_eq!(
            format_timestamp(DEFAULT_START_EPOCH_MILLIS + 123),
            "2026-11-01T10:00:00.123Z"
        );
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_timestamp(MAX_START_EPOCH_MILLIS),
            "9000-01-01T00:00:00.000Z"
        );
        assert_eq!(
            format_timestamp(951_782_400_000 - 1),
            "2000-02-28T23:59:59.999Z"
        );
    }

    #[test]
    #[should_panic(expected = "start_epoch_millis must be between 0 and")]
    fn test_new_rejects_negative_start() {
        let _ = LogGenerator::new(1, -1);
    }

    #[test]
    fn test_fields_have_the_documented_shapes() {
        for doc in sample_docs(2000) {
            let level = doc[field::LEVEL].as_str().unwrap();
            assert!(
                ["INFO", "WARN", "ERROR", "DEBUG"].contains(&level),
                "level {level}"
            );
            assert!(SERVICES.contains(&doc[field::SERVICE].as_str().unwrap()));

            let host = doc[field::HOST].as_str().unwrap();
            let (prefix, number) = host.split_once('-').unwrap();
            assert!(HOST_PREFIXES.contains(&prefix), "host {host}");
            let number: usize = number.parse().unwrap();
            assert!(
                number.to_string().len() <= 3 && (1..=HOSTS_PER_PREFIX).contains(&number),
                "host {host}"
            );
            assert_eq!(
                host.len(),
                prefix.len() + 4,
                "host {host} is not zero-padded"
            );

            let user = doc[field::USER].as_str().unwrap();
            assert_eq!(user.len(), 9, "user {user}");
            assert!(
                user.strip_prefix("user_")
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
                    < NUM_USERS
            );

            let message = doc[field::MESSAGE].as_str().unwrap();
            let words: Vec<&str> = message.trim_end_matches('.').split(' ').collect();
            assert!(
                (MIN_MESSAGE_WORDS..=MAX_MESSAGE_WORDS).contains(&words.len()),
                "{message}"
            );
            assert!(
                message.as_bytes()[0].is_ascii_uppercase() && message.ends_with('.'),
                "{message}"
            );
            for word in &words {
                assert!(
                    VOCABULARY.contains(&word.to_ascii_lowercase().as_str()),
                    "{word} in {message}"
                );
            }

            let status = doc[field::STATUS].as_u64().unwrap();
            assert!(
                STATUS_WEIGHTS
                    .iter()
                    .any(|&(code, _)| u64::from(code) == status)
            );
            if status >= 500 {
                assert_eq!(level, "ERROR");
            }
            assert!(doc[field::LATENCY_MS].as_f64().unwrap() > 0.0);
            let bytes = doc[field::BYTES].as_i64().unwrap();
            assert!(bytes >= 0);
            if status == 204 || status == 304 {
                assert_eq!(bytes, 0);
            }
        }
    }

    #[test]
    fn test_distributions_are_skewed_like_real_logs() {
        let docs = sample_docs(50_000);
        let count_by = |name: &str| {
            let mut counts: HashMap<String, usize> = HashMap::new();
            for doc in &docs {
                *counts.entry(doc[name].to_string()).or_default() += 1;
            }
            counts
        };
        let share = |count: usize| count as f64 / docs.len() as f64;

        let levels = count_by(field::LEVEL);
        assert!(
            (0.65..0.80).contains(&share(levels["\"INFO\""])),
            "{levels:?}"
        );
        assert!(
            (0.05..0.15).contains(&share(levels["\"WARN\""])),
            "{levels:?}"
        );
        assert!(
            (0.005..0.05).contains(&share(levels["\"ERROR\""])),
            "{levels:?}"
        );

        let statuses = count_by(field::STATUS);
        assert!(
            (0.80..0.90).contains(&share(statuses["200"])),
            "{statuses:?}"
        );

        let services = count_by(field::SERVICE);
        assert_eq!(services.len(), SERVICES.len());
        assert!(
            services["\"gateway\""] > 5 * services["\"fraud\""],
            "{services:?}"
        );

        let hosts = count_by(field::HOST);
        assert!(hosts.len() >= 195, "only {} hosts seen", hosts.len());

        let users = count_by(field::USER);
        let busiest_user = users.values().copied().max().unwrap();
        assert!(users.len() > 2000, "only {} users seen", users.len());
        assert!(
            share(busiest_user) > 0.05,
            "busiest user has {busiest_user} documents"
        );
        assert_eq!(
            users["\"user_0042\""], busiest_user,
            "the busiest user is user_0042 by design"
        );
        let busiest_host = hosts.values().copied().max().unwrap();
        assert_eq!(
            hosts["\"web-017\""], busiest_host,
            "the busiest host is web-017 by design"
        );

        let mut latencies: Vec<f64> = docs
            .iter()
            .map(|d| d[field::LATENCY_MS].as_f64().unwrap())
            .collect();
        latencies.sort_by(f64::total_cmp);
        let p50 = latencies[latencies.len() / 2];
        let p99 = latencies[latencies.len() * 99 / 100];
        assert!((17.0..24.0).contains(&p50), "latency p50 {p50}");
        assert!(p99 > 5.0 * p50, "latency p99 {p99} vs p50 {p50}");
    }

    #[test]
    fn test_message_words_mix_common_and_rare_terms() {
        let docs = sample_docs(20_000);
        let num_containing = |word: &str| {
            docs.iter()
                .filter(|d| {
                    d[field::MESSAGE]
                        .as_str()
                        .unwrap()
                        .trim_end_matches('.')
                        .split(' ')
                        .any(|w| w.eq_ignore_ascii_case(word))
                })
                .count()
        };
        let most_common = num_containing(VOCABULARY[0]);
        let rarest = num_containing(VOCABULARY[VOCABULARY.len() - 1]);
        assert!(
            most_common > docs.len() / 2,
            "{:?} in {most_common} docs",
            VOCABULARY[0]
        );
        assert!(
            rarest > 0 && rarest < docs.len() / 100,
            "{:?} in {rarest} docs",
            VOCABULARY.last()
        );
    }
}
