//! The request heads of an HTTP/1 connection, read ahead of hyper so that what hyper would
//! answer with a bare status and a close is answered as OpenSearch answers it:
//! - a request target with bytes `http::Uri` refuses (`GET /logs/_search?q=t:"x"` as curl
//!   sends it) reaches hyper with those bytes percent-encoded ([`crate::http::target`]), and is
//!   served, as Netty serves it; hyper answered it a bare `400`;
//! - a head whose header lines are over `http.max_header_size` (16 KB, counted as Netty counts
//!   them: every byte of the lines but their ends) is refused as soon as they are, however
//!   long the head: 400 `too_long_http_header_exception`. hyper answered a head past its
//!   buffer (about 400 KB) a bare `431`;
//! - a request line over [`MAX_REQUEST_LINE`] is refused the same way: 400
//!   `too_long_http_line_exception`, as Netty refuses a line over its own limit. hyper answered
//!   it a bare `414` (or `431`);
//! - a body framing hyper cannot read (a `Content-Length` that is no number, or several that
//!   disagree; a `Transfer-Encoding` not ending in `chunked`, or on HTTP/1.0) is refused: 400
//!   `illegal_argument_exception`, in Netty's words where Netty refuses it too ("Multiple
//!   Content-Length values found: [9, 8]"), as OpenSearch answers its decoder's failure.
//!   hyper answered a bare `400`. So is an HTTP/1.1 head of several `Content-Length` lines
//!   that agree, which hyper reads but Netty refuses (its decoder allows no duplicate
//!   lengths, as RFC 9112 §6.3 lets a recipient choose);
//! - a head of more header lines than hyper reads (100) within the size limit, which Netty
//!   takes, is served: hyper is given the lines it acts on, and the service the others
//!   ([`Refusals`]). hyper answered a bare `431`.
//!
//! A refused head reaches hyper as a stand-in: its request line (or `GET /` for a line too
//! long) with `Connection: close` and no other header. The connection's service learns from
//! [`Refusals`] which of its requests stands for a refused head, and answers it with the
//! refusal ([`crate::server`]'s request steps), after the answers to the requests before it;
//! nothing the client sent after that head reaches hyper, and the connection closes once
//! the answer is out.
//!
//! A request line appears only at a message's start, and taking body bytes for one would
//! change a body: [`Heads`] follows the framing of each request as hyper reads it (RFC 9112
//! §6: `Transfer-Encoding: chunked`, else `Content-Length`, else no body) and looks for a head
//! only where one starts. A connection whose framing it does not follow (HTTP/2, `CONNECT`, a
//! head that is no HTTP/1 head or a chunk hyper refuses, which ends the connection) is passed
//! through untouched from there on, as before.
//!
//! # Invariants
//! - H1 — hyper reads the bytes the client sent, in order, each once, but for the targets
//!   encoded, the heads refused and the lines of heads too many for it (H6): a body, chunked or not, is passed as it came, and nothing
//!   is looked at as a head but at a message's start. Tested by
//!   `test_heads_follow_the_framing_of_every_body` (bodies that hold request lines with odd
//!   targets, framed both ways, read back whole, in pieces of every size) and
//!   `test_what_heads_does_not_follow_passes_through_untouched`.
//! - H2 — a target with an odd byte reaches hyper encoded, and one without unchanged. Tested
//!   by `test_heads_follow_the_framing_of_every_body` and, end to end,
//!   `test_unencoded_targets_are_served_as_opensearch_serves_them`.
//! - H3 — a refused head is the last request hyper reads on the connection, and the only one
//!   [`Refusals`] names. Tested by `test_a_head_too_long_is_refused_after_the_requests_before_it`
//!   and, end to end, `test_headers_over_16kb_get_opensearchs_400_on_every_request`.
//! - H4 — a head's memory is bounded: its header lines are counted as Netty counts them,
//!   every byte but an `LF` and a `CR` just before one, so a head that never ends (a flood of
//!   bare `CR`s, which once counted for nothing: an outside trial held 770 MB on one
//!   unauthenticated connection) is refused past `http.max_header_size`, at most three bytes
//!   held for each one counted. Tested by `test_a_head_of_bare_crs_is_refused_as_too_long` and,
//!   end to end, `test_headers_over_16kb_get_opensearchs_400_on_every_request`.
//! - H5 — empty lines before a request line are skipped, as Netty skips them, and a request
//!   asking for an `Upgrade` (which sluice never grants) is followed as any other: neither
//!   turns the layer off for the rest of the connection (an outside trial's odd target after a
//!   stray `CRLF` got hyper's bare 400). Tested by `test_heads_follow_the_framing_of_every_body`.
//! - H6 — a head of more than [`MAX_HEADERS`] lines within the size limit reaches hyper with
//!   its request line and the lines hyper acts on ([`HYPERS_LINES`]), in order, and every
//!   other line reaches the request's headers, in order ([`Refusals::next`]), so the request
//!   has all its lines; a head of fewer lines, the usual one, costs nothing more. Tested by
//!   `test_a_head_of_more_lines_than_hyper_reads_gives_it_the_lines_it_acts_on` and, end to
//!   end, `test_more_than_100_header_lines_within_16kb_are_served`.
//! - H7 — a head whose framing hyper refuses is refused as H3 says, with why: exactly the
//!   heads hyper refuses for their framing, and the HTTP/1.1 heads of several
//!   `Content-Length` lines Netty refuses, no other. Tested by
//!   `test_a_framing_hyper_refuses_is_refused_in_netty_words` and, end to end,
//!   `test_a_framing_that_cannot_be_read_gets_opensearchs_400_and_a_close`.
//! - H8 — a chunk hyper refuses is known to [`Refusals::framing_lost`] before hyper reads it:
//!   the answer to the request whose body it is says `Connection: close` (the connection then
//!   ends; it did so without saying). Tested by
//!   `test_a_framing_that_cannot_be_read_gets_opensearchs_400_and_a_close`.

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::io::poll_read_buf;

use crate::http::target;
use crate::server::MAX_HEADER_SIZE;

/// The longest request line taken, its end aside: hyper refuses a target longer than
/// `u16::MAX - 1` bytes (its `MAX_URI_LEN`, a bare `414`), and a line within this holds no
/// such target, encoded or not.
pub const MAX_REQUEST_LINE: usize = u16::MAX as usize - 1;

/// The most header lines hyper reads in a head: its own default limit, past which it refuses
/// the head with a bare `431` and ends the connection. A head with more (within
/// `http.max_header_size`, as OpenSearch takes it) gives hyper only the lines it acts on, and
/// the others beside it ([`Refusals`], H6). Raising hyper's limit instead would cost every
/// request hyper reads two heap allocations of that many slots (hyper's own slots live on
/// the stack only up to this number), for heads no usual client sends.
const MAX_HEADERS: usize = 100;

/// The header lines hyper acts on, framing and connection, which it must read itself even in a
/// head of more than [`MAX_HEADERS`] lines (H6); every other line reaches the service beside
/// the head.
const HYPERS_LINES: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "expect",
    "upgrade",
];

/// How much room a read asks for at a time: a request head's usual size.
const READ_CHUNK: usize = 4096;

/// Why a head was refused; in the extensions of the request standing for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Its header lines are over `http.max_header_size`.
    HeadersTooLong,
    /// Its request line is over [`MAX_REQUEST_LINE`].
    LineTooLong,
    /// Its body's framing cannot be read (a `Content-Length` that is no number, or several
    /// that disagree; a `Transfer-Encoding` hyper does not take): why, in Netty's words where
    /// Netty refuses it too (H7).
    Framing(String),
}

/// What [`Heads`] tells a connection's service of its requests, shared by the connection's IO
/// and its service: which request stands for a head it refused, and the header lines of
/// heads too many for hyper that it did not give hyper (H6).
#[derive(Debug, Default)]
pub struct Refusals {
    /// The request's number on the connection (from 0), and why; set once at most (H3).
    refused: OnceLock<(u64, Refused)>,
    /// How many requests the service has been given.
    seen: AtomicU64,
    /// Whether `moved` was ever written to: the one load a request pays for it.
    any_moved: AtomicBool,
    /// The lines hyper was not given, by request number, in the connection's order.
    moved: parking_lot::Mutex<VecDeque<(u64, http::HeaderMap)>>,
    /// Whether a body's framing was lost (a chunk hyper refuses): the connection ends after
    /// the answer being built (H8).
    lost: AtomicBool,
}

/// What [`Refusals::next`] tells of a request.
#[derive(Debug, Default)]
pub struct Told {
    /// The refusal the request stands for, if it stands for one.
    pub refused: Option<Refused>,
    /// The request's header lines hyper was not given (H6), to add to its headers.
    pub lines: Option<http::HeaderMap>,
}

impl Refusals {
    /// Called by the connection's service once for each request, in the order hyper gives
    /// them (HTTP/1 gives them in the connection's order): what [`Heads`] has to tell of it.
    pub fn next(&self) -> Told {
        // Relaxed: the IO and the service run in the connection's one task.
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        let refused = self
            .refused
            .get()
            .and_then(|(at, why)| (*at == n).then(|| why.clone()));
        let lines = if self.any_moved.load(Ordering::Relaxed) {
            let mut moved = self.moved.lock();
            match moved.front() {
                Some((at, _)) if *at == n => moved.pop_front().map(|(_, lines)| lines),
                _ => None,
            }
        } else {
            None
        };
        Told { refused, lines }
    }

    /// Whether a body's framing was lost on the connection (H8): hyper ends it once the answer
    /// being built is out, which must say `Connection: close` (RFC 9112 §9.6). Set before hyper
    /// reads the chunk it refuses, so before the request reading that body is answered.
    pub fn framing_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Keeps `lines` for request `n`, whose head hyper is given without them (H6).
    fn keep_moved(&self, n: u64, lines: http::HeaderMap) {
        self.moved.lock().push_back((n, lines));
        self.any_moved.store(true, Ordering::Relaxed);
    }
}

/// What [`Heads`] is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A head, gathered in the buffer until it is whole.
    Head,
    /// A body framed by its length: the bytes left.
    Body(u64),
    /// A chunked body.
    Chunked(Chunk),
    /// Nothing more is looked at: everything goes to hyper as it comes.
    Through,
    /// A head was refused: nothing more goes to hyper.
    Refused,
}

/// A connection's IO as hyper's HTTP/1 server reads it (see the module documentation).
pub struct Heads<I> {
    io: I,
    state: State,
    /// Read from `io`, not yet given to hyper: a head being gathered, or what came after the
    /// end of a chunked body.
    buf: BytesMut,
    /// Where the request line ends in `buf` (past its `LF`), once it has been read whole and
    /// its target encoded.
    line: Option<usize>,
    /// How much of `buf` has been looked at, for the request line's end and then the head's:
    /// a head that comes in many reads is not searched from its start at each.
    scanned: usize,
    /// The size of the head's header lines read so far, as [`lines_size`] counts it.
    size: usize,
    /// To give hyper before anything else: a head, as hyper reads it.
    out: Bytes,
    /// The heads given to hyper so far.
    heads: u64,
    refusals: std::sync::Arc<Refusals>,
}

impl<I> Heads<I> {
    /// Reads the connection `io`, telling `refusals` of a head it refuses.
    pub fn new(io: I, refusals: std::sync::Arc<Refusals>) -> Self {
        Heads {
            io,
            state: State::Head,
            buf: BytesMut::new(),
            line: None,
            scanned: 0,
            size: 0,
            out: Bytes::new(),
            heads: 0,
            refusals,
        }
    }

    /// The connection, and what was read of it and not yet given to hyper (as hyper would
    /// have been given it).
    pub fn into_inner(self) -> (I, Bytes) {
        let mut rest = BytesMut::with_capacity(self.out.len() + self.buf.len());
        rest.extend_from_slice(&self.out);
        rest.extend_from_slice(&self.buf);
        (self.io, rest.freeze())
    }

    /// Looks at the head gathered so far: whether it moved on (a head to give hyper, or a
    /// state to read in) rather than needing more bytes.
    fn gather(&mut self) -> bool {
        let line = match self.line {
            Some(line) => line,
            None => match self.read_line() {
                Some(line) => line,
                None => return self.state != State::Head,
            },
        };
        // Only what came since the last look: its size, and whether it may end the head (an
        // empty line), before the head is parsed whole.
        let from = self.scanned.max(line);
        self.size = counted(self.size, &self.buf[from - 1..]);
        let may_end = ends_head(&self.buf[(line - 1).max(self.scanned.saturating_sub(2))..]);
        self.scanned = self.buf.len();
        if !may_end {
            if self.size > MAX_HEADER_SIZE {
                self.refuse(Refused::HeadersTooLong);
                return true;
            }
            return false;
        }
        // Slots left uninitialized, as the lane's request parse leaves its own.
        let mut slots = [const { MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
        let mut many = Vec::new();
        let mut req = httparse::Request::new(&mut []);
        let mut parsed = req.parse_with_uninit_headers(&self.buf, &mut slots);
        if parsed == Err(httparse::Error::TooManyHeaders) {
            // More lines than hyper reads (H6): parsed again with a slot a line (each ends in
            // an `LF`), which only such a head pays for, up to the most lines a head within
            // the size limit holds (`a:`, two bytes, is the shortest line).
            let lines = memchr::memchr_iter(b'\n', &self.buf)
                .count()
                .min(MAX_HEADER_SIZE / 2 + 1);
            many.resize_with(lines, MaybeUninit::uninit);
            req = httparse::Request::new(&mut []);
            parsed = req.parse_with_uninit_headers(&self.buf, &mut many);
        }
        let end = match parsed {
            Ok(httparse::Status::Complete(end)) => end,
            Ok(httparse::Status::Partial) => {
                if self.size > MAX_HEADER_SIZE {
                    self.refuse(Refused::HeadersTooLong);
                    return true;
                }
                return false;
            }
            Err(httparse::Error::TooManyHeaders) => {
                self.refuse(Refused::HeadersTooLong);
                return true;
            }
            Err(_) => {
                // hyper refuses it too, and ends the connection.
                self.state = State::Through;
                self.out = self.buf.split().freeze();
                return true;
            }
        };
        if lines_size(&self.buf[line..end]) > MAX_HEADER_SIZE {
            self.refuse(Refused::HeadersTooLong);
            return true;
        }
        let next = match framing(&req) {
            Ok(next) => next,
            Err(why) => {
                self.refuse(Refused::Framing(why));
                return true;
            }
        };
        let fewer = (req.headers.len() > MAX_HEADERS)
            .then(|| fewer_lines(&self.buf[..line], req.headers))
            .flatten();
        let head = self.buf.split_to(end).freeze();
        self.out = match fewer {
            Some((head, lines)) => {
                self.refusals.keep_moved(self.heads, lines);
                head
            }
            // hyper refuses it (too many of the lines it acts on), or takes it whole.
            None => head,
        };
        self.line = None;
        self.scanned = 0;
        self.size = 0;
        self.heads += 1;
        self.state = next;
        true
    }

    /// Reads the request line at the start of the buffer once it is whole, encoding its
    /// target's odd bytes; where it ends. `None` while it is not whole, or when the state
    /// moved on (refused, or passed through: not an HTTP/1 request line).
    fn read_line(&mut self) -> Option<usize> {
        // Empty lines before a request line are skipped (H5), as Netty skips them (and RFC 9112
        // §2.2 asks a server to): a client's `CRLF` after a body once made this layer take
        // the connection for one it does not follow.
        let empty = self
            .buf
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        if empty > 0 {
            self.buf.advance(empty);
            self.scanned = self.scanned.saturating_sub(empty);
        }
        let Some(lf) = memchr::memchr(b'\n', &self.buf[self.scanned..]).map(|i| self.scanned + i)
        else {
            if self.buf.len() > MAX_REQUEST_LINE {
                self.refuse(Refused::LineTooLong);
            }
            self.scanned = self.buf.len();
            return None;
        };
        let Some(target) = target_of(&self.buf[..lf]) else {
            // HTTP/2's preface, or no request line hyper reads.
            self.state = State::Through;
            self.out = self.buf.split().freeze();
            return None;
        };
        let mut end = lf + 1;
        if target::has_odd(&self.buf[target.clone()]) {
            let encoded = target::encode(&self.buf[target.clone()]);
            let mut rebuilt = BytesMut::with_capacity(self.buf.len() + encoded.len());
            rebuilt.extend_from_slice(&self.buf[..target.start]);
            rebuilt.extend_from_slice(&encoded);
            rebuilt.extend_from_slice(&self.buf[target.end..]);
            end += encoded.len() - target.len();
            self.buf = rebuilt;
        }
        // Its end (`CRLF` or `LF`) aside.
        let len = end - 1 - usize::from(end >= 2 && self.buf[end - 2] == b'\r');
        if len > MAX_REQUEST_LINE {
            self.refuse(Refused::LineTooLong);
            return None;
        }
        self.line = Some(end);
        self.scanned = end;
        Some(end)
    }

    /// Refuses the head being gathered (H3): hyper is given its stand-in, and nothing more.
    fn refuse(&mut self, why: Refused) {
        let mut stand_in = BytesMut::new();
        match (&why, self.line) {
            (Refused::HeadersTooLong | Refused::Framing(_), Some(line)) => {
                let request_line = self.buf[..line].trim_ascii_end();
                stand_in.extend_from_slice(request_line);
            }
            _ => stand_in.extend_from_slice(b"GET / HTTP/1.1"),
        }
        stand_in.extend_from_slice(b"\r\nconnection: close\r\n\r\n");
        let _ = self.refusals.refused.set((self.heads, why));
        self.heads += 1;
        self.out = stand_in.freeze();
        self.buf = BytesMut::new();
        self.line = None;
        self.scanned = 0;
        self.size = 0;
        self.state = State::Refused;
    }
}

impl<I: AsyncRead + Unpin> Heads<I> {
    /// Reads more of the connection into the buffer: how many bytes came (0 at its end).
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buf.reserve(READ_CHUNK);
        poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    /// Gives hyper up to `n` bytes of the buffer.
    fn give(&mut self, dst: &mut ReadBuf<'_>, n: usize) -> usize {
        let n = n.min(self.buf.len()).min(dst.remaining());
        dst.put_slice(&self.buf[..n]);
        self.buf.advance(n);
        n
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Heads<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(dst.remaining());
                dst.put_slice(&this.out[..n]);
                this.out.advance(n);
                return Poll::Ready(Ok(()));
            }
            match this.state {
                State::Head => {
                    if !this.buf.is_empty() && this.gather() {
                        continue;
                    }
                    if ready!(this.fill(cx))? == 0 {
                        // The end, in the middle of a head or not: hyper sees it as it came
                        // (the connection's end reads as its end again).
                        this.state = State::Through;
                        this.out = this.buf.split().freeze();
                        if this.out.is_empty() {
                            return Poll::Ready(Ok(()));
                        }
                    }
                }
                State::Body(left) => {
                    let n = if this.buf.is_empty() && left >= dst.remaining() as u64 {
                        // The socket's bytes straight to hyper: all of them are the body's.
                        let before = dst.filled().len();
                        ready!(Pin::new(&mut this.io).poll_read(cx, dst))?;
                        let n = dst.filled().len() - before;
                        if n == 0 {
                            this.state = State::Through;
                            return Poll::Ready(Ok(()));
                        }
                        n
                    } else {
                        if this.buf.is_empty() && ready!(this.fill(cx))? == 0 {
                            this.state = State::Through;
                            return Poll::Ready(Ok(()));
                        }
                        this.give(dst, usize::try_from(left).unwrap_or(usize::MAX))
                    };
                    let left = left - n as u64;
                    this.state = if left == 0 {
                        State::Head
                    } else {
                        State::Body(left)
                    };
                    return Poll::Ready(Ok(()));
                }
                State::Chunked(chunk) => {
                    if this.buf.is_empty() && ready!(this.fill(cx))? == 0 {
                        this.state = State::Through;
                        return Poll::Ready(Ok(()));
                    }
                    let ahead = this.buf.len().min(dst.remaining());
                    this.state = match chunk.scan(&this.buf[..ahead]) {
                        Ok((n, next)) => {
                            this.give(dst, n);
                            match next {
                                Some(chunk) => State::Chunked(chunk),
                                None => State::Head,
                            }
                        }
                        Err(()) => {
                            // hyper refuses the chunk too, and ends the connection after the
                            // answer the request gets, which says so (H8).
                            this.refusals.lost.store(true, Ordering::Relaxed);
                            this.give(dst, ahead);
                            State::Through
                        }
                    };
                    return Poll::Ready(Ok(()));
                }
                State::Through => {
                    if !this.buf.is_empty() {
                        this.give(dst, usize::MAX);
                        return Poll::Ready(Ok(()));
                    }
                    return Pin::new(&mut this.io).poll_read(cx, dst);
                }
                State::Refused => {
                    // hyper reads no more once it has the stand-in (it says `close`); should
                    // it, what the client sends is dropped until it closes.
                    this.buf.clear();
                    if ready!(this.fill(cx))? == 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Heads<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Where the target is in an HTTP/1 request line (`line`, its `LF` aside): between the first
/// space and the last, the method before them and `HTTP/1.0` or `HTTP/1.1` after. `None` for
/// any other line (HTTP/2's preface, no request line): hyper's to answer.
fn target_of(line: &[u8]) -> Option<std::ops::Range<usize>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let first = memchr::memchr(b' ', line)?;
    let last = memchr::memrchr(b' ', line)?;
    let version = &line[last + 1..];
    (first > 0 && last > first + 1 && (version == b"HTTP/1.1" || version == b"HTTP/1.0"))
        .then_some(first + 1..last)
}

/// Whether `bytes` hold the end of a head: a line end followed by an empty line.
fn ends_head(bytes: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', bytes)
        .any(|i| matches!(&bytes[i + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// The size of header lines as Netty counts it against `http.max_header_size`: every byte
/// but the lines' ends, an `LF` and a `CR` just before it (H4).
fn lines_size(lines: &[u8]) -> usize {
    // A cheap bound first: most heads are far below the limit.
    if lines.len() <= MAX_HEADER_SIZE {
        return lines.len();
    }
    netty_count(lines)
}

/// [`lines_size`] without its bound: the bytes, less each `LF` and each `CR` just before one.
fn netty_count(bytes: &[u8]) -> usize {
    let ends = memchr::memchr_iter(b'\n', bytes).count();
    let crs_before = memchr::memmem::find_iter(bytes, b"\r\n").count();
    bytes.len() - ends - crs_before
}

/// [`lines_size`]'s count `size` of the lines up to `bytes[0]`, with the bytes after it. A
/// `CR` at `bytes[0]`, counted when it came, is taken back when an `LF` follows it here (the
/// two are the line's end). A bare `CR` counts, as Netty counts it: leaving every `CR` out
/// let a head of `CR`s grow without end (H4).
fn counted(size: usize, bytes: &[u8]) -> usize {
    let ends_a_line = bytes.starts_with(b"\r\n");
    size + netty_count(&bytes[1..]) - usize::from(ends_a_line)
}

/// What follows a request head, by hyper's reading of its framing (its `role.rs`): a chunked
/// body when the last `Transfer-Encoding` ends in `chunked`, else a body of its
/// `Content-Length` (the first one; later ones must agree), else none. A `CONNECT` may leave
/// HTTP/1: the rest is passed through. `Err` for what hyper refuses, with a bare `400` and
/// the connection's end: a length that is no number or disagrees, a `Transfer-Encoding` not
/// ending in `chunked` or on HTTP/1.0 (RFC 9112 §6.1: the body's end cannot be known). The
/// head is refused instead, in OpenSearch's words (H7); so is an HTTP/1.1 head of a second
/// `Content-Length` line, even one that agrees and even beside a `Transfer-Encoding`, as
/// Netty's decoder refuses it (`HttpUtil.normalizeAndGetContentLength` without
/// `allowDuplicateContentLengths`, its default, reads every length line before the codings).
fn framing(req: &httparse::Request<'_, '_>) -> Result<State, String> {
    let http11 = req.version == Some(1);
    let mut chunked = None;
    let mut length: Option<u64> = None;
    let mut length_lines = 0usize;
    // An `Upgrade` is never taken (sluice answers no request 101, and a gateway forwards no
    // `Upgrade`): the connection stays HTTP/1, and this layer follows it (H5). A `CONNECT`
    // answered 2xx would leave it.
    let upgrade = req.method == Some("CONNECT");
    let mut last_te: &[u8] = b"";
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !http11 {
                return Err("Transfer-Encoding is not allowed on an HTTP/1.0 request".to_string());
            }
            length = None;
            chunked = Some(is_chunked(h.value));
            last_te = h.value;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            length_lines += 1;
            if http11 && length_lines > 1 {
                return Err(content_length_refusal(req));
            }
            if chunked.is_some() {
                continue;
            }
            match (digits(h.value), length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Err(content_length_refusal(req)),
            }
        }
    }
    match (upgrade, chunked, length) {
        (true, _, _) => Ok(State::Through),
        (_, Some(false), _) => Err(format!(
            "Transfer-Encoding [{}] is not supported: the last transfer coding of a request \
             must be chunked",
            String::from_utf8_lossy(last_te)
        )),
        (_, Some(true), _) => Ok(State::Chunked(Chunk::Start)),
        // hyper's largest length (its `DecodedLength::MAX_LEN`); past Java's `long` for Netty.
        (_, None, Some(n)) if n > u64::MAX - 2 => Err(content_length_refusal(req)),
        (_, None, Some(n)) if n > 0 => Ok(State::Body(n)),
        _ => Ok(State::Head),
    }
}

/// Why a head's `Content-Length` lines are refused, in Netty's words
/// (`HttpUtil.normalizeAndGetContentLength`, whose `IllegalArgumentException` OpenSearch
/// answers as a 400): several values (lines, or a list in one) are "Multiple Content-Length
/// values found: [9, 8]", one that is no number "Content-Length value is not a number: 9x".
fn content_length_refusal(req: &httparse::Request<'_, '_>) -> String {
    let values: Vec<_> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| String::from_utf8_lossy(h.value))
        .collect();
    match values.as_slice() {
        [one] if !one.contains(',') => format!("Content-Length value is not a number: {one}"),
        _ => format!(
            "Multiple Content-Length values found: [{}]",
            values.join(", ")
        ),
    }
}

/// A head of more than [`MAX_HEADERS`] lines as hyper is given it (H6): `request_line` (with
/// its end) and the lines of [`HYPERS_LINES`], in order; and every other line, in order, to
/// reach the service beside it. `None` when hyper would still have too many lines (it refuses
/// the head whole), or a line is no header value (hyper's to refuse).
fn fewer_lines(
    request_line: &[u8],
    headers: &[httparse::Header<'_>],
) -> Option<(Bytes, http::HeaderMap)> {
    let mut head = BytesMut::with_capacity(request_line.len() + 256);
    head.extend_from_slice(request_line);
    let mut kept = 0;
    let mut moved = http::HeaderMap::new();
    for h in headers {
        if HYPERS_LINES.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            kept += 1;
            head.extend_from_slice(h.name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(h.value);
            head.extend_from_slice(b"\r\n");
        } else {
            let name = http::HeaderName::from_bytes(h.name.as_bytes()).ok()?;
            let value = http::HeaderValue::from_bytes(h.value).ok()?;
            moved.append(name, value);
        }
    }
    if kept > MAX_HEADERS {
        return None;
    }
    head.extend_from_slice(b"\r\n");
    Some((head.freeze(), moved))
}

/// Whether a `Transfer-Encoding` value ends in `chunked`, as hyper reads it.
fn is_chunked(value: &[u8]) -> bool {
    std::str::from_utf8(value).is_ok_and(|v| {
        v.rsplit(',')
            .next()
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
    })
}

/// A `Content-Length` as hyper reads one: ASCII digits alone, fitting a `u64`.
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        let d = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(d)
    })
}

/// Where a chunked body is, byte by byte, as hyper's decoder reads it (its `ChunkedState`):
/// a size line (hex digits, then spaces or tabs, or `;` and an extension, then `CRLF`), the
/// chunk's bytes and `CRLF`, and after the last chunk (size 0) trailer lines up to an empty
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Start,
    Size(u64),
    SizeLws(u64),
    Extension(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
}

impl Chunk {
    /// Reads on through `bytes`: how many of them are the body's, and where it then is
    /// (`None` at its end: the bytes after it are the next request's). `Err` for a byte
    /// hyper's decoder refuses.
    fn scan(self, bytes: &[u8]) -> Result<(usize, Option<Chunk>), ()> {
        let mut at = self;
        let mut i = 0;
        while i < bytes.len() {
            if let Chunk::Data(left) = at {
                let n = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - i);
                i += n;
                let left = left - n as u64;
                at = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                continue;
            }
            let b = bytes[i];
            i += 1;
            at = match (at, b) {
                (Chunk::Start, _) => Chunk::Size(hex(0, b)?),
                (Chunk::Size(n), b' ' | b'\t') => Chunk::SizeLws(n),
                (Chunk::Size(n) | Chunk::SizeLws(n), b';') => Chunk::Extension(n),
                (Chunk::Size(n) | Chunk::SizeLws(n) | Chunk::Extension(n), b'\r') => {
                    Chunk::SizeLf(n)
                }
                (Chunk::Size(n), _) => Chunk::Size(hex(n, b)?),
                (Chunk::SizeLws(n), b' ' | b'\t') => Chunk::SizeLws(n),
                (Chunk::Extension(_), b'\n') => return Err(()),
                (Chunk::Extension(n), _) => Chunk::Extension(n),
                (Chunk::SizeLf(0), b'\n') => Chunk::EndCr,
                (Chunk::SizeLf(n), b'\n') => Chunk::Data(n),
                (Chunk::DataCr, b'\r') => Chunk::DataLf,
                (Chunk::DataLf, b'\n') => Chunk::Start,
                (Chunk::EndCr, b'\r') => Chunk::EndLf,
                (Chunk::Trailer, b'\r') => Chunk::TrailerLf,
                (Chunk::EndCr | Chunk::Trailer, _) => Chunk::Trailer,
                (Chunk::TrailerLf, b'\n') => Chunk::EndCr,
                (Chunk::EndLf, b'\n') => return Ok((i, None)),
                _ => return Err(()),
            };
        }
        Ok((i, Some(at)))
    }
}

/// `n` with the hex digit `b` appended, as hyper reads a chunk size (`Err` for no digit, or
/// a size past `u64`).
fn hex(n: u64, b: u8) -> Result<u64, ()> {
    let d = match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => return Err(()),
    };
    n.checked_mul(16)
        .and_then(|n| n.checked_add(u64::from(d)))
        .ok_or(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A connection that gives its bytes at most `step` at a time.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self
                .step
                .min(self.bytes.len() - self.at)
                .min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.bytes[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// What hyper reads of `sent`, given `step` bytes at a time and reading `room` at a time,
    /// and the refusals told.
    fn read(sent: &[u8], step: usize, room: usize) -> (Vec<u8>, Arc<Refusals>) {
        let refusals = Arc::new(Refusals::default());
        let io = Trickle {
            bytes: sent.to_vec(),
            at: 0,
            step,
        };
        let mut heads = Heads::new(io, refusals.clone());
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut got = Vec::new();
        let mut chunk = vec![0u8; room];
        loop {
            let mut buf = ReadBuf::new(&mut chunk);
            match Pin::new(&mut heads).poll_read(&mut cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return (got, refusals),
                Poll::Ready(Ok(())) => got.extend_from_slice(buf.filled()),
                other => panic!("{other:?}"),
            }
        }
    }

    /// A request line with an odd target, as a request and inside bodies.
    const ODD: &str = "GET /logs/_search?q=t:\"x\" HTTP/1.1\r\n";
    const ENCODED: &str = "GET /logs/_search?q=t:%22x%22 HTTP/1.1\r\n";

    #[test]
    fn test_heads_follow_the_framing_of_every_body() {
        let body = format!("{ODD}\r\n");
        let sent = format!(
            "{ODD}host: a\r\ncontent-length: {}\r\n\r\n{body}\
             POST /{{x}} HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\ncontent-length: 3\r\n\r\n\
             {:x};ext=\"y\"\r\n{body}\r\n1 \r\n{{\r\n0\r\ntrailer: {ODD}\r\n\
             {ODD}\n\
             \r\n\r\n{ODD}upgrade: websocket\r\nconnection: upgrade\r\n\r\n\
             {ODD}\r\n\
             GET /plain HTTP/1.0\r\n\r\n",
            body.len(),
            body.len(),
        );
        // Empty lines before a request line are dropped; an upgrade asked is followed.
        let expected = format!(
            "{ENCODED}host: a\r\ncontent-length: {}\r\n\r\n{body}\
             POST /%7Bx%7D HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\ncontent-length: 3\r\n\r\n\
             {:x};ext=\"y\"\r\n{body}\r\n1 \r\n{{\r\n0\r\ntrailer: {ODD}\r\n\
             {ENCODED}\n\
             {ENCODED}upgrade: websocket\r\nconnection: upgrade\r\n\r\n\
             {ENCODED}\r\n\
             GET /plain HTTP/1.0\r\n\r\n",
            body.len(),
            body.len(),
        );
        for step in 1..=sent.len() {
            for room in [1, 3, 7, 64, 4096] {
                let (got, refusals) = read(sent.as_bytes(), step, room);
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    expected,
                    "step {step}, room {room}"
                );
                assert!((0..4).all(|_| refusals.next().refused.is_none()));
            }
        }
    }

    #[test]
    fn test_what_heads_does_not_follow_passes_through_untouched() {
        for sent in [
            // HTTP/2's preface, then frames.
            format!("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n{ODD}"),
            // A `CONNECT` may leave HTTP/1.
            format!("CONNECT a:1 HTTP/1.1\r\n\r\n{ODD}"),
            // A chunk hyper refuses, ending the connection.
            format!("POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nz\r\n{ODD}"),
            // A head hyper refuses.
            format!("GET / HTTP/1.1\r\nbad header\r\n\r\n{ODD}"),
            // A client that stops in the middle of a head.
            "GET /a HTTP/1.1\r\nhost:".to_string(),
        ] {
            let (got, _) = read(sent.as_bytes(), 5, 64);
            let got = String::from_utf8_lossy(&got);
            assert_eq!(got, sent);
        }
    }

    #[test]
    fn test_a_framing_hyper_refuses_is_refused_in_netty_words() {
        // H7: refused where hyper would refuse it (a bare 400), nothing after it read.
        for (head, why) in [
            (
                "POST /{x} HTTP/1.1\r\ncontent-length: 1x\r\n\r\n",
                "Content-Length value is not a number: 1x",
            ),
            (
                "POST /{x} HTTP/1.1\r\ncontent-length: 18446744073709551614\r\n\r\n",
                "Content-Length value is not a number: 18446744073709551614",
            ),
            (
                "POST /{x} HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                "Multiple Content-Length values found: [1, 2]",
            ),
            (
                "POST /{x} HTTP/1.1\r\ncontent-length: 1,1\r\n\r\n",
                "Multiple Content-Length values found: [1,1]",
            ),
            // Netty allows no duplicate length, even one that agrees (hyper takes it).
            (
                "POST /{x} HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\n",
                "Multiple Content-Length values found: [1, 1]",
            ),
            (
                "POST /{x} HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 1\r\n\
                 content-length: 1\r\n\r\n",
                "Multiple Content-Length values found: [1, 1]",
            ),
            (
                "POST /{x} HTTP/1.1\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
                "Transfer-Encoding [chunked, gzip] is not supported: the last transfer coding \
                 of a request must be chunked",
            ),
            (
                "POST /{x} HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
                "Transfer-Encoding is not allowed on an HTTP/1.0 request",
            ),
        ] {
            let sent = format!("{head}{ODD}\r\n");
            for step in [1, 7, 4096] {
                let (got, refusals) = read(sent.as_bytes(), step, 4096);
                let line = head.split("\r\n").next().unwrap().replace("{x}", "%7Bx%7D");
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    format!("{line}\r\nconnection: close\r\n\r\n"),
                    "{head}"
                );
                assert_eq!(refusals.next().refused, Some(Refused::Framing(why.into())));
            }
        }
        // What hyper and Netty take is taken: equal lengths on two lines of HTTP/1.0 (Netty
        // reads the first), a length beside chunks.
        for head in [
            "POST / HTTP/1.0\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nx",
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: x\r\n\r\n0\r\n\r\n",
        ] {
            let (got, refusals) = read(head.as_bytes(), 3, 4096);
            assert_eq!(String::from_utf8_lossy(&got), head);
            assert!(refusals.next().refused.is_none());
        }
    }

    #[test]
    fn test_a_head_of_more_lines_than_hyper_reads_gives_it_the_lines_it_acts_on() {
        // H6: hyper reads the request line and its own lines, in order; every other line, in
        // order, reaches the service beside it, and what follows is read as before.
        let lines: String = (0..MAX_HEADERS).map(|i| format!("h{i}: {i}\r\n")).collect();
        let first = format!(
            "POST /a HTTP/1.1\r\nx-opaque-id: a\r\n{lines}content-length: 2\r\n\
             connection: keep-alive\r\nx-opaque-id: b\r\n\r\n{{}}"
        );
        let sent = format!("{first}{ODD}\r\n");
        for step in [1, 13, 100_000] {
            let (got, refusals) = read(sent.as_bytes(), step, 4096);
            assert_eq!(
                String::from_utf8_lossy(&got),
                format!(
                    "POST /a HTTP/1.1\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\n{{}}\
                     {ENCODED}\r\n"
                ),
                "step {step}"
            );
            let told = refusals.next();
            assert!(told.refused.is_none());
            let moved = told.lines.expect("the lines hyper was not given");
            assert_eq!(moved.len(), MAX_HEADERS + 2);
            let ids: Vec<_> = moved.get_all("x-opaque-id").iter().collect();
            assert_eq!(ids, ["a", "b"]);
            assert_eq!(moved["h99"], "99");
            // The next request had no such head.
            let told = refusals.next();
            assert!(told.refused.is_none() && told.lines.is_none());
        }
        // Within 16 KB, however short the lines; past it, refused as too long.
        let short: String = (0..3_000).map(|i| format!("{i:x}:\r\n")).collect();
        let head = format!("GET /a HTTP/1.1\r\n{short}\r\n");
        let (got, refusals) = read(head.as_bytes(), 4096, 4096);
        assert_eq!(String::from_utf8_lossy(&got), "GET /a HTTP/1.1\r\n\r\n");
        assert_eq!(refusals.next().lines.map(|l| l.len()), Some(3_000));
        let over: String = (0..9_000).map(|_| "a:\r\n").collect();
        let (_, refusals) = read(
            format!("GET /a HTTP/1.1\r\n{over}\r\n").as_bytes(),
            4096,
            4096,
        );
        assert_eq!(refusals.next().refused, Some(Refused::HeadersTooLong));
    }

    #[test]
    fn test_a_head_of_bare_crs_is_refused_as_too_long() {
        // Bare `CR`s count (H4); `CRLF` ends take back their `CR`, in one read or split.
        let flood = format!(
            "GET /a HTTP/1.1\r\nhost: x\r\nx-a: b{}",
            "\r".repeat(40_000)
        );
        for step in [1, 7, 4096] {
            let (got, refusals) = read(flood.as_bytes(), step, 4096);
            assert_eq!(
                String::from_utf8_lossy(&got),
                "GET /a HTTP/1.1\r\nconnection: close\r\n\r\n",
                "step {step}"
            );
            assert_eq!(refusals.next().refused, Some(Refused::HeadersTooLong));
        }
        // Within the count, a head of many `CRLF`-ended lines, split anywhere, is not refused
        // (hyper is given the lines it acts on, none here, H6).
        let lines = "x-p: 1\r\n".repeat(MAX_HEADER_SIZE / 7);
        let head = format!("GET /a HTTP/1.1\r\n{lines}\r\n");
        assert!(lines.len() > MAX_HEADER_SIZE && lines_size(lines.as_bytes()) <= MAX_HEADER_SIZE);
        for step in [1, 3, 5, 4096] {
            let (got, refusals) = read(head.as_bytes(), step, 4096);
            assert_eq!(
                String::from_utf8_lossy(&got),
                "GET /a HTTP/1.1\r\n\r\n",
                "step {step}"
            );
            let told = refusals.next();
            assert!(told.refused.is_none());
            assert_eq!(told.lines.map(|l| l.len()), Some(MAX_HEADER_SIZE / 7));
        }
    }

    #[test]
    fn test_a_head_too_long_is_refused_after_the_requests_before_it() {
        let first = "GET /a HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}";
        // Netty's count: 16,384 bytes of lines are within the limit, one more is not.
        let pad = |n: usize| format!("x-pad: {}\r\n", "p".repeat(n - "x-pad: ".len()));
        let within = format!("{first}GET /b HTTP/1.1\r\n{}\r\n", pad(MAX_HEADER_SIZE));
        let (got, refusals) = read(within.as_bytes(), 4096, 4096);
        assert_eq!(String::from_utf8_lossy(&got), within);
        assert!((0..3).all(|_| refusals.next().refused.is_none()));
        for step in [1, 1000, 100_000] {
            let over = format!(
                "{first}PUT /{{b}} HTTP/1.1\r\n{}content-length: 5\r\n\r\nGET /c HTTP/1.1\r\n\r\n",
                pad(MAX_HEADER_SIZE + 1)
            );
            let (got, refusals) = read(over.as_bytes(), step, 4096);
            assert_eq!(
                String::from_utf8_lossy(&got),
                format!("{first}PUT /%7Bb%7D HTTP/1.1\r\nconnection: close\r\n\r\n"),
                "step {step}"
            );
            assert_eq!(refusals.next().refused, None);
            assert_eq!(refusals.next().refused, Some(Refused::HeadersTooLong));
            assert_eq!(refusals.next().refused, None);
        }
        // A request line too long, ended or not.
        for end in ["", " HTTP/1.1\r\n\r\n"] {
            let over = format!("GET /{}{end}", "l".repeat(MAX_REQUEST_LINE));
            let (got, refusals) = read(over.as_bytes(), 4096, 4096);
            assert_eq!(
                String::from_utf8_lossy(&got),
                "GET / HTTP/1.1\r\nconnection: close\r\n\r\n"
            );
            assert_eq!(refusals.next().refused, Some(Refused::LineTooLong));
        }
        // Within it once encoded, it is hyper's.
        let line = format!("GET /{} HTTP/1.1", "l".repeat(MAX_REQUEST_LINE - 15));
        let (got, refusals) = read(format!("{line}\r\n\r\n").as_bytes(), 4096, 4096);
        assert_eq!(got.len(), line.len() + 4);
        assert_eq!(refusals.next().refused, None);
        let odd = format!(
            "GET /\"{} HTTP/1.1\r\n\r\n",
            "l".repeat(MAX_REQUEST_LINE - 15)
        );
        let (_, refusals) = read(odd.as_bytes(), 4096, 4096);
        assert_eq!(refusals.next().refused, Some(Refused::LineTooLong));
    }

    #[test]
    fn test_chunks_are_read_as_hypers_decoder_reads_them() {
        let whole = b"4\r\nabcd\r\n1;a=b\r\nx\r\n0\r\nt: 1\r\nu: 2\r\n\r\nNEXT";
        assert_eq!(Chunk::Start.scan(whole), Ok((whole.len() - 4, None)));
        assert_eq!(Chunk::Start.scan(b"0\r\n\r\n"), Ok((5, None)));
        assert_eq!(
            Chunk::Start.scan(b"a\t \r\n"),
            Ok((5, Some(Chunk::Data(10))))
        );
        for refused in [
            &b"\r\n"[..],
            b"g\r\n",
            b"1 2\r\n",
            b"1\n",
            b"1;a\n",
            b"1\r\nxy",
            b"0\r\n\r\r",
            b"0\r\nt\r\r",
            b"11111111111111111\r\n",
        ] {
            assert_eq!(
                Chunk::Start.scan(refused),
                Err(()),
                "{}",
                String::from_utf8_lossy(refused)
            );
        }
    }
}
