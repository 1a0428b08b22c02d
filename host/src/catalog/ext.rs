//! What is built from the [`Catalog`]'s atomic steps, for every catalog: each method here is
//! one of those steps with its arguments filled in, so no backend writes or overrides it.
//!
//! [`Catalog`] is the core a backend provides: its required methods are the atomic steps and
//! the reads; its provided methods are compositions a backend overrides only to make them one
//! step or cheaper. [`CatalogExt`] is implemented for every `Catalog`, `dyn Catalog` included,
//! and holds what no backend has a reason to write.

use async_trait::async_trait;

use super::{Catalog, DatasetChange, MarkRule, RequestKey};
use crate::error::Result;
use crate::model::{Dataset, DatasetConfig, MarkResult, TimestampMs};

/// The compositions of [`Catalog`]'s steps; in scope with `use mend::catalog::CatalogExt`.
#[async_trait]
pub trait CatalogExt: Catalog {
    /// [`DatasetChange::Config`] through [`update_dataset`](Catalog::update_dataset).
    async fn update_config(
        &self,
        dataset_id: &str,
        expected_config_version: u64,
        config: &DatasetConfig,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let change = DatasetChange::Config {
            expected_config_version,
            config,
        };
        self.update_dataset(dataset_id, change, now_ms, key).await
    }

    /// [`DatasetChange::PublishToken`] through [`update_dataset`](Catalog::update_dataset).
    async fn set_publish_token(
        &self,
        dataset_id: &str,
        publish_token: Option<&str>,
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<Dataset> {
        let change = DatasetChange::PublishToken(publish_token);
        self.update_dataset(dataset_id, change, now_ms, key).await
    }

    /// [`DatasetChange::AdvanceFencingEpoch`] through
    /// [`update_dataset`](Catalog::update_dataset).
    async fn advance_fencing_epoch(
        &self,
        dataset_id: &str,
        now_ms: TimestampMs,
    ) -> Result<Dataset> {
        let change = DatasetChange::AdvanceFencingEpoch;
        self.update_dataset(dataset_id, change, now_ms, None).await
    }

    /// [`MarkRule::Named`] through [`mark`](Catalog::mark).
    async fn mark_for_deletion(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        now_ms: TimestampMs,
        key: Option<&RequestKey>,
    ) -> Result<MarkResult> {
        self.mark(dataset_id, split_ids, MarkRule::Named, now_ms, key)
            .await
    }

    /// [`MarkRule::StaleStaged`] through [`mark`](Catalog::mark): the ids it marked.
    async fn mark_stale_staged(
        &self,
        dataset_id: &str,
        split_ids: &[String],
        untouched_before_ms: TimestampMs,
        now_ms: TimestampMs,
    ) -> Result<Vec<String>> {
        let rule = MarkRule::StaleStaged {
            untouched_before_ms,
        };
        let result = self.mark(dataset_id, split_ids, rule, now_ms, None).await?;
        Ok(result.marked)
    }
}

impl<C: Catalog + ?Sized> CatalogExt for C {}
