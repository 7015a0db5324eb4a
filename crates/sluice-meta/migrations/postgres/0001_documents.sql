-- sluice metastore, schema 1: every document in one table, and the store's counters.
-- Released migrations never change (sqlx records their checksums); add a new file instead.

CREATE TABLE sluice_documents (
    collection TEXT NOT NULL,
    -- "C" collation: keys compare bytewise, the order `list` promises (UTF-8 byte order).
    key TEXT COLLATE "C" NOT NULL,
    -- The JSON text as written: TEXT, not JSONB, which would reorder object keys.
    value TEXT NOT NULL,
    version BIGINT NOT NULL,
    updated_at_millis BIGINT NOT NULL,
    PRIMARY KEY (collection, key)
);

-- `revision`: the last version handed out by a put; every batch locks this row first, which
-- serializes writers across every node. `changes.<collection>`: committed batches that wrote
-- the collection.
CREATE TABLE sluice_counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

INSERT INTO sluice_counters (name, value) VALUES
    ('revision', 0),
    ('changes.cluster_settings', 0),
    ('changes.rules', 0),
    ('changes.workload_groups', 0);
