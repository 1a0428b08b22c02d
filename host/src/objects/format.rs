//! The split object format: a header that carries the recovery metadata, then the payload.
//!
//! ```text
//! bytes 0..8        magic "MENDSPL1"
//! bytes 8..12       header length N, u32 little-endian
//! bytes 12..12+N    header, JSON: SplitObjectHeader
//! bytes 12+N..      payload, exactly as the writer gave it
//! ```
//!
//! The header is everything reconcile needs to rebuild the split's row when the row is gone
//! (dataset, split id, node, metadata, the operation that wrote it) and what recovery needs to
//! check the object without reading the payload (its size and sha256). Reading the header is
//! one ranged read of the first bytes.

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{MendError, Result};

/// The first 8 bytes of every split object.
pub const MAGIC: &[u8; 8] = b"MENDSPL1";
/// The prefix before the header: magic and length.
pub const PREFIX_LEN: usize = 12;
/// The header format this host writes and the newest it reads.
pub const HEADER_FORMAT_VERSION: u32 = 1;
/// A header longer than this is not one of ours (metadata is limited well below it).
pub const MAX_HEADER_LEN: u32 = 1 << 20;

/// The recovery metadata embedded at the start of every split object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitObjectHeader {
    /// [`HEADER_FORMAT_VERSION`] when written by this host.
    pub format_version: u32,
    /// The dataset the object belongs to.
    pub dataset_id: String,
    /// The incarnation of the dataset the object was written for.
    pub dataset_uid: String,
    /// The split the object is.
    pub split_id: String,
    /// The node that wrote it.
    pub node: String,
    /// The split's metadata, as the writer staged it (a JSON object, as text).
    pub metadata_json: String,
    /// The operation that wrote the object, if any.
    pub operation_id: Option<String>,
    /// The payload's size in bytes.
    pub payload_size: u64,
    /// `sha256:<hex>` of the payload.
    pub payload_sha256: String,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    sha256_text(Sha256::digest(bytes).as_slice())
}

/// [`sha256`] of `value`'s JSON as `serde_json::to_vec` writes it, hashed as it is written
/// rather than gathered first (a recovery sweep digests every observation it records).
pub fn sha256_of_json<T: Serialize + ?Sized>(value: &T) -> String {
    struct Hashing(Sha256);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.update(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(Sha256::new());
    serde_json::to_writer(&mut hashing, value).expect("mend digests only plain data");
    sha256_text(hashing.0.finalize().as_slice())
}

/// `sha256:` and the digest in lowercase hex.
fn sha256_text(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity("sha256:".len() + 2 * digest.len());
    text.push_str("sha256:");
    for byte in digest {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

/// The whole object: prefix, header, payload.
pub fn encode(header: &SplitObjectHeader, payload: &[u8]) -> Bytes {
    let prefix = encode_prefix(header);
    let mut bytes = BytesMut::with_capacity(prefix.len() + payload.len());
    bytes.extend_from_slice(&prefix);
    bytes.extend_from_slice(payload);
    bytes.freeze()
}

/// Everything of the object before its payload: magic, header length, header. A writer that
/// streams the payload puts this first, then the payload's bytes as they come.
pub fn encode_prefix(header: &SplitObjectHeader) -> Bytes {
    let json = serde_json::to_vec(header).expect("a header is plain data and always serialises");
    let mut bytes = BytesMut::with_capacity(PREFIX_LEN + json.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&json);
    bytes.freeze()
}

/// The size of the object `encode` makes from `header` and a payload of `payload_len` bytes.
pub fn encoded_len(header: &SplitObjectHeader, payload_len: usize) -> u64 {
    let json = serde_json::to_vec(header).expect("a header is plain data and always serialises");
    (PREFIX_LEN + json.len() + payload_len) as u64
}

/// The header length announced by an object's first `PREFIX_LEN` bytes.
pub fn header_len(prefix: &[u8]) -> Result<u32> {
    if prefix.len() < PREFIX_LEN || &prefix[..8] != MAGIC {
        return Err(not_ours("it does not start with the split object magic"));
    }
    let len = u32::from_le_bytes(prefix[8..12].try_into().expect("four bytes"));
    if len > MAX_HEADER_LEN {
        return Err(not_ours(&format!("its header claims {len} bytes")));
    }
    Ok(len)
}

/// Parses a header from the bytes after the prefix, refusing a newer format.
pub fn decode_header(json: &[u8]) -> Result<SplitObjectHeader> {
    #[derive(Deserialize)]
    struct Version {
        format_version: u32,
    }
    let version: Version = serde_json::from_slice(json)
        .map_err(|error| not_ours(&format!("its header is unreadable: {error}")))?;
    if version.format_version == 0 || version.format_version > HEADER_FORMAT_VERSION {
        return Err(MendError::Corrupt {
            message: format!(
                "a split object has header format {}, newer than this mend reads ({HEADER_FORMAT_VERSION}): upgrade mend",
                version.format_version
            ),
        });
    }
    serde_json::from_slice(json)
        .map_err(|error| not_ours(&format!("its header is unreadable: {error}")))
}

/// Parses a whole object, checking the payload against the header.
pub fn decode(object: &[u8]) -> Result<(SplitObjectHeader, Bytes)> {
    let len = header_len(object)? as usize;
    let header_end = PREFIX_LEN + len;
    let header = decode_header(
        object
            .get(PREFIX_LEN..header_end)
            .ok_or_else(|| not_ours("it is shorter than its header"))?,
    )?;
    let payload = &object[header_end..];
    if payload.len() as u64 != header.payload_size || sha256(payload) != header.payload_sha256 {
        return Err(MendError::Corrupt {
            message: format!(
                "split object {} of dataset {}: the payload does not match its header's size and checksum",
                header.split_id, header.dataset_id
            ),
        });
    }
    Ok((header, Bytes::copy_from_slice(payload)))
}

fn not_ours(why: &str) -> MendError {
    MendError::Corrupt {
        message: format!("an object under the splits prefix is not a mend split object: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_lowercase_hex_and_json_is_digested_as_written() {
        assert_eq!(
            sha256(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let value = serde_json::json!({"split_ids": ["a", "b\u{0}"], "n": 7, "deep": {"x": [1.5]}});
        assert_eq!(
            sha256_of_json(&value),
            sha256(&serde_json::to_vec(&value).unwrap())
        );
    }

    fn header(payload: &[u8]) -> SplitObjectHeader {
        SplitObjectHeader {
            format_version: HEADER_FORMAT_VERSION,
            dataset_id: "ds".into(),
            dataset_uid: "uid-1".into(),
            split_id: "s1".into(),
            node: "node-a".into(),
            metadata_json: r#"{"num_docs": 3}"#.into(),
            operation_id: Some("op-1".into()),
            payload_size: payload.len() as u64,
            payload_sha256: sha256(payload),
        }
    }

    #[test]
    fn objects_round_trip_and_carry_their_recovery_metadata() {
        let payload = b"the split's bytes";
        let object = encode(&header(payload), payload);
        let (decoded, body) = decode(&object).unwrap();
        assert_eq!(decoded, header(payload));
        assert_eq!(&body[..], payload);
        assert_eq!(
            header_len(&object[..PREFIX_LEN]).unwrap() as usize,
            object.len() - PREFIX_LEN - payload.len()
        );
    }

    #[test]
    fn foreign_tampered_and_future_objects_are_refused() {
        let payload = b"bytes";
        let object = encode(&header(payload), payload);
        assert!(decode(b"not a split object at all").is_err());
        let mut tampered = object.to_vec();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(matches!(decode(&tampered), Err(MendError::Corrupt { .. })));
        let mut future = header(payload);
        future.format_version = HEADER_FORMAT_VERSION + 1;
        let error = decode(&encode(&future, payload)).unwrap_err();
        assert!(error.to_string().contains("newer"), "{error}");
    }
}
