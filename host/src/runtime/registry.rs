//! The policy registry: which policy a deployment runs, kept next to its split objects, so
//! every process that opens the catalog decides with the same component.
//!
//! ```text
//! policies/components/{sha256 hex}.wasm     each component ever activated, put-if-absent
//! policies/active/{version:020}.json        one record per swap or rollback, put-if-absent
//! ```
//!
//! The active policy is the newest record. A swap or rollback writes the next version with
//! put-if-absent, so two operators swapping at once cannot both win: the loser gets
//! `Conflict` and nothing changed. Nothing is ever overwritten, so the history of what ran
//! when is the list of records. A component is read back only if its bytes still hash to the
//! digest it is filed under.
//!
//! A swap or rollback sent under an idempotency key carries its [`RecordedRequest`] in the
//! record that is its effect, written in the same put: the key, the request's digest and its
//! answer (all but the record itself). A retry finds it with [`PolicyRegistry::recorded`].
//! Records are history and never forgotten, theirs included; records written before this
//! field existed read as having none.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use super::digest_of;
use crate::catalog::RecordedRequest;
use crate::error::{MendError, Result};
use crate::model::TimestampMs;

/// One change of the active policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActiveRecord {
    /// The record's number: the newest record is the active policy.
    pub version: u64,
    /// The policy active from this record on.
    pub digest: String,
    /// The policy it replaced, which a rollback restores.
    pub previous: Option<String>,
    /// `swap` or `rollback`.
    pub change: String,
    /// When the change was made.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub changed_at_ms: TimestampMs,
    /// The request under an idempotency key that made this change, with its answer but for
    /// this record: what a retry of it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedRequest>,
    /// Who made the change: the principal of the request. The record is the swap, so it is
    /// the audit trail of swaps and rollbacks. Absent in records written before it existed,
    /// and for a change no one named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// A deployment's policy registry (see the module doc).
#[derive(Debug, Clone)]
pub struct PolicyRegistry {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl PolicyRegistry {
    /// The registry under `prefix` of `store` (its `policies/` directory).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self {
            store,
            prefix: prefix.child("policies"),
        }
    }

    fn component_path(&self, digest: &str) -> Path {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.prefix.child("components").child(format!("{hex}.wasm"))
    }

    fn active_dir(&self) -> Path {
        self.prefix.child("active")
    }

    /// Files a component; filing the same bytes again is a no-op. Returns its digest.
    pub async fn put_component(&self, bytes: &[u8]) -> Result<String> {
        let digest = digest_of(bytes);
        let path = self.component_path(&digest);
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes.to_vec()), options)
            .await
        {
            // Same name, same digest: the same bytes, unless someone tampered, which reading
            // it back will tell.
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(digest),
            Err(error) => Err(MendError::unavailable(format!("write {path}"), error)),
        }
    }

    /// A filed component's bytes, checked against its digest.
    pub async fn component(&self, digest: &str) -> Result<Vec<u8>> {
        let path = self.component_path(digest);
        let bytes = match self.store.get(&path).await {
            Ok(found) => found
                .bytes()
                .await
                .map_err(|error| MendError::unavailable(format!("read {path}"), error))?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(MendError::Corrupt {
                    message: format!(
                        "the policy registry names component {digest}, but {path} is missing"
                    ),
                });
            }
            Err(error) => return Err(MendError::unavailable(format!("read {path}"), error)),
        };
        if digest_of(&bytes) != digest {
            return Err(MendError::Corrupt {
                message: format!("{path} does not hash to {digest}: it was changed after filing"),
            });
        }
        Ok(bytes.to_vec())
    }

    /// The newest record: the active policy. `None` before the first swap (the host's
    /// built-in default policy is active then).
    pub async fn active(&self) -> Result<Option<ActiveRecord>> {
        match self.record_paths().await?.pop() {
            Some(path) => self.read_record(&path).await.map(Some),
            None => Ok(None),
        }
    }

    /// The record of the change made under idempotency key `key`, if there is one. Reads
    /// every record: there is one per swap or rollback, a short history.
    pub async fn recorded(&self, key: &str) -> Result<Option<ActiveRecord>> {
        for path in self.record_paths().await?.iter().rev() {
            let record = self.read_record(path).await?;
            if record.recorded.as_ref().is_some_and(|r| r.key == key) {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    /// Every record, oldest first: the history of what ran when.
    pub async fn records(&self) -> Result<Vec<ActiveRecord>> {
        let mut records = Vec::new();
        for path in self.record_paths().await? {
            records.push(self.read_record(&path).await?);
        }
        Ok(records)
    }

    /// The paths of every record, oldest first.
    async fn record_paths(&self) -> Result<Vec<Path>> {
        let dir = self.active_dir();
        let mut paths: Vec<Path> = self
            .store
            .list(Some(&dir))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|error| MendError::unavailable(format!("list {dir}"), error))?;
        paths.sort();
        Ok(paths)
    }

    async fn read_record(&self, path: &Path) -> Result<ActiveRecord> {
        let bytes = self
            .store
            .get(path)
            .await
            .map_err(|error| MendError::unavailable(format!("read {path}"), error))?
            .bytes()
            .await
            .map_err(|error| MendError::unavailable(format!("read {path}"), error))?;
        serde_json::from_slice(&bytes).map_err(|error| MendError::Corrupt {
            message: format!("{path} is unreadable: {error}"),
        })
    }

    /// Appends the next record, if the newest is still `after` (`Conflict` otherwise), with
    /// the request that made the change when it came under an idempotency key.
    pub async fn set_active(
        &self,
        after: Option<&ActiveRecord>,
        digest: &str,
        change: &str,
        now_ms: TimestampMs,
        recorded: Option<RecordedRequest>,
    ) -> Result<ActiveRecord> {
        let record = ActiveRecord {
            version: after.map_or(0, |record| record.version + 1),
            digest: digest.to_string(),
            previous: after.map(|record| record.digest.clone()),
            change: change.to_string(),
            changed_at_ms: now_ms,
            recorded,
            principal: crate::catalog::write_audit::current()
                .and_then(|scope| scope.principal.clone()),
        };
        let path = self
            .active_dir()
            .child(format!("{:020}.json", record.version));
        let body = serde_json::to_vec(&record).expect("records always serialise");
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(body), options)
            .await
        {
            Ok(_) => Ok(record),
            Err(object_store::Error::AlreadyExists { .. }) => Err(MendError::Conflict {
                message: "another operator changed the active policy first; look at `mend policy active` and try again".into(),
            }),
            Err(error) => Err(MendError::unavailable(format!("write {path}"), error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn swaps_append_records_and_a_lost_race_is_a_conflict() {
        let registry = PolicyRegistry::new(Arc::new(InMemory::new()), Path::default());
        assert_eq!(registry.active().await.unwrap(), None);
        let a = registry.put_component(b"component a").await.unwrap();
        let b = registry.put_component(b"component b").await.unwrap();
        assert_eq!(registry.put_component(b"component a").await.unwrap(), a);
        assert_eq!(registry.component(&a).await.unwrap(), b"component a");

        let first = registry
            .set_active(None, &a, "swap", 1, None)
            .await
            .unwrap();
        let second = registry
            .set_active(Some(&first), &b, "swap", 2, None)
            .await
            .unwrap();
        assert_eq!(second.previous.as_deref(), Some(a.as_str()));
        assert_eq!(registry.active().await.unwrap(), Some(second.clone()));

        let lost = registry.set_active(Some(&first), &a, "swap", 3, None).await;
        assert!(matches!(lost, Err(MendError::Conflict { .. })), "{lost:?}");
        assert_eq!(registry.active().await.unwrap(), Some(second));
    }

    #[tokio::test]
    async fn a_keyed_change_is_found_by_its_key_and_old_records_still_read() {
        let store = Arc::new(InMemory::new());
        let registry = PolicyRegistry::new(store.clone(), Path::default());
        let a = registry.put_component(b"component a").await.unwrap();
        // A record as a mend from before recorded requests wrote it.
        let old = serde_json::json!({"version": 0, "digest": a, "previous": null,
            "change": "initial", "changed_at_ms": 1});
        store
            .put(
                &Path::from("policies/active/00000000000000000000.json"),
                PutPayload::from(old.to_string().into_bytes()),
            )
            .await
            .unwrap();
        let first = registry.active().await.unwrap().unwrap();
        assert_eq!(first.recorded, None);
        let key = crate::catalog::RequestKey::new("swap-1", &("policy_swap", &a));
        let request = RecordedRequest::new(&key, &serde_json::json!({"answer": 1}), 2);
        let second = registry
            .set_active(Some(&first), &a, "swap", 2, Some(request.clone()))
            .await
            .unwrap();
        assert_eq!(registry.recorded("swap-1").await.unwrap(), Some(second));
        assert_eq!(registry.recorded("swap-2").await.unwrap(), None);
        let replayed: serde_json::Value = request.replay(&key).unwrap();
        assert_eq!(replayed["answer"], 1);
    }
}
