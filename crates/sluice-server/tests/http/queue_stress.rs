//! The seed's manual test as a bounded burst (issue #11 B.8): 3,000 concurrent requests against
//! one queued bucket whose only slot the test holds, a tenth of them cancelled by their deadline
//! while parked and a tenth abandoned by their client. Every request must end (admitted,
//! cancelled or given up), the bucket must never run more than its limit, the slot must go to
//! the parked requests in the order they parked (FIFO, no barging), and nothing may be left
//! parked or in flight.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_core::permits::{Acquire, QueuePolicy};
use sluice_core::{BucketKey, ThrottleAttribute};

use crate::common::TestNode;
use crate::throttling::stats_of;
use crate::throttling_stress::setup;

const REQUESTS: usize = 3_000;

/// Waits until `check` holds on the group's stats.
async fn wait_stats(node: &TestNode, id: &str, what: &str, check: impl Fn(&Value) -> bool) {
    for _ in 0..200_000 {
        if check(&stats_of(node, id).await) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{what} never held: {}", stats_of(node, id).await);
}

#[tokio::test]
async fn test_burst_of_3000_parks_drains_in_fifo_order_and_leaves_nothing_behind() {
    let node = setup(&[]).await;
    let id = node
        .create_group(json!({"name": "burst", "resiliency_mode": "enforced",
                        "resource_limits": {"memory": 0.1},
                        "throttling": {"attribute": "group", "node_limit": 1},
                        "queue": {"size_per_bucket": REQUESTS}}))
        .await;

    // The test itself holds the bucket's only slot, through the node's permit table, until it
    // lets go: the burst parks however long it takes to arrive.
    let entry = node.state.workload.entry(&id).expect("group");
    let queue = entry.queue.clone().expect("throttled group");
    let key = BucketKey {
        group_id: entry.id.clone(),
        attribute: ThrottleAttribute::Group,
        value: None,
    };
    let permits = &node.state.workload.permits;
    let Acquire::Admitted(hold) = permits.acquire(&key, &queue, QueuePolicy::new(0), 0) else {
        panic!("an idle bucket admits");
    };

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let (mut handles, mut short_lived) = (Vec::new(), Vec::new());
    for i in 0..REQUESTS {
        let mut path = "/small/_search".to_string();
        let mut timeout = None;
        match i % 10 {
            // Evicted by its own deadline while parked.
            0 => path.push_str("?cancel_after_time_interval=1ms"),
            // Abandoned by its client while parked.
            1 => timeout = Some(Duration::from_millis(200)),
            _ => {}
        }
        let mut rb = client
            .post(node.url(&path))
            .header("content-type", "application/json")
            .header("workloadGroupId", &id)
            .body(json!({"size": 1}).to_string());
        if let Some(t) = timeout {
            rb = rb.timeout(t);
        }
        let h = tokio::spawn(async move {
            match rb.send().await {
                Ok(r) => r.status().as_u16(),
                Err(e) if e.is_timeout() => 0,
                Err(e) => panic!("request failed: {e}"),
            }
        });
        if i % 10 < 2 {
            short_lived.push(h);
        } else {
            handles.push(h);
        }
    }
    // The short-lived end while the slot is held: by their deadline (500) or their client
    // giving up (0), parked or still arriving.
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for h in short_lived {
        *statuses.entry(h.await.expect("joined")).or_default() += 1;
    }
    let gone = REQUESTS / 5;
    let stay = (REQUESTS - gone) as u64;
    wait_stats(&node, &id, "every other request parked", |s| {
        s["queued_current"] == stay
    })
    .await;
    let parked: Vec<u64> = node
        .state
        .workload
        .permits
        .parked_all()
        .into_iter()
        .map(|(_, seq)| seq)
        .collect();
    assert_eq!(parked.len() as u64, stay);

    // Free the slot: the parked requests run one at a time, oldest first.
    drop(hold);
    for h in handles {
        *statuses.entry(h.await.expect("joined")).or_default() += 1;
    }
    let expected = std::collections::BTreeMap::from([
        (0, REQUESTS / 10),
        (200, REQUESTS - gone),
        (500, REQUESTS / 10),
    ]);
    assert_eq!(
        statuses, expected,
        "every request ends: admitted, cancelled or given up"
    );

    wait_stats(&node, &id, "the bucket drained", |s| {
        s["queued_current"] == 0 && s["executing"] == 0
    })
    .await;
    let probe = node.state.workload.probe.get().expect("probe");
    let peaks = probe.peaks();
    assert!(peaks.iter().all(|(_, p)| *p <= 1), "{peaks:?}");
    // FIFO: of the parked requests, those that ran started in the order they parked.
    let started: Vec<u64> = probe
        .starts(&key)
        .into_iter()
        .filter(|seq| parked.contains(seq))
        .collect();
    let order: Vec<u64> = parked
        .iter()
        .copied()
        .filter(|seq| started.contains(seq))
        .collect();
    assert_eq!(started, order, "parked requests ran out of order");
    assert_eq!(permits.num_buckets(), 0);
    assert_eq!(permits.num_waiter_nodes(), 0);
    assert_eq!(permits.num_invariant_violations(), 0);
}
