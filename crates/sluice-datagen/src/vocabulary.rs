//! The fixed word lists the generator draws from.
//!
//! Every list is ordered by rank: the generator draws entry `i` more often than entry `i + 1`
//! (see [`crate::LogGenerator`] for the exact skew). Changing a list, or its order, changes the
//! output of every seed, so treat them as part of the generator's format.

/// Words of the `message` field, most frequent first.
///
/// Function words and the usual log nouns lead, so that the top ranks occur in a large share of
/// documents and the tail words in well under one percent of them: match queries then cover
/// both very selective and very broad terms.
#[rustfmt::skip]
pub const VOCABULARY: &[&str] = &[
    // Ranks 0..40: function words and the most common log vocabulary.
    "the", "request", "to", "for", "user", "from", "in", "completed", "with", "session",
    "of", "on", "failed", "started", "connection", "cache", "and", "after", "service", "response",
    "query", "token", "is", "by", "server", "client", "retry", "timeout", "was", "error",
    "handler", "new", "data", "at", "not", "job", "an", "order", "update", "payment",
    // Ranks 40..120: everyday operational words.
    "account", "queue", "message", "worker", "upstream", "database", "read", "write", "record", "event",
    "batch", "task", "backend", "index", "document", "search", "login", "logout", "refresh", "lookup",
    "miss", "hit", "expired", "created", "deleted", "updated", "received", "sent", "processed", "scheduled",
    "accepted", "rejected", "closed", "opened", "reset", "dropped", "skipped", "loaded", "saved", "sync",
    "pool", "thread", "lock", "key", "value", "limit", "rate", "quota", "node", "cluster",
    "shard", "replica", "primary", "leader", "follower", "config", "setting", "header", "body", "payload",
    "route", "path", "endpoint", "method", "status", "code", "result", "count", "size", "bytes",
    "latency", "duration", "slow", "fast", "high", "low", "memory", "disk", "cpu", "network",
    // Ranks 120..220: less frequent domain words.
    "checkout", "cart", "item", "product", "price", "invoice", "refund", "coupon", "discount", "shipment",
    "address", "email", "notification", "profile", "password", "permission", "role", "group", "tenant", "region",
    "zone", "host", "port", "socket", "stream", "channel", "topic", "partition", "offset", "consumer",
    "producer", "snapshot", "backup", "restore", "migration", "schema", "table", "column", "row", "transaction",
    "commit", "rollback", "deadlock", "conflict", "version", "release", "deploy", "rollout", "canary", "feature",
    "flag", "experiment", "metric", "gauge", "counter", "histogram", "trace", "span", "log", "audit",
    "policy", "rule", "filter", "mapping", "template", "alias", "pipeline", "processor", "parser", "encoder",
    "decoder", "compression", "checksum", "signature", "certificate", "handshake", "cipher", "proxy", "balancer", "gateway",
    "healthcheck", "heartbeat", "election", "quorum", "membership", "gossip", "lease", "ticket", "credential", "secret",
    "vault", "bucket", "object", "upload", "download", "chunk", "segment", "merge", "flush", "compaction",
    // Ranks 220..320: the rare tail.
    "throttled", "backpressure", "saturated", "degraded", "recovered", "evicted", "preempted", "cancelled", "aborted", "truncated",
    "malformed", "unauthorized", "forbidden", "unavailable", "overloaded", "stale", "orphaned", "duplicate", "idempotent", "reentrant",
    "serialization", "deserialization", "normalization", "tokenizer", "analyzer", "stemmer", "synonym", "fuzzy", "wildcard", "prefix",
    "geohash", "polygon", "latitude", "longitude", "timezone", "locale", "currency", "exchange", "ledger", "settlement",
    "chargeback", "fraud", "anomaly", "outlier", "threshold", "watermark", "checkpoint", "epoch", "generation", "tombstone",
    "vacuum", "reindex", "warmup", "cooldown", "jitter", "backoff", "circuit", "breaker", "bulkhead", "sidecar",
    "daemon", "cron", "webhook", "callback", "promise", "future", "coroutine", "fiber", "mutex", "semaphore",
    "spinlock", "barrier", "latch", "condvar", "arena", "allocator", "fragmentation", "paging", "swap", "oom",
    "kernel", "syscall", "interrupt", "firmware", "nvme", "raid", "inode", "mount", "quarantine", "sandbox",
    "zeppelin", "quasar", "obsidian", "juniper", "marmalade", "tangerine", "nebula", "halcyon", "labyrinth", "kaleidoscope",
];

/// Names of the `service` field, most frequent first.
#[rustfmt::skip]
pub const SERVICES: &[&str] = &[
    "gateway", "search", "catalog", "checkout", "cart", "auth", "orders", "payments", "inventory", "pricing",
    "accounts", "shipping", "recommendations", "notifications", "reviews", "media", "analytics", "billing", "email", "fraud",
];

/// Prefixes of the `host` field; each is followed by a three-digit number, as in `web-017`.
pub const HOST_PREFIXES: &[&str] = &["web", "api", "worker", "cache", "db"];

/// How many hosts each prefix in [`HOST_PREFIXES`] has, numbered from 1.
///
/// Five prefixes times 40 gives the 200 hosts of a mid-sized fleet.
pub const HOSTS_PER_PREFIX: usize = 40;

/// How many distinct users appear in the `user` field, named `user_0000` to `user_4999`.
///
/// Large enough that most users are rare, small enough that the four-digit name stays fixed-width.
pub const NUM_USERS: usize = 5000;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn test_word_lists_have_no_duplicates() {
        for list in [VOCABULARY, SERVICES, HOST_PREFIXES] {
            let unique: HashSet<&str> = list.iter().copied().collect();
            assert_eq!(unique.len(), list.len(), "duplicate entry in {list:?}");
        }
    }

    #[test]
    fn test_vocabulary_has_a_few_hundred_lowercase_ascii_words() {
        assert!(
            (250..=400).contains(&VOCABULARY.len()),
            "got {}",
            VOCABULARY.len()
        );
        for word in VOCABULARY {
            assert!(!word.is_empty());
            assert!(
                word.bytes().all(|b| b.is_ascii_lowercase()),
                "{word:?} is not lowercase ascii"
            );
        }
    }

    #[test]
    fn test_fleet_sizes_match_the_brief() {
        assert_eq!(SERVICES.len(), 20);
        assert_eq!(HOST_PREFIXES.len() * HOSTS_PER_PREFIX, 200);
    }
}
