//! The errors of the mend library: typed, and honest about outcome.
//!
//! Every variant says whether the operation certainly did not happen
//! ([`MendError::certainly_not_applied`]). `Unavailable` and `Transient` are the only ones whose
//! outcome is unknown: the write may have landed, and a retry must be safe to repeat.

use std::fmt;

/// What a `NotFound` or `AlreadyExists` refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityKind {
    Dataset,
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

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MendError {
    #[error("{kind} not found: {}", ids.join(", "))]
    NotFound { kind: EntityKind, ids: Vec<String> },

    #[error("{kind} already exists: {id}")]
    AlreadyExists { kind: EntityKind, id: String },

    /// The request is valid but the catalog is not in the state it requires; nothing happened.
    #[error("failed precondition: {message}")]
    FailedPrecondition { message: String, ids: Vec<String> },

    /// The request itself is malformed; nothing happened.
    #[error("invalid argument: {message}")]
    InvalidArgument { message: String },

    /// An unresolved operation stands in the way; hand it to recovery and retry.
    #[error("recovery required: operation {operation_id} is unresolved")]
    RecoveryRequired { operation_id: String },

    /// The policy returned a decision that breaks an invariant; nothing was executed.
    #[error("policy decision rejected: {message}")]
    PolicyRejected { message: String },

    /// A policy, backend or host lacks a capability the request or policy needs. Nothing falls
    /// back to older semantics.
    #[error("capability {capability} is missing: {detail}")]
    CapabilityMissing { capability: String, detail: String },

    /// The policy component could not be loaded, trapped or hit a limit; nothing was executed.
    #[error(transparent)]
    Policy(#[from] PolicyError),

    /// Another writer changed the catalog first, too often to retry here; nothing happened.
    #[error("conflict: {message}; retry")]
    Conflict { message: String },

    /// The storage could not be reached or did not answer; the outcome is unknown.
    #[error("unavailable (outcome unknown): {message}")]
    Unavailable {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// A temporary failure with unknown outcome; retrying is safe.
    #[error("transient failure (outcome unknown): {message}")]
    Transient { message: String },

    /// Stored data is unreadable or contradicts itself; an operator must look.
    #[error("corrupt catalog data: {message}")]
    Corrupt { message: String },
}

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

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            message: message.into(),
        }
    }

    pub fn dataset_not_found(dataset_id: &str) -> Self {
        Self::NotFound {
            kind: EntityKind::Dataset,
            ids: vec![dataset_id.to_string()],
        }
    }

    pub fn splits_not_found(mut split_ids: Vec<String>) -> Self {
        split_ids.sort();
        split_ids.dedup();
        Self::NotFound {
            kind: EntityKind::Split,
            ids: split_ids,
        }
    }

    pub fn failed_precondition(message: impl Into<String>, mut ids: Vec<String>) -> Self {
        ids.sort();
        ids.dedup();
        Self::FailedPrecondition {
            message: message.into(),
            ids,
        }
    }

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

/// Why the policy component could not give a decision. Each is contained to that one decision
/// (or that one load); the host keeps serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    #[error("policy component could not be compiled: {message}")]
    Compile { message: String },

    #[error(
        "policy component imports {import}, which is not allowed: a policy gets no files, network, environment, clock or randomness"
    )]
    ForbiddenImport { import: String },

    #[error("policy component is incompatible with this host: {reason}")]
    Incompatible { reason: String },

    #[error("policy call {function} trapped: {message}")]
    Trap {
        function: &'static str,
        message: String,
    },

    #[error(
        "policy call {function} ran past its deadline of {limit:?}; the policy is looping or too slow"
    )]
    DeadlineExceeded {
        function: &'static str,
        limit: std::time::Duration,
    },

    #[error("policy call {function} exceeded its memory limit of {limit_bytes} bytes")]
    MemoryExhausted {
        function: &'static str,
        limit_bytes: usize,
    },

    #[error("policy call {function} returned {size} bytes, over the limit of {limit}")]
    OutputTooLarge {
        function: &'static str,
        size: usize,
        limit: usize,
    },
}
