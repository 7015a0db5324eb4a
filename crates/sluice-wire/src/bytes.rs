//! Byte-size values as OpenSearch settings write them (`100mb`, `1gb`, a bare number of bytes).

/// Parses a byte size like `100mb`, `1gb`, `512kb`, `1024b` or a bare number of bytes.
pub fn parse_byte_size(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let digits = s.bytes().take_while(|b| b.is_ascii_digit()).count();
    let (n, unit) = s.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "b" => 1,
        "kb" | "k" => 1 << 10,
        "mb" | "m" => 1 << 20,
        "gb" | "g" => 1 << 30,
        "tb" | "t" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn test_byte_sizes_with_and_without_units() {
        assert_eq!(parse_byte_size("100mb"), Some(100 << 20));
        assert_eq!(parse_byte_size(" 1GB "), Some(1 << 30));
        assert_eq!(parse_byte_size("512"), Some(512));
        assert_eq!(parse_byte_size("1tb"), Some(1 << 40));
        assert_eq!(parse_byte_size("1.5gb"), None);
        assert_eq!(parse_byte_size("mb"), None);
        assert_eq!(parse_byte_size("99999999999999tb"), None);
    }
}
