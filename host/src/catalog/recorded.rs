//! Recorded requests: what makes a retried request answer what the first one answered.
//!
//! A client that sends a mutating request and loses the answer (its connection dropped, the
//! server died, a proxy timed out) cannot tell whether the request took effect. Sending it
//! again must be safe and must tell the truth: a publish that landed answers its result again,
//! never "splits to publish are not staged". So a request carrying an idempotency key has its
//! result recorded **in the same atomic step as its effect** (the same Postgres transaction,
//! the same commit of the object-store log): there is no moment at which the effect has
//! landed and the record has not. A later request with the same key finds the record inside
//! its own atomic step and answers the recorded result without executing anything.
//!
//! A key is bound to the request it was first used for by a digest of that request: the same
//! key with another request is refused (`InvalidArgument`), never answered with the first
//! request's result. Records are kept per dataset and forgotten by gc once older than the
//! dataset's request-record retention.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{MendError, Result};
use crate::model::TimestampMs;
use crate::objects::format::sha256_of_json;

/// An idempotency key and the digest of the request it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestKey {
    /// The client's key (`Idempotency-Key`), or `op:<operation id>` for an operation's steps.
    pub key: String,
    /// `sha256:<hex>` of the request's canonical JSON: what the key was first used for.
    pub request_digest: String,
}

impl RequestKey {
    /// The key `key` for `request`, digested from its JSON form.
    pub fn new(key: impl Into<String>, request: &impl Serialize) -> Self {
        Self {
            key: key.into(),
            request_digest: sha256_of_json(request),
        }
    }
}

/// A request's result, recorded with its effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordedRequest {
    /// The client's key, or mend's own for an operation's step.
    pub key: String,
    /// `sha256:<hex>` of the request the key was first used for.
    pub request_digest: String,
    /// The result as the backend returned it, as JSON.
    pub result: serde_json::Value,
    /// When it was recorded; gc forgets records after a week.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub recorded_at_ms: TimestampMs,
}

impl RecordedRequest {
    /// The record of `result` for `key`.
    pub fn new(key: &RequestKey, result: &impl Serialize, now_ms: TimestampMs) -> Self {
        Self {
            key: key.key.clone(),
            request_digest: key.request_digest.clone(),
            result: serde_json::to_value(result).expect("results are plain data"),
            recorded_at_ms: now_ms,
        }
    }

    /// The recorded result, for a request with `key`: refused if the key was first used for
    /// another request.
    pub fn replay<T: DeserializeOwned>(&self, key: &RequestKey) -> Result<T> {
        self.replay_named(key, &key.key)
    }

    /// [`replay`](Self::replay) of a record kept under a key mend derived from the client's
    /// (a config apply's promotion, `op:<operation id>:promote`): a refusal names `client_key`,
    /// the key the client sent.
    pub fn replay_named<T: DeserializeOwned>(
        &self,
        key: &RequestKey,
        client_key: &str,
    ) -> Result<T> {
        if self.request_digest != key.request_digest {
            return Err(MendError::invalid(format!(
                "idempotency key {client_key} was first used for another request (at {} ms); a \
                 key names one request: send a new request with a new key",
                self.recorded_at_ms
            )));
        }
        serde_json::from_value(self.result.clone()).map_err(|error| MendError::Corrupt {
            message: format!(
                "the recorded result of idempotency key {} is unreadable: {error}",
                key.key
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_replays_its_own_request_and_refuses_another() {
        let key = RequestKey::new("k1", &("publish", ["s1"]));
        let record = RecordedRequest::new(&key, &vec!["s1".to_string()], 7);
        assert_eq!(record.replay::<Vec<String>>(&key).unwrap(), vec!["s1"]);
        let other = RequestKey::new("k1", &("publish", ["s2"]));
        let error = record.replay::<Vec<String>>(&other).unwrap_err();
        assert!(
            matches!(&error, MendError::InvalidArgument { message } if message.contains("another request")),
            "{error:?}"
        );
    }
}
