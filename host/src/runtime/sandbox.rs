//! The sandbox one decision runs in: a fresh store with a memory limiter and an epoch deadline,
//! and the translation of whatever goes wrong inside it into a typed [`PolicyError`].

use std::time::Duration;

use wasmtime::{ResourceLimiter, Trap};

use crate::error::PolicyError;

/// Per-decision limits. Each decision gets a fresh instance, so these bound one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyLimits {
    /// Largest linear memory the component may grow to, in bytes.
    pub max_memory_bytes: usize,
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
            cpu_time_per_call: Duration::from_secs(1),
            max_output_bytes: 32 << 20,
        }
    }
}

/// The store's data: the limiter, which also remembers whether it refused a growth so that a
/// trap caused by that refusal is reported as memory exhaustion rather than a bare trap.
#[derive(Debug)]
pub(crate) struct SandboxState {
    max_memory_bytes: usize,
    pub(crate) memory_refused: bool,
}

impl SandboxState {
    pub(crate) fn new(limits: &PolicyLimits) -> Self {
        Self {
            max_memory_bytes: limits.max_memory_bytes,
            memory_refused: false,
        }
    }
}

impl ResourceLimiter for SandboxState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.max_memory_bytes;
        self.memory_refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a policy has no reason for a large one.
        Ok(desired <= 100_000)
    }

    fn instances(&self) -> usize {
        1
    }

    fn memories(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        4
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
