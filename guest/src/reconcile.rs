//! Reconcile decisions: what becomes of an object in the bucket that no row describes.
//!
//! The host hands over only orphans it may act on: no row, named by no intent, older than the
//! staged grace period. It stages a row for each from the object's embedded header, create-only,
//! and then does what the policy says with the rows it won:
//!
//! - **adopt** (publish) an object that is whole (size and checksum as its header records) and
//!   belongs to the dataset's current incarnation: it is data some writer finished uploading,
//!   whose row was lost;
//! - **discard** (mark for deletion) anything else: a damaged object, or one left by an earlier
//!   dataset of the same name. Gc deletes it after the deletion grace period, so an operator has
//!   that long to look at it.

use alloc::string::String;
use alloc::vec::Vec;

use mend_contract::{OrphanObject, ReconcileAction, ReconcileDecision, ReconcileInput};

/// One action per orphan, in the input's order.
pub fn plan_reconcile(input: &ReconcileInput) -> Vec<ReconcileDecision> {
    input
        .orphans
        .iter()
        .map(|orphan| ReconcileDecision {
            split_id: orphan.split_id.clone(),
            action: action(orphan),
        })
        .collect()
}

fn action(orphan: &OrphanObject) -> ReconcileAction {
    if !orphan.intact {
        ReconcileAction::Discard(String::from(
            "its payload does not match the size and checksum in its header",
        ))
    } else if !orphan.same_incarnation {
        ReconcileAction::Discard(String::from(
            "it was written for an earlier dataset of the same name",
        ))
    } else {
        ReconcileAction::Adopt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orphan(id: &str, intact: bool, same_incarnation: bool) -> OrphanObject {
        OrphanObject {
            split_id: id.into(),
            same_incarnation,
            intact,
            metadata_json: "{}".into(),
            age_ms: 10_000,
        }
    }

    #[test]
    fn whole_objects_of_this_dataset_are_adopted_and_the_rest_discarded() {
        let input = ReconcileInput {
            dataset_id: "ds".into(),
            now_ms: 1,
            orphans: alloc::vec![
                orphan("whole", true, true),
                orphan("damaged", false, true),
                orphan("old", true, false),
            ],
        };
        let actions: Vec<(String, bool)> = plan_reconcile(&input)
            .into_iter()
            .map(|d| (d.split_id, d.action == ReconcileAction::Adopt))
            .collect();
        assert_eq!(
            actions,
            alloc::vec![
                ("whole".into(), true),
                ("damaged".into(), false),
                ("old".into(), false)
            ]
        );
    }
}
