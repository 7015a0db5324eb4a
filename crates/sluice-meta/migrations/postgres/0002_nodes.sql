-- sluice metastore, schema 2: the nodes using the metastore, each row rewritten by its node
-- every second or so (`MetaStore::heartbeat`). A node compares the rows seen recently with
-- its gossip membership, so a node that could not join the others (a typo in
-- discovery.seed_hosts) is found and joined through the addresses here.
CREATE TABLE sluice_nodes (
    node_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    -- host:port of its transport (gossip over UDP, RPC over TCP).
    transport TEXT NOT NULL,
    cluster_name TEXT NOT NULL,
    generation BIGINT NOT NULL,
    -- The server's clock, never a node's: nodes' clocks may differ.
    last_seen TIMESTAMPTZ NOT NULL
);
