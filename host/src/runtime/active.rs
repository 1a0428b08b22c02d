//! The active policy, swapped at runtime: prepare, then publish.
//!
//! Preparing a swap (loading and compiling the candidate, its handshake, replaying recorded
//! decisions and golden scenarios against it) happens entirely to the side; nothing changes
//! until [`ActivePolicy::publish`] stores the candidate in one step. An operation reads the
//! active policy once, when it starts, and keeps that one to its end (the engine pins it), so
//! every audit record of an operation names one digest. The policy replaced stays ready:
//! [`ActivePolicy::rollback`] brings it back, again in one step.

use std::sync::RwLock;

use super::PolicyRuntime;
use crate::error::{MendError, Result};

/// The policy decisions are made with now, and the one before it.
#[derive(Debug)]
pub struct ActivePolicy {
    // A std lock held only to clone or replace two `Arc`s: never across an await.
    slots: RwLock<Slots>,
}

#[derive(Debug, Clone)]
struct Slots {
    current: PolicyRuntime,
    previous: Option<PolicyRuntime>,
    /// Grows with every swap and rollback, so that a swap prepared against one policy is not
    /// published over another.
    generation: u64,
    /// The version of the deployment's policy registry record `current` came from, when it
    /// came from one: a record read before a newer one was installed is older news, never
    /// installed over it.
    registry_version: Option<u64>,
}

impl Slots {
    /// Makes `policy` current; the one it replaces becomes the previous one.
    fn install(&mut self, policy: PolicyRuntime) -> Swapped {
        let from = std::mem::replace(&mut self.current, policy);
        self.generation += 1;
        let swapped = Swapped {
            from_digest: from.digest().to_string(),
            to_digest: self.current.digest().to_string(),
            generation: self.generation,
        };
        self.previous = Some(from);
        swapped
    }
}

/// What a swap or rollback replaced, and with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swapped {
    /// The policy active before.
    pub from_digest: String,
    /// The policy active now.
    pub to_digest: String,
    /// Counts the changes of the active policy, from 0.
    pub generation: u64,
}

impl ActivePolicy {
    /// The active policy of a new engine: `initial`, until a swap.
    pub fn new(initial: PolicyRuntime) -> Self {
        Self {
            slots: RwLock::new(Slots {
                current: initial,
                previous: None,
                generation: 0,
                registry_version: None,
            }),
        }
    }

    fn read(&self) -> Slots {
        self.slots
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The policy to decide with now. Cheap: a clone of an `Arc`.
    pub fn current(&self) -> PolicyRuntime {
        self.read().current
    }

    /// The policy a rollback would restore, if any.
    pub fn previous(&self) -> Option<PolicyRuntime> {
        self.read().previous
    }

    /// The current generation: pass it to [`ActivePolicy::publish`] to swap only if nothing
    /// else swapped since.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    /// Makes `candidate` the active policy, in one step, if the generation is still
    /// `expected_generation` (`Conflict` otherwise: another swap or rollback won, and the
    /// candidate was prepared against a policy no longer active). The replaced policy stays
    /// ready for [`ActivePolicy::rollback`].
    pub fn publish(&self, candidate: PolicyRuntime, expected_generation: u64) -> Result<Swapped> {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slots.generation != expected_generation {
            return Err(MendError::Conflict {
                message: format!(
                    "the active policy changed (generation {} is now {}) while the swap to {} was prepared; prepare it again",
                    expected_generation,
                    slots.generation,
                    candidate.digest()
                ),
            });
        }
        Ok(slots.install(candidate))
    }

    /// Makes `policy` active whatever the generation: for a change this process decides
    /// alone (a demo, a test). A deployment's changes go through
    /// [`ActivePolicy::install_registry_record`].
    pub fn install(&self, policy: PolicyRuntime) -> Swapped {
        self.slots
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .install(policy)
    }

    /// Makes `policy`, the policy of the deployment registry's record `version`, active if no
    /// record as new or newer was installed before: `None` when one was, and nothing changed.
    ///
    /// One check under the lock, because a process learns of the registry's records in two
    /// ways that race: its own swap or rollback, and the watcher that follows the registry. A
    /// watcher that read record 4 before this process wrote record 5 must not install 4's
    /// policy over 5's after the swap has answered.
    pub fn install_registry_record(&self, policy: PolicyRuntime, version: u64) -> Option<Swapped> {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slots
            .registry_version
            .is_some_and(|installed| installed >= version)
        {
            return None;
        }
        slots.registry_version = Some(version);
        if slots.current.digest() == policy.digest() {
            // The record names the policy already running (the first record a follower
            // reads, usually): nothing to swap, and no generation spent.
            return Some(Swapped {
                from_digest: policy.digest().to_string(),
                to_digest: policy.digest().to_string(),
                generation: slots.generation,
            });
        }
        Some(slots.install(policy))
    }

    /// The version of the registry record the active policy came from, if it came from one.
    pub fn registry_version(&self) -> Option<u64> {
        self.read().registry_version
    }

    /// The version of the registry record installed last (if any) and the policy running,
    /// read together: a swap between two separate reads could pair one with the other's.
    pub fn installed(&self) -> (Option<u64>, PolicyRuntime) {
        let slots = self.read();
        (slots.registry_version, slots.current)
    }

    /// Restores the policy the last swap replaced; the one it replaces becomes the previous
    /// one, so a second rollback undoes the first. `FailedPrecondition` when there is none.
    pub fn rollback(&self) -> Result<Swapped> {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(previous) = slots.previous.take() else {
            return Err(MendError::failed_precondition(
                "there is no previous policy to roll back to: no swap happened in this process",
                Vec::new(),
            ));
        };
        Ok(slots.install(previous))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::CAUTIOUS_POLICY_WASM;

    #[test]
    fn a_registry_record_older_than_the_installed_one_is_never_installed() {
        let default = PolicyRuntime::default_policy().unwrap();
        let cautious = PolicyRuntime::load_with(
            CAUTIOUS_POLICY_WASM,
            &crate::runtime::LoadOptions::default(),
        )
        .unwrap();
        let active = ActivePolicy::new(default.clone());

        // The first record names the policy already running: nothing is swapped.
        let first = active.install_registry_record(default.clone(), 1).unwrap();
        assert_eq!(first.from_digest, first.to_digest);
        assert_eq!(first.generation, 0);
        // This process's own swap wrote record 2 ...
        let swapped = active.install_registry_record(cautious.clone(), 2).unwrap();
        assert_eq!(swapped.to_digest, cautious.digest());
        // ... while its watcher had read record 1: installing it now is refused.
        assert_eq!(active.install_registry_record(default.clone(), 1), None);
        assert_eq!(active.install_registry_record(default.clone(), 2), None);
        assert_eq!(active.current().digest(), cautious.digest());
        assert_eq!(active.registry_version(), Some(2));
        // A newer record (a rollback elsewhere) is.
        let rolled_back = active.install_registry_record(default.clone(), 3).unwrap();
        assert_eq!(rolled_back.to_digest, default.digest());
        assert_eq!(active.registry_version(), Some(3));
    }
}
