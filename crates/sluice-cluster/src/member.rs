//! What a node tells the cluster about itself, as chitchat key-values.

use std::net::SocketAddr;

use serde::Serialize;

/// Gossip keys of a [`Member`] record. Short, stable names: they are on the wire.
mod key {
    pub const NAME: &str = "name";
    pub const HTTP: &str = "http";
    pub const TRANSPORT: &str = "transport";
    pub const PROTOCOL: &str = "protocol";
    pub const BACKEND: &str = "backend";
    pub const VERSION: &str = "version";
    pub const CLUSTER_UUID: &str = "cluster_uuid";
}

/// One node of the cluster, as it gossips itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    /// The node id, persisted in the node's data folder (stable across restarts).
    pub node_id: String,
    /// Incremented each time the node starts (its start time in milliseconds), so a restarted
    /// node is a new incarnation that supersedes the old one.
    pub generation: u64,
    /// `node.name`.
    pub name: String,
    /// Where the node serves HTTP.
    pub http_addr: SocketAddr,
    /// Where the node serves RPC (TCP) and gossip (UDP).
    pub transport_addr: SocketAddr,
    /// The node-to-node protocol version it speaks ([`crate::PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// Its backend: `embedded` or `upstream`.
    pub backend: String,
    /// Its sluice version.
    pub version: String,
    /// The cluster uuid its metastore holds: members of one cluster share one metastore.
    pub cluster_uuid: String,
}

impl Member {
    /// The key-values this member gossips (everything but the id and generation, which are
    /// chitchat's node identity).
    pub fn key_values(&self) -> Vec<(String, String)> {
        [
            (key::NAME, self.name.clone()),
            (key::HTTP, self.http_addr.to_string()),
            (key::TRANSPORT, self.transport_addr.to_string()),
            (key::PROTOCOL, self.protocol_version.to_string()),
            (key::BACKEND, self.backend.clone()),
            (key::VERSION, self.version.clone()),
            (key::CLUSTER_UUID, self.cluster_uuid.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Reads a member back from its gossiped key-values; `None` while some key has not
    /// arrived yet or does not parse (a node mid-join, or a foreign program on the port).
    pub fn from_key_values<'a>(
        node_id: &str,
        generation: u64,
        mut get: impl FnMut(&str) -> Option<&'a str>,
    ) -> Option<Member> {
        Some(Member {
            node_id: node_id.to_string(),
            generation,
            name: get(key::NAME)?.to_string(),
            http_addr: get(key::HTTP)?.parse().ok()?,
            transport_addr: get(key::TRANSPORT)?.parse().ok()?,
            protocol_version: get(key::PROTOCOL)?.parse().ok()?,
            backend: get(key::BACKEND)?.to_string(),
            version: get(key::VERSION)?.to_string(),
            cluster_uuid: get(key::CLUSTER_UUID)?.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Member {
        Member {
            node_id: "n1".into(),
            generation: 7,
            name: "node-1".into(),
            http_addr: "127.0.0.1:9200".parse().unwrap(),
            transport_addr: "127.0.0.1:9300".parse().unwrap(),
            protocol_version: 1,
            backend: "embedded".into(),
            version: "0.1.0".into(),
            cluster_uuid: "abc".into(),
        }
    }

    #[test]
    fn test_member_round_trips_through_key_values() {
        let m = sample();
        let kv = m.key_values();
        let back = Member::from_key_values("n1", 7, |k| {
            kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
        });
        assert_eq!(back, Some(m));
    }

    #[test]
    fn test_a_record_missing_a_key_or_with_a_bad_address_is_not_a_member() {
        let kv = sample().key_values();
        let without_http = Member::from_key_values("n1", 7, |k| {
            (k != "http")
                .then(|| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()))
                .flatten()
        });
        assert_eq!(without_http, None);
        let bad_port = Member::from_key_values("n1", 7, |k| {
            if k == "transport" {
                Some("127.0.0.1:notaport")
            } else {
                kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
            }
        });
        assert_eq!(bad_port, None);
    }
}
