//! The address a node publishes: what it tells other nodes and clients to connect to, which
//! is not the address its sockets bind when those bind a wildcard (`0.0.0.0`, `::`).
//!
//! A wildcard is no address another machine can reach: a peer, or a sniffing client, that
//! dials `0.0.0.0` reaches its own host. So, as OpenSearch's
//! `NetworkService.resolvePublishHostAddresses` does, a wildcard bind publishes one of the
//! machine's interface addresses, chosen by [`publish_ip`] in OpenSearch's order
//! (`NetworkUtils.sortAddresses`): IPv4 before IPv6, then global before site-local before
//! link-local before loopback; multicast and broadcast never. Reading the interfaces is the
//! caller's (the server's wiring), so the choice itself is pure and tested with any set.
//!
//! Invariants, tested below:
//! - P1 A specific bind address is published as it is
//!   (`test_a_specific_bind_address_is_published_as_it_is`).
//! - P2 The chosen address is never a wildcard, multicast or broadcast address, and it is one
//!   of the candidates whenever any candidate is eligible; with none it is the loopback of the
//!   bind's family (`prop_the_choice_is_an_eligible_candidate_or_loopback`).
//! - P3 A `0.0.0.0` bind publishes only IPv4: an IPv4 listener cannot be reached over IPv6
//!   (`test_a_wildcard_bind_prefers_by_family_then_kind`).
//! - P4 Among candidates of the same rank the first listed wins (OpenSearch's sort is
//!   stable), so a node publishes the same address across restarts on the same interfaces
//!   (`test_a_wildcard_bind_prefers_by_family_then_kind`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IP a node bound on `bind` publishes, given the machine's interface addresses
/// `candidates` (in the order the system lists them).
pub fn publish_ip(bind: IpAddr, candidates: &[IpAddr]) -> IpAddr {
    if !bind.is_unspecified() {
        return bind;
    }
    let v4_only = bind.is_ipv4();
    candidates
        .iter()
        .copied()
        .filter(|ip| !(v4_only && ip.is_ipv6()))
        .filter_map(|ip| rank(ip).map(|r| (r, ip)))
        // `min_by_key` keeps the first of equal keys (P4).
        .min_by_key(|(r, _)| *r)
        .map_or_else(|| loopback_of(bind), |(_, ip)| ip)
}

/// How reachable an address is from elsewhere, by kind: lower is preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Global,
    SiteLocal,
    LinkLocal,
    Loopback,
}

/// The sort key of an address (family first, IPv4 before IPv6, then [`Kind`]); `None` for
/// an address never published (a wildcard, multicast or broadcast).
fn rank(ip: IpAddr) -> Option<(u8, Kind)> {
    match ip {
        IpAddr::V4(v4) => kind_v4(v4).map(|k| (0, k)),
        IpAddr::V6(v6) => kind_v6(v6).map(|k| (1, k)),
    }
}

fn kind_v4(ip: Ipv4Addr) -> Option<Kind> {
    if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
        None
    } else if ip.is_loopback() {
        Some(Kind::Loopback)
    } else if ip.is_link_local() {
        Some(Kind::LinkLocal)
    } else if ip.is_private() {
        // 10/8, 172.16/12, 192.168/16.
        Some(Kind::SiteLocal)
    } else {
        Some(Kind::Global)
    }
}

fn kind_v6(ip: Ipv6Addr) -> Option<Kind> {
    let first = ip.segments()[0];
    if ip.is_unspecified() || ip.is_multicast() {
        None
    } else if ip.is_loopback() {
        Some(Kind::Loopback)
    } else if first & 0xffc0 == 0xfe80 {
        // fe80::/10.
        Some(Kind::LinkLocal)
    } else if first & 0xfe00 == 0xfc00 {
        // fc00::/7, the unique local addresses that replaced IPv6's site-local ones.
        Some(Kind::SiteLocal)
    } else {
        Some(Kind::Global)
    }
}

fn loopback_of(bind: IpAddr) -> IpAddr {
    match bind {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| ip(s)).collect()
    }

    #[test]
    fn test_a_specific_bind_address_is_published_as_it_is() {
        let all = ips(&["8.8.4.4", "10.0.0.5", "127.0.0.1"]);
        for bind in ["127.0.0.1", "10.0.0.9", "::1", "fe80::1", "2001:db8::5"] {
            assert_eq!(publish_ip(ip(bind), &all), ip(bind), "{bind}");
        }
    }

    #[test]
    fn test_a_wildcard_bind_prefers_by_family_then_kind() {
        // (bind, interface addresses in listed order, published)
        let cases: &[(&str, &[&str], &str)] = &[
            // global before site-local before link-local before loopback
            (
                "0.0.0.0",
                &["127.0.0.1", "169.254.1.1", "10.0.0.5", "8.8.4.4"],
                "8.8.4.4",
            ),
            (
                "0.0.0.0",
                &["127.0.0.1", "169.254.1.1", "10.0.0.5"],
                "10.0.0.5",
            ),
            ("0.0.0.0", &["127.0.0.1", "172.16.3.4"], "172.16.3.4"),
            ("0.0.0.0", &["192.168.1.2", "127.0.0.1"], "192.168.1.2"),
            ("0.0.0.0", &["127.0.0.1", "169.254.1.1"], "169.254.1.1"),
            ("0.0.0.0", &["127.0.0.1"], "127.0.0.1"),
            // 172.32/12 is not private: global
            ("0.0.0.0", &["10.0.0.5", "172.32.0.1"], "172.32.0.1"),
            // P3: an IPv4 listener publishes no IPv6 address, global or not
            ("0.0.0.0", &["2001:db8::5", "10.0.0.5"], "10.0.0.5"),
            ("0.0.0.0", &["2001:db8::5", "::1"], "127.0.0.1"),
            // never a wildcard, multicast or broadcast
            (
                "0.0.0.0",
                &["0.0.0.0", "224.0.0.1", "255.255.255.255"],
                "127.0.0.1",
            ),
            ("0.0.0.0", &[], "127.0.0.1"),
            // P4: the first of equal rank
            ("0.0.0.0", &["10.0.0.7", "10.0.0.5"], "10.0.0.7"),
            ("0.0.0.0", &["10.0.0.5", "10.0.0.7"], "10.0.0.5"),
            // `::`: IPv4 first, even a loopback one over a global IPv6
            ("::", &["2001:db8::5", "10.0.0.5"], "10.0.0.5"),
            ("::", &["2001:db8::5", "127.0.0.1"], "127.0.0.1"),
            // then IPv6 by kind: global, unique local (fc00::/7), link-local, loopback
            (
                "::",
                &["::1", "fe80::1", "fd00::5", "2001:db8::5"],
                "2001:db8::5",
            ),
            ("::", &["::1", "fe80::1", "fd00::5"], "fd00::5"),
            ("::", &["::1", "fe80::1"], "fe80::1"),
            ("::", &["::", "ff02::1"], "::1"),
            ("::", &[], "::1"),
        ];
        for (bind, candidates, want) in cases {
            assert_eq!(
                publish_ip(ip(bind), &ips(candidates)),
                ip(want),
                "bind {bind}, interfaces {candidates:?}"
            );
        }
    }

    fn any_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from),
            // The special ones, which random bytes almost never hit.
            Just(ip("0.0.0.0")),
            Just(ip("::")),
            Just(ip("255.255.255.255")),
            Just(ip("224.0.0.1")),
            Just(ip("ff02::1")),
            Just(ip("127.0.0.1")),
            Just(ip("::1")),
        ]
    }

    proptest! {
        /// P2.
        #[test]
        fn prop_the_choice_is_an_eligible_candidate_or_loopback(
            v4_bind in any::<bool>(),
            candidates in proptest::collection::vec(any_ip(), 0..8),
        ) {
            let bind = if v4_bind { ip("0.0.0.0") } else { ip("::") };
            let chosen = publish_ip(bind, &candidates);
            prop_assert!(!chosen.is_unspecified() && !chosen.is_multicast());
            prop_assert!(chosen != ip("255.255.255.255"));
            let eligible: Vec<IpAddr> = candidates
                .iter()
                .copied()
                .filter(|c| rank(*c).is_some() && (!v4_bind || c.is_ipv4()))
                .collect();
            if eligible.is_empty() {
                prop_assert_eq!(chosen, loopback_of(bind));
            } else {
                prop_assert!(eligible.contains(&chosen));
                // Nothing eligible ranks better.
                let best = rank(chosen).unwrap();
                prop_assert!(eligible.iter().all(|c| rank(*c).unwrap() >= best));
            }
            if v4_bind {
                prop_assert!(chosen.is_ipv4());
            }
        }
    }
}
