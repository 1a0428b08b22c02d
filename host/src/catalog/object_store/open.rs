//! Opening an [`ObjectStoreCatalog`] from a catalog URL: `file:///DIR` or a bare directory
//! path, `memory://`, or `s3://BUCKET/PREFIX`. `postgres://` is the Postgres backend's, and
//! choosing between backends is the caller's. [`open_store`] is public because split objects
//! may live on a store named the same way.

use std::sync::Arc;

use crate::objects::{SplitObjects, UploadSigner};
use ::object_store::ObjectStore;
use ::object_store::local::LocalFileSystem;
use ::object_store::memory::InMemory;
use ::object_store::path::Path;
use url::Url;

use super::{ObjectStoreCatalog, ObjectStoreCatalogOptions};

use crate::error::{MendError, Result};

const SUPPORTED: &str = "file:///DIR, a directory path, memory:// or s3://BUCKET/PREFIX";

impl ObjectStoreCatalog {
    /// Opens the catalog at `url` with default options.
    pub fn open_url(url: &str) -> Result<Self> {
        Self::open_url_with(url, ObjectStoreCatalogOptions::default())
    }

    /// Opens the catalog at `url`. A local directory is created if missing. S3 takes its
    /// credentials and region from the `AWS_*` environment and writes commits with
    /// `If-None-Match: *`, which S3 and most compatible stores honour. The store of a
    /// `memory://` or `s3://` URL lists in order, so `store_lists_in_order` is set for them
    /// ([`lists_in_order`]).
    pub fn open_url_with(url: &str, mut options: ObjectStoreCatalogOptions) -> Result<Self> {
        let (store, prefix) = open_store(url)?;
        options.store_lists_in_order |= lists_in_order(url);
        Ok(Self::new(store, prefix, options))
    }
}

/// Whether the store `url` names lists names in lexicographic order
/// ([`ObjectStoreCatalogOptions::store_lists_in_order`]): `memory://` (a sorted map) and
/// `s3://` (the S3 API lists in order, and so do the stores compatible with it), not a local
/// directory (whose listing is in the file system's order).
pub fn lists_in_order(url: &str) -> bool {
    url.starts_with("memory://") || url.starts_with("s3://")
}

/// The store and prefix a URL names, for the catalog or for split objects kept elsewhere.
pub fn open_store(url: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
    open_store_and_signer(url).map(|(store, prefix, _)| (store, prefix))
}

/// The split objects a URL names: its store and prefix, and where the store presigns (S3), a
/// signer so that writers can be handed upload URLs.
pub(crate) fn open_objects(url: &str) -> Result<SplitObjects> {
    let (store, prefix, signer) = open_store_and_signer(url)?;
    let objects = SplitObjects::new(store, prefix);
    Ok(match signer {
        Some(signer) => objects.with_signer(signer),
        None => objects,
    })
}

/// A store, the prefix a URL names in it, and what presigns uploads to it, if it can.
type OpenedStore = (Arc<dyn ObjectStore>, Path, Option<Arc<dyn UploadSigner>>);

fn open_store_and_signer(url: &str) -> Result<OpenedStore> {
    let Some((scheme, _)) = url.split_once("://") else {
        let (store, prefix) = local_directory(std::path::Path::new(url))?;
        return Ok((store, prefix, None));
    };
    let parsed =
        Url::parse(url).map_err(|err| MendError::invalid(format!("catalog url {url}: {err}")))?;
    match scheme {
        "file" => {
            let directory = parsed.to_file_path().map_err(|()| {
                MendError::invalid(format!(
                    "catalog url {url} is not an absolute local path; use file:///DIR"
                ))
            })?;
            let (store, prefix) = local_directory(&directory)?;
            Ok((store, prefix, None))
        }
        "memory" => Ok((Arc::new(InMemory::new()), url_prefix(&parsed)?, None)),
        #[cfg(feature = "s3")]
        "s3" => {
            let bucket = parsed.host_str().unwrap_or_default();
            if bucket.is_empty() {
                return Err(MendError::invalid(format!(
                    "catalog url {url} names no bucket; use s3://BUCKET/PREFIX"
                )));
            }
            let store = ::object_store::aws::AmazonS3Builder::from_env()
                .with_url(format!("s3://{bucket}"))
                .with_conditional_put(::object_store::aws::S3ConditionalPut::ETagMatch)
                .build()
                .map_err(|err| {
                    MendError::invalid(format!("catalog url {url}: cannot configure s3: {err}"))
                })?;
            let store = Arc::new(store);
            let signer = Arc::new(crate::objects::presign::S3UploadSigner::new(store.clone()));
            Ok((store, url_prefix(&parsed)?, Some(signer)))
        }
        #[cfg(not(feature = "s3"))]
        "s3" => Err(MendError::invalid(format!(
            "catalog url {url}: this build of mend has no S3 backend: build it with the `s3` feature"
        ))),
        other => Err(MendError::invalid(format!(
            "catalog url scheme {other}:// is not an object store; use {SUPPORTED}"
        ))),
    }
}

fn local_directory(directory: &std::path::Path) -> Result<(Arc<dyn ObjectStore>, Path)> {
    if directory.as_os_str().is_empty() {
        return Err(MendError::invalid(format!(
            "the catalog url is empty; use {SUPPORTED}"
        )));
    }
    std::fs::create_dir_all(directory).map_err(|err| {
        MendError::invalid(format!(
            "catalog directory {} cannot be created: {err}",
            directory.display()
        ))
    })?;
    let store = LocalFileSystem::new_with_prefix(directory).map_err(|err| {
        MendError::invalid(format!(
            "catalog directory {} cannot be opened: {err}",
            directory.display()
        ))
    })?;
    Ok((Arc::new(store), Path::default()))
}

fn url_prefix(url: &Url) -> Result<Path> {
    Path::parse(url.path().trim_matches('/'))
        .map_err(|err| MendError::invalid(format!("catalog url prefix {}: {err}", url.path())))
}
