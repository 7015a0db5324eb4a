//! An HTTP/2 upstream that turns its connections over, as nginx does after
//! `keepalive_requests` (a graceful GOAWAY), or refuses a stream (`REFUSED_STREAM`): the
//! requests it did not process are sent again on a new connection, never failed.
//!
//! The upstream is written here frame by frame over rustls (ALPN `h2`, which is how the
//! gateway's client comes to speak HTTP/2), so that it refuses exactly the stream that follows
//! its quota: a real server's GOAWAY races the next request, this one meets it every time.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::{gateway, private_ca};

/// How the fake refuses the stream past its quota on a connection.
#[derive(Clone, Copy)]
enum Refuse {
    /// A GOAWAY (`NO_ERROR`) naming the last stream it answered; no stream after it answered.
    GoAway,
    /// A `REFUSED_STREAM` reset of that stream, the connection kept (its count starts over).
    Reset,
}

/// What the fake answers every request: enough of OpenSearch's `GET /` for the gateway's
/// start-up probe, and a JSON object for anything else.
const ANSWER: &str =
    r#"{"cluster_name":"h2","version":{"number":"2.19.0","distribution":"opensearch"}}"#;

fn frame(out: &mut impl Write, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    let mut head = [0u8; 9];
    head[..3].copy_from_slice(&len.to_be_bytes()[1..]);
    head[3] = kind;
    head[4] = flags;
    head[5..].copy_from_slice(&stream.to_be_bytes());
    out.write_all(&head).unwrap();
    out.write_all(payload).unwrap();
}

/// One connection: answers `quota` requests, then refuses the next as `how` says. Counts the
/// refusals in `refused`.
fn serve(mut tls: impl Read + Write, quota: usize, how: Refuse, refused: &AtomicUsize) {
    let mut preface = [0u8; 24];
    if tls.read_exact(&mut preface).is_err() {
        return;
    }
    frame(&mut tls, 4, 0, 0, &[]);
    let (mut answered, mut last, mut gone) = (0, 0u32, false);
    loop {
        let mut head = [0u8; 9];
        if tls.read_exact(&mut head).is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        if tls.read_exact(&mut payload).is_err() {
            return;
        }
        match kind {
            // Gone away: the rest is read until the client closes (closed at once, with the
            // client's frames unread, the connection would be reset, and the GOAWAY lost).
            _ if gone => {}
            // SETTINGS and PING: acknowledged (a PING's ack echoes its payload).
            4 if flags & 1 == 0 => frame(&mut tls, 4, 1, 0, &[]),
            6 if flags & 1 == 0 => frame(&mut tls, 6, 1, 0, &payload),
            // HEADERS: a new request.
            1 if answered == quota => {
                refused.fetch_add(1, Ordering::SeqCst);
                match how {
                    Refuse::GoAway => {
                        let mut goaway = last.to_be_bytes().to_vec();
                        goaway.extend_from_slice(&0u32.to_be_bytes()); // NO_ERROR
                        frame(&mut tls, 7, 0, 0, &goaway);
                        gone = true;
                    }
                    Refuse::Reset => {
                        frame(&mut tls, 3, 0, stream, &7u32.to_be_bytes()); // REFUSED_STREAM
                        answered = 0;
                    }
                }
            }
            1 => {
                // `:status: 200` (static table entry 8), then the body ending the stream.
                frame(&mut tls, 1, 0x4, stream, &[0x88]);
                frame(&mut tls, 0, 0x1, stream, ANSWER.as_bytes());
                answered += 1;
                last = stream;
            }
            _ => {}
        }
        if tls.flush().is_err() {
            return;
        }
    }
}

/// An HTTP/2-over-TLS upstream with the certificate in `dir` (see [`private_ca`]), refusing
/// one stream past `quota` on each connection; its port and the count of refusals.
fn h2_upstream(dir: &std::path::Path, quota: usize, how: Refuse) -> (u16, Arc<AtomicUsize>) {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(dir.join("srv.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(dir.join("srv.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let refused = Arc::new(AtomicUsize::new(0));
    let counted = refused.clone();
    // Threads that end with the test's process (blocked in accept or read).
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let (config, refused) = (config.clone(), counted.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                serve(rustls::StreamOwned::new(conn, tcp), quota, how, &refused);
            });
        }
    });
    (port, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_requests_an_h2_upstream_refused_unprocessed_are_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    private_ca(dir.path());
    let ca = format!(
        "backend.upstream.ca_file={}",
        dir.path().join("ca.pem").display()
    );
    for how in [Refuse::GoAway, Refuse::Reset] {
        // One request per connection: every request after the gateway's first meets a
        // refusal on the connection it is sent on.
        let (port, refused) = h2_upstream(dir.path(), 1, how);
        let gw = gateway(&format!("https://localhost:{port}"), &[ca.as_str()]).await;
        let before = refused.load(Ordering::SeqCst);
        for i in 0..3 {
            let (s, b) = gw.req("GET", &format!("/logs/_doc/{i}"), None).await;
            assert_eq!(s, 200, "GET {i}: {b}");
            // A POST (a search, whose body the gateway holds whole): not processed either,
            // so sent again too.
            let (s, b) = gw
                .req(
                    "POST",
                    "/logs/_search",
                    Some(json!({"query": {"match_all": {}}})),
                )
                .await;
            assert_eq!(s, 200, "search {i}: {b}");
            assert_eq!(b["cluster_name"], "h2", "{b}");
        }
        // Each of the six met its refusal (the upstream's count proves the case was met).
        assert!(
            refused.load(Ordering::SeqCst) - before >= 6,
            "refused {}",
            refused.load(Ordering::SeqCst) - before
        );
        gw.stop().await;
    }
}
