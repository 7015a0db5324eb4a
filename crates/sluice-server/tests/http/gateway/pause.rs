//! A gateway that stops running for a while (a VM frozen or migrated, a container paused,
//! `SIGSTOP`) while its upstream answers: on waking, what the upstream sent meanwhile is
//! relayed, not a 504 "did not answer within request_timeout" or an answer broken off — the
//! upstream did answer in time (`src/deadline.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, mpsc};

use super::{gateway_process, read_request};

/// The body the upstream answers every request but `GET /` with.
const BODY: &str =
    r#"{"took":1,"timed_out":false,"hits":{"total":{"value":0,"relation":"eq"},"hits":[]}}"#;

/// How long the gateway stays stopped: past its `request_timeout` (1 s here), so that its
/// timers have fired when it resumes.
const PAUSE: Duration = Duration::from_millis(1500);

/// An upstream that holds its answers to `/paused…` and `/half…` until released: it tells `received` it
/// has the request (for a path starting `/half`, after it sent the answer's head and half its
/// body), waits for `release`, sends the (rest of the) answer, and tells `answered`.
struct Holding {
    base: String,
    received: mpsc::UnboundedReceiver<()>,
    release: Arc<Notify>,
    answered: mpsc::UnboundedReceiver<()>,
}

async fn holding_upstream() -> Holding {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (received_tx, received) = mpsc::unbounded_channel();
    let (answered_tx, answered) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let released = release.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (received_tx, answered_tx, released) =
                (received_tx.clone(), answered_tx.clone(), released.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some((first, _, _)) = read_request(&mut stream, &mut buf).await {
                    let body = match first.starts_with("GET / ") {
                        true => {
                            r#"{"cluster_name":"paused","version":{"number":"2.19.0","distribution":"opensearch"}}"#
                        }
                        false => BODY,
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=UTF-8\r\n\
                         content-length: {}\r\n\r\n",
                        body.len()
                    );
                    // What the gateway asks on its own (its start-up `GET /`, task listings)
                    // is answered at once.
                    if !first.contains(" /paused") && !first.contains(" /half") {
                        let _ = stream.write_all(format!("{head}{body}").as_bytes()).await;
                        continue;
                    }
                    let (now, later) = match first.contains(" /half") {
                        true => body.split_at(body.len() / 2),
                        false => ("", body),
                    };
                    let mut out = String::new();
                    if !now.is_empty() {
                        out = format!("{head}{now}");
                        stream.write_all(out.as_bytes()).await.unwrap();
                        out.clear();
                    } else {
                        out.push_str(&head);
                    }
                    let _ = received_tx.send(());
                    released.notified().await;
                    out.push_str(later);
                    stream.write_all(out.as_bytes()).await.unwrap();
                    let _ = answered_tx.send(());
                }
            });
        }
    });
    Holding {
        base,
        received,
        release,
        answered,
    }
}

/// Pauses or resumes the gateway (`STOP`, `CONT`), once the kernel shows it done.
fn signal(pid: u32, signal: &str) {
    crate::common::signal::send(pid, signal, "the gateway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_paused_gateway_relays_what_its_upstream_answered_meanwhile() {
    let mut up = holding_upstream().await;
    let gw = gateway_process(
        &up.base,
        tempfile::tempdir().unwrap(),
        &["backend.upstream.request_timeout=1s"],
    )
    .await;
    let client = reqwest::Client::new();
    let cases = [
        ("POST", "/paused/_search", "a search (the fast lane)"),
        ("GET", "/paused/_doc/1", "a read (the general path)"),
        (
            "POST",
            "/half/_search",
            "the rest of an answer whose head came before the pause",
        ),
    ];
    for (method, path, what) in cases {
        let req = client
            .request(method.parse().unwrap(), format!("{}{path}", gw.url))
            .header("content-type", "application/json")
            .body("{}")
            .timeout(Duration::from_secs(30))
            .send();
        let (head_tx, head) = tokio::sync::oneshot::channel();
        let asked = tokio::spawn(async move {
            let resp = req.await?;
            let status = resp.status();
            let _ = head_tx.send(());
            resp.text().await.map(|body| (status, body))
        });
        up.received
            .recv()
            .await
            .expect("the upstream has the request");
        if path.starts_with("/half") {
            // The client has the head, so the gateway is relaying the body when it stops.
            head.await.expect("the answer's head reaches the client");
        }
        signal(gw.pid, "STOP");
        up.release.notify_one();
        up.answered.recv().await.expect("the upstream answered");
        // The upstream answered within a few milliseconds; the gateway sleeps through it and
        // past its request_timeout.
        tokio::time::sleep(PAUSE).await;
        signal(gw.pid, "CONT");
        let (status, body) = asked
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(status, 200, "{what}: {body}");
        assert_eq!(body, BODY, "{what}");
    }
}
