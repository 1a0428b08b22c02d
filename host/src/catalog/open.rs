//! Opening a catalog from its URL: an object-storage one (`file://`, `memory://`, `s3://`) or
//! a Postgres one, with the store of split objects beside it.

use std::sync::Arc;

#[cfg(feature = "postgres")]
use super::PostgresCatalog;
use super::{Catalog, ObjectStoreCatalog};
use crate::error::Result;

/// How a Postgres catalog is opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PostgresOptions {
    /// Open a server whose settings may lose acknowledged commits in a crash (`fsync`,
    /// `synchronous_commit` or `full_page_writes` off). Only for throwaway clusters: a publish
    /// mend acknowledged could be gone after the server restarts.
    pub accept_unsafe_durability: bool,
}

/// Whether `url` names a Postgres catalog.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// What a `postgres://` URL meets in a build without the `postgres` feature.
#[cfg(not(feature = "postgres"))]
pub(crate) fn no_postgres_backend() -> crate::MendError {
    crate::MendError::invalid(
        "this build of mend has no Postgres backend: build it with the `postgres` feature",
    )
}

/// Opens the catalog at `catalog_url` and the store of split objects.
///
/// Split objects live in the catalog's own store for object-storage catalogs unless
/// `objects_url` names another; a Postgres catalog needs `objects_url`.
pub async fn open(
    catalog_url: &str,
    objects_url: Option<&str>,
) -> Result<(Arc<dyn Catalog>, crate::objects::SplitObjects)> {
    open_with(catalog_url, objects_url, PostgresOptions::default()).await
}

/// [`open`], with how a Postgres catalog is opened.
pub async fn open_with(
    catalog_url: &str,
    objects_url: Option<&str>,
    postgres: PostgresOptions,
) -> Result<(Arc<dyn Catalog>, crate::objects::SplitObjects)> {
    let separate_objects = objects_url
        .map(super::object_store::open_objects)
        .transpose()?;
    if is_postgres_url(catalog_url) {
        return open_postgres(catalog_url, separate_objects, postgres).await;
    }
    let own = super::object_store::open_objects(catalog_url)?;
    let (store, prefix) = own.store();
    let options = super::object_store::ObjectStoreCatalogOptions {
        store_lists_in_order: super::object_store::lists_in_order(catalog_url),
        ..Default::default()
    };
    let catalog = ObjectStoreCatalog::new(store.clone(), prefix.clone(), options);
    Ok((Arc::new(catalog), separate_objects.unwrap_or(own)))
}

/// A Postgres catalog, with the split objects it needs elsewhere.
#[cfg(feature = "postgres")]
async fn open_postgres(
    catalog_url: &str,
    objects: Option<crate::objects::SplitObjects>,
    options: PostgresOptions,
) -> Result<(Arc<dyn Catalog>, crate::objects::SplitObjects)> {
    let objects = objects.ok_or_else(|| {
        crate::MendError::invalid(
            "a Postgres catalog keeps rows only: give --objects URL (file://DIR, s3://...) for the split objects",
        )
    })?;
    let catalog = PostgresCatalog::connect_with(catalog_url, options).await?;
    Ok((Arc::new(catalog), objects))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(
    _catalog_url: &str,
    _objects: Option<crate::objects::SplitObjects>,
    _options: PostgresOptions,
) -> Result<(Arc<dyn Catalog>, crate::objects::SplitObjects)> {
    Err(no_postgres_backend())
}
