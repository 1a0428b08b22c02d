//! Datasets: creating one, reading them, and the settings a dataset's writers are held to
//! (its publish token and fencing epoch). Config changes that go through an intent are in
//! `config_apply.rs`.

use futures::StreamExt;

use super::Engine;
use super::keyed::{Keyed, request_key};
use crate::catalog::CatalogExt;
use crate::catalog::RequestKey;
use crate::error::{MendError, Result};
use crate::model::{Dataset, DatasetConfig};
use crate::validate;

use mend_contract::capability::PUBLISH_TOKEN;

impl Engine {
    /// Creates a dataset with `config`, under a new incarnation uid; `AlreadyExists` if the id is taken.
    ///
    /// Under an idempotency key the record lives in the new dataset, written with it, so a
    /// retry of a creation that landed answers the created dataset (the same uid) instead of
    /// `AlreadyExists`; a dataset that exists without this key recorded is still
    /// `AlreadyExists`.
    pub fn create_dataset<'a>(
        &'a self,
        dataset_id: &'a str,
        config: &'a DatasetConfig,
    ) -> Keyed<'a, Dataset> {
        Keyed::new(self.write_scope("create"), move |key| async move {
            let key = request_key(key, &("create_dataset", dataset_id, config))?;
            self.create_dataset_keyed(dataset_id, config, key.as_ref())
                .await
        })
    }

    /// Creates the dataset under a fresh uid; with `key`, its record lives in the new dataset
    /// and a retry of a creation that landed answers it ([`Catalog::create_dataset`]).
    #[tracing::instrument(
        name = "create_dataset",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn create_dataset_keyed(
        &self,
        dataset_id: &str,
        config: &DatasetConfig,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        let uid = crate::ambient::uuid_v4().to_string();
        self.catalog
            .create_dataset(dataset_id, &uid, config, self.now_ms(), key)
            .await
    }

    /// Every dataset, sorted by id; fails whole if one cannot be read (see [`each_dataset`](Self::each_dataset)).
    pub async fn datasets(&self) -> Result<Vec<Dataset>> {
        self.catalog.list_datasets().await
    }

    /// Every dataset, each read on its own: one whose state cannot be read is listed with
    /// its error instead of failing the whole listing, so one damaged dataset does not hide
    /// the others.
    pub async fn each_dataset(&self) -> Result<Vec<(String, Result<Dataset>)>> {
        let ids = self.catalog.list_dataset_ids().await?;
        let read: Vec<(String, Result<Dataset>)> = futures::stream::iter(ids)
            .map(|id| async move {
                let dataset = self.catalog.dataset(&id).await;
                (id, dataset)
            })
            .buffered(8)
            .collect()
            .await;
        Ok(read
            .into_iter()
            .filter(|(_, dataset)| !matches!(dataset, Err(MendError::NotFound { .. })))
            .collect())
    }

    /// One dataset; `NotFound` if it does not exist.
    pub async fn dataset(&self, dataset_id: &str) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        self.catalog.dataset(dataset_id).await
    }

    /// Replaces the config in one conditional write if it is still at `expected_config_version`; no intent (see [`apply_config`](Self::apply_config), which writes one).
    pub async fn update_config(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        validate::config(config)?;
        self.catalog
            .update_config(
                dataset_id,
                expected_config_version,
                config,
                self.now_ms(),
                None,
            )
            .await
    }

    /// Sets the token every later publish must present (`None` removes it): fencing a dataset's writers.
    pub fn set_publish_token<'a>(
        &'a self,
        dataset_id: &'a str,
        publish_token: Option<&'a str>,
    ) -> Keyed<'a, Dataset> {
        Keyed::new(self.write_scope("token"), move |key| async move {
            let key = request_key(key, &("set_publish_token", dataset_id, publish_token))?;
            self.set_publish_token_keyed(dataset_id, publish_token, key.as_ref())
                .await
        })
    }

    #[tracing::instrument(
        name = "set_publish_token",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id)
    )]
    async fn set_publish_token_keyed(
        &self,
        dataset_id: &str,
        publish_token: Option<&str>,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        self.require(PUBLISH_TOKEN, "setting a publish token needs fencing")?;
        if let Some(token) = publish_token {
            validate::name("publish token", token)?;
        }
        self.catalog
            .set_publish_token(dataset_id, publish_token, self.now_ms(), key)
            .await
    }

    /// Moves the dataset's fencing epoch on by one: from now on a publish carrying an older
    /// epoch is refused. Returns the dataset after.
    #[tracing::instrument(skip_all, err(level = "debug"), fields(dataset_id = %dataset_id))]
    pub async fn advance_fencing_epoch(&self, dataset_id: &str) -> Result<Dataset> {
        validate::dataset_id(dataset_id)?;
        let fencing = self
            .catalog
            .advance_fencing_epoch(dataset_id, self.now_ms());
        self.writing("fence", None, fencing).await
    }
}
