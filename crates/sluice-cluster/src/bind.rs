//! The transport port: node-to-node RPC on TCP and gossip on UDP share one port number, as
//! OpenSearch's `transport.port` names one number for its transport.

use std::io;
use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpListener;

/// Attempts at a free port when `transport.port` is `0`: the kernel picks a free TCP port,
/// whose UDP twin is almost always free too; a few retries cover the rare clash.
const ANY_PORT_ATTEMPTS: usize = 16;

/// A `transport.port` value: one port (`0`: any free one) or an inclusive range, the first
/// free port of which is taken (OpenSearch's default is the range `9300-9400`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortSpec {
    /// This port; `0` picks a free one.
    Exact(u16),
    /// The first port of `low..=high` whose TCP and UDP are both free.
    Range(u16, u16),
}

impl PortSpec {
    /// Parses `9300`, `0` or `9300-9400`; the error says what is accepted.
    pub fn parse(raw: &str) -> Result<PortSpec, String> {
        let expected = "a port number (0-65535; 0 picks a free port) or a range such as 9300-9400";
        let port = |s: &str| s.trim().parse::<u16>().map_err(|_| expected.to_string());
        match raw.split_once('-') {
            None => port(raw).map(PortSpec::Exact),
            Some((lo, hi)) => {
                let (lo, hi) = (port(lo)?, port(hi)?);
                if lo == 0 || lo > hi {
                    return Err(format!(
                        "{expected}; a range needs 1 <= low <= high, got [{raw}]"
                    ));
                }
                Ok(PortSpec::Range(lo, hi))
            }
        }
    }
}

/// Binds the transport's TCP listener on `host` at a port (chosen by `spec`) whose UDP port
/// is free as well, so gossip can bind the same number right after. Fails naming the
/// address when no port of the spec is free.
pub async fn bind_transport(host: IpAddr, spec: PortSpec) -> io::Result<TcpListener> {
    match spec {
        PortSpec::Exact(0) => {
            for _ in 0..ANY_PORT_ATTEMPTS {
                if let Some(l) = try_bind(SocketAddr::new(host, 0)).await? {
                    return Ok(l);
                }
            }
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("no free port on [{host}] has both TCP and UDP free"),
            ))
        }
        PortSpec::Exact(port) => {
            let addr = SocketAddr::new(host, port);
            try_bind(addr).await?.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("UDP port [{addr}] (gossip) is already in use"),
                )
            })
        }
        PortSpec::Range(lo, hi) => {
            for port in lo..=hi {
                match try_bind(SocketAddr::new(host, port)).await {
                    Ok(Some(l)) => return Ok(l),
                    Ok(None) => continue,
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("every port of [{host}:{lo}-{hi}] is in use (TCP or UDP)"),
            ))
        }
    }
}

/// Binds TCP at `addr`; `Ok(None)` when its UDP twin is taken.
async fn try_bind(addr: SocketAddr) -> io::Result<Option<TcpListener>> {
    let tcp = TcpListener::bind(addr).await?;
    let bound = tcp.local_addr()?;
    // Probe the UDP twin and release it at once: gossip binds it moments later. On loopback
    // nothing else races for a port this node just took for TCP.
    match std::net::UdpSocket::bind(bound) {
        Ok(_) => Ok(Some(tcp)),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_port_specs_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(PortSpec::parse("9300"), Ok(PortSpec::Exact(9300)));
        assert_eq!(PortSpec::parse("0"), Ok(PortSpec::Exact(0)));
        assert_eq!(
            PortSpec::parse("9300-9400"),
            Ok(PortSpec::Range(9300, 9400))
        );
        for bad in ["", "x", "70000", "9400-9300", "0-5", "1-x"] {
            let err = PortSpec::parse(bad).unwrap_err();
            assert!(err.contains("port number"), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn test_a_taken_port_is_skipped_in_a_range_and_refused_when_exact() {
        let host: IpAddr = "127.0.0.1".parse().unwrap();
        let first = bind_transport(host, PortSpec::Exact(0)).await.unwrap();
        let port = first.local_addr().unwrap().port();
        assert!(bind_transport(host, PortSpec::Exact(port)).await.is_err());
        if port < u16::MAX {
            let next = bind_transport(host, PortSpec::Range(port, port.saturating_add(50)))
                .await
                .unwrap();
            assert_ne!(next.local_addr().unwrap().port(), port);
        }
        // A UDP-only holder makes the port unusable too.
        let udp = std::net::UdpSocket::bind((host, 0)).unwrap();
        let udp_port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind((host, udp_port)).is_ok() {
            assert!(
                bind_transport(host, PortSpec::Exact(udp_port))
                    .await
                    .is_err()
            );
        }
    }
}
