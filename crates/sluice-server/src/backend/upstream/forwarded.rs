//! The `X-Forwarded-For` chain a gateway in `proxy` identity tells its upstream: the chain a
//! trusted proxy sent, as far as it is well formed, then the gateway's peer — what nginx's
//! `$proxy_add_x_forwarded_for` writes, but never an entry that is not an IP address.
//!
//! Pure: the caller decides whether the peer is trusted ([`super::headers::Identity`]), and
//! gives the chain's header lines. The chain is read as the upstream reads it, from the right
//! (the nearest hop) to the left: OpenSearch security's `RemoteIpDetector` walks it that way,
//! skipping its `internalProxies`, and nginx's `real_ip_recursive` likewise. Each entry was
//! written by the hop to its right, so an entry is worth something only while every entry to
//! its right is: the first one that is not an IP address ends what is kept, and the entries
//! left of it (whoever wrote them) are dropped, not skipped — skipping would hand the
//! upstream an entry that no trusted hop vouched for as the next one.
//!
//! # Invariants
//! - F1 — the value written lists only IP addresses, at most [`MAX_FORWARDED`] of the chain
//!   and the peer last (`test_forwarded_value_lists_only_addresses`, generated lines).
//! - F2 — the entries kept are the nearest well-formed ones, in the order sent, the lines of
//!   the header joined as one list (`test_chain_keeps_the_well_formed_nearest_entries`).

use std::fmt::Write as _;
use std::net::IpAddr;

use http::HeaderValue;

/// The most entries of a trusted proxy's chain forwarded (the nearest ones; the peer comes on
/// top). A chain counts the proxies a request came through — a CDN, a load balancer, an
/// ingress: a handful. 32 is far beyond a real path, and keeps the forwarded header under
/// 1.4 KB (33 IPv6 addresses of at most 39 characters, with separators), so a chain looped
/// between proxies, or padded by a client behind an appending proxy, cannot swell every
/// request to the upstream.
pub const MAX_FORWARDED: usize = 32;

/// The entries of an `X-Forwarded-For` chain sent in the header lines `lines` that are kept
/// (F2): the lines joined as one comma-separated list (RFC 9110 §5.3), empty elements
/// ignored (§5.6.1), read from the right until an entry is not an IP address or
/// [`MAX_FORWARDED`] are kept; answered in the order sent.
pub fn believed_chain<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<IpAddr> {
    // Usually one line; read from the last.
    let lines: Vec<&[u8]> = lines.into_iter().collect();
    let mut kept = Vec::new();
    'lines: for line in lines.iter().rev() {
        for element in line.rsplit(|&b| b == b',') {
            let element = element.trim_ascii();
            if element.is_empty() {
                continue;
            }
            match entry(element) {
                Some(ip) if kept.len() < MAX_FORWARDED => kept.push(ip),
                _ => break 'lines,
            }
        }
    }
    kept.reverse();
    kept
}

/// One entry of a chain as an address: an IPv4 or IPv6 address, an IPv6 one in brackets, or
/// either with a port (`192.0.2.1:8080`, `[2001:db8::1]:443`), which some proxies add and
/// nginx's realip accepts; the port is not forwarded. An IPv4-mapped IPv6 address is its IPv4
/// form. Anything else — a host name, `unknown`, an obfuscated identifier of RFC 7239, a zone
/// index — is not an address: the upstream would look a name up in DNS or fail on it.
fn entry(element: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(element).ok()?;
    let ip = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if !after.is_empty() && !after.strip_prefix(':').is_some_and(is_port) {
            return None;
        }
        IpAddr::V6(v6.parse().ok()?)
    } else if let Ok(ip) = text.parse::<IpAddr>() {
        ip
    } else {
        // Only an IPv4 address takes a port without brackets: in an IPv6 one the colon is
        // the address's own.
        let (v4, port) = text.rsplit_once(':')?;
        if !is_port(port) {
            return None;
        }
        IpAddr::V4(v4.parse().ok()?)
    };
    Some(ip.to_canonical())
}

/// Whether `text` is a TCP port: 1 to 5 digits, at most 65535.
fn is_port(text: &str) -> bool {
    text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u16>().is_ok()
}

/// The `X-Forwarded-For` value for the upstream (F1): `chain`'s entries, then `peer`, the
/// hop the gateway itself saw, separated by `, ` as nginx writes them. Always `Some`:
/// addresses and separators are visible ASCII.
pub fn header_value(chain: &[IpAddr], peer: IpAddr) -> Option<HeaderValue> {
    let mut text = String::new();
    for ip in chain.iter().chain([&peer.to_canonical()]) {
        if !text.is_empty() {
            text.push_str(", ");
        }
        let _ = write!(text, "{ip}");
    }
    HeaderValue::try_from(text).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn chain_of(lines: &[&str]) -> Vec<IpAddr> {
        believed_chain(lines.iter().map(|l| l.as_bytes()))
    }

    #[test]
    fn test_chain_keeps_the_well_formed_nearest_entries() {
        // Several lines are one list, in order; spaces, tabs and empty elements ignored.
        assert_eq!(
            chain_of(&["203.0.113.7,10.0.0.5", " ,\t198.51.100.2 ,, ", ""]),
            ips(&["203.0.113.7", "10.0.0.5", "198.51.100.2"])
        );
        assert_eq!(chain_of(&[]), ips(&[]));
        assert_eq!(chain_of(&[" , "]), ips(&[]));
        // Ports and brackets are read, and not kept; a mapped address is its IPv4 form.
        assert_eq!(
            chain_of(&["192.0.2.1:8080, [2001:db8::1]:443, [2001:db8::2], 2001:db8::3"]),
            ips(&["192.0.2.1", "2001:db8::1", "2001:db8::2", "2001:db8::3"])
        );
        assert_eq!(chain_of(&["::ffff:10.0.0.1"]), ips(&["10.0.0.1"]));
        // The first entry from the right that is not an address ends the chain: what is left
        // of it is dropped, not skipped, in the same line or an earlier one.
        assert_eq!(
            chain_of(&["198.51.100.9, unknown, 203.0.113.7"]),
            ips(&["203.0.113.7"])
        );
        assert_eq!(
            chain_of(&["198.51.100.9", "proxy.example", "203.0.113.7, 10.0.0.5"]),
            ips(&["203.0.113.7", "10.0.0.5"])
        );
        assert_eq!(chain_of(&["198.51.100.9, 203.0.113.7, junk"]), ips(&[]));
    }

    #[test]
    fn test_entries_that_are_not_addresses_are_refused() {
        for bad in [
            "unknown",
            "_hidden",
            "proxy.example",
            "1.2.3",
            "010.0.0.1",
            "1.2.3.4.5",
            "1.2.3.4:",
            "1.2.3.4:65536",
            "1.2.3.4:+80",
            "1.2.3.4:080080",
            "2001:db8::1:80:x",
            "fe80::1%eth0",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "[2001:db8::1]:",
            "[1.2.3.4]",
            "for=1.2.3.4",
            "\"1.2.3.4\"",
            "1.2.3.4 5.6.7.8",
            "caf\u{e9}",
        ] {
            assert_eq!(entry(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(entry(b"\xff1.2.3.4"), None);
        assert_eq!(entry(b"1.2.3.4:0"), Some("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn test_chain_is_bounded_by_its_nearest_entries() {
        let all: Vec<String> = (0..40).map(|i| format!("10.0.0.{i}")).collect();
        let line = all.join(", ");
        let kept = chain_of(&[&line]);
        assert_eq!(kept.len(), MAX_FORWARDED);
        assert_eq!(kept[0], "10.0.0.8".parse::<IpAddr>().unwrap());
        assert_eq!(
            kept[MAX_FORWARDED - 1],
            "10.0.0.39".parse::<IpAddr>().unwrap()
        );
        // Across lines too.
        let lines: Vec<&str> = all.iter().map(String::as_str).collect();
        assert_eq!(chain_of(&lines), kept);
    }

    #[test]
    fn test_header_value_is_the_chain_then_the_peer() {
        let peer: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(header_value(&[], peer).unwrap(), "127.0.0.1");
        assert_eq!(
            header_value(&ips(&["203.0.113.7", "2001:db8::1"]), peer).unwrap(),
            "203.0.113.7, 2001:db8::1, 127.0.0.1"
        );
    }

    proptest! {
        /// Over generated lines of addresses, ports, separators, names and stray bytes, the
        /// value written lists IP addresses only, at most the bound and the peer (F1).
        #[test]
        fn test_forwarded_value_lists_only_addresses(
            lines in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![
                        proptest::sample::select(vec![
                            "10.0.0.1", "2001:db8::1", "[2001:db8::1]:443", "192.0.2.1:80",
                            "unknown", "a.example", ",", ", ", " ", "\t", ":", "[", "]",
                        ]).prop_map(|s| s.as_bytes().to_vec()),
                        proptest::collection::vec(proptest::num::u8::ANY, 0..4),
                    ],
                    0..40,
                ).prop_map(|parts| parts.concat()),
                0..4,
            ),
        ) {
            let chain = believed_chain(lines.iter().map(Vec::as_slice));
            prop_assert!(chain.len() <= MAX_FORWARDED);
            let value = header_value(&chain, "192.0.2.9".parse().unwrap()).unwrap();
            let text = value.to_str().unwrap();
            let listed: Vec<&str> = text.split(", ").collect();
            prop_assert_eq!(listed.len(), chain.len() + 1);
            for ip in &listed {
                prop_assert!(ip.parse::<IpAddr>().is_ok(), "{} in {}", ip, text);
            }
            prop_assert_eq!(*listed.last().unwrap(), "192.0.2.9");
        }
    }
}
