//! `ip` field values: parsing, the indexed encoding and CIDR ranges.
//!
//! OpenSearch indexes every address as 16 bytes, IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`), so
//! that one field holds both families in one order. sluice does the same and keeps the 16 bytes
//! as 32 lowercase hex digits in the `_kw` JSON field: fixed width, so string order is address
//! order and `range` queries are string ranges; `term` is exact after normalisation (`::1` and
//! `0:0::1` are one address). Addresses render back as OpenSearch does: IPv4-mapped addresses as
//! dotted quads, others in RFC 5952 form.

use std::net::{IpAddr, Ipv6Addr};

/// The message OpenSearch (Guava's `InetAddresses`) gives for text that is not an address.
pub fn not_an_ip(text: &str) -> String {
    format!("'{text}' is not an IP string literal.")
}

/// Parses an IPv4 or IPv6 address.
pub fn parse(text: &str) -> Option<IpAddr> {
    text.trim().parse().ok()
}

fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn encode_bits(bits: u128) -> String {
    format!("{bits:032x}")
}

/// The indexed form of an address: its 16-byte IPv6 (or IPv4-mapped) form in hex.
pub fn encode(addr: IpAddr) -> String {
    encode_bits(to_bits(addr))
}

/// Parses and encodes an address; `Err` carries OpenSearch's message.
pub fn encode_text(text: &str) -> Result<String, String> {
    parse(text).map(encode).ok_or_else(|| not_an_ip(text))
}

/// The address an indexed value stands for, as OpenSearch renders it; `None` if `encoded` is not
/// an encoding made by [`encode`].
pub fn decode(encoded: &str) -> Option<String> {
    if encoded.len() != 32 {
        return None;
    }
    let bits = u128::from_str_radix(encoded, 16).ok()?;
    let v6 = Ipv6Addr::from(bits);
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => v6.to_string(),
    })
}

/// The first and last indexed values of a CIDR block (`192.168.0.0/16`, `2001:db8::/32`), or
/// `None` if `text` is not one; `Some(Err)` carries OpenSearch's message for a bad block.
pub fn cidr_bounds(text: &str) -> Option<Result<(String, String), String>> {
    let (addr, prefix) = text.trim().split_once('/')?;
    let Some(ip) = parse(addr) else {
        return Some(Err(not_an_ip(addr)));
    };
    let max: u32 = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u32 = match prefix.parse::<u32>() {
        Ok(p) if p <= max => p + (128 - max),
        _ => {
            return Some(Err(format!(
                "Illegal prefix length [{prefix}] in [{text}]. Must be 0-32 for IPv4 ranges, \
                 0-128 for IPv6 ranges"
            )));
        }
    };
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    let bits = to_bits(ip);
    Some(Ok((encode_bits(bits & mask), encode_bits(bits | !mask))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_encoding_orders_and_round_trips_both_families() {
        let a = encode_text("10.0.0.2").unwrap();
        let b = encode_text("10.0.0.10").unwrap();
        assert!(a < b, "string order is address order");
        assert_eq!(decode(&a).as_deref(), Some("10.0.0.2"));
        let v6 = encode_text("2001:DB8:0:0::1").unwrap();
        assert_eq!(decode(&v6).as_deref(), Some("2001:db8::1"));
        assert_eq!(encode_text("::ffff:10.0.0.2").unwrap(), a);
        assert_eq!(
            encode_text("nope"),
            Err("'nope' is not an IP string literal.".to_string())
        );
        assert_eq!(decode("zz"), None);
    }

    #[test]
    fn test_cidr_bounds_cover_the_block() {
        let (lo, hi) = cidr_bounds("192.168.0.0/16").unwrap().unwrap();
        assert_eq!(decode(&lo).as_deref(), Some("192.168.0.0"));
        assert_eq!(decode(&hi).as_deref(), Some("192.168.255.255"));
        let (lo, hi) = cidr_bounds("::/0").unwrap().unwrap();
        assert_eq!((lo.as_str(), hi.len()), ("0".repeat(32).as_str(), 32));
        assert!(cidr_bounds("10.0.0.1").is_none());
        assert!(cidr_bounds("10.0.0.0/33").unwrap().is_err());
    }
}
