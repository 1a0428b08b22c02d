//! The errors of the mend library: typed, and honest about outcome.
//!
//! Every variant says whether the operation certainly did not happen
//! ([`MendError::certainly_not_applied`]). `Unavailable` and `Transient` are the only ones whose
//! outcome is unknown: the write may have landed, and a retry must be safe to repeat.

use std::fmt;

/// What a `NotFound` or `AlreadyExists` refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityKind {
    /// A dataset, named by its id.
    Dataset,
    /// A split, named by its id.
    Split,
    /// An operation's intent, named by its operation id.
    Intent,
}

impl fmt::Display for EntityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Dataset => "dataset",
            Self::Split => "split",
            Self::Intent => "intent",
        })
    }
}

/// How a step of an operation found the operation, when that is why it was refused
/// ([`MendError::FailedPrecondition`]'s `operation`). Serialized as its name (`published`,
/// `confirmed`, `ended`), as an HTTP answer's `operation` field carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OperationFound {
    /// It published: its splits are visible.
    Published,
    /// It confirmed its effects: it publishes (its writer's publish or recovery's roll-forward
    /// lands it), unless another operation publishes from the same checkpoint positions
    /// first; then it ends. Its publish answers which.
    Confirmed,
    /// It ended without publishing, and never will.
    Ended,
}

/// Everything the library can fail with. The variants are the kinds of failure a caller acts
/// on differently; [`MendError::code`] names each for JSON, metrics and exit codes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MendError {
    /// What the request names does not exist; nothing happened.
    #[error("{kind} not found: {}", ids.join(", "))]
    NotFound {
        /// What kind of thing is missing.
        kind: EntityKind,
        /// Every missing id, sorted.
        ids: Vec<String>,
    },

    /// What the request would create exists already; nothing happened.
    #[error("{kind} already exists: {id}")]
    AlreadyExists {
        /// What kind of thing exists.
        kind: EntityKind,
        /// Its id (with a word on what is in its place, for an object).
        id: String,
    },

    /// The request is valid but the catalog is not in the state it requires; nothing happened.
    #[error("failed precondition: {message}")]
    FailedPrecondition {
        /// What is not as required, and what to do about it.
        message: String,
        /// The splits (or partitions, or operation) at fault, sorted; empty when the
        /// precondition is about the dataset as a whole.
        ids: Vec<String>,
        /// A step of an operation refused because of how the operation stands (it published,
        /// confirmed, or ended): that, in structure as well as in words. A step that lost a
        /// race answers what the winner made of the operation here; `None` for any other
        /// precondition.
        operation: Option<OperationFound>,
    },

    /// The request itself is malformed; nothing happened.
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// Which input is wrong and what it must be.
        message: String,
    },

    /// An unresolved operation stands in the way; hand it to recovery and retry.
    #[error("recovery required: operation {operation_id} is unresolved")]
    RecoveryRequired {
        /// The operation recovery must settle first.
        operation_id: String,
    },

    /// The policy returned a decision that breaks an invariant; nothing was executed.
    #[error("policy decision rejected: {message}")]
    PolicyRejected {
        /// The decision and the invariant it breaks.
        message: String,
    },

    /// A policy, backend or host lacks a capability the request or policy needs. Nothing falls
    /// back to older semantics.
    #[error("capability {capability} is missing: {detail}")]
    CapabilityMissing {
        /// The capability's name, such as `stage.create-only`.
        capability: String,
        /// Who lacks it and what needed it.
        detail: String,
    },

    /// The policy component could not be loaded, trapped or hit a limit; nothing was executed.
    #[error(transparent)]
    Policy(#[from] PolicyError),

    /// Another writer changed the catalog first, too often to retry here; nothing happened.
    #[error("conflict: {message}; retry")]
    Conflict {
        /// What was contended for.
        message: String,
    },

    /// The storage could not be reached or did not answer; the outcome is unknown.
    #[error("unavailable (outcome unknown): {message}")]
    Unavailable {
        /// What mend was doing.
        message: String,
        /// The store's or database's own error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A temporary failure with unknown outcome; retrying is safe.
    #[error("transient failure (outcome unknown): {message}")]
    Transient {
        /// What failed.
        message: String,
    },

    /// Stored data is unreadable or contradicts itself; an operator must look.
    #[error("corrupt catalog data: {message}")]
    Corrupt {
        /// What is wrong with which stored thing.
        message: String,
    },
}

/// The library's result: a [`MendError`] by default.
pub type Result<T, E = MendError> = std::result::Result<T, E>;

impl MendError {
    /// True when the operation certainly had no durable effect.
    pub fn certainly_not_applied(&self) -> bool {
        !matches!(self, Self::Unavailable { .. } | Self::Transient { .. })
    }

    /// True when the same request may succeed if retried unchanged.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::Transient { .. } | Self::Conflict { .. }
        )
    }

    /// `InvalidArgument` with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            message: message.into(),
        }
    }

    /// `NotFound` naming the dataset.
    pub fn dataset_not_found(dataset_id: &str) -> Self {
        Self::NotFound {
            kind: EntityKind::Dataset,
            ids: vec![dataset_id.to_string()],
        }
    }

    /// `NotFound` naming the splits, sorted and deduplicated.
    pub fn splits_not_found(mut split_ids: Vec<String>) -> Self {
        split_ids.sort();
        split_ids.dedup();
        Self::NotFound {
            kind: EntityKind::Split,
            ids: split_ids,
        }
    }

    /// `FailedPrecondition` with `message` and the ids at fault, sorted and deduplicated.
    pub fn failed_precondition(message: impl Into<String>, mut ids: Vec<String>) -> Self {
        ids.sort();
        ids.dedup();
        Self::FailedPrecondition {
            message: message.into(),
            ids,
            operation: None,
        }
    }

    /// `FailedPrecondition` refusing a step of `operation_id` because of how the operation
    /// stands: `found`, said in `message` too.
    pub fn operation_refused(
        message: impl Into<String>,
        operation_id: &str,
        found: OperationFound,
    ) -> Self {
        Self::FailedPrecondition {
            message: message.into(),
            ids: vec![operation_id.to_string()],
            operation: Some(found),
        }
    }

    /// How the operation stood, when a step of it was refused because of that.
    pub fn operation_found(&self) -> Option<OperationFound> {
        match self {
            Self::FailedPrecondition { operation, .. } => *operation,
            _ => None,
        }
    }

    /// `Unavailable`: doing `message`, the store or database answered `source`.
    pub fn unavailable(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// A short stable name for the variant, for JSON output, metrics and exit codes.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "not_found",
            Self::AlreadyExists { .. } => "already_exists",
            Self::FailedPrecondition { .. } => "failed_precondition",
            Self::InvalidArgument { .. } => "invalid_argument",
            Self::RecoveryRequired { .. } => "recovery_required",
            Self::PolicyRejected { .. } => "policy_rejected",
            Self::CapabilityMissing { .. } => "capability_missing",
            Self::Policy(_) => "policy_failed",
            Self::Conflict { .. } => "conflict",
            Self::Unavailable { .. } => "unavailable",
            Self::Transient { .. } => "transient",
            Self::Corrupt { .. } => "corrupt",
        }
    }
}

/// How to build a policy without imports, said with every [`PolicyError::ForbiddenImport`].
pub const BUILD_WITHOUT_IMPORTS: &str = "To build one mend accepts: in Rust, a `#![no_std]` crate for wasm32-wasip2 \
     that uses no std::env, std::time, std::fs, std::net or random numbers (as guest/ does); in \
     JavaScript, componentize-js with every WASI feature disabled (`disableFeatures: ['stdio', \
     'random', 'clocks', 'http', 'fetch-event']`, or `jco componentize --disable all`), or \
     componentize-qjs with its WASI stubbed (`--stub-wasi --sync`), and no Date, Math.random or \
     console in the decisions (policies/js/ builds both ways).";

/// Why the policy component could not give a decision. Each is contained to that one decision
/// (or that one load); the host keeps serving.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The bytes are not a component wasmtime can compile.
    #[error("policy component could not be compiled: {message}")]
    Compile {
        /// wasmtime's diagnosis.
        message: String,
    },

    /// The component imports something outside the allowlist (WASI, say).
    #[error(
        "policy component imports {}, which a policy may not: it gets no files, network, environment, clock or randomness, only the contract's types. {BUILD_WITHOUT_IMPORTS}",
        .imports.join(", ")
    )]
    ForbiddenImport {
        /// Every import outside the allowlist, in the component's order.
        imports: Vec<String>,
    },

    /// One instantiation of the component needs more of a decision's sandbox than the limits
    /// allow: more core instances, memories or tables, or more memory to start with. Found when
    /// the component is loaded, before any of it runs.
    #[error(
        "policy component needs {needs}, more than a decision's sandbox allows: {}. Raise the setting (within its range) or build the policy from fewer modules",
        .over.join("; ")
    )]
    ExceedsSandbox {
        /// What one instantiation of the component creates.
        needs: crate::runtime::shape::ComponentShape,
        /// Each limit it is over: what it needs, the setting, and what the setting allows.
        over: Vec<String>,
    },

    /// The component's contract does not match this host's: ABI, semantics revision,
    /// capabilities, or a `describe()` that lies.
    #[error("policy component is incompatible with this host: {reason}")]
    Incompatible {
        /// What does not match.
        reason: String,
    },

    /// The guest trapped (a panic, an out-of-bounds access, an unreachable).
    #[error("policy call {function} trapped: {message}")]
    Trap {
        /// The contract function called.
        function: &'static str,
        /// The trap as wasmtime reports it.
        message: String,
    },

    /// The call ran past its epoch deadline.
    #[error(
        "policy call {function} ran past its deadline of {limit:?}; the policy is looping or too slow"
    )]
    DeadlineExceeded {
        /// The contract function called.
        function: &'static str,
        /// The deadline it ran past.
        limit: std::time::Duration,
    },

    /// The guest tried to grow its memory past the limit.
    #[error("policy call {function} exceeded its memory limit of {limit_bytes} bytes")]
    MemoryExhausted {
        /// The contract function called.
        function: &'static str,
        /// The memory limit it asked to grow past.
        limit_bytes: usize,
    },

    /// The answer was larger than the output limit.
    #[error("policy call {function} returned {size} bytes, over the limit of {limit}")]
    OutputTooLarge {
        /// The contract function called.
        function: &'static str,
        /// How many bytes it returned.
        size: usize,
        /// The output limit.
        limit: usize,
    },

    /// Every sandbox of the process's pool was in use for as long as a decision may wait for
    /// one: more decisions at once than [`crate::runtime::CONCURRENT_DECISIONS`].
    #[error(
        "policy call {function} found all {slots} sandboxes busy for {waited:?}; too many decisions at once in this process"
    )]
    Busy {
        /// The contract function that was to be called.
        function: &'static str,
        /// The size of the pool.
        slots: u32,
        /// How long it waited for a sandbox.
        waited: std::time::Duration,
    },
}
