//! Scrolls are the cluster's knowledge, not one gateway's: a scroll opened through gateway A
//! and continued or cleared through gateway B (a round-robin balancer, or a client sniffing
//! `_nodes/http`) runs in its group and is its opener's on B as on A.
//!
//! The opener remembers the scroll as before ([`super::scrolls`]); a gateway asks its live
//! peers only for an id it does not know itself, takes the first answer that knows it, and
//! keeps that answer for as long as the scroll lives, so its later pages are local. Opening a
//! scroll calls nobody, and a continuation on a gateway that knows the scroll is what it was
//! on a single gateway. A clear tells the peers to forget the ids only when one may know them
//! (S2 of [`super::scrolls`]). The answering side is [`crate::cluster::local`]'s.
//!
//! Weighed and not taken: the opener telling every peer on open (a fan-out on every open for
//! pages most scrolls take on their opener), and the metastore (a database write on every
//! open). A peer that does not answer within [`ASK_WITHIN`] knows nothing: the id is a scroll
//! no gateway knows, under the rule for those (tagged anew, or with authorization refused to
//! users not allowed others' scrolls).

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use sluice_cluster::rpc::LocalApi;

use super::Upstream;
use super::scrolls::ScrollEntry;
use crate::cluster::local::{KnownScrolls, ScrollIds};
use crate::state::AppState;

/// How long a gateway waits for its peers to say whether they know a scroll. A live peer
/// answers from memory in one loopback or LAN round trip (well under a millisecond at the
/// median, a few at p99 on a loaded machine: BENCHMARKS.md, node-to-node RPC); only a scroll
/// the gateway has not seen waits at all, once, and the first peer that knows it ends the wait.
/// Not knowing costs much more than waiting (with authorization the page is refused, without
/// it runs outside its group), so the bound is five times the shared tier's 200 ms
/// `ACQUIRE_DEADLINE` and equals the transport's connect timeout: only a peer that is frozen or
/// unreachable reaches it.
pub const ASK_WITHIN: Duration = Duration::from_secs(1);

/// What the gateway knows of each of `ids`, in order: its own memory, else the first live
/// peer's answer that knows it (kept). `_all` is nobody's scroll: `None`.
pub async fn resolve(st: &AppState, up: &Upstream, ids: &[String]) -> Vec<Option<ScrollEntry>> {
    let now = Instant::now();
    let mut out: Vec<Option<ScrollEntry>> =
        ids.iter().map(|id| up.scrolls.entry_of(id, now)).collect();
    let unknown: Vec<String> = ids
        .iter()
        .zip(&out)
        .filter(|(id, e)| e.is_none() && *id != "_all")
        .map(|(id, _)| id.clone())
        .collect();
    if unknown.is_empty() {
        return out;
    }
    let members = st.cluster.members();
    let me = &st.cluster.me().node_id;
    let peers: Vec<_> = members.live.iter().filter(|m| m.node_id != *me).collect();
    if peers.is_empty() {
        return out;
    }
    let params = serde_json::to_value(ScrollIds {
        ids: unknown.clone(),
    })
    .unwrap_or_default();
    let mut calls: FuturesUnordered<_> = peers
        .iter()
        .map(|m| {
            let params = params.clone();
            async move {
                let answer = st
                    .cluster
                    .call(m, LocalApi::ScrollsOf, params, ASK_WITHIN)
                    .await;
                (m, answer)
            }
        })
        .collect();
    let mut missing = unknown.len();
    let asking = async {
        while let Some((m, answer)) = calls.next().await {
            let known = match answer {
                Ok(a) if a.status == 200 => {
                    serde_json::from_value::<KnownScrolls>(a.body).unwrap_or_default()
                }
                Ok(a) => {
                    tracing::debug!(node = %m.name, status = a.status, "a peer did not tell its scrolls");
                    continue;
                }
                Err(e) => {
                    tracing::debug!(node = %m.name, "a peer did not tell its scrolls: {e}");
                    continue;
                }
            };
            let now = Instant::now();
            for k in known.known {
                for (id, slot) in ids.iter().zip(out.iter_mut()) {
                    if slot.is_none() && *id == k.id {
                        let (entry, remaining) = k.entry();
                        up.scrolls.learn(id.clone(), entry.clone(), remaining, now);
                        *slot = Some(entry);
                        missing -= 1;
                    }
                }
            }
            if missing == 0 {
                break;
            }
        }
    };
    // Each call has the deadline; this bounds the connects too.
    let _ = tokio::time::timeout(ASK_WITHIN, asking).await;
    out
}

/// Tells every live peer to forget `ids` (cleared here; `_all`: every scroll), waiting at most
/// [`ASK_WITHIN`]: a peer that does not hear it keeps its copy until the scroll's keep-alive
/// passes, and a continuation through it reaches the upstream, which no longer has the scroll.
pub async fn tell_forget(st: &AppState, ids: &[String]) {
    let members = st.cluster.members();
    let me = &st.cluster.me().node_id;
    let peers: Vec<_> = members
        .live
        .iter()
        .filter(|m| m.node_id != *me)
        .cloned()
        .collect();
    if peers.is_empty() {
        return;
    }
    let params = serde_json::to_value(ScrollIds { ids: ids.to_vec() }).unwrap_or_default();
    let _ = tokio::time::timeout(
        ASK_WITHIN,
        st.cluster
            .fan_out(&peers, LocalApi::ForgetScrolls, &params, ASK_WITHIN),
    )
    .await;
}
