//! The PostgreSQL backend against the shared metastore suite, plus what only a shared server
//! can show: compare-and-set across separate pools (as across nodes), notifications reaching
//! another store, schema versioning, and an unreachable server.
//!
//! Needs the throwaway server of `scripts/postgres.sh` (`SLUICE_TEST_POSTGRES_URL`); without
//! it every test here fails, naming the script. Each test has a database of its own.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde_json::json;
use sluice_meta::test_suite::{self, CutProxy, ScratchPostgres, fresh_postgres_url};
use sluice_meta::{
    Changes, Collection, Expect, MetaError, MetaKind, MetaStore, MetastoreUri, PostgresMetaStore,
};

/// Long enough for anything here on a loaded two-core machine; a wait that runs out is a
/// failure, never a sleep.
const DEADLINE: Duration = Duration::from_secs(20);

async fn open(url: &str) -> PostgresMetaStore {
    PostgresMetaStore::open(url).await.expect("open postgres")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_postgres_store_passes_the_shared_suite() {
    let store = open(&fresh_postgres_url("suite").await).await;
    assert_eq!(store.kind(), MetaKind::Postgres);
    test_suite::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_postgres_store_matches_the_model_on_a_long_sequence() {
    use sluice_meta::Op;
    use sluice_meta::test_suite::ModelOp;
    let store = open(&fresh_postgres_url("model").await).await;
    let (g, r) = (Collection::WorkloadGroups, Collection::Rules);
    let mut ops = Vec::new();
    for i in 0..20u64 {
        let key = format!("k{}", i % 4);
        ops.push(ModelOp::Put(g, key.clone(), json!(i), Expect::Any));
        ops.push(ModelOp::Put(g, key.clone(), json!(i), Expect::Absent));
        ops.push(ModelOp::Put(r, key.clone(), json!(i), Expect::Version(i)));
        ops.push(ModelOp::Apply(vec![
            Op::delete(g, key.clone(), Expect::Any),
            Op::put(r, format!("r{i}"), json!({"n": i}), Expect::Absent),
        ]));
        ops.push(ModelOp::List(g));
        ops.push(ModelOp::Get(r, key));
    }
    test_suite::check_against_model(&store, &ops).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_postgres_store_keeps_documents_across_reopen() {
    let url = fresh_postgres_url("reopen").await;
    let store = open(&url).await;
    let fixture = test_suite::write_persistence_fixture(&store).await;
    store.close().await;
    drop(store);
    let store = open(&url).await;
    test_suite::check_persistence_fixture(&store, &fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_nodes_opening_at_once_migrate_once() {
    let url = fresh_postgres_url("migrate_race").await;
    let stores = join_all((0..4).map(|_| PostgresMetaStore::open(&url))).await;
    let stores: Vec<PostgresMetaStore> = stores
        .into_iter()
        .map(|s| s.expect("every concurrent open succeeds"))
        .collect();
    let doc = stores[0]
        .put(Collection::Rules, "r", json!(1), Expect::Absent)
        .await
        .expect("put");
    for s in &stores[1..] {
        assert_eq!(
            s.get(Collection::Rules, "r").await.expect("get"),
            Some(doc.clone())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_postgres_store_refuses_a_newer_schema() {
    use sqlx::Connection;
    let url = fresh_postgres_url("newer_schema").await;
    open(&url).await.close().await;
    // A future sluice would have recorded a migration this one does not know.
    let mut conn = sqlx::PgConnection::connect(&url)
        .await
        .expect("raw connect");
    sqlx::query(
        "INSERT INTO sluice_migrations (version, description, success, checksum, execution_time)
         VALUES (99, 'from the future', true, '\\x00', 0)",
    )
    .execute(&mut conn)
    .await
    .expect("record a future migration");
    conn.close().await.expect("raw close");
    let err = PostgresMetaStore::open(&url)
        .await
        .expect_err("newer schema");
    let MetaError::Backend(msg) = &err else {
        panic!("expected a backend error, got {err:?}")
    };
    assert!(msg.contains("schema version 99"), "{msg}");
    assert!(msg.contains("run a sluice at least as new"), "{msg}");
}

/// Two stores with separate pools stand for two nodes: compare-and-set must hold between
/// them, not only between tasks sharing a pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_compare_and_set_holds_across_two_pools() {
    let url = fresh_postgres_url("two_pools").await;
    let (a, b) = (Arc::new(open(&url).await), Arc::new(open(&url).await));
    let stores: [Arc<dyn MetaStore>; 2] = [a, b];
    let c = Collection::WorkloadGroups;

    // Racing creates of one key from both stores: exactly one winner.
    for round in 0..5 {
        let key = format!("race-{round}");
        let results = join_all((0..8).map(|i| {
            let store = stores[i % 2].clone();
            let key = key.clone();
            async move { store.put(c, &key, json!(i), Expect::Absent).await }
        }))
        .await;
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, MetaError::Conflict { .. }), "{e:?}");
            }
        }
    }

    // A list that may hold at most 1.0 of "cpu", grown by read-check-write loops on both
    // stores (the shape of the server's group document): the sum never goes over.
    stores[0]
        .put(c, "groups", json!({"cpu": []}), Expect::Absent)
        .await
        .expect("create the list");
    let writer = |i: usize| {
        let store = stores[i % 2].clone();
        async move {
            loop {
                let doc = store.get(c, "groups").await.expect("get").expect("list");
                let mut shares: Vec<f64> = doc.value["cpu"]
                    .as_array()
                    .expect("array")
                    .iter()
                    .map(|v| v.as_f64().expect("number"))
                    .collect();
                if shares.iter().sum::<f64>() + 0.3 > 1.0 + 1e-9 {
                    return false; // refused: it would go over the limit
                }
                shares.push(0.3);
                match store
                    .put(
                        c,
                        "groups",
                        json!({ "cpu": shares }),
                        Expect::Version(doc.version),
                    )
                    .await
                {
                    Ok(_) => return true,
                    Err(MetaError::Conflict { .. }) => continue,
                    Err(e) => panic!("write failed: {e}"),
                }
            }
        }
    };
    let accepted = join_all((0..10).map(writer)).await;
    assert_eq!(
        accepted.iter().filter(|a| **a).count(),
        3,
        "exactly three shares of 0.3 fit in 1.0: {accepted:?}"
    );
    let doc = stores[1]
        .get(c, "groups")
        .await
        .expect("get")
        .expect("list");
    assert_eq!(doc.value["cpu"].as_array().expect("array").len(), 3);

    // Counter increments split over both stores lose nothing.
    stores[0]
        .put(c, "counter", json!(0), Expect::Absent)
        .await
        .expect("create");
    join_all((0..6).map(|i| {
        let store = stores[i % 2].clone();
        async move {
            for _ in 0..5 {
                loop {
                    let doc = store
                        .get(c, "counter")
                        .await
                        .expect("get")
                        .expect("counter");
                    let n = doc.value.as_u64().expect("number");
                    match store
                        .put(c, "counter", json!(n + 1), Expect::Version(doc.version))
                        .await
                    {
                        Ok(_) => break,
                        Err(MetaError::Conflict { .. }) => continue,
                        Err(e) => panic!("increment failed: {e}"),
                    }
                }
            }
        }
    }))
    .await;
    let doc = stores[0]
        .get(c, "counter")
        .await
        .expect("get")
        .expect("counter");
    assert_eq!(
        doc.value,
        json!(30),
        "compare-and-set lost updates across pools"
    );
}

/// Waits until `rx` shows at least `target`, or panics after [`DEADLINE`].
async fn wait_for_changes(rx: &mut tokio::sync::watch::Receiver<Changes>, target: Changes) {
    let reached = tokio::time::timeout(
        DEADLINE,
        rx.wait_for(|seen| {
            let mut merged = *seen;
            !merged.merge(&target)
        }),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(
        reached,
        "the receiver never saw {target:?}; it shows {:?}",
        *rx.borrow()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_another_store_learns_of_a_commit_by_notification() {
    let url = fresh_postgres_url("notify").await;
    let (writer, watcher) = (open(&url).await, open(&url).await);
    let mut rx = watcher.subscribe();
    rx.borrow_and_update();
    // The watcher's own view moves only through notifications (it writes nothing and nobody
    // calls its `changes`), so reaching the writer's counters proves one arrived.
    writer
        .put(Collection::Rules, "r", json!(1), Expect::Absent)
        .await
        .expect("put");
    let target = writer.changes().await.expect("changes");
    wait_for_changes(&mut rx, target).await;
    assert_eq!(
        rx.borrow().changed_since(&Changes::default()),
        vec![Collection::Rules]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_unreachable_server_is_unavailable_then_recovers() {
    let url = fresh_postgres_url("outage").await;
    let proxy = CutProxy::start(&url).await;
    let direct = open(&url).await;
    let cut_off = open(proxy.url()).await;
    cut_off
        .put(Collection::Rules, "before", json!(1), Expect::Absent)
        .await
        .expect("put before the outage");

    proxy.cut();
    let unavailable = |r: Result<(), MetaError>| match r {
        Err(MetaError::Unavailable(msg)) => {
            assert!(
                !msg.contains("sluice-"),
                "a message shows the password: {msg}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    };
    unavailable(cut_off.changes().await.map(|_| ()));
    unavailable(cut_off.get(Collection::Rules, "before").await.map(|_| ()));
    unavailable(
        cut_off
            .put(Collection::Rules, "during", json!(1), Expect::Absent)
            .await
            .map(|_| ()),
    );
    // Meanwhile another node changes the store.
    direct
        .put(Collection::WorkloadGroups, "g", json!(1), Expect::Absent)
        .await
        .expect("the direct store still writes");
    assert_eq!(
        direct.get(Collection::Rules, "during").await.expect("get"),
        None,
        "a write that failed as unavailable landed"
    );

    proxy.restore();
    let changes = cut_off.changes().await.expect("reachable again");
    assert_eq!(changes, direct.changes().await.expect("changes"));
    let doc = cut_off
        .get(Collection::WorkloadGroups, "g")
        .await
        .expect("get after the outage");
    assert!(
        doc.is_some(),
        "the change made during the outage is visible"
    );
    cut_off
        .put(Collection::Rules, "after", json!(1), Expect::Absent)
        .await
        .expect("writes work again");

    // The listener reconnects by itself: a later commit elsewhere reaches the receiver
    // again.
    wait_for_notifications(&direct, &cut_off).await;
}

/// Waits until a commit by `writer` reaches `store`'s receiver by notification, writing again
/// while the listener reconnects; panics after [`DEADLINE`].
async fn wait_for_notifications(writer: &PostgresMetaStore, store: &PostgresMetaStore) {
    let mut rx = store.subscribe();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut n = 0;
    loop {
        n += 1;
        writer
            .put(Collection::ClusterSettings, "tick", json!(n), Expect::Any)
            .await
            .expect("put");
        let target = writer.changes().await.expect("changes");
        let seen = tokio::time::timeout(
            Duration::from_millis(500),
            rx.wait_for(|seen| {
                seen.get(Collection::ClusterSettings) >= target.get(Collection::ClusterSettings)
            }),
        )
        .await;
        if matches!(seen, Ok(Ok(_))) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no notification reached the store"
        );
    }
}

/// A real stop of the server (existing connections get "terminating connection due to
/// administrator command", new ones are refused), not a simulated one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_stopped_server_is_unavailable_and_a_restarted_one_serves_again() {
    let server = ScratchPostgres::start().await;
    let writer = open(server.url()).await;
    let store = open(server.url()).await;
    writer
        .put(Collection::Rules, "before", json!(1), Expect::Absent)
        .await
        .expect("put");

    server.down().await;
    for result in [
        store.changes().await.map(|_| ()),
        store.get(Collection::Rules, "before").await.map(|_| ()),
        store
            .put(Collection::Rules, "during", json!(1), Expect::Absent)
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(MetaError::Unavailable(_))),
            "{result:?}"
        );
    }

    server.up().await;
    assert_eq!(
        store
            .get(Collection::Rules, "before")
            .await
            .expect("get")
            .map(|d| d.value),
        Some(json!(1)),
        "the data survived the restart"
    );
    assert_eq!(
        store.get(Collection::Rules, "during").await.expect("get"),
        None
    );
    store
        .put(Collection::Rules, "after", json!(1), Expect::Absent)
        .await
        .expect("writes work again");
    wait_for_notifications(&writer, &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_open_fails_as_unavailable_when_nothing_listens() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener); // nothing listens on `port` now
    let err = PostgresMetaStore::open(&format!("postgres://u:topsecret@127.0.0.1:{port}/db"))
        .await
        .expect_err("nothing to connect to");
    assert!(matches!(err, MetaError::Unavailable(_)), "{err:?}");
    assert!(!err.to_string().contains("topsecret"), "{err}");
    assert!(err.to_string().contains("u:***@127.0.0.1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_metastore_uri_opens_postgres_and_a_wrong_password_stays_secret() {
    let url = fresh_postgres_url("uri").await;
    let uri = MetastoreUri::parse(&url).expect("parse");
    let store = uri.open().await.expect("open through the uri");
    assert_eq!(store.kind(), MetaKind::Postgres);
    let wrong = url.replacen(":sluice-", ":wrongsecret-", 1);
    assert_ne!(
        wrong, url,
        "the test server's password has the expected shape"
    );
    let err = MetastoreUri::parse(&wrong)
        .expect("parse")
        .open()
        .await
        .err()
        .expect("wrong password");
    assert!(!err.to_string().contains("wrongsecret"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_refused_connection_says_what_to_fix() {
    let url = fresh_postgres_url("refused").await;
    // postgres://user:password@host:port/database
    let (credentials, address) = url.rsplit_once('@').expect("the test URL names a password");
    let (user, password) = credentials.rsplit_once(':').expect("user:password");
    let (server, _) = address.rsplit_once('/').expect("a database");
    let cases = [
        (
            format!("{user}:not-the-password@{address}"),
            "password authentication failed",
            "check the user and password in metastore.uri",
        ),
        (
            format!("{user}:{password}@{server}/no_such_database"),
            "does not exist",
            "create the database",
        ),
    ];
    for (bad, said, hint) in cases {
        let msg = match PostgresMetaStore::open(&bad).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("opened {bad}"),
        };
        assert!(msg.contains(said) && msg.contains(hint), "{msg}");
        // Not the SQLite store's advice, nor PostgreSQL's source line of the error.
        assert!(
            !msg.contains("data folder") && !msg.contains(" at line "),
            "{msg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_url_asking_for_tls_says_the_client_has_none() {
    let url = fresh_postgres_url("tls").await;
    let msg = match PostgresMetaStore::open(&format!("{url}?sslmode=require")).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened with sslmode=require"),
    };
    assert!(
        msg.contains("without TLS") && msg.contains("sslmode"),
        "{msg}"
    );
    assert!(!msg.contains("check that it runs"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_server_that_refuses_connections_is_named_so_at_open() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("postgres://sluice:secret-pw@127.0.0.1:{port}/sluice");
    match PostgresMetaStore::open(&url).await {
        Err(MetaError::Unavailable(msg)) => {
            assert!(msg.to_lowercase().contains("refused"), "{msg}");
            assert!(!msg.contains("secret-pw"), "the password leaked: {msg}");
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("opened a store where nothing listens"),
    }
}

/// Presence (P1, P2): a store opened while another is open on the database is not alone;
/// once every store is gone, the next one is (probed: the server ends a dropped store's
/// session a moment after its connection closes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_presence_tells_whether_another_store_is_open() {
    let url = fresh_postgres_url("presence").await;
    let first = open(&url).await;
    assert!(first.opened_alone(), "the first store on a new database");
    let second = open(&url).await;
    assert!(!second.opened_alone(), "opened beside the first");
    drop(first);
    let third = open(&url).await;
    assert!(!third.opened_alone(), "opened beside the second");
    drop(second);
    drop(third);
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        if open(&url).await.opened_alone() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no store was alone after every other was dropped"
        );
    }
    // Another database of the same server is another cluster.
    let other = open(&fresh_postgres_url("presence_other").await).await;
    let here = open(&url).await;
    assert!(other.opened_alone());
    assert!(!open(&url).await.opened_alone(), "beside `here`");
    drop(here);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_heartbeats_are_shared_and_only_recent_ones_count() {
    use sluice_meta::NodePresence;
    let url = fresh_postgres_url("heartbeat").await;
    let (a, b) = (open(&url).await, open(&url).await);
    let row = |id: &str, transport: &str| NodePresence {
        node_id: id.to_string(),
        name: format!("node-{id}"),
        transport: transport.to_string(),
        cluster_name: "c".to_string(),
        generation: 7,
        hears: None,
        unjoined: None,
    };
    let live = Duration::from_secs(60);
    assert_eq!(
        a.heartbeat(&row("n1", "127.0.0.1:9300"), live)
            .await
            .unwrap(),
        [row("n1", "127.0.0.1:9300")]
    );
    // Another store (another node) sees both, ordered by node id; a restart at a new address
    // replaces the row.
    b.heartbeat(&row("n2", "127.0.0.1:9301"), live)
        .await
        .unwrap();
    assert_eq!(
        b.heartbeat(&row("n2", "127.0.0.1:9302"), live)
            .await
            .unwrap(),
        [row("n1", "127.0.0.1:9300"), row("n2", "127.0.0.1:9302")]
    );
    // A row older than the window does not count: with a window of zero, none but those
    // written at the same instant, so nobody's but perhaps the writer's own.
    let recent = a
        .heartbeat(&row("n1", "127.0.0.1:9300"), Duration::ZERO)
        .await
        .unwrap();
    assert!(recent.iter().all(|r| r.node_id == "n1"), "{recent:?}");
    // Whom a node hears is kept as written, and replaced by its next heartbeat.
    let hearing = |ids: &[&str]| NodePresence {
        hears: Some(ids.iter().map(|id| id.to_string()).collect()),
        ..row("n2", "127.0.0.1:9302")
    };
    b.heartbeat(&hearing(&["n1", "n2"]), live).await.unwrap();
    let rows = a
        .heartbeat(&row("n1", "127.0.0.1:9300"), live)
        .await
        .unwrap();
    assert_eq!(rows, [row("n1", "127.0.0.1:9300"), hearing(&["n1", "n2"])]);
    b.heartbeat(&hearing(&["n2"]), live).await.unwrap();
    let rows = a
        .heartbeat(&row("n1", "127.0.0.1:9300"), live)
        .await
        .unwrap();
    assert_eq!(rows[1], hearing(&["n2"]));
    // Whom a node counts off its side too.
    let apart = NodePresence {
        unjoined: Some(vec!["n1".to_string()]),
        ..hearing(&["n2"])
    };
    b.heartbeat(&apart, live).await.unwrap();
    let rows = a
        .heartbeat(&row("n1", "127.0.0.1:9300"), live)
        .await
        .unwrap();
    assert_eq!(rows[1], apart);
    // The other backends keep none.
    let memory = sluice_meta::MemoryMetaStore::new();
    assert!(
        memory
            .heartbeat(&row("n1", "127.0.0.1:9300"), live)
            .await
            .unwrap()
            .is_empty()
    );
}
