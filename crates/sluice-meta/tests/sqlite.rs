//! The SQLite backend against the shared metastore suite, plus what only a file can show:
//! persistence across reopen, schema versioning, and a kill -9 in the middle of writes.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_meta::test_suite;
use sluice_meta::{Collection, Expect, MetaError, MetaStore, Op, SqliteMetaStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sqlite_store_passes_the_shared_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteMetaStore::open(dir.path().join("meta.sqlite"))
        .await
        .expect("open");
    test_suite::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sqlite_store_keeps_documents_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.sqlite");
    let store = SqliteMetaStore::open(&path).await.expect("open");
    let fixture = test_suite::write_persistence_fixture(&store).await;
    store.close().await;
    drop(store);
    let store = SqliteMetaStore::open(&path).await.expect("reopen");
    test_suite::check_persistence_fixture(&store, &fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sqlite_store_keeps_documents_when_dropped_without_close() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.sqlite");
    let store = SqliteMetaStore::open(&path).await.expect("open");
    let fixture = test_suite::write_persistence_fixture(&store).await;
    drop(store);
    let store = SqliteMetaStore::open(&path).await.expect("reopen");
    test_suite::check_persistence_fixture(&store, &fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sqlite_store_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.sqlite");
    let store = SqliteMetaStore::open(&path).await.expect("open");
    store.close().await;
    // A future sluice would have bumped the schema version.
    set_schema_version(&path, 99).await;
    let err = SqliteMetaStore::open(&path)
        .await
        .expect_err("newer schema");
    let MetaError::Backend(msg) = &err else {
        panic!("expected a backend error, got {err:?}")
    };
    assert!(msg.contains("schema version 99"), "{msg}");
    assert!(msg.contains("run a sluice at least as new"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_sqlite_store_reports_a_corrupt_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.sqlite");
    let store = SqliteMetaStore::open(&path).await.expect("open");
    store
        .put(
            Collection::WorkloadGroups,
            "g",
            json!({"ok": true}),
            Expect::Any,
        )
        .await
        .expect("put");
    store.close().await;
    raw_execute(
        &path,
        "UPDATE documents SET value = '{not json' WHERE key = 'g'",
    )
    .await;
    let store = SqliteMetaStore::open(&path).await.expect("reopen");
    let err = store
        .get(Collection::WorkloadGroups, "g")
        .await
        .expect_err("corrupt value");
    assert!(
        matches!(&err, MetaError::Corrupt { location, .. } if location == "workload_groups/g"),
        "{err:?}"
    );
    assert!(err.to_string().contains("restore the metastore"), "{err}");
    // The advertised fix works: the damaged document can be deleted.
    assert!(
        store
            .delete(Collection::WorkloadGroups, "g", Expect::Any)
            .await
            .expect("delete corrupt")
            .is_some()
    );
}

async fn raw_execute(path: &Path, sql: &'static str) {
    use sqlx::{ConnectOptions, Connection};
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .expect("raw connect");
    sqlx::query(sql).execute(&mut conn).await.expect("raw sql");
    conn.close().await.expect("raw close");
}

async fn set_schema_version(path: &Path, version: i64) {
    use sqlx::{ConnectOptions, Connection};
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .expect("raw connect");
    sqlx::query("UPDATE meta_info SET value = ? WHERE name = 'schema_version'")
        .bind(version)
        .execute(&mut conn)
        .await
        .expect("raw update");
    conn.close().await.expect("raw close");
}

/// The child half of the crash test: when `CRASH_CHILD_ENV` names a database, writes pairs of
/// documents that must always agree, forever, until the parent kills the process.
const CRASH_CHILD_ENV: &str = "SLUICE_META_CRASH_CHILD_DB";
/// How long the child writes at most; the parent kills it within a second or two.
const CHILD_MAX_RUN: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_crash_child_writer() {
    let Ok(path) = std::env::var(CRASH_CHILD_ENV) else {
        return; // Only does something when spawned by the crash test.
    };
    let store = SqliteMetaStore::open(&path).await.expect("child open");
    // Bounded, so a parent that dies before killing it leaves no writer behind for long.
    let started = Instant::now();
    for n in 0u64.. {
        if started.elapsed() > CHILD_MAX_RUN {
            break;
        }
        store
            .apply(vec![
                Op::put(
                    Collection::WorkloadGroups,
                    "pair",
                    json!({"n": n, "pad": "x".repeat(2000)}),
                    Expect::Any,
                ),
                Op::put(Collection::Rules, "pair", json!({"n": n}), Expect::Any),
            ])
            .await
            .expect("child batch");
        // Tells the parent, which reads this line from the pipe, that batch `n` is committed.
        println!("committed {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_batches_survive_kill_minus_nine_whole_or_not_at_all() {
    if std::env::var(CRASH_CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.sqlite");
    // Create the schema first so the parent can poll while the child writes.
    SqliteMetaStore::open(&path)
        .await
        .expect("open")
        .close()
        .await;
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "test_crash_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child writer");
    // Kill the writer mid-stream, once it has committed 50 batches: it says so on its stdout
    // after each commit, so the parent waits on the pipe, not on a clock.
    let stdout = child.stdout.take().expect("child stdout");
    let committed = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut last = None;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("committed ") {
                last = n.trim().parse::<u64>().ok();
                if last.is_some_and(|n| n >= 50) {
                    break;
                }
            }
        }
        last
    })
    .await
    .expect("reader");
    assert!(
        committed.is_some_and(|n| n >= 50),
        "the child stopped after committing {committed:?} batches"
    );
    let observer = SqliteMetaStore::open(&path).await.expect("observer open");
    let seen = observer
        .get(Collection::Rules, "pair")
        .await
        .expect("observer read")
        .map_or(0, |d| d.value["n"].as_u64().unwrap_or(0));
    assert!(seen >= 50, "a committed batch is not visible: saw {seen}");
    child.kill().expect("kill -9 the writer"); // SIGKILL: no destructors, no clean close
    child.wait().expect("reap child");
    observer.close().await;
    drop(observer);

    let store = SqliteMetaStore::open(&path)
        .await
        .expect("reopen after kill");
    let group = store
        .get(Collection::WorkloadGroups, "pair")
        .await
        .expect("get")
        .expect("group");
    let rule = store
        .get(Collection::Rules, "pair")
        .await
        .expect("get")
        .expect("rule");
    assert_eq!(
        group.value["n"], rule.value["n"],
        "a batch was half applied after kill -9"
    );
    assert!(
        group.value["n"].as_u64().expect("n") >= 50,
        "acknowledged batches were lost"
    );
    assert_eq!(
        rule.version,
        group.version + 1,
        "the pair comes from one batch"
    );
    // The store still takes writes after the crash.
    store
        .put(Collection::Rules, "after", json!(1), Expect::Absent)
        .await
        .expect("write after crash");
}
