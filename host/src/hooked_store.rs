//! The one object store the library's own tests step into requests with: in memory, it records
//! the path of every put, and runs a test's hook before each put lands (to fail it, or hold it
//! back), before each get is read (to hold it back), after each delete has landed and after
//! each listing was read, before it is answered (to act between two requests of the code under
//! test). The crates outside the library have `mend-testkit`'s stores; this one exists because
//! a test inside the library cannot depend on a crate that depends on the library.

use std::fmt;
use std::sync::{Arc, Mutex};

use ::object_store::memory::InMemory;
use ::object_store::path::Path;
use ::object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

/// Runs before a put lands: an error answers the put in its place (nothing written).
pub(crate) type BeforePut =
    Arc<dyn Fn(&Path) -> BoxFuture<'static, Option<::object_store::Error>> + Send + Sync>;
/// Runs before a get is read.
pub(crate) type BeforeGet = Arc<dyn Fn(&Path) -> BoxFuture<'static, ()> + Send + Sync>;
/// Runs after a delete landed, before the delete answers.
pub(crate) type AfterDelete = Arc<dyn Fn(&Path) -> BoxFuture<'static, ()> + Send + Sync>;
/// Runs after a listing (of the prefix it is given) was read, before it is answered.
pub(crate) type AfterList = Arc<dyn Fn(&Path) -> BoxFuture<'static, ()> + Send + Sync>;

/// An in-memory store with hooks; see the module's doc.
#[derive(Default)]
pub(crate) struct HookedStore {
    inner: InMemory,
    puts: Mutex<Vec<String>>,
    before_put: Mutex<Option<BeforePut>>,
    before_get: Mutex<Option<BeforeGet>>,
    after_delete: Mutex<Option<AfterDelete>>,
    after_list: Mutex<Option<AfterList>>,
}

impl HookedStore {
    /// Runs `hook` before every put from now on (replacing the one before).
    pub(crate) fn set_before_put(
        &self,
        hook: impl Fn(&Path) -> BoxFuture<'static, Option<::object_store::Error>>
        + Send
        + Sync
        + 'static,
    ) {
        *self.before_put.lock().unwrap() = Some(Arc::new(hook));
    }

    /// Runs `hook` before every get from now on (replacing the one before).
    pub(crate) fn set_before_get(
        &self,
        hook: impl Fn(&Path) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        *self.before_get.lock().unwrap() = Some(Arc::new(hook));
    }

    /// Runs `hook` after every delete from now on (replacing the one before).
    pub(crate) fn set_after_delete(
        &self,
        hook: impl Fn(&Path) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        *self.after_delete.lock().unwrap() = Some(Arc::new(hook));
    }

    /// Runs `hook` after every listing is read, before it is answered, from now on
    /// (replacing the one before).
    pub(crate) fn set_after_list(
        &self,
        hook: impl Fn(&Path) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        *self.after_list.lock().unwrap() = Some(Arc::new(hook));
    }

    /// The paths of the puts so far, in order, answered or not.
    pub(crate) fn puts(&self) -> Vec<String> {
        self.puts.lock().unwrap().clone()
    }

    /// An engine over this store, as one process of several sharing it would be: the
    /// object-store catalog and the split objects under `mend`, the default policy.
    pub(crate) fn engine(self: &Arc<Self>) -> crate::Engine {
        let catalog = crate::catalog::ObjectStoreCatalog::new(
            self.clone(),
            Path::from("mend"),
            crate::catalog::object_store::ObjectStoreCatalogOptions::default(),
        );
        crate::Engine::new(
            Arc::new(catalog),
            crate::objects::SplitObjects::new(self.clone(), Path::from("mend")),
            crate::runtime::PolicyRuntime::default_policy().expect("the default policy loads"),
            crate::EngineOptions::default(),
        )
        .expect("an engine over the hooked store")
    }

    /// Puts so far (answered or not) whose path contains `fragment`.
    pub(crate) fn puts_containing(&self, fragment: &str) -> usize {
        let puts = self.puts.lock().unwrap();
        puts.iter().filter(|path| path.contains(fragment)).count()
    }
}

/// The error of a store that does not answer, for a hook to return.
pub(crate) fn unanswered() -> ::object_store::Error {
    ::object_store::Error::Generic {
        store: "hooked",
        source: "the store does not answer".into(),
    }
}

impl fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HookedStore({})", self.inner)
    }
}

impl fmt::Display for HookedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HookedStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for HookedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> ::object_store::Result<PutResult> {
        self.puts.lock().unwrap().push(location.to_string());
        // Cloned out of the lock: a hook may wait, and other requests must not.
        let hook = self.before_put.lock().unwrap().clone();
        if let Some(hook) = hook
            && let Some(error) = hook(location).await
        {
            return Err(error);
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> ::object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> ::object_store::Result<GetResult> {
        let hook = self.before_get.lock().unwrap().clone();
        if let Some(hook) = hook {
            hook(location).await;
        }
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> ::object_store::Result<()> {
        let deleted = self.inner.delete(location).await;
        let hook = self.after_delete.lock().unwrap().clone();
        if let Some(hook) = hook {
            hook(location).await;
        }
        deleted
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, ::object_store::Result<ObjectMeta>> {
        use futures::StreamExt;
        let listing = self.inner.list(prefix);
        let Some(hook) = self.after_list.lock().unwrap().clone() else {
            return listing;
        };
        let prefix = prefix.cloned().unwrap_or_default();
        futures::stream::once(async move {
            let listed: Vec<_> = listing.collect().await;
            hook(&prefix).await;
            futures::stream::iter(listed)
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> ::object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> ::object_store::Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> ::object_store::Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}
