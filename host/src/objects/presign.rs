//! Presigned upload URLs that bind the object: AWS Signature Version 4 in the query string,
//! over the headers a writer must send with its `PUT`.
//!
//! A presigned URL lets whoever holds it `PUT` one path, without credentials, until it expires.
//! Signed over the host alone (all that object_store 0.12's signer signs, and all its newest
//! release signs too), it lets its holder put that path again and again: a writer could replace
//! an object after mend had read it back and published it. So mend signs two headers more,
//! which the store checks before it writes anything:
//!
//! - `If-None-Match: *`: put-if-absent. Once an object is at the path, every `PUT` through the
//!   URL is refused (412), so the object mend read back is the object that stays.
//! - `x-amz-checksum-sha256`: the base64 sha256 of the whole object (prefix, header, payload),
//!   as the writer computed it. The store refuses a body that does not hash to it (400
//!   `BadDigest`), so bytes damaged on the way never land, and the URL cannot carry any other
//!   object.
//!
//! A request whose headers differ from the signed ones, or lacks one, is refused by the store's
//! signature check (403 `SignatureDoesNotMatch`). The checksum is the writer's claim about the
//! bytes it sends, not mend's plan: mend still reads the payload back and hashes it against
//! the planned sha256 before it publishes (a header is a claim, not a proof).
//!
//! The URL, its host and its query (credential scope, date, expiry, security token) come from
//! object_store's own signer, so the path and host are exactly the ones object_store would
//! use; this module recomputes the signature over the added headers with the same credential.
//! `signature` is the specification's algorithm on its own, tested against the example the
//! S3 documentation gives.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use sha2::{Digest, Sha256};

use super::{SignedUpload, UploadSigner};
use crate::error::{MendError, Result};

/// The header that makes a `PUT` put-if-absent.
pub const IF_NONE_MATCH: &str = "If-None-Match";
/// The header that carries the whole object's sha256, base64.
pub const CHECKSUM_SHA256: &str = "x-amz-checksum-sha256";

/// Presigns uploads to an S3 (or S3-compatible) store with the headers above signed.
#[derive(Debug)]
pub struct S3UploadSigner {
    store: Arc<object_store::aws::AmazonS3>,
}

impl S3UploadSigner {
    /// A signer for `store`'s bucket, with `store`'s credentials.
    pub fn new(store: Arc<object_store::aws::AmazonS3>) -> Self {
        Self { store }
    }
}

#[async_trait::async_trait]
impl UploadSigner for S3UploadSigner {
    async fn upload_url(
        &self,
        path: &Path,
        valid_for: Duration,
        object_sha256: &[u8; 32],
    ) -> Result<SignedUpload> {
        use object_store::signer::Signer;
        let unavailable = |error| MendError::unavailable(format!("presign {path}"), error);
        let base = self
            .store
            .signed_url(http::Method::PUT, path, valid_for)
            .await
            .map_err(unavailable)?;
        let credential = self
            .store
            .credentials()
            .get_credential()
            .await
            .map_err(unavailable)?;
        let headers = vec![
            (IF_NONE_MATCH.to_string(), "*".to_string()),
            (CHECKSUM_SHA256.to_string(), base64(object_sha256)),
        ];
        let url = resign(&base, &credential.secret_key, &headers)?;
        Ok(SignedUpload { url, headers })
    }
}

/// `base`, a URL presigned over `host` alone, signed again over `host` and `headers`.
fn resign(base: &url::Url, secret_key: &str, headers: &[(String, String)]) -> Result<String> {
    let broken = |what: &str| MendError::Corrupt {
        message: format!("object_store's presigned URL has no {what}: {base}"),
    };
    let mut query: BTreeMap<String, String> = base
        .query_pairs()
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    query.remove("X-Amz-Signature");
    let credential = query
        .get("X-Amz-Credential")
        .cloned()
        .ok_or_else(|| broken("X-Amz-Credential"))?;
    let amz_date = query
        .get("X-Amz-Date")
        .cloned()
        .ok_or_else(|| broken("X-Amz-Date"))?;
    // The credential is KEY_ID/DATE/REGION/SERVICE/aws4_request.
    let scope: Vec<&str> = credential.splitn(2, '/').collect();
    let scope = scope.get(1).ok_or_else(|| broken("credential scope"))?;
    let mut canonical_headers: BTreeMap<String, String> = headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let host = &base[url::Position::BeforeHost..url::Position::AfterPort];
    canonical_headers.insert("host".into(), host.to_string());
    let signed_headers: Vec<&str> = canonical_headers.keys().map(String::as_str).collect();
    query.insert("X-Amz-SignedHeaders".into(), signed_headers.join(";"));
    let request = CanonicalRequest {
        method: "PUT",
        path: base.path(),
        query: &query,
        headers: &canonical_headers,
    };
    let signature = signature(&request, &amz_date, scope, secret_key);
    let mut url = base.clone();
    url.set_query(None);
    url.query_pairs_mut()
        .extend_pairs(query.iter())
        .append_pair("X-Amz-Signature", &signature);
    Ok(url.to_string())
}

/// A request as SigV4 canonicalises it: the payload is always `UNSIGNED-PAYLOAD` (the writer
/// sends it later, straight to the store).
#[derive(Debug)]
pub(crate) struct CanonicalRequest<'a> {
    pub method: &'a str,
    /// The URL's path, already URI-encoded once (S3 encodes paths once, not twice).
    pub path: &'a str,
    /// Every query parameter but the signature, decoded.
    pub query: &'a BTreeMap<String, String>,
    /// Every signed header, names in lower case, values trimmed.
    pub headers: &'a BTreeMap<String, String>,
}

/// The SigV4 signature (hex) of `request` at `amz_date` (`YYYYMMDDTHHMMSSZ`) in `scope`
/// (`DATE/REGION/SERVICE/aws4_request`), with `secret_key`.
pub(crate) fn signature(
    request: &CanonicalRequest<'_>,
    amz_date: &str,
    scope: &str,
    secret_key: &str,
) -> String {
    let query: Vec<String> = request
        .query
        .iter()
        .map(|(key, value)| format!("{}={}", uri_encode(key), uri_encode(value)))
        .collect();
    let headers: String = request
        .headers
        .iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect();
    let signed: Vec<&str> = request.headers.keys().map(String::as_str).collect();
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\nUNSIGNED-PAYLOAD",
        request.method,
        request.path,
        query.join("&"),
        headers,
        signed.join(";"),
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut parts = scope.split('/');
    let (date, region, service) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let key = hmac_sha256(format!("AWS4{secret_key}").as_bytes(), date.as_bytes());
    let key = hmac_sha256(&key, region.as_bytes());
    let key = hmac_sha256(&key, service.as_bytes());
    let key = hmac_sha256(&key, b"aws4_request");
    hex(&hmac_sha256(&key, to_sign.as_bytes()))
}

/// SigV4's URI encoding: every byte but the unreserved characters `A-Z a-z 0-9 - . _ ~` as
/// `%XX`, upper case.
fn uri_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |with: u8| -> Vec<u8> { block.iter().map(|byte| byte ^ with).collect() };
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Standard base64 with padding (RFC 4648), as S3 writes checksums.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut encoded = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, byte)| n | (u32::from(*byte) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                encoded.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                encoded.push('=');
            }
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the S3 documentation, "Authenticating Requests: Using Query Parameters
    /// (AWS Signature Version 4)": a presigned GET of `test.txt` in `examplebucket`, valid for a
    /// day from 2013-05-24, signed over `host` alone.
    #[test]
    fn the_signature_is_the_one_the_specification_gives_for_its_example() {
        let query: BTreeMap<String, String> = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
            (
                "X-Amz-Credential",
                "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request",
            ),
            ("X-Amz-Date", "20130524T000000Z"),
            ("X-Amz-Expires", "86400"),
            ("X-Amz-SignedHeaders", "host"),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
        let headers: BTreeMap<String, String> = [(
            "host".to_string(),
            "examplebucket.s3.amazonaws.com".to_string(),
        )]
        .into();
        let request = CanonicalRequest {
            method: "GET",
            path: "/test.txt",
            query: &query,
            headers: &headers,
        };
        assert_eq!(
            signature(
                &request,
                "20130524T000000Z",
                "20130524/us-east-1/s3/aws4_request",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
            ),
            "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }

    /// RFC 4231, test cases 1 and 6 (a key longer than a block).
    #[test]
    fn hmac_sha256_is_rfc_4231s() {
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn base64_is_rfc_4648s() {
        for (bytes, encoded) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(bytes), encoded);
        }
    }

    /// Re-signing keeps object_store's URL (scheme, host, port, path, credential scope, date,
    /// expiry) and names the added headers among the signed ones, sorted; its signature is the
    /// one [`signature`] computes over them.
    #[test]
    fn a_url_is_signed_again_over_the_headers_a_writer_must_send() {
        let base = url::Url::parse(
            "http://127.0.0.1:9000/bucket/datasets/ds/splits/s-1?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=key%2F20260101%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20260101T000000Z&X-Amz-Expires=600&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=0000",
        )
        .unwrap();
        let headers = vec![
            (IF_NONE_MATCH.to_string(), "*".to_string()),
            (CHECKSUM_SHA256.to_string(), base64(&[7; 32])),
        ];
        let signed = url::Url::parse(&resign(&base, "secret", &headers).unwrap()).unwrap();
        assert_eq!(signed.host_str(), Some("127.0.0.1"));
        assert_eq!(signed.port(), Some(9000));
        assert_eq!(signed.path(), "/bucket/datasets/ds/splits/s-1");
        let query: BTreeMap<String, String> = signed
            .query_pairs()
            .map(|(key, value)| (key.into_owned(), value.into_owned()))
            .collect();
        assert_eq!(
            query["X-Amz-SignedHeaders"],
            "host;if-none-match;x-amz-checksum-sha256"
        );
        assert_eq!(query["X-Amz-Expires"], "600");
        let mut unsigned = query.clone();
        let given = unsigned.remove("X-Amz-Signature").unwrap();
        let canonical_headers: BTreeMap<String, String> = [
            ("host".to_string(), "127.0.0.1:9000".to_string()),
            ("if-none-match".to_string(), "*".to_string()),
            (CHECKSUM_SHA256.to_string(), base64(&[7; 32])),
        ]
        .into();
        let request = CanonicalRequest {
            method: "PUT",
            path: "/bucket/datasets/ds/splits/s-1",
            query: &unsigned,
            headers: &canonical_headers,
        };
        assert_eq!(
            given,
            signature(
                &request,
                "20260101T000000Z",
                "20260101/us-east-1/s3/aws4_request",
                "secret"
            )
        );
        assert_ne!(given, "0000");
    }
}
