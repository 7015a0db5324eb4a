//! The in-memory backend against the shared metastore suite.

use sluice_meta::MemoryMetaStore;
use sluice_meta::test_suite;

#[tokio::test]
async fn test_memory_store_passes_the_shared_suite() {
    let store = MemoryMetaStore::new();
    test_suite::run_all(&store).await;
}
