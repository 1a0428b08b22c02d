//! mend's own backends under the conformance kit (`mend-testkit`, in `testkit/`), run by
//! `tests/conformance.rs`: each [`Backend`] opens its storage as the [`Harness`](crate::Harness)
//! does, and fingerprints its catalog as [`Harness::write_fingerprint`](crate::Harness::write_fingerprint)
//! does: the row versions of the dataset's rows on Postgres, the writes to the catalog's store
//! on object storage. The kit counts the split objects' writes itself.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mend::catalog::object_store::ObjectStoreCatalogOptions;
use mend::objects::SplitObjects;
use mend_testkit::{BackendUnderTest, Fingerprint, FreshCatalog, Scale};
use sqlx::PgPool;
use tempfile::TempDir;

use crate::CountingStore;
use crate::harness::{Backend, Storage, postgres_row_versions};

/// What one opened catalog of mend's keeps for its fingerprint.
#[derive(Debug)]
pub struct OpenedStorage {
    /// The store the object-storage catalog writes through, counting its writes (unused by
    /// Postgres). The split objects go to the store under it, where the kit counts them.
    catalog_store: Arc<CountingStore>,
    /// On Postgres: a pool of its own for reading row versions.
    pg: Option<PgPool>,
    /// A local directory's catalog lives until the case ends.
    _directory: Option<TempDir>,
}

#[async_trait]
impl BackendUnderTest for Backend {
    type State = OpenedStorage;

    fn name(&self) -> String {
        self.to_string()
    }

    async fn open(&self) -> FreshCatalog<OpenedStorage> {
        // No grace on the pending markers: the kit's pending cases expect `clear_pending` to
        // take a dataset off at once.
        let options = ObjectStoreCatalogOptions {
            pending_marker_reuse: Duration::ZERO,
            ..Default::default()
        };
        let storage = Storage::open(*self, false, options, None).await;
        let objects = SplitObjects::new(storage.store.inner().clone(), storage.prefix.clone());
        FreshCatalog {
            catalog: storage.catalog,
            objects,
            state: OpenedStorage {
                catalog_store: storage.store,
                pg: storage.pg,
                _directory: storage.directory,
            },
        }
    }

    async fn catalog_fingerprint(&self, state: &OpenedStorage, dataset_id: &str) -> Fingerprint {
        match &state.pg {
            Some(pool) => postgres_row_versions(pool, dataset_id)
                .await
                .into_iter()
                .map(|(table, ctid, xmin)| format!("{table} {ctid} {xmin}"))
                .collect(),
            None => Fingerprint::writes(state.catalog_store.writes()),
        }
    }

    fn scale(&self) -> Scale {
        match self {
            Backend::Postgres => Scale::THOROUGH,
            Backend::LocalDirectory | Backend::Memory => Scale::STANDARD,
            // Every commit is a request to a server written in Python: fewer rounds.
            Backend::S3 => Scale::LIGHT,
        }
    }
}
