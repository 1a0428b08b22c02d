//! `upload`: one object streamed into the store, checked against its plan, then its record.

use std::collections::BTreeSet;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::WriteMultipart;

use crate::engine::Engine;
use crate::error::{EntityKind, MendError, Result};
use crate::intent::{Intent, IntentPhase, PlannedObject};
use crate::objects::PutOutcome;
use crate::objects::format::{self, HEADER_FORMAT_VERSION, SplitObjectHeader};
use crate::validate;

use super::{ObjectStatus, ObjectToPut, ObjectUploadUrl, UploadResult, ended};

/// Objects up to this size are uploaded in one put-if-absent, buffered; larger ones stream
/// through a multipart upload, one part of this size in memory at a time.
pub const SINGLE_PUT_BYTES: u64 = 8 << 20;
/// Parts of a multipart upload written at once.
const PARTS_IN_FLIGHT: usize = 2;

impl Engine {
    /// Presigned `PUT` URLs for objects of an operation that a writer puts straight into the
    /// store (S3 and S3-compatible stores; a local directory or memory cannot presign, and
    /// answers `CapabilityMissing`: upload through mend there). Each URL is signed over
    /// `If-None-Match: *` and the whole object's sha256 as the writer computed it, so the store
    /// takes that one object once and nothing else ([`crate::objects::UploadSigner`]). The
    /// operation must still take objects (armed, its lease not run out); the URLs work until
    /// its lease ends, at most an hour. Publish still reads every such object back and hashes
    /// its payload against the plan.
    #[tracing::instrument(
        name = "operation_upload_urls",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id)
    )]
    pub async fn upload_urls(
        &self,
        dataset_id: &str,
        operation_id: &str,
        objects: &[ObjectToPut],
    ) -> Result<Vec<ObjectUploadUrl>> {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        // An operation plans at most a stage batch of objects, each once.
        if objects.len() > self.options.max_stage_batch {
            return Err(MendError::invalid(format!(
                "{} objects asked for; an operation plans at most {} (limits.max_stage_batch)",
                objects.len(),
                self.options.max_stage_batch
            )));
        }
        let mut digests = Vec::with_capacity(objects.len());
        let mut seen = BTreeSet::new();
        for (index, object) in objects.iter().enumerate() {
            validate::split_id(&object.split_id)?;
            if !seen.insert(object.split_id.as_str()) {
                return Err(MendError::invalid(format!(
                    "objects[{index}]: split {} is asked for twice",
                    object.split_id
                )));
            }
            digests.push(object_digest(index, &object.object_sha256)?);
        }
        if !self.objects.presigns() {
            return Err(MendError::CapabilityMissing {
                capability: "objects.presigned-upload".into(),
                detail: format!(
                    "the objects store of dataset {dataset_id} cannot presign uploads (a local directory or memory): upload each object through mend instead"
                ),
            });
        }
        let intent = self.live_intent(dataset_id, operation_id).await?;
        if intent.phase != IntentPhase::Armed {
            return Err(MendError::failed_precondition(
                format!("operation {operation_id} confirmed its effects: it takes no new object"),
                vec![operation_id.to_string()],
            ));
        }
        let now = self.now_ms();
        let lease_left = intent.lease_expires_at_ms.saturating_sub(now);
        if lease_left <= 0 {
            return Err(MendError::failed_precondition(
                format!(
                    "operation {operation_id}'s lease ran out: send a heartbeat first, then ask again"
                ),
                vec![operation_id.to_string()],
            ));
        }
        let valid_for = std::time::Duration::from_millis(lease_left as u64);
        let mut urls = Vec::with_capacity(objects.len());
        for (object, digest) in objects.iter().zip(&digests) {
            if !intent
                .effects
                .objects
                .iter()
                .any(|planned| planned.split_id == object.split_id)
            {
                return Err(MendError::invalid(format!(
                    "operation {operation_id} plans no split {}",
                    object.split_id
                )));
            }
            let signed = self
                .objects
                .upload_url(dataset_id, &object.split_id, valid_for, digest)
                .await?
                .expect("the store presigns: checked above");
            urls.push(ObjectUploadUrl {
                split_id: object.split_id.clone(),
                url: signed.signed.url,
                headers: signed.signed.headers.into_iter().collect(),
                expires_at_ms: now.saturating_add(signed.valid_for.as_millis() as i64),
            });
        }
        Ok(urls)
    }

    /// Streams one planned object into the store with its recovery header. The bytes must be
    /// exactly the planned payload (size and sha256), or nothing is written. An object already
    /// in place as planned is not written again (`written: false`).
    #[tracing::instrument(
        name = "operation_upload",
        skip_all,
        err(level = "debug"),
        fields(dataset_id = %dataset_id, operation_id = %operation_id, split_id = %split_id)
    )]
    pub async fn upload_object<S>(
        &self,
        dataset_id: &str,
        operation_id: &str,
        split_id: &str,
        payload: S,
    ) -> Result<UploadResult>
    where
        S: Stream<Item = std::result::Result<Bytes, MendError>> + Send + Unpin,
    {
        let uploading = async {
            let uploaded = self
                .put_planned_object(dataset_id, operation_id, split_id, payload)
                .await?;
            // The object is in the split storage, which no catalog step can join: its record
            // follows it, beside the look at whether the operation is still live. It is not
            // visible until the operation's publish, which is recorded in its own step.
            let recording = self.record_object_write(dataset_id, "upload", [split_id], &uploaded);
            let (live, recorded) = futures::join!(
                self.ended_while_uploading(dataset_id, operation_id),
                recording
            );
            recorded?;
            live?;
            Ok(uploaded)
        };
        self.writing("upload", Some(operation_id), uploading).await
    }

    /// The operation may have ended while the bytes streamed: its writer is told so. The
    /// object stays: reconcile discards an object of an operation whose end is recorded (and
    /// never adopts it). Deleting it here would race a reconcile that staged a row for it
    /// meanwhile, taking the object of a staged row (invariant 2; mend-sim seed
    /// 1083818128378677243, an upload stalled 12 s between its put and this look).
    pub(super) async fn ended_while_uploading(
        &self,
        dataset_id: &str,
        operation_id: &str,
    ) -> Result<()> {
        let still_live = self
            .find_intent(dataset_id, operation_id)
            .await?
            .is_some_and(|intent| intent.phase != IntentPhase::Abandoned);
        if !still_live
            && self
                .recorded_publish(dataset_id, operation_id)
                .await?
                .is_none()
        {
            return Err(ended(dataset_id, operation_id));
        }
        Ok(())
    }

    /// Puts one planned object, checked against its plan. The plan is the one this process
    /// began, if it did (a plan never changes under its operation id), or read: an
    /// operation that ended meanwhile is found by [`Engine::ended_while_uploading`] after
    /// the put.
    pub(super) async fn put_planned_object<S>(
        &self,
        dataset_id: &str,
        operation_id: &str,
        split_id: &str,
        payload: S,
    ) -> Result<UploadResult>
    where
        S: Stream<Item = std::result::Result<Bytes, MendError>> + Send + Unpin,
    {
        validate::dataset_id(dataset_id)?;
        validate::split_id(operation_id)?;
        validate::split_id(split_id)?;
        let (intent, uid) = match self.uploaded.begun(dataset_id, operation_id) {
            Some(begun) => begun,
            None => {
                let intent = self.live_intent(dataset_id, operation_id).await?;
                let uid = self.catalog.dataset(dataset_id).await?.uid;
                (intent, uid)
            }
        };
        let planned = intent
            .effects
            .objects
            .iter()
            .find(|object| object.split_id == split_id)
            .ok_or_else(|| {
                MendError::invalid(format!(
                    "operation {operation_id} plans no split {split_id}; it plans: {}",
                    intent
                        .effects
                        .objects
                        .iter()
                        .map(|object| object.split_id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?
            .clone();
        let header = planned_header(&intent, &planned, &uid)?;
        let result = UploadResult {
            split_id: split_id.to_string(),
            object_size: planned.size,
            sha256: planned.checksum.clone(),
            written: true,
        };
        // A small object's put-if-absent tells whether it is in place already, so it is not
        // looked for first (one request less per upload on a remote store). A multipart upload
        // would overwrite, and a confirmed operation takes no new object: both look first.
        let look_first =
            intent.phase != IntentPhase::Armed || header.payload_size > SINGLE_PUT_BYTES;
        if look_first {
            match self.object_status(&intent, &planned).await? {
                ObjectStatus::Present => {
                    return Ok(UploadResult {
                        written: false,
                        ..result
                    });
                }
                ObjectStatus::Different => return Err(another_object_in_place(split_id)),
                ObjectStatus::Missing => {}
            }
        }
        if intent.phase != IntentPhase::Armed {
            return Err(MendError::failed_precondition(
                format!(
                    "operation {operation_id} was confirmed without the object of split {split_id}"
                ),
                vec![split_id.to_string()],
            ));
        }
        let step = crate::faults::DurableStep::PutObject {
            split_id: split_id.to_string(),
        };
        let outcome = self
            .durably(step, self.write_object(&header, payload))
            .await?;
        // Checked byte for byte as planned, whether written now or found: the publish that
        // follows need not read it back.
        self.uploaded.remember(
            dataset_id,
            operation_id,
            split_id,
            planned.size,
            &planned.checksum,
        );
        Ok(UploadResult {
            written: outcome == PutOutcome::Written,
            ..result
        })
    }

    /// Writes an object whose payload streams in, checking it against `header`.
    pub(super) async fn write_object<S>(
        &self,
        header: &SplitObjectHeader,
        mut payload: S,
    ) -> Result<PutOutcome>
    where
        S: Stream<Item = std::result::Result<Bytes, MendError>> + Send + Unpin,
    {
        let mut check = PayloadCheck::new(header);
        if header.payload_size <= SINGLE_PUT_BYTES {
            // The chunks as they arrived, behind the header: held until checked, never copied.
            let mut object = vec![format::encode_prefix(header)];
            while let Some(chunk) = payload.next().await {
                let chunk = chunk?;
                check.feed(&chunk)?;
                object.push(chunk);
            }
            check.finish()?;
            let put = self.objects.put(
                &header.dataset_id,
                &header.split_id,
                object.into_iter().collect(),
            );
            return match put.await {
                Err(MendError::AlreadyExists { .. }) => {
                    Err(another_object_in_place(&header.split_id))
                }
                outcome => outcome,
            };
        }
        let path = self.objects.path(&header.dataset_id, &header.split_id);
        let (store, _) = self.objects.store();
        let unavailable = |error| MendError::unavailable(format!("write {path}"), error);
        let upload = store.put_multipart(&path).await.map_err(unavailable)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, SINGLE_PUT_BYTES as usize);
        let prefix = format::encode(header, &[]);
        writer.write(&prefix);
        let streamed = async {
            while let Some(chunk) = payload.next().await {
                let chunk = chunk?;
                check.feed(&chunk)?;
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(unavailable)?;
                writer.write(&chunk);
            }
            check.finish()
        }
        .await;
        match streamed {
            Ok(()) => {
                writer.finish().await.map_err(unavailable)?;
                Ok(PutOutcome::Written)
            }
            Err(error) => {
                // Never completed, the upload leaves nothing visible; aborting frees its parts.
                let _ = writer.abort().await;
                Err(error)
            }
        }
    }

    /// The header an operation's object carries: a function of the intent and the dataset.
    pub(super) async fn planned_header(
        &self,
        intent: &Intent,
        planned: &PlannedObject,
    ) -> Result<SplitObjectHeader> {
        let dataset = self.catalog.dataset(&intent.dataset_id).await?;
        planned_header(intent, planned, &dataset.uid)
    }
}

/// The header an operation's object carries: a function of the intent and the dataset's
/// incarnation (`dataset_uid`).
pub(super) fn planned_header(
    intent: &Intent,
    planned: &PlannedObject,
    dataset_uid: &str,
) -> Result<SplitObjectHeader> {
    let metadata_json = intent
        .effects
        .stage
        .iter()
        .find(|row| row.split_id == planned.split_id)
        .map(|row| row.metadata_json.clone())
        .unwrap_or_default();
    let mut header = SplitObjectHeader {
        format_version: HEADER_FORMAT_VERSION,
        dataset_id: intent.dataset_id.clone(),
        dataset_uid: dataset_uid.to_string(),
        split_id: planned.split_id.clone(),
        node: intent.owner.clone(),
        metadata_json,
        operation_id: Some(intent.operation_id.clone()),
        payload_size: 0,
        payload_sha256: planned.checksum.clone(),
    };
    let bare = format::encoded_len(&header, 0);
    header.payload_size = payload_size_for(planned.size, bare);
    if format::encoded_len(&header, header.payload_size as usize) != planned.size {
        return Err(MendError::Corrupt {
            message: format!(
                "operation {}: the planned object of split {} does not match its header",
                intent.operation_id, planned.split_id
            ),
        });
    }
    Ok(header)
}

/// The payload size of an object of `object_size` bytes whose header, with a payload size of
/// 0, encodes to `bare` bytes: the header's own length grows with the digits of the size.
pub(super) fn payload_size_for(object_size: u64, bare: u64) -> u64 {
    // "payload_size":0 is one digit; each further digit of the real size adds a byte.
    let mut payload = object_size.saturating_sub(bare);
    for _ in 0..20 {
        let digits = payload.max(1).ilog10() as u64 + 1;
        let candidate = object_size.saturating_sub(bare + digits - 1);
        if candidate == payload {
            break;
        }
        payload = candidate;
    }
    payload
}

/// The 32 bytes of a whole object's sha256, given as 64 hex digits (or `sha256:<hex>`).
pub(super) fn object_digest(index: usize, given: &str) -> Result<[u8; 32]> {
    let hex = given.strip_prefix("sha256:").unwrap_or(given);
    let invalid = || {
        MendError::invalid(format!(
            "objects[{index}].object_sha256 {:?} is invalid: give the whole object's sha256 as 64 hex digits",
            validate::truncated(given, 80)
        ))
    };
    if hex.len() != 64 || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(invalid());
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| invalid())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
    }
    Ok(digest)
}

pub(super) fn another_object_in_place(split_id: &str) -> MendError {
    MendError::AlreadyExists {
        kind: EntityKind::Split,
        id: format!(
            "{split_id} (another object is in its place: not the size, checksum or operation planned)"
        ),
    }
}

/// Counts and hashes a payload as it streams, against the size and checksum planned.
pub(super) struct PayloadCheck {
    split_id: String,
    expected_size: u64,
    expected_sha256: String,
    seen: u64,
    hasher: sha2::Sha256,
}

impl PayloadCheck {
    pub(super) fn new(header: &SplitObjectHeader) -> Self {
        use sha2::Digest;
        Self {
            split_id: header.split_id.clone(),
            expected_size: header.payload_size,
            expected_sha256: header.payload_sha256.clone(),
            seen: 0,
            hasher: sha2::Sha256::new(),
        }
    }

    pub(super) fn feed(&mut self, chunk: &[u8]) -> Result<()> {
        use sha2::Digest;
        self.seen = self.seen.saturating_add(chunk.len() as u64);
        if self.seen > self.expected_size {
            return Err(MendError::invalid(format!(
                "split {}: the upload is longer than the {} bytes planned; nothing was written",
                self.split_id, self.expected_size
            )));
        }
        self.hasher.update(chunk);
        Ok(())
    }

    pub(super) fn finish(self) -> Result<()> {
        use sha2::Digest;
        if self.seen != self.expected_size {
            return Err(MendError::invalid(format!(
                "split {}: the upload has {} bytes, {} were planned; nothing was written",
                self.split_id, self.seen, self.expected_size
            )));
        }
        let hex: String = self
            .hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let actual = format!("sha256:{hex}");
        if actual != self.expected_sha256 {
            return Err(MendError::invalid(format!(
                "split {}: the upload's sha256 is {actual}, {} was planned; nothing was written",
                self.split_id, self.expected_sha256
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole object's sha256, as a writer that puts its objects itself gives it: exactly 64
    /// hex digits (after an optional `sha256:`); fewer or more, even all hex, are refused,
    /// naming the object by its place in the request.
    #[test]
    fn an_object_digest_is_64_hex_digits_and_nothing_else() {
        let good = "aB".repeat(32);
        assert_eq!(object_digest(0, &good).unwrap(), [0xab; 32]);
        assert_eq!(
            object_digest(0, &format!("sha256:{good}")).unwrap(),
            [0xab; 32]
        );
        let mut refused = 0;
        for bad in [
            "ab".repeat(31),
            "ab".repeat(33),
            format!("{}zz", "ab".repeat(31)),
            format!("sha256:{}", "ab".repeat(31)),
            String::new(),
        ] {
            match object_digest(3, &bad) {
                Err(MendError::InvalidArgument { message }) => {
                    assert!(message.contains("objects[3].object_sha256"), "{message}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
            refused += 1;
        }
        assert_eq!(refused, 5);
    }

    #[test]
    fn the_payload_size_is_recovered_from_the_object_size_whatever_its_digits() {
        let header = |size: u64| SplitObjectHeader {
            format_version: HEADER_FORMAT_VERSION,
            dataset_id: "ds".into(),
            dataset_uid: "uid".into(),
            split_id: "s1".into(),
            node: "n".into(),
            metadata_json: "{}".into(),
            operation_id: Some("op".into()),
            payload_size: size,
            payload_sha256: "sha256:00".into(),
        };
        let bare = format::encoded_len(&header(0), 0);
        for size in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1 << 20,
            999_999_999_999,
            5 << 40,
        ] {
            let object = format::encoded_len(&header(size), size as usize);
            assert_eq!(
                payload_size_for(object, bare),
                size,
                "payload of {size} bytes"
            );
        }
    }
}
