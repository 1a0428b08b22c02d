//! The sandbox one decision runs in: a fresh store with a memory limiter and an epoch deadline,
//! the pool its instance is allocated from, and the translation of whatever goes wrong inside
//! it into a typed [`PolicyError`].
//!
//! Every decision still gets a fresh instance: fresh linear memory initialised from the
//! component's image, fresh globals and tables. The pool only keeps the virtual memory of each
//! slot mapped between decisions, so that an instance is set up and torn down without an
//! `mmap`/`munmap` (a slot's memory is reset to the image when its decision ends). The
//! `remember` behaviour of the hostile test policy tries to carry state from one decision to
//! the next and finds none.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use wasmtime::{ResourceLimiter, Trap};

use crate::error::PolicyError;

/// Per-decision limits. Each decision gets a fresh instance, so these bound one call.
///
/// The counts bound what one instantiation of the component may create: a policy built as one
/// Rust module needs one core instance, one memory and a table; a composed one (a JavaScript
/// engine with its shims, components wired together) needs several. A component over them is
/// refused when it is loaded ([`super::ComponentShape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyLimits {
    /// Most memory the component's memories may hold together, in bytes.
    pub max_memory_bytes: usize,
    /// Most core instances one instantiation may create.
    pub max_core_instances: u32,
    /// Most linear memories those instances may define together.
    pub max_memories: u32,
    /// Most tables those instances may define together.
    pub max_tables: u32,
    /// Time one call may run before it is interrupted. Enforced in epoch ticks of
    /// [`EPOCH_TICK`](super::EPOCH_TICK), so the bound is rounded up to a whole tick; zero
    /// interrupts a call at its first instruction.
    pub cpu_time_per_call: Duration,
    /// Largest output one call may return, in bytes of strings plus entries.
    pub max_output_bytes: usize,
}

impl Default for PolicyLimits {
    fn default() -> Self {
        Self {
            max_memory_bytes: 64 << 20,
            max_core_instances: 16,
            max_memories: 4,
            max_tables: 16,
            cpu_time_per_call: Duration::from_secs(1),
            max_output_bytes: 32 << 20,
        }
    }
}

/// The most elements in one table.
pub(crate) const TABLE_ELEMENTS: usize = 100_000;

/// The store's data: the limiter, which also remembers whether it refused a growth so that a
/// trap caused by that refusal is reported as memory exhaustion rather than a bare trap.
#[derive(Debug)]
pub(crate) struct SandboxState {
    limits: PolicyLimits,
    /// Bytes every memory of the instance holds together, as the limiter has allowed them.
    memory_bytes: usize,
    /// The growth allowed last, taken back if the memory then fails to grow.
    last_growth: usize,
    pub(crate) memory_refused: bool,
}

impl SandboxState {
    pub(crate) fn new(limits: &PolicyLimits) -> Self {
        Self {
            limits: *limits,
            memory_bytes: 0,
            last_growth: 0,
            memory_refused: false,
        }
    }
}

impl ResourceLimiter for SandboxState {
    /// Called for every memory when it is created (from 0 to its initial size) and at every
    /// growth: the sum of the growths is what all the memories hold, and the limit is on that
    /// sum, so a composed component has the same budget as a single module.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.memory_bytes.saturating_add(growth);
        let allowed = total <= self.limits.max_memory_bytes;
        self.memory_refused |= !allowed;
        if allowed {
            self.memory_bytes = total;
            self.last_growth = growth;
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_bytes = self.memory_bytes.saturating_sub(self.last_growth);
        self.last_growth = 0;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a policy has no reason for a large one.
        Ok(desired <= TABLE_ELEMENTS)
    }

    // The counts were checked when the component was loaded; these hold them true anyway.
    fn instances(&self) -> usize {
        self.limits.max_core_instances as usize
    }

    fn memories(&self) -> usize {
        self.limits.max_memories as usize
    }

    fn tables(&self) -> usize {
        self.limits.max_tables as usize
    }
}

/// How many decisions may run at once in one process: the pool holds this many sandboxes.
/// Each reserves the virtual address space of the largest memory a policy may be allowed
/// (`limits.policy_memory_bytes`, at most 4 GiB, plus guard pages); only the pages a decision
/// touches are ever resident.
pub const CONCURRENT_DECISIONS: u32 = 128;

/// How long a decision waits for a free sandbox when all are in use before it fails with
/// [`PolicyError::Busy`]. A sandbox is held for one call, which its CPU deadline bounds.
pub(crate) const SANDBOX_WAIT: Duration = Duration::from_secs(10);

/// The pool's sandboxes as a counting semaphore. wasmtime fails an instantiation when its pool
/// is exhausted; waiting here first turns a burst of decisions into a short queue instead.
/// Decisions are synchronous and never nest, so a std mutex and condvar suffice.
pub(crate) struct Sandboxes {
    in_use: Mutex<u32>,
    freed: Condvar,
}

/// One sandbox of the pool, given back when dropped.
pub(crate) struct SandboxPermit<'a> {
    sandboxes: &'a Sandboxes,
}

impl Sandboxes {
    pub(crate) const fn new() -> Self {
        Self {
            in_use: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Takes a sandbox, waiting up to `wait` for one.
    pub(crate) fn take(
        &self,
        function: &'static str,
        wait: Duration,
    ) -> Result<SandboxPermit<'_>, PolicyError> {
        let started = Instant::now();
        let mut in_use = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        while *in_use >= CONCURRENT_DECISIONS {
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(PolicyError::Busy {
                    function,
                    slots: CONCURRENT_DECISIONS,
                    waited: wait,
                });
            }
            in_use = self
                .freed
                .wait_timeout(in_use, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *in_use += 1;
        Ok(SandboxPermit { sandboxes: self })
    }
}

impl Drop for SandboxPermit<'_> {
    fn drop(&mut self) {
        let mut in_use = self
            .sandboxes
            .in_use
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *in_use -= 1;
        self.sandboxes.freed.notify_one();
    }
}

/// Classifies an error from inside a call.
pub(crate) fn call_error(
    function: &'static str,
    error: wasmtime::Error,
    state: &SandboxState,
    limits: &PolicyLimits,
) -> PolicyError {
    if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
        return PolicyError::DeadlineExceeded {
            function,
            limit: limits.cpu_time_per_call,
        };
    }
    if state.memory_refused {
        return PolicyError::MemoryExhausted {
            function,
            limit_bytes: limits.max_memory_bytes,
        };
    }
    PolicyError::Trap {
        function,
        message: format!("{error:#}"),
    }
}

/// Refuses an output larger than the limit.
pub(crate) fn check_output_size(
    function: &'static str,
    size: usize,
    limits: &PolicyLimits,
) -> Result<(), PolicyError> {
    if size > limits.max_output_bytes {
        return Err(PolicyError::OutputTooLarge {
            function,
            size,
            limit: limits.max_output_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pool_makes_a_decision_wait_then_fail_busy() {
        let sandboxes = Sandboxes::new();
        let held: Vec<_> = (0..CONCURRENT_DECISIONS)
            .map(|_| sandboxes.take("plan-stage", Duration::ZERO).expect("free"))
            .collect();
        let error = sandboxes
            .take("plan-stage", Duration::from_millis(20))
            .err()
            .expect("the pool is full");
        assert!(
            matches!(error, PolicyError::Busy { function: "plan-stage", slots, .. } if slots == CONCURRENT_DECISIONS),
            "{error:?}"
        );

        // A sandbox given back while a decision waits is the one it gets.
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                sandboxes
                    .take("plan-stage", Duration::from_secs(10))
                    .is_ok()
            });
            std::thread::sleep(Duration::from_millis(20));
            drop(held);
            assert!(
                waiter.join().expect("waiter"),
                "the waiter got the freed sandbox"
            );
        });
    }
}
