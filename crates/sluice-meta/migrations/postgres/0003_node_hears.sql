-- sluice metastore, schema 3: whom each node hears. A node records, with its heartbeat, the
-- node ids of its gossip membership (itself included). A link that drops one direction only
-- (a node hears its peers while they no longer hear it) leaves each side's gossip sure of a
-- different cluster; the rows let both see it (`sluice-cluster`'s `split.rs`, S6). NULL: a
-- node that has not recorded it (starting, or of an earlier sluice).
ALTER TABLE sluice_nodes ADD COLUMN hears TEXT[];
