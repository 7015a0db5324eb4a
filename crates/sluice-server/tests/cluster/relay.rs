//! A relay in front of one node's transport — gossip (UDP) and RPC (TCP) on one port — that
//! its peers reach it through (the node publishes the relay's port, `transport.publish_port`),
//! so a test can lose one direction of a link: a firewall on loopback without root.
//!
//! Datagrams are relayed as a NAT does: each source gets a socket of the relay's own toward
//! the node, and what the node answers to that socket goes back to the source, so the node's
//! replies pass the relay too. [`Cut`] says what is lost: datagrams from one address toward
//! the node, the node's replies, every TCP connection (closed, or held silent).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

/// What the relay loses now.
#[derive(Debug, Clone, Default)]
pub struct Cut {
    /// Datagrams toward the node from this address (a peer's gossip socket).
    pub from: Option<SocketAddr>,
    /// Every datagram toward the node.
    pub datagrams: bool,
    /// The node's datagrams back to their sources.
    pub replies: bool,
    /// Every TCP connection: open ones are closed, new ones refused (closed at accept).
    pub tcp: bool,
    /// Every TCP connection goes silent both ways, as over a link that loses every packet:
    /// open ones are held open, bytes neither way, a close not passed on; new ones are
    /// accepted and held so too.
    pub stall: bool,
}

/// A running relay; its tasks stop when it is dropped.
pub struct Relay {
    /// The address (UDP and TCP) peers send to.
    pub addr: SocketAddr,
    target: Target,
    cut: tokio::sync::watch::Sender<Cut>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// Where the node's transport is bound, once known.
type Target = Arc<Mutex<Option<SocketAddr>>>;

/// The largest datagram relayed (UDP's own limit).
const DATAGRAM: usize = 65_536;

impl Relay {
    /// Binds a UDP socket and a TCP listener on one free loopback port. Nothing is relayed
    /// until [`Relay::to`] names the node.
    pub async fn start() -> Relay {
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.expect("udp bind");
            let addr = udp.local_addr().expect("udp addr");
            if let Ok(tcp) = TcpListener::bind(addr).await {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().expect("udp addr");
        let target: Target = Arc::default();
        let (cut, watch) = tokio::sync::watch::channel(Cut::default());
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let datagrams = tokio::spawn(relay_datagrams(
            Arc::new(udp),
            target.clone(),
            watch.clone(),
            tasks.clone(),
        ));
        let streams = tokio::spawn(relay_streams(tcp, target.clone(), watch, tasks.clone()));
        tasks.lock().extend([datagrams, streams]);
        Relay {
            addr,
            target,
            cut,
            tasks,
        }
    }

    /// Relays to the node's bound transport address from now on (again after a restart).
    pub fn to(&self, node: SocketAddr) {
        *self.target.lock() = Some(node);
    }

    /// Loses what `cut` says from now on (the default: nothing).
    pub fn cut(&self, cut: Cut) {
        self.cut.send_replace(cut);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

async fn relay_datagrams(
    outer: Arc<UdpSocket>,
    target: Target,
    cut: tokio::sync::watch::Receiver<Cut>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let mut inner: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut buf = vec![0u8; DATAGRAM];
    loop {
        let Ok((n, source)) = outer.recv_from(&mut buf).await else {
            return;
        };
        let Some(node) = *target.lock() else { continue };
        if cut.borrow().from == Some(source) || cut.borrow().datagrams {
            continue;
        }
        let socket = match inner.get(&source) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("udp bind"));
                let replies =
                    tokio::spawn(relay_replies(s.clone(), outer.clone(), source, cut.clone()));
                push(&tasks, replies);
                inner.insert(source, s.clone());
                s
            }
        };
        let _ = socket.send_to(&buf[..n], node).await;
    }
}

/// The node's datagrams to `inner` (the socket standing for `source`) go back to `source`.
async fn relay_replies(
    inner: Arc<UdpSocket>,
    outer: Arc<UdpSocket>,
    source: SocketAddr,
    cut: tokio::sync::watch::Receiver<Cut>,
) {
    let mut buf = vec![0u8; DATAGRAM];
    loop {
        let Ok(n) = inner.recv(&mut buf).await else {
            return;
        };
        if !cut.borrow().replies {
            let _ = outer.send_to(&buf[..n], source).await;
        }
    }
}

async fn relay_streams(
    listener: TcpListener,
    target: Target,
    cut: tokio::sync::watch::Receiver<Cut>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let Some(node) = *target.lock() else { continue };
        if cut.borrow().tcp {
            continue;
        }
        let mut cut = cut.clone();
        let pipe = tokio::spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(node).await else {
                return;
            };
            let mut stream = stream;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream) => return,
                _ = cut.wait_for(|c| c.tcp || c.stall) => {}
            }
            // Stalled: both ends held open, silent, until the stall ends (then closed).
            let _ = cut.wait_for(|c| !c.stall).await;
            drop((stream, upstream));
        });
        push(&tasks, pipe);
    }
}

/// Keeps `task` to abort with the relay, forgetting those that ended.
fn push(tasks: &Mutex<Vec<JoinHandle<()>>>, task: JoinHandle<()>) {
    let mut tasks = tasks.lock();
    tasks.retain(|t| !t.is_finished());
    tasks.push(task);
}

/// `n` nodes with the heavy index (`TestCluster::start_heavy_each`), each behind a relay of
/// its own through which its peers reach it; with each node's relay setting, for a restart.
pub async fn relayed_cluster(
    test: &str,
    n: usize,
) -> (crate::harness::TestCluster, Vec<Relay>, Vec<Vec<String>>) {
    let mut relays = Vec::with_capacity(n);
    for _ in 0..n {
        relays.push(Relay::start().await);
    }
    let each: Vec<Vec<String>> = relays
        .iter()
        .map(|r| vec![format!("transport.publish_port={}", r.addr.port())])
        .collect();
    let c = crate::harness::TestCluster::start_heavy_each(test, &each, |i, node| {
        relays[i].to(node.bound_transport)
    })
    .await;
    (c, relays, each)
}
