//! The addresses this node publishes — in its gossiped member record, so in `_nodes`,
//! `_cat/nodes`, the nodes' stats, the metastore's presence rows and the peers' RPC and
//! gossip — from the addresses its listeners bound and the `*.publish_host`/`*.publish_port`
//! settings. The choice among the machine's addresses for a wildcard bind is
//! [`sluice_cluster::publish::publish_ip`]'s; this reads the interfaces it chooses from.

use std::net::{IpAddr, SocketAddr};

/// The address to publish for a listener bound at `bound`: `host` (a `*.publish_host`) if
/// set, else the bound IP, or one of the machine's interface addresses when that is a
/// wildcard; `port` (a `*.publish_port`) if set, else the bound port.
pub fn publish_addr(bound: SocketAddr, host: Option<IpAddr>, port: Option<u16>) -> SocketAddr {
    let ip = match host {
        Some(ip) => ip,
        None if bound.ip().is_unspecified() => {
            sluice_cluster::publish::publish_ip(bound.ip(), &interface_ips())
        }
        None => bound.ip(),
    };
    SocketAddr::new(ip, port.unwrap_or(bound.port()))
}

/// The addresses of the machine's interfaces, in the order the system lists them; none when
/// they cannot be read (then a wildcard bind publishes loopback, and says so in the log).
fn interface_ips() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces.into_iter().map(|i| i.ip()).collect(),
        Err(e) => {
            tracing::warn!(
                "cannot read this machine's network interfaces ({e}): a wildcard bind publishes \
                 loopback; set http.publish_host and transport.publish_host to an address other \
                 nodes and clients can reach"
            );
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_settings_win_and_a_wildcard_bind_publishes_an_address_of_this_machine() {
        let wild: SocketAddr = "0.0.0.0:9200".parse().unwrap();
        let ten: IpAddr = "10.0.0.5".parse().unwrap();
        assert_eq!(
            publish_addr(wild, Some(ten), Some(80)),
            "10.0.0.5:80".parse().unwrap()
        );
        let specific: SocketAddr = "127.0.0.2:9201".parse().unwrap();
        assert_eq!(publish_addr(specific, None, None), specific);
        assert_eq!(
            publish_addr(specific, None, Some(443)),
            "127.0.0.2:443".parse().unwrap()
        );
        let chosen = publish_addr(wild, None, None);
        assert!(
            !chosen.ip().is_unspecified() && chosen.is_ipv4(),
            "{chosen}"
        );
        assert_eq!(chosen.port(), 9200);
        // One of this machine's addresses: a listener on it accepts.
        assert!(
            std::net::TcpListener::bind(SocketAddr::new(chosen.ip(), 0)).is_ok(),
            "{chosen} is not an address of this machine"
        );
    }
}
