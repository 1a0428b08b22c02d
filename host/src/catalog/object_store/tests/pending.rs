//! The pending index (`pending.rs`): the marker put before the intent, once per `C` for the
//! process that created it, again by a process that found it; discovery from another process
//! after a crash; `clear_pending` keeping a young marker, and its re-read putting the marker
//! back for an intent that landed between its delete and its re-read.

use std::time::Duration;

use futures::FutureExt;

use super::*;
use crate::catalog::object_store::pending::{MarkerPut, PendingIndex};
use crate::hooked_store::HookedStore;
use crate::intent::{Intent, OperationKind};

fn catalog_on(store: &Arc<HookedStore>, pending_marker_reuse: Duration) -> ObjectStoreCatalog {
    let options = ObjectStoreCatalogOptions {
        pending_marker_reuse,
        ..ObjectStoreCatalogOptions::default()
    };
    ObjectStoreCatalog::new(store.clone(), Path::from("mend"), options)
}

fn intent(dataset_id: &str, operation_id: &str) -> Intent {
    Intent::armed(
        operation_id.to_string(),
        OperationKind::Commit,
        dataset_id,
        "node-a",
        T0,
        30_000,
    )
}

async fn pending_ids(catalog: &ObjectStoreCatalog) -> Vec<String> {
    catalog
        .pending_datasets()
        .await
        .unwrap()
        .into_iter()
        .map(|pending| pending.dataset_id)
        .collect()
}

async fn create(catalog: &ObjectStoreCatalog, dataset_id: &str) {
    catalog
        .create_dataset(dataset_id, "uid-1", &DatasetConfig::default(), T0, None)
        .await
        .unwrap();
}

const C: Duration = crate::catalog::object_store::pending::PENDING_MARKER_REUSE;

#[tokio::test]
async fn the_marker_goes_first_and_once_per_c_for_the_process_that_created_it() {
    let store = Arc::new(HookedStore::default());
    let writer = catalog_on(&store, C);
    create(&writer, "logs").await;
    assert_eq!(pending_ids(&writer).await, Vec::<String>::new());

    let created = store.puts().len();
    writer.put_intent(&intent("logs", "op-1")).await.unwrap();
    let puts = store.puts()[created..].to_vec();
    assert!(
        puts[0].ends_with("index/pending/logs") && puts[1].contains("/log/"),
        "the marker before the log version that adds the intent: {puts:?}"
    );
    assert_eq!(pending_ids(&writer).await, ["logs"]);

    // Within C of creating it, this process skips the put; a change to an existing intent, or
    // none at all, never puts it.
    writer.put_intent(&intent("logs", "op-2")).await.unwrap();
    writer.delete_intent("logs", "op-1", T0).await.unwrap();
    stage(&writer, StageMode::CreateOnly, "node-a", &ids(&["a"]), T0)
        .await
        .unwrap();
    assert_eq!(store.puts_containing("/index/pending/"), 1);
    assert_eq!(
        store.puts_containing("/log/"),
        5,
        "creation, 2 intents, a delete, a stage"
    );

    // Another process found the marker there: its age is unknown, so it puts it every time.
    let other = catalog_on(&store, C);
    other.put_intent(&intent("logs", "op-3")).await.unwrap();
    other.put_intent(&intent("logs", "op-4")).await.unwrap();
    assert_eq!(store.puts_containing("/index/pending/"), 3);
}

#[tokio::test]
async fn a_failed_marker_put_writes_no_intent() {
    let (catalog, store) = catalog_with_dataset("logs").await;
    store
        .fail_next_put_before_write
        .store(true, Ordering::SeqCst);
    let failed = catalog
        .put_intent(&intent("logs", "op-1"))
        .await
        .unwrap_err();
    assert!(
        failed.to_string().contains("pending-work marker"),
        "{failed}"
    );
    assert!(catalog.list_intents("logs").await.unwrap().is_empty());
    assert_eq!(pending_ids(&catalog).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_crashed_writers_dataset_is_found_by_another_process() {
    let store = Arc::new(HookedStore::default());
    let writer = catalog_on(&store, C);
    for dataset_id in ["a", "b", "c/d", "e f"] {
        create(&writer, dataset_id).await;
    }
    // A commit's first step lands in "c/d" and "e f", then the writer is gone.
    for dataset_id in ["c/d", "e f"] {
        writer
            .put_intent(&intent(dataset_id, "op-1"))
            .await
            .unwrap();
    }
    drop(writer);

    let supervisor = catalog_on(&store, C);
    assert_eq!(pending_ids(&supervisor).await, ["c/d", "e f"]);
    let found = supervisor.pending_datasets().await.unwrap();
    assert!(
        found
            .iter()
            .all(|pending| pending.intents.is_none() && pending.earliest_lease_expiry_ms.is_none()),
        "the index names datasets only: {found:?}"
    );
    // Its intents are there: clearing leaves the dataset named.
    supervisor.clear_pending("c/d").await.unwrap();
    assert_eq!(pending_ids(&supervisor).await, ["c/d", "e f"]);
}

#[tokio::test]
async fn clear_pending_keeps_a_marker_younger_than_g() {
    let store = Arc::new(HookedStore::default());
    let writer = catalog_on(&store, C);
    create(&writer, "logs").await;
    writer.put_intent(&intent("logs", "op-1")).await.unwrap();
    writer.delete_intent("logs", "op-1", T0).await.unwrap();

    // G = 2 x 30 s: the marker written a moment ago stays (its writer may still rely on it).
    writer.clear_pending("logs").await.unwrap();
    assert_eq!(pending_ids(&writer).await, ["logs"]);

    // With no grace, it goes.
    let clearer = catalog_on(&store, Duration::ZERO);
    clearer.clear_pending("logs").await.unwrap();
    assert_eq!(pending_ids(&clearer).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_process_that_deletes_a_marker_forgets_it_created_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let index = PendingIndex::new(store, &Path::from("mend"), C);
    assert_eq!(index.ensure("logs").await.unwrap(), MarkerPut::Created);
    assert!(index.head("logs").await.unwrap().is_some());
    index.delete("logs").await.unwrap();
    assert!(index.head("logs").await.unwrap().is_none());
    // Within C of creating it, yet it puts it again: it knows the marker is gone.
    assert_eq!(index.ensure("logs").await.unwrap(), MarkerPut::Created);
    assert!(index.head("logs").await.unwrap().is_some());
    assert_eq!(index.put("logs").await.unwrap(), MarkerPut::Existed);
    assert_eq!(index.grace(), 2 * C);
}

/// Rule 3's re-read: a writer whose intent lands between the clearer's delete and its re-read
/// (here one that skipped the put because it created the marker less than its C ago, as a
/// writer whose log put took longer than G - C would) is seen by the re-read, and the marker
/// is put back.
#[tokio::test]
async fn an_intent_between_the_delete_and_the_re_read_puts_the_marker_back() {
    let store = Arc::new(HookedStore::default());
    let writer = Arc::new(catalog_on(&store, C));
    create(&writer, "logs").await;
    writer.put_intent(&intent("logs", "op-1")).await.unwrap();
    writer.delete_intent("logs", "op-1", T0).await.unwrap();
    assert_eq!(store.puts_containing("/index/pending/"), 1);

    // A writer acting between the clearer's delete of the marker and its re-read.
    let ran = Arc::new(AtomicBool::new(false));
    store.set_after_delete({
        let (writer, ran) = (Arc::clone(&writer), Arc::clone(&ran));
        move |path| {
            let first =
                path.as_ref().contains("/index/pending/") && !ran.swap(true, Ordering::SeqCst);
            let writer = Arc::clone(&writer);
            async move {
                if first {
                    writer.put_intent(&intent("logs", "op-2")).await.unwrap();
                }
            }
            .boxed()
        }
    });
    let clearer = catalog_on(&store, Duration::ZERO);
    clearer.clear_pending("logs").await.unwrap();

    assert!(ran.load(Ordering::SeqCst), "the hook ran");
    assert_eq!(
        store.puts_containing("/index/pending/"),
        2,
        "the writer skipped its put (its own C), the clearer put the marker back"
    );
    assert_eq!(writer.list_intents("logs").await.unwrap().len(), 1);
    assert_eq!(pending_ids(&clearer).await, ["logs"]);
}
