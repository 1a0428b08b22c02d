//! Objects this process uploaded and checked for an operation still in flight, so that the
//! operation's publish need not read each one back from the store; and the intent of each
//! operation this process began, with its dataset's incarnation, so that its uploads need
//! not read them to build each object's header, nor its end the record of its begin to know
//! its own rows.
//!
//! An intent's plan never changes under its operation id (a begin sent again with another
//! plan is refused, and an operation that ended is never begun again), so the plan
//! remembered is the plan stored, and a begin that wrote it owns every row it plans. Its
//! phase and lease do change, and are never read from here: each step reads or checks them
//! in the catalog.
//!
//! An upload through mend ([`Engine::upload_object`](super::Engine::upload_object)) hashes
//! every byte against the plan and writes the object put-if-absent; an object already there
//! counts only if it is byte for byte the one planned. From then on nothing of mend's removes
//! or replaces that object while its operation can still publish: objects are never
//! overwritten, gc deletes only the objects of marked rows (the operation's rows are staged,
//! invariant 2), and abort and abandonment fence the operation before they delete anything,
//! so its confirm fails. Reading the object back at publish would tell this process nothing
//! it does not know; on a remote store it costs a request per split.
//!
//! The memory is a shortcut, never the truth:
//! - it is this process's only: a publish sent to another replica, or to this one after a
//!   restart, reads every object back;
//! - it answers only for an operation whose every planned object it holds, each with the
//!   planned size and checksum, so one object written straight to the store by the client
//!   makes the publish read them all;
//! - it is bounded ([`MAX_REMEMBERED_OBJECTS`], an intent counting as one object per row it
//!   plans): the operations remembered longest ago are forgotten first, as are those that
//!   publish or abort.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::intent::Intent;

/// At most this many objects are remembered, over all operations (about 100 bytes each), an
/// intent counting as one per row it plans.
pub const MAX_REMEMBERED_OBJECTS: usize = 100_000;

type OperationKey = (String, String);
/// An operation's remembered objects: split id to (size, checksum).
type ObjectsBySplit = BTreeMap<String, (u64, String)>;

/// What is remembered of one operation.
#[derive(Debug, Default)]
struct Operation {
    /// When it was first remembered ([`Remembered::by_age`]).
    age: u64,
    objects: ObjectsBySplit,
    /// The intent as this process began it, and its dataset's uid.
    intent: Option<(Intent, String)>,
}

impl Operation {
    /// What it counts against [`MAX_REMEMBERED_OBJECTS`].
    fn weight(&self) -> usize {
        self.objects.len()
            + self
                .intent
                .as_ref()
                .map_or(0, |(intent, _)| intent_weight(intent))
    }
}

fn intent_weight(intent: &Intent) -> usize {
    intent.effects.stage.len().max(1)
}

#[derive(Debug, Default)]
pub(crate) struct UploadedObjects {
    // A std mutex: held for a few map operations, never across an await.
    inner: Mutex<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    /// Per (dataset, operation): when it was first remembered, its objects by split id, each
    /// with its size and checksum, and its intent.
    operations: HashMap<OperationKey, Operation>,
    /// The operations by when they were first remembered, oldest first.
    by_age: BTreeMap<u64, OperationKey>,
    next_age: u64,
    /// The weight of everything remembered ([`Operation::weight`]).
    objects: usize,
}

impl Remembered {
    /// The entry of `key`, made (the youngest) if there is none.
    fn entry(&mut self, key: OperationKey) -> &mut Operation {
        if !self.operations.contains_key(&key) {
            let age = self.next_age;
            self.next_age += 1;
            self.by_age.insert(age, key.clone());
            self.operations.insert(
                key.clone(),
                Operation {
                    age,
                    ..Operation::default()
                },
            );
        }
        self.operations.get_mut(&key).expect("inserted above")
    }

    /// Forgets the operations remembered longest ago until the weight is within the bound.
    fn evict(&mut self) {
        while self.objects > MAX_REMEMBERED_OBJECTS {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            if let Some(operation) = self.operations.remove(&oldest) {
                self.objects -= operation.weight();
            }
        }
    }
}

impl UploadedObjects {
    /// Remembers that this process wrote (or found, byte for byte as planned) an object of
    /// the operation.
    pub(crate) fn remember(
        &self,
        dataset_id: &str,
        operation_id: &str,
        split_id: &str,
        size: u64,
        checksum: &str,
    ) {
        let mut inner = self.inner.lock().expect("no panic while the lock is held");
        let key = (dataset_id.to_string(), operation_id.to_string());
        let added = inner
            .entry(key)
            .objects
            .insert(split_id.to_string(), (size, checksum.to_string()))
            .is_none();
        if added {
            inner.objects += 1;
        }
        inner.evict();
    }

    /// Remembers the intent of an operation this process began, and its dataset's uid.
    pub(crate) fn remember_intent(&self, intent: &Intent, dataset_uid: &str) {
        let mut inner = self.inner.lock().expect("no panic while the lock is held");
        let key = (intent.dataset_id.clone(), intent.operation_id.clone());
        let entry = inner.entry(key);
        let before = entry
            .intent
            .as_ref()
            .map_or(0, |(intent, _)| intent_weight(intent));
        entry.intent = Some((intent.clone(), dataset_uid.to_string()));
        inner.objects = inner.objects - before + intent_weight(intent);
        inner.evict();
    }

    /// The intent of the operation as this process began it, and its dataset's uid, if it
    /// remembers them: its plan is the stored one, its phase and lease may be stale.
    pub(crate) fn begun(&self, dataset_id: &str, operation_id: &str) -> Option<(Intent, String)> {
        let inner = self.inner.lock().expect("no panic while the lock is held");
        let key = (dataset_id.to_string(), operation_id.to_string());
        inner.operations.get(&key)?.intent.clone()
    }

    /// Whether this process put (or read back) this object of the operation, as planned.
    pub(crate) fn holds(
        &self,
        dataset_id: &str,
        operation_id: &str,
        split_id: &str,
        size: u64,
        checksum: &str,
    ) -> bool {
        let inner = self.inner.lock().expect("no panic while the lock is held");
        let key = (dataset_id.to_string(), operation_id.to_string());
        inner
            .operations
            .get(&key)
            .and_then(|operation| operation.objects.get(split_id))
            .is_some_and(|(held_size, held_checksum)| {
                *held_size == size && held_checksum == checksum
            })
    }

    /// Whether this process put every object the intent plans, each as planned.
    pub(crate) fn all_in_place(&self, intent: &Intent) -> bool {
        let inner = self.inner.lock().expect("no panic while the lock is held");
        let key = (intent.dataset_id.clone(), intent.operation_id.clone());
        let Some(operation) = inner.operations.get(&key) else {
            return false;
        };
        intent.effects.objects.iter().all(|planned| {
            operation
                .objects
                .get(&planned.split_id)
                .is_some_and(|(size, checksum)| {
                    *size == planned.size && *checksum == planned.checksum
                })
        })
    }

    /// Forgets an operation that published or ended.
    pub(crate) fn forget(&self, dataset_id: &str, operation_id: &str) {
        let mut inner = self.inner.lock().expect("no panic while the lock is held");
        let key = (dataset_id.to_string(), operation_id.to_string());
        if let Some(operation) = inner.operations.remove(&key) {
            inner.by_age.remove(&operation.age);
            inner.objects -= operation.weight();
        }
    }

    #[cfg(test)]
    fn remembered_objects(&self) -> usize {
        self.inner.lock().unwrap().objects
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{OperationKind, PlannedObject};

    fn intent(operation_id: &str, objects: &[(&str, u64, &str)]) -> Intent {
        let mut intent = Intent::armed(
            operation_id.to_string(),
            OperationKind::Commit,
            "ds",
            "node",
            0,
            60_000,
        );
        intent.effects.objects = objects
            .iter()
            .map(|(split_id, size, checksum)| PlannedObject {
                split_id: split_id.to_string(),
                size: *size,
                checksum: checksum.to_string(),
            })
            .collect();
        intent
    }

    #[test]
    fn answers_only_for_every_object_as_planned() {
        let uploaded = UploadedObjects::default();
        let planned = intent("op", &[("a", 10, "sha256:aa"), ("b", 20, "sha256:bb")]);
        assert!(!uploaded.all_in_place(&planned), "nothing remembered yet");
        uploaded.remember("ds", "op", "a", 10, "sha256:aa");
        assert!(!uploaded.all_in_place(&planned), "b is not remembered");
        uploaded.remember("ds", "op", "b", 20, "sha256:other");
        assert!(!uploaded.all_in_place(&planned), "b has another checksum");
        uploaded.remember("ds", "op", "b", 20, "sha256:bb");
        assert!(uploaded.all_in_place(&planned));
        assert!(
            !uploaded.all_in_place(&intent("op", &[("a", 11, "sha256:aa")])),
            "another size"
        );
        assert!(
            !uploaded.all_in_place(&Intent {
                dataset_id: "other".into(),
                ..planned.clone()
            }),
            "another dataset"
        );
        uploaded.forget("ds", "op");
        assert!(!uploaded.all_in_place(&planned));
        assert_eq!(uploaded.remembered_objects(), 0);
    }

    #[test]
    fn an_intent_is_remembered_until_its_operation_is_forgotten() {
        let uploaded = UploadedObjects::default();
        let begun = intent("op", &[("a", 10, "sha256:aa")]);
        assert_eq!(uploaded.begun("ds", "op").map(|(intent, _)| intent), None);
        uploaded.remember_intent(&begun, "uid");
        uploaded.remember("ds", "op", "a", 10, "sha256:aa");
        assert_eq!(
            uploaded.begun("ds", "op").map(|(intent, _)| intent),
            Some(begun.clone())
        );
        assert_eq!(
            uploaded.begun("other", "op").map(|(intent, _)| intent),
            None,
            "another dataset"
        );
        assert_eq!(
            uploaded.remembered_objects(),
            2,
            "the object and the intent"
        );
        uploaded.remember_intent(&begun, "uid");
        assert_eq!(uploaded.remembered_objects(), 2, "remembered once");
        uploaded.forget("ds", "op");
        assert_eq!(uploaded.begun("ds", "op").map(|(intent, _)| intent), None);
        assert_eq!(uploaded.remembered_objects(), 0);
    }

    #[test]
    fn the_oldest_operations_go_first_past_the_bound() {
        let uploaded = UploadedObjects::default();
        let per_operation = 1000;
        let operations = MAX_REMEMBERED_OBJECTS / per_operation + 1;
        for op in 0..operations {
            for split in 0..per_operation {
                uploaded.remember("ds", &format!("op{op}"), &format!("s{split}"), 1, "c");
            }
        }
        assert_eq!(uploaded.remembered_objects(), MAX_REMEMBERED_OBJECTS);
        let first = intent("op0", &[("s0", 1, "c")]);
        let last = intent(&format!("op{}", operations - 1), &[("s0", 1, "c")]);
        assert!(!uploaded.all_in_place(&first), "the oldest was forgotten");
        assert!(uploaded.all_in_place(&last));
        // Forgetting what was evicted already changes nothing.
        uploaded.forget("ds", "op0");
        assert_eq!(uploaded.remembered_objects(), MAX_REMEMBERED_OBJECTS);
    }
}
