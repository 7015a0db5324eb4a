//! Property test: random operation sequences give the same observable results on each backend
//! as on a plain `BTreeMap` model (documents, versions, batch outcomes, conflicts).

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_meta::test_suite::{self, ModelOp};
use sluice_meta::{Collection, Expect, MemoryMetaStore, MetaStore, Op, SqliteMetaStore};

fn collection() -> impl Strategy<Value = Collection> {
    prop::sample::select(Collection::ALL.to_vec())
}

/// Few keys, so ops collide often; includes the empty key and non-ASCII.
fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "B", "", "é", "a/b"]).prop_map(str::to_string)
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z ]{0,8}".prop_map(Value::from),
        (any::<u8>(), "[a-z]{0,4}").prop_map(|(n, s)| json!({"z": n, "a": s, "list": [n, s]})),
    ]
}

/// Versions are small store-wide revisions, so small guesses hit the current one often.
fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        Just(Expect::Any),
        Just(Expect::Absent),
        (1u64..=40).prop_map(Expect::Version),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (collection(), key(), value(), expect()).prop_map(|(c, k, v, e)| Op::put(c, k, v, e)),
        (collection(), key(), expect()).prop_map(|(c, k, e)| Op::delete(c, k, e)),
    ]
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        2 => (collection(), key()).prop_map(|(c, k)| ModelOp::Get(c, k)),
        1 => collection().prop_map(ModelOp::List),
        4 => (collection(), key(), value(), expect()).prop_map(|(c, k, v, e)| ModelOp::Put(c, k, v, e)),
        2 => (collection(), key(), expect()).prop_map(|(c, k, e)| ModelOp::Delete(c, k, e)),
        2 => prop::collection::vec(op(), 0..5).prop_map(ModelOp::Apply),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn check(store: &dyn MetaStore, rt: &tokio::runtime::Runtime, ops: &[ModelOp]) {
    rt.block_on(test_suite::check_against_model(store, ops));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn test_memory_store_matches_the_model(ops in prop::collection::vec(model_op(), 1..40)) {
        let rt = runtime();
        check(&MemoryMetaStore::new(), &rt, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn test_sqlite_store_matches_the_model(ops in prop::collection::vec(model_op(), 1..40)) {
        let rt = runtime();
        let dir = tempfile::tempdir().expect("tempdir");
        let store = rt
            .block_on(SqliteMetaStore::open(dir.path().join("meta.sqlite")))
            .expect("open");
        check(&store, &rt, &ops);
    }
}
