-- sluice metastore, schema 4: whom each node counts off its side. A node records, with its
-- heartbeat, the node ids its split view holds unjoined (`sluice-cluster`'s `split.rs`: past
-- the grace, or joined again for less than it). Two nodes that each count the other off, a
-- split both sides see, keep each other out of their shared-tier rings until the link has
-- held for the grace (S11), so a link that flaps does not move buckets to and fro. NULL: a
-- node that has not recorded it (starting, or of an earlier sluice).
ALTER TABLE sluice_nodes ADD COLUMN unjoined TEXT[];
