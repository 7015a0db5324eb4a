//! The behaviour every [`MetaStore`] backend must show, as async checks that panic on the
//! first deviation. A backend's tests call [`run_all`] on a fresh store, the persistence pair
//! [`write_persistence_fixture`] / [`check_persistence_fixture`] around a reopen, and
//! [`check_against_model`] from a property test with random [`ModelOp`] sequences.
//!
//! For PostgreSQL, [`fresh_postgres_url`] makes an empty database per test on the throwaway
//! server of `scripts/postgres.sh` (it fails, naming the script, when
//! [`POSTGRES_URL_ENV`] is not set), and [`CutProxy`] makes the server unreachable for the
//! clients that connect through it, to test a metastore outage; [`ScratchPostgres`] is a
//! server of a test's own that it can really stop and start again.
//!
//! Enabled by the `test-suite` cargo feature; not part of the production API.
//!
//! Every check begins by deleting all documents, so checks can run in any order on one store;
//! none depends on the revision counter starting at a particular value.

use std::collections::BTreeMap;

use futures::future::join_all;
use serde_json::{Value, json};

use crate::{Changes, Collection, Document, Expect, MetaError, MetaStore, Op, Outcome};

/// Runs every behavioural check against `store`; panics on the first failure.
pub async fn run_all(store: &dyn MetaStore) {
    check_empty_store(store).await;
    check_put_get_roundtrip(store).await;
    check_versions_grow_with_every_put(store).await;
    check_expect_absent(store).await;
    check_expect_version(store).await;
    check_delete(store).await;
    check_no_version_reuse_after_delete(store).await;
    check_collections_are_isolated(store).await;
    check_list_is_ordered_by_key(store).await;
    check_batch_applies_in_order(store).await;
    check_failed_batch_applies_nothing(store).await;
    check_empty_batch(store).await;
    check_racing_creates_have_one_winner(store).await;
    check_compare_and_set_counter(store).await;
    check_changes_count_committed_batches(store).await;
}

/// Deletes every document of every collection.
pub async fn reset(store: &dyn MetaStore) {
    let mut batch = Vec::new();
    for c in Collection::ALL {
        for doc in store.list(c).await.expect("list for reset") {
            batch.push(Op::delete(c, doc.key, Expect::Any));
        }
    }
    store.apply(batch).await.expect("reset batch");
    for c in Collection::ALL {
        assert!(
            store.list(c).await.expect("list").is_empty(),
            "reset left documents in {c}"
        );
    }
}

fn conflict(
    collection: Collection,
    key: &str,
    expected: Expect,
    current: Option<u64>,
) -> MetaError {
    MetaError::Conflict {
        collection,
        key: key.to_string(),
        expected,
        current,
    }
}

/// A new store (or a reset one) has nothing to get or list.
pub async fn check_empty_store(store: &dyn MetaStore) {
    reset(store).await;
    for c in Collection::ALL {
        assert_eq!(store.get(c, "missing").await.expect("get"), None);
        assert_eq!(store.list(c).await.expect("list"), Vec::<Document>::new());
    }
}

/// A put returns the document as stored, and get returns the same value, byte for byte
/// (object key order, unicode, large and negative numbers, floats, nesting).
pub async fn check_put_get_roundtrip(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::WorkloadGroups;
    let value = json!({
        "zeta": 1,
        "alpha": {"nested": [1, 2.5, -3, null, true, "x"], "empty": {}},
        "name": "analytics ✓ \u{1F600} \"quoted\" \\ slash",
        "big": u64::MAX,
        "neg": i64::MIN,
        "float": 0.1,
        "m": []
    });
    let before = crate::now_millis();
    let doc = store
        .put(c, "group-1", value.clone(), Expect::Any)
        .await
        .expect("put");
    assert_eq!(doc.key, "group-1");
    assert_eq!(doc.value, value);
    assert!(doc.version >= 1, "versions start at 1, got {}", doc.version);
    assert!(
        doc.updated_at_millis >= before,
        "updated_at_millis {} is before the put started ({before})",
        doc.updated_at_millis
    );
    let got = store.get(c, "group-1").await.expect("get").expect("stored");
    assert_eq!(got, doc, "get differs from what put returned");
    assert_eq!(
        serde_json::to_string(&got.value).expect("json"),
        serde_json::to_string(&value).expect("json"),
        "object key order or number formatting changed in the store"
    );
    for weird in ["", " ", "a/b", "ünïcödé", "x'y\"z", "line\nbreak"] {
        let doc = store
            .put(c, weird, json!(weird), Expect::Absent)
            .await
            .unwrap_or_else(|e| panic!("put of key {weird:?}: {e}"));
        let got = store.get(c, weird).await.expect("get").expect("stored");
        assert_eq!(got, doc, "key {weird:?} did not round-trip");
    }
}

/// Every put, to any key, returns a strictly larger version than any put before it.
pub async fn check_versions_grow_with_every_put(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::Rules;
    let mut last = 0;
    for (i, key) in ["a", "b", "a", "c", "a"].into_iter().enumerate() {
        let doc = store.put(c, key, json!(i), Expect::Any).await.expect("put");
        assert!(
            doc.version > last,
            "put #{i} of {key} got version {} after {last}",
            doc.version
        );
        last = doc.version;
    }
    let a = store.get(c, "a").await.expect("get").expect("a stored");
    assert_eq!(a.version, last, "get returns the last put's version");
    assert_eq!(a.value, json!(4));
}

/// `Expect::Absent` creates once; a second create conflicts and names the current version.
pub async fn check_expect_absent(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::WorkloadGroups;
    let doc = store
        .put(c, "g", json!({"v": 1}), Expect::Absent)
        .await
        .expect("create");
    let err = store
        .put(c, "g", json!({"v": 2}), Expect::Absent)
        .await
        .expect_err("second create must conflict");
    assert_eq!(err, conflict(c, "g", Expect::Absent, Some(doc.version)));
    assert!(
        err.to_string().contains("re-read"),
        "conflict message says what to do: {err}"
    );
    let got = store.get(c, "g").await.expect("get").expect("kept");
    assert_eq!(got, doc, "a failed create changed the document");
}

/// `Expect::Version` applies only at exactly the current version, and conflicts on a missing
/// key with `current: None`.
pub async fn check_expect_version(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::ClusterSettings;
    let err = store
        .put(c, "s", json!(1), Expect::Version(1))
        .await
        .expect_err("update of a missing key must conflict");
    assert_eq!(err, conflict(c, "s", Expect::Version(1), None));
    assert_eq!(store.get(c, "s").await.expect("get"), None);

    let v1 = store
        .put(c, "s", json!(1), Expect::Absent)
        .await
        .expect("create");
    let v2 = store
        .put(c, "s", json!(2), Expect::Version(v1.version))
        .await
        .expect("update at the current version");
    assert!(v2.version > v1.version);
    let err = store
        .put(c, "s", json!(3), Expect::Version(v1.version))
        .await
        .expect_err("update at a stale version must conflict");
    assert_eq!(
        err,
        conflict(c, "s", Expect::Version(v1.version), Some(v2.version))
    );
    let got = store.get(c, "s").await.expect("get").expect("kept");
    assert_eq!(got.value, json!(2), "a stale update changed the value");
    assert_eq!(got.version, v2.version);
}

/// Deletes honour their precondition, return the removed version, and are idempotent with
/// `Expect::Any`.
pub async fn check_delete(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::Rules;
    assert_eq!(
        store
            .delete(c, "nothing", Expect::Any)
            .await
            .expect("delete missing"),
        None
    );
    assert_eq!(
        store
            .delete(c, "nothing", Expect::Absent)
            .await
            .expect("delete missing, expect absent"),
        None
    );
    let err = store
        .delete(c, "nothing", Expect::Version(7))
        .await
        .expect_err("delete of a missing key at a version must conflict");
    assert_eq!(err, conflict(c, "nothing", Expect::Version(7), None));

    let doc = store
        .put(c, "r", json!("rule"), Expect::Any)
        .await
        .expect("put");
    let err = store
        .delete(c, "r", Expect::Version(doc.version + 1))
        .await
        .expect_err("delete at a wrong version must conflict");
    assert_eq!(
        err,
        conflict(c, "r", Expect::Version(doc.version + 1), Some(doc.version))
    );
    let err = store
        .delete(c, "r", Expect::Absent)
        .await
        .expect_err("delete expecting absent must conflict on a present key");
    assert_eq!(err, conflict(c, "r", Expect::Absent, Some(doc.version)));
    assert!(
        store.get(c, "r").await.expect("get").is_some(),
        "a failed delete removed the document"
    );

    assert_eq!(
        store
            .delete(c, "r", Expect::Version(doc.version))
            .await
            .expect("delete"),
        Some(doc.version)
    );
    assert_eq!(store.get(c, "r").await.expect("get"), None);
    assert!(store.list(c).await.expect("list").is_empty());
    assert_eq!(
        store
            .delete(c, "r", Expect::Any)
            .await
            .expect("delete again"),
        None
    );
}

/// A key deleted and created again gets a version it never had before, so a writer holding
/// the old version conflicts instead of overwriting the new document.
pub async fn check_no_version_reuse_after_delete(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::WorkloadGroups;
    let old = store
        .put(c, "k", json!("old"), Expect::Absent)
        .await
        .expect("create");
    store.delete(c, "k", Expect::Any).await.expect("delete");
    let new = store
        .put(c, "k", json!("new"), Expect::Absent)
        .await
        .expect("recreate");
    assert!(
        new.version > old.version,
        "version reused after delete: {} then {}",
        old.version,
        new.version
    );
    let err = store
        .put(c, "k", json!("stale writer"), Expect::Version(old.version))
        .await
        .expect_err("a writer holding the pre-delete version must conflict");
    assert_eq!(
        err,
        conflict(c, "k", Expect::Version(old.version), Some(new.version))
    );
}

/// The same key in different collections names different documents.
pub async fn check_collections_are_isolated(store: &dyn MetaStore) {
    reset(store).await;
    for (i, c) in Collection::ALL.into_iter().enumerate() {
        store
            .put(c, "same", json!(i), Expect::Absent)
            .await
            .expect("put per collection");
    }
    for (i, c) in Collection::ALL.into_iter().enumerate() {
        let doc = store.get(c, "same").await.expect("get").expect("present");
        assert_eq!(
            doc.value,
            json!(i),
            "collection {c} sees another collection's document"
        );
        assert_eq!(store.list(c).await.expect("list").len(), 1);
    }
    store
        .delete(Collection::Rules, "same", Expect::Any)
        .await
        .expect("delete");
    assert!(
        store
            .get(Collection::WorkloadGroups, "same")
            .await
            .expect("get")
            .is_some()
    );
    assert!(
        store
            .get(Collection::ClusterSettings, "same")
            .await
            .expect("get")
            .is_some()
    );
}

/// `list` orders by key bytewise whatever the insertion order.
pub async fn check_list_is_ordered_by_key(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::WorkloadGroups;
    let keys = ["m", "b", "Z", "a10", "a2", "é", "a", "_x", "~"];
    for k in keys {
        store.put(c, k, json!(k), Expect::Any).await.expect("put");
    }
    let listed: Vec<String> = store
        .list(c)
        .await
        .expect("list")
        .into_iter()
        .map(|d| d.key)
        .collect();
    let mut expected: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    expected.sort();
    assert_eq!(listed, expected);
    for doc in store.list(c).await.expect("list") {
        assert_eq!(
            doc.value,
            json!(doc.key),
            "list paired a key with another value"
        );
    }
}

/// A batch applies in order: a later op sees an earlier one's write, and the outcomes report
/// each op.
pub async fn check_batch_applies_in_order(store: &dyn MetaStore) {
    reset(store).await;
    let (g, r) = (Collection::WorkloadGroups, Collection::Rules);
    let existing = store
        .put(r, "old-rule", json!(0), Expect::Any)
        .await
        .expect("put");
    let outcomes = store
        .apply(vec![
            Op::put(g, "g1", json!({"name": "one"}), Expect::Absent),
            Op::put(r, "r1", json!({"group": "g1"}), Expect::Absent),
            Op::delete(r, "old-rule", Expect::Version(existing.version)),
            Op::delete(r, "never-there", Expect::Any),
        ])
        .await
        .expect("batch");
    assert_eq!(outcomes.len(), 4);
    let Outcome::Put(g1) = &outcomes[0] else {
        panic!("outcome 0 is {:?}", outcomes[0])
    };
    let Outcome::Put(r1) = &outcomes[1] else {
        panic!("outcome 1 is {:?}", outcomes[1])
    };
    assert_eq!(outcomes[2], Outcome::Deleted(Some(existing.version)));
    assert_eq!(outcomes[3], Outcome::Deleted(None));
    assert!(
        g1.version > existing.version && r1.version > g1.version,
        "each put takes the next revision"
    );
    assert_eq!(store.get(g, "g1").await.expect("get").as_ref(), Some(g1));
    assert_eq!(store.get(r, "r1").await.expect("get").as_ref(), Some(r1));
    assert_eq!(store.get(r, "old-rule").await.expect("get"), None);

    // Later ops see earlier ones: create, then update at the version just written, then
    // delete at the next one.
    let base = r1.version;
    let outcomes = store
        .apply(vec![
            Op::put(g, "seq", json!(1), Expect::Absent),
            Op::put(g, "seq", json!(2), Expect::Version(base + 1)),
            Op::put(g, "seq", json!(3), Expect::Version(base + 2)),
        ])
        .await
        .expect("sequential batch");
    let versions: Vec<u64> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Put(d) => d.version,
            other => panic!("unexpected outcome {other:?}"),
        })
        .collect();
    assert_eq!(versions, vec![base + 1, base + 2, base + 3]);
    let doc = store.get(g, "seq").await.expect("get").expect("present");
    assert_eq!((doc.value, doc.version), (json!(3), base + 3));

    let outcomes = store
        .apply(vec![
            Op::delete(g, "seq", Expect::Version(base + 3)),
            Op::put(g, "seq", json!("again"), Expect::Absent),
        ])
        .await
        .expect("delete then recreate in one batch");
    assert_eq!(outcomes[0], Outcome::Deleted(Some(base + 3)));
    assert_eq!(
        store
            .get(g, "seq")
            .await
            .expect("get")
            .expect("present")
            .value,
        json!("again")
    );
}

/// A batch whose last op conflicts leaves no trace: no document written or deleted, no
/// revision consumed.
pub async fn check_failed_batch_applies_nothing(store: &dyn MetaStore) {
    reset(store).await;
    let (g, r) = (Collection::WorkloadGroups, Collection::Rules);
    let keep = store
        .put(g, "keep", json!("kept"), Expect::Any)
        .await
        .expect("put");
    let taken = store
        .put(r, "taken", json!("taken"), Expect::Any)
        .await
        .expect("put");
    let before: Vec<Vec<Document>> = {
        let mut all = Vec::new();
        for c in Collection::ALL {
            all.push(store.list(c).await.expect("list"));
        }
        all
    };
    let err = store
        .apply(vec![
            Op::put(g, "new-group", json!(1), Expect::Absent),
            Op::put(
                g,
                "keep",
                json!("overwritten"),
                Expect::Version(keep.version),
            ),
            Op::delete(g, "keep", Expect::Any),
            Op::put(r, "new-rule", json!(2), Expect::Any),
            Op::put(r, "taken", json!("clobbered"), Expect::Absent),
        ])
        .await
        .expect_err("the last op conflicts");
    assert_eq!(
        err,
        conflict(r, "taken", Expect::Absent, Some(taken.version))
    );
    for (i, c) in Collection::ALL.into_iter().enumerate() {
        assert_eq!(
            store.list(c).await.expect("list"),
            before[i],
            "a failed batch changed collection {c}"
        );
    }
    let next = store
        .put(g, "probe", json!(0), Expect::Any)
        .await
        .expect("put");
    assert_eq!(
        next.version,
        taken.version + 1,
        "a failed batch consumed revisions"
    );
}

/// An empty batch succeeds with no outcomes and changes nothing.
pub async fn check_empty_batch(store: &dyn MetaStore) {
    reset(store).await;
    let a = store
        .put(Collection::Rules, "a", json!(1), Expect::Any)
        .await
        .expect("put");
    assert_eq!(
        store.apply(Vec::new()).await.expect("empty batch"),
        Vec::new()
    );
    let b = store
        .put(Collection::Rules, "b", json!(1), Expect::Any)
        .await
        .expect("put");
    assert_eq!(
        b.version,
        a.version + 1,
        "an empty batch consumed a revision"
    );
}

/// Concurrent creates of one key: exactly one wins; the others conflict naming its version.
pub async fn check_racing_creates_have_one_winner(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::WorkloadGroups;
    let results = join_all((0..8).map(|i| store.put(c, "race", json!(i), Expect::Absent))).await;
    let winners: Vec<&Document> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "racing creates: {results:?}");
    let winner = winners[0].clone();
    for r in &results {
        if let Err(e) = r {
            assert_eq!(
                *e,
                conflict(c, "race", Expect::Absent, Some(winner.version))
            );
        }
    }
    assert_eq!(store.get(c, "race").await.expect("get"), Some(winner));
}

/// Concurrent read-modify-write loops with `Expect::Version` lose no update.
pub async fn check_compare_and_set_counter(store: &dyn MetaStore) {
    reset(store).await;
    let c = Collection::ClusterSettings;
    store
        .put(c, "counter", json!(0), Expect::Absent)
        .await
        .expect("create");
    const WRITERS: u64 = 4;
    const INCREMENTS: u64 = 5;
    let writer = |_: u64| async move {
        let mut conflicts = 0u64;
        for _ in 0..INCREMENTS {
            loop {
                let doc = store
                    .get(c, "counter")
                    .await
                    .expect("get")
                    .expect("present");
                let n = doc.value.as_u64().expect("counter is a number");
                match store
                    .put(c, "counter", json!(n + 1), Expect::Version(doc.version))
                    .await
                {
                    Ok(_) => break,
                    Err(MetaError::Conflict { .. }) => conflicts += 1,
                    Err(e) => panic!("counter update failed: {e}"),
                }
            }
        }
        conflicts
    };
    join_all((0..WRITERS).map(writer)).await;
    let doc = store
        .get(c, "counter")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(
        doc.value,
        json!(WRITERS * INCREMENTS),
        "compare-and-set lost updates"
    );
}

/// Every committed non-empty batch adds one to the change counter of each collection it
/// writes (deletes too, even of a missing key); failed and empty batches change nothing; the
/// store's own receiver sees its commits at once.
pub async fn check_changes_count_committed_batches(store: &dyn MetaStore) {
    reset(store).await;
    let (s, g, r) = (
        Collection::ClusterSettings,
        Collection::WorkloadGroups,
        Collection::Rules,
    );
    let mut rx = store.subscribe();
    let before = store.changes().await.expect("changes");
    assert_eq!(
        *rx.borrow_and_update(),
        before,
        "the receiver lags behind the store's own commits"
    );
    let expect = |base: &Changes, bumped: &[Collection]| {
        let mut next = *base;
        for c in bumped {
            next.bump(*c);
        }
        next
    };

    let put = store
        .put(g, "g", json!(1), Expect::Absent)
        .await
        .expect("put");
    let after_put = store.changes().await.expect("changes");
    assert_eq!(
        after_put,
        expect(&before, &[g]),
        "a put counts once, in its collection"
    );
    assert!(
        rx.has_changed().expect("store alive"),
        "the receiver missed a commit"
    );
    assert_eq!(*rx.borrow_and_update(), after_put);
    assert_eq!(after_put.changed_since(&before), vec![g]);

    store
        .apply(vec![
            Op::put(g, "g2", json!(2), Expect::Absent),
            Op::put(g, "g3", json!(3), Expect::Absent),
            Op::delete(r, "never-there", Expect::Any),
        ])
        .await
        .expect("batch");
    let after_batch = store.changes().await.expect("changes");
    assert_eq!(
        after_batch,
        expect(&after_put, &[g, r]),
        "a batch counts once per collection it writes, deletes of missing keys included"
    );

    store
        .delete(g, "g", Expect::Version(put.version))
        .await
        .expect("delete");
    let after_delete = store.changes().await.expect("changes");
    assert_eq!(after_delete, expect(&after_batch, &[g]), "a delete counts");

    store
        .apply(vec![
            Op::put(s, "x", json!(1), Expect::Any),
            Op::put(g, "g2", json!(0), Expect::Absent),
        ])
        .await
        .expect_err("the second op conflicts");
    store.apply(Vec::new()).await.expect("empty batch");
    assert_eq!(
        store.changes().await.expect("changes"),
        after_delete,
        "a failed or empty batch counted"
    );
    assert_eq!(*rx.borrow_and_update(), after_delete);
    assert!(
        !rx.has_changed().expect("store alive"),
        "a failed batch woke the receiver"
    );
}

/// What [`write_persistence_fixture`] wrote, for [`check_persistence_fixture`] after a
/// reopen.
#[derive(Debug, Clone)]
pub struct PersistenceFixture {
    lists: Vec<(Collection, Vec<Document>)>,
    last_version: u64,
}

/// Writes documents in every collection (single puts, a batch, an update, a delete) and
/// returns what a reopened store must show.
pub async fn write_persistence_fixture(store: &dyn MetaStore) -> PersistenceFixture {
    reset(store).await;
    let (s, g, r) = (
        Collection::ClusterSettings,
        Collection::WorkloadGroups,
        Collection::Rules,
    );
    store
        .put(
            s,
            "persistent",
            json!({"search.max_buckets": "1000"}),
            Expect::Absent,
        )
        .await
        .expect("put");
    store
        .apply(vec![
            Op::put(
                g,
                "g1",
                json!({"name": "analytics", "resource_limits": {"cpu": 0.4}}),
                Expect::Absent,
            ),
            Op::put(g, "g2", json!({"name": "batch"}), Expect::Absent),
            Op::put(
                r,
                "r1",
                json!({"index_pattern": ["logs-*"], "workload_group": "g1"}),
                Expect::Absent,
            ),
        ])
        .await
        .expect("batch");
    let g2 = store.get(g, "g2").await.expect("get").expect("g2");
    store
        .put(
            g,
            "g2",
            json!({"name": "batch", "updated": true}),
            Expect::Version(g2.version),
        )
        .await
        .expect("update");
    store.delete(g, "g1", Expect::Any).await.expect("delete");
    let mut lists = Vec::new();
    let mut last_version = 0;
    for c in Collection::ALL {
        let docs = store.list(c).await.expect("list");
        last_version = docs.iter().map(|d| d.version).fold(last_version, u64::max);
        lists.push((c, docs));
    }
    PersistenceFixture {
        lists,
        last_version,
    }
}

/// Checks that a reopened store shows exactly what [`write_persistence_fixture`] left, and
/// that its revision counter survived (the next put gets a newer version).
pub async fn check_persistence_fixture(store: &dyn MetaStore, fixture: &PersistenceFixture) {
    for (c, docs) in &fixture.lists {
        assert_eq!(
            &store.list(*c).await.expect("list"),
            docs,
            "collection {c} after reopen"
        );
        for doc in docs {
            assert_eq!(
                store.get(*c, &doc.key).await.expect("get").as_ref(),
                Some(doc)
            );
        }
    }
    assert_eq!(
        store
            .get(Collection::WorkloadGroups, "g1")
            .await
            .expect("get"),
        None,
        "a delete was lost on reopen"
    );
    let next = store
        .put(Collection::Rules, "after-reopen", json!(1), Expect::Absent)
        .await
        .expect("put after reopen");
    assert!(
        next.version > fixture.last_version,
        "the revision counter went back on reopen: {} after {}",
        next.version,
        fixture.last_version
    );
}

/// One step of a random operation sequence for [`check_against_model`].
#[derive(Debug, Clone)]
pub enum ModelOp {
    /// `get(collection, key)`.
    Get(Collection, String),
    /// `list(collection)`.
    List(Collection),
    /// `put(collection, key, value, expected)`.
    Put(Collection, String, Value, Expect),
    /// `delete(collection, key, expected)`.
    Delete(Collection, String, Expect),
    /// `apply(batch)`.
    Apply(Vec<Op>),
}

/// What a caller can observe of a result, without the wall-clock `updated_at_millis`.
#[derive(Debug, Clone, PartialEq)]
enum Observed {
    Doc(Option<(String, Value, u64)>),
    Docs(Vec<(String, Value, u64)>),
    Put((String, Value, u64)),
    Deleted(Option<u64>),
    Outcomes(Vec<Observed>),
    Failed(MetaError),
}

fn observe_doc(d: Document) -> (String, Value, u64) {
    (d.key, d.value, d.version)
}

fn observe_outcome(o: Outcome) -> Observed {
    match o {
        Outcome::Put(d) => Observed::Put(observe_doc(d)),
        Outcome::Deleted(v) => Observed::Deleted(v),
    }
}

/// The reference model: a `BTreeMap` and a revision counter, as simple as it can be.
#[derive(Debug, Clone, Default)]
struct Model {
    docs: BTreeMap<(Collection, String), (Value, u64)>,
    revision: u64,
}

impl Model {
    fn apply(&mut self, batch: &[Op]) -> Result<Vec<Observed>, MetaError> {
        let mut next = self.clone();
        let mut outcomes = Vec::new();
        for op in batch {
            let id = (op.collection(), op.key().to_string());
            let current = next.docs.get(&id).map(|(_, v)| *v);
            if !op.expected().is_met_by(current) {
                return Err(conflict(op.collection(), op.key(), op.expected(), current));
            }
            match op {
                Op::Put { value, .. } => {
                    next.revision += 1;
                    next.docs.insert(id.clone(), (value.clone(), next.revision));
                    outcomes.push(Observed::Put((id.1, value.clone(), next.revision)));
                }
                Op::Delete { .. } => {
                    outcomes.push(Observed::Deleted(next.docs.remove(&id).map(|(_, v)| v)));
                }
            }
        }
        *self = next;
        Ok(outcomes)
    }

    fn run(&mut self, op: &ModelOp) -> Observed {
        let single = |r: Result<Vec<Observed>, MetaError>| match r {
            Ok(mut o) => o.pop().expect("one outcome"),
            Err(e) => Observed::Failed(e),
        };
        match op {
            ModelOp::Get(c, k) => Observed::Doc(
                self.docs
                    .get(&(*c, k.clone()))
                    .map(|(v, ver)| (k.clone(), v.clone(), *ver)),
            ),
            ModelOp::List(c) => Observed::Docs(
                self.docs
                    .iter()
                    .filter(|((dc, _), _)| dc == c)
                    .map(|((_, k), (v, ver))| (k.clone(), v.clone(), *ver))
                    .collect(),
            ),
            ModelOp::Put(c, k, v, e) => {
                single(self.apply(&[Op::put(*c, k.clone(), v.clone(), *e)]))
            }
            ModelOp::Delete(c, k, e) => single(self.apply(&[Op::delete(*c, k.clone(), *e)])),
            ModelOp::Apply(batch) => match self.apply(batch) {
                Ok(o) => Observed::Outcomes(o),
                Err(e) => Observed::Failed(e),
            },
        }
    }
}

async fn run_on_store(store: &dyn MetaStore, op: &ModelOp) -> Observed {
    let failed = Observed::Failed;
    match op {
        ModelOp::Get(c, k) => store
            .get(*c, k)
            .await
            .map_or_else(failed, |d| Observed::Doc(d.map(observe_doc))),
        ModelOp::List(c) => store.list(*c).await.map_or_else(failed, |d| {
            Observed::Docs(d.into_iter().map(observe_doc).collect())
        }),
        ModelOp::Put(c, k, v, e) => store
            .put(*c, k, v.clone(), *e)
            .await
            .map_or_else(failed, |d| Observed::Put(observe_doc(d))),
        ModelOp::Delete(c, k, e) => store
            .delete(*c, k, *e)
            .await
            .map_or_else(failed, Observed::Deleted),
        ModelOp::Apply(batch) => store.apply(batch.clone()).await.map_or_else(failed, |o| {
            Observed::Outcomes(o.into_iter().map(observe_outcome).collect())
        }),
    }
}

/// Resets `store`, runs `ops` against it and against the reference model, and panics at the
/// first step whose observable result differs (documents, versions, outcomes, errors), then
/// compares every collection at the end.
///
/// Versions are compared exactly: the model starts from the store's current revision, found
/// with one probe put.
pub async fn check_against_model(store: &dyn MetaStore, ops: &[ModelOp]) {
    reset(store).await;
    let probe = store
        .put(
            Collection::Rules,
            "__model_probe__",
            Value::Null,
            Expect::Any,
        )
        .await
        .expect("probe put");
    store
        .delete(Collection::Rules, "__model_probe__", Expect::Any)
        .await
        .expect("probe delete");
    let mut model = Model {
        revision: probe.version,
        ..Model::default()
    };
    for (i, op) in ops.iter().enumerate() {
        let expected = model.run(op);
        let actual = run_on_store(store, op).await;
        assert_eq!(actual, expected, "step {i} ({op:?}) differs from the model");
    }
    for c in Collection::ALL {
        let op = ModelOp::List(c);
        assert_eq!(
            run_on_store(store, &op).await,
            model.run(&op),
            "final contents of {c} differ from the model"
        );
    }
}

/// The environment variable naming the throwaway PostgreSQL server that tests use; set by
/// `scripts/postgres.sh start` (and so by `scripts/test.sh` and `.ci/run`).
pub const POSTGRES_URL_ENV: &str = "SLUICE_TEST_POSTGRES_URL";

/// The URL of the test PostgreSQL server ([`POSTGRES_URL_ENV`]); panics, saying how to start
/// one, when it is not set: a test that needs PostgreSQL fails rather than skips.
pub fn postgres_server_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_URL_ENV} is not set: this test needs a PostgreSQL server. Run the tests with scripts/test.sh, or start a throwaway server with `eval \"$(scripts/postgres.sh start)\"` (stop it with `scripts/postgres.sh stop \"$SLUICE_TEST_POSTGRES_DIR\"`)"
        )
    })
}

/// Creates a new, empty database on the test PostgreSQL server and returns its URL, so each
/// test (or each simulated cluster) has a metastore of its own. `name` (any text; only its
/// letters, digits and `_` are kept) makes the database easy to spot; a per-process counter,
/// the process id and the clock make it unique.
///
/// Panics when [`POSTGRES_URL_ENV`] is not set (see [`postgres_server_url`]) or the server
/// refuses.
pub async fn fresh_postgres_url(name: &str) -> String {
    use sqlx::Connection;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let server = postgres_server_url();
    let tag: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .map(|c| c.to_ascii_lowercase())
        .take(30)
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let database = format!(
        "t_{tag}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut conn = sqlx::PgConnection::connect(&server)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {POSTGRES_URL_ENV}: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE \"{database}\""
    )))
    .execute(&mut conn)
    .await
    .unwrap_or_else(|e| panic!("cannot create database {database}: {e}"));
    let _ = conn.close().await;
    with_database(&server, &database)
}

/// `scripts/postgres.sh`, found from this crate's folder.
const POSTGRES_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/postgres.sh");

/// A PostgreSQL server of a test's own, made by `scripts/postgres.sh start`, that the test may
/// stop and start again ([`ScratchPostgres::down`], [`ScratchPostgres::up`]) to show what
/// nodes do while their metastore is really gone; stopped and deleted on drop.
///
/// Like every PostgreSQL test, it needs the environment of `scripts/test.sh`: it fails when
/// [`POSTGRES_URL_ENV`] is not set, so a bare `cargo test` never installs or starts anything.
pub struct ScratchPostgres {
    url: String,
    dir: String,
}

impl ScratchPostgres {
    /// Starts a fresh server (a second or two: `initdb`, then `pg_ctl start`).
    pub async fn start() -> ScratchPostgres {
        postgres_server_url(); // the same requirement, and message, as every PostgreSQL test
        let out = run_script(vec!["start".to_string()]).await;
        let value = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(|v| v.trim_matches('\'').to_string())
                .unwrap_or_else(|| panic!("scripts/postgres.sh start printed no {name}: {out}"))
        };
        ScratchPostgres {
            url: value(POSTGRES_URL_ENV),
            dir: value("SLUICE_TEST_POSTGRES_DIR"),
        }
    }

    /// The server's URL (its `postgres` database; use it as a metastore directly).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server (`pg_ctl stop -m fast`), keeping its data.
    pub async fn down(&self) {
        run_script(vec!["down".to_string(), self.dir.clone()]).await;
    }

    /// Starts the stopped server again on the same port.
    pub async fn up(&self) {
        run_script(vec!["up".to_string(), self.dir.clone()]).await;
    }
}

impl Drop for ScratchPostgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new(POSTGRES_SCRIPT)
            .args(["stop", &self.dir])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Runs `scripts/postgres.sh` with `args` off the async threads; returns its stdout, panics
/// with its stderr when it fails.
async fn run_script(args: Vec<String>) -> String {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(POSTGRES_SCRIPT)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {POSTGRES_SCRIPT}: {e}"))
    })
    .await
    .expect("the script's thread");
    assert!(
        out.status.success(),
        "{POSTGRES_SCRIPT} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `url` with its database (the path) replaced by `database`, query parameters kept.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// `url` with its `host:port` replaced by `addr`.
fn with_address(url: &str, addr: std::net::SocketAddr) -> String {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[authority_start..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host_start = rest[..authority_end].rfind('@').map_or(0, |i| i + 1);
    format!(
        "{}{addr}{}",
        &url[..authority_start + host_start],
        &rest[authority_end..]
    )
}

/// A TCP forwarder in front of a server, which a test can cut off and restore: the
/// metastore "goes away" for the nodes that connect through it, while everything else
/// (other nodes, other tests on the same server) keeps its connection.
///
/// [`CutProxy::cut`] severs every forwarded connection and closes each new one as soon as it
/// is accepted (clients see their connections drop, as when the server stops);
/// [`CutProxy::restore`] forwards again. Dropping the proxy stops it.
pub struct CutProxy {
    url: String,
    up: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::AbortHandle,
    /// How many connections are being relayed now.
    open: tokio::sync::watch::Receiver<usize>,
}

impl CutProxy {
    /// Starts forwarding a free loopback port to the server of `url`.
    pub async fn start(url: &str) -> CutProxy {
        let authority_start = url.find("://").map_or(0, |i| i + 3);
        let rest = &url[authority_start..];
        let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
        let target = authority[authority.rfind('@').map_or(0, |i| i + 1)..].to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let up = std::sync::Arc::new(tokio::sync::watch::channel(true).0);
        let state = up.clone();
        let (relays, open) = tokio::sync::watch::channel(0usize);
        let relays = std::sync::Arc::new(relays);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let mut down = state.subscribe();
                if !*down.borrow_and_update() {
                    drop(client); // cut: the connection closes at once
                    continue;
                }
                let target = target.clone();
                relays.send_modify(|n| *n += 1);
                let relays = relays.clone();
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = down.wait_for(|up| !*up) => {}
                        }
                    }
                    // Both ends are closed as this task ends, before it is counted out.
                    drop((client, down));
                    relays.send_modify(|n| *n -= 1);
                });
            }
        });
        CutProxy {
            url: with_address(url, addr),
            up,
            task: task.abort_handle(),
            open,
        }
    }

    /// The URL that reaches the server through the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Severs every connection through the proxy and refuses new ones until restored.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// [`Self::cut`], and waits until every connection it was relaying is closed: after it,
    /// nothing the node sends reaches the server. (`cut` closes them from their relays' tasks,
    /// which a loaded machine may run a little later: an operation on a pooled connection
    /// could still succeed just after `cut` returned.) Gives up after 10 s.
    pub async fn cut_and_close(&self) {
        self.cut();
        let mut open = self.open.clone();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            open.wait_for(|n| *n == 0),
        )
        .await;
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_urls_get_a_new_database_or_address() {
        assert_eq!(
            with_database("postgres://u:p@h:1/postgres?sslmode=disable", "t_1"),
            "postgres://u:p@h:1/t_1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "t"), "postgres://h:1/t");
        let addr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(
            with_address("postgres://u:p@h:1/db?x=1", addr),
            "postgres://u:p@127.0.0.1:9/db?x=1"
        );
        assert_eq!(
            with_address("postgres://h:1/db", addr),
            "postgres://127.0.0.1:9/db"
        );
    }
}
