//! Where a chunked answer body ends ([`super`] R4), found as its bytes pass through.

/// Finds where a chunked body ends (RFC 9112 §7.1), fed the body's bytes as they arrive; the
/// bytes themselves are relayed unchanged.
#[derive(Debug, Default)]
pub struct ChunkedEnd {
    state: Chunk,
    /// The size of the chunk whose size line is being read.
    size: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In the size's hex digits.
    #[default]
    Size,
    /// After the size: extensions or whitespace up to the line's end.
    SizeRest,
    /// After the size line's `\r`.
    SizeLf,
    /// In the data, this many bytes left.
    Data(u64),
    /// After the data: `\r` expected.
    DataCr,
    /// After the data's `\r`: `\n` expected.
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// In a trailer line.
    Trailer,
    /// After the final line's `\r`.
    EndLf,
    /// The body ended.
    Done,
}

impl ChunkedEnd {
    /// Feeds the next bytes: `Some(n)` when the body ends after the first `n` of them.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<usize>, String> {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            self.state = match self.state {
                Chunk::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        self.size = self
                            .size
                            .checked_mul(16)
                            .and_then(|s| s.checked_add(u64::from(d)))
                            .ok_or("a chunk's size is too large")?;
                        Chunk::Size
                    }
                    None if b == b'\r' => Chunk::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => Chunk::SizeRest,
                    None => return Err("a chunk's size is not hexadecimal".to_string()),
                },
                Chunk::SizeRest => match b {
                    b'\r' => Chunk::SizeLf,
                    b'\n' => return Err("a chunk's size line ends without CR".to_string()),
                    _ => Chunk::SizeRest,
                },
                Chunk::SizeLf if b == b'\n' => {
                    let size = std::mem::take(&mut self.size);
                    if size == 0 {
                        Chunk::TrailerStart
                    } else {
                        Chunk::Data(size)
                    }
                }
                Chunk::Data(left) => {
                    let avail = (bytes.len() - i) as u64;
                    let take = avail.min(left);
                    // `take` is at most what is left of `bytes`, so it fits in a usize.
                    i += take as usize;
                    self.state = if take == left {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(left - take)
                    };
                    continue;
                }
                Chunk::DataCr if b == b'\r' => Chunk::DataLf,
                Chunk::DataLf if b == b'\n' => Chunk::Size,
                Chunk::TrailerStart if b == b'\r' => Chunk::EndLf,
                Chunk::TrailerStart | Chunk::Trailer => {
                    if b == b'\n' {
                        Chunk::TrailerStart
                    } else {
                        Chunk::Trailer
                    }
                }
                Chunk::EndLf if b == b'\n' => {
                    self.state = Chunk::Done;
                    return Ok(Some(i + 1));
                }
                Chunk::Done => return Ok(Some(i)),
                _ => return Err("the chunked body is malformed".to_string()),
            };
            i += 1;
        }
        Ok((self.state == Chunk::Done).then_some(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"4\r\nWiki\r\n7;ext=1\r\npedia i\r\n0\r\nx-t: 1\r\n\r\nNEXT";

    #[test]
    fn test_chunked_end_is_found_whatever_the_pieces() {
        let end = BODY.len() - 4;
        // Every split into two pieces finds the same end.
        for cut in 0..=BODY.len() {
            let mut c = ChunkedEnd::default();
            let first = c.feed(&BODY[..cut]).unwrap();
            let found = match first {
                Some(n) => n,
                None => cut + c.feed(&BODY[cut..]).unwrap().expect("ends"),
            };
            assert_eq!(found, end, "cut at {cut}");
        }
        // Byte by byte.
        let mut c = ChunkedEnd::default();
        let mut at = None;
        for (i, b) in BODY.iter().enumerate() {
            if let Some(n) = c.feed(std::slice::from_ref(b)).unwrap() {
                at = Some(i + n);
                break;
            }
        }
        assert_eq!(at, Some(end));
    }

    #[test]
    fn test_chunked_end_refuses_malformed_bodies() {
        for bad in [
            &b"zz\r\n"[..],
            b"3\r\nabcX",
            b"3\n",
            b"fffffffffffffffff\r\n",
        ] {
            assert!(ChunkedEnd::default().feed(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ChunkedEnd::default().feed(b"0\r\n\r\n").unwrap(), Some(5));
    }
}
