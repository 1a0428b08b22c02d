//! TLS for `mend serve`, with rustls: the certificate chain and key from PEM files
//! (`serve.tls_cert_file`, `serve.tls_key_file`), read again when they change so that a renewed
//! certificate is served without a restart, and optional client certificates
//! (`serve.tls_client_ca_file`): a client may present one the CA signed, and the tokens file
//! maps the names it holds to principals (`cert:NAME`, [`crate::auth`]).
//!
//! - **Versions.** TLS 1.3 and 1.2 only, on rustls's default cipher suites (ring).
//! - **Reload.** [`Tls::reload`] reads the three files; a change that does not make a
//!   working configuration (a key that does not match, a file cut short mid-write) is refused
//!   whole, and the configuration loaded last keeps serving.
//! - **Not TLS.** A connection whose first byte is not a TLS handshake (plain HTTP sent to the
//!   TLS port) is answered one plain-text HTTP 400 in the JSON error form, saying to use
//!   `https://`, and closed; a handshake that fails (a client that does not
//!   trust the certificate, an expired or unknown client certificate) is closed, logged at
//!   debug.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

/// The largest certificate, key or CA file read.
pub const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// What plain HTTP sent to the TLS port reads before the connection is closed.
pub(crate) fn not_tls_answer() -> String {
    let body = r#"{"error":"invalid_argument","message":"this port speaks TLS: use https:// (and the server's CA certificate)","certainly_not_applied":true}"#;
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Where the server's certificate, key and client CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, the server's own first.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates, PEM, that sign the client certificates accepted; `None`: clients
    /// present none.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TlsError {
    message: String,
}

impl TlsError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// The TLS configuration in force, and the files it is read from.
#[derive(Debug)]
pub struct Tls {
    files: TlsFiles,
    loaded: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    config: Arc<ServerConfig>,
    /// The SHA-256 of the files' contents, in order.
    digest: [u8; 32],
}

/// What a [`Tls::reload`] found.
#[derive(Debug)]
pub enum TlsReload {
    Unchanged,
    Reloaded,
    /// The files changed, but not into a working configuration: the last one stays.
    Refused(TlsError),
}

impl Tls {
    /// Reads the files: an error if one cannot be read or they do not make a configuration.
    pub fn open(files: TlsFiles) -> Result<Self, TlsError> {
        let (contents, digest) = read_all(&files)?;
        let config = configure(&files, &contents)?;
        Ok(Self {
            files,
            loaded: RwLock::new(Loaded {
                config: Arc::new(config),
                digest,
            }),
        })
    }

    /// The files it reads.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Whether clients may present certificates.
    pub fn client_certificates(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The configuration in force, for one connection's handshake.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        tokio_rustls::TlsAcceptor::from(loaded.config.clone())
    }

    /// Reads the files again and takes them if they changed and make a configuration.
    pub fn reload(&self) -> TlsReload {
        let (contents, digest) = match read_all(&self.files) {
            Ok(read) => read,
            Err(error) => return TlsReload::Refused(error),
        };
        if self.loaded.read().unwrap_or_else(|p| p.into_inner()).digest == digest {
            return TlsReload::Unchanged;
        }
        match configure(&self.files, &contents) {
            Ok(config) => {
                *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Loaded {
                    config: Arc::new(config),
                    digest,
                };
                TlsReload::Reloaded
            }
            Err(error) => TlsReload::Refused(error),
        }
    }
}

/// The files' contents (cert, key, client CA) and their digest.
type Contents = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

fn read_all(files: &TlsFiles) -> Result<(Contents, [u8; 32]), TlsError> {
    let cert = read_bounded(&files.cert, "serve.tls_cert_file")?;
    let key = read_bounded(&files.key, "serve.tls_key_file")?;
    let client_ca = match &files.client_ca {
        Some(path) => Some(read_bounded(path, "serve.tls_client_ca_file")?),
        None => None,
    };
    let mut digest = Sha256::new();
    for part in [Some(&cert), Some(&key), client_ca.as_ref()]
        .into_iter()
        .flatten()
    {
        digest.update((part.len() as u64).to_le_bytes());
        digest.update(part);
    }
    Ok(((cert, key, client_ca), digest.finalize().into()))
}

fn read_bounded(path: &Path, setting: &str) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|error| {
        TlsError::new(format!(
            "{setting}: cannot open {}: {error}",
            path.display()
        ))
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_TLS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| {
            TlsError::new(format!(
                "{setting}: cannot read {}: {error}",
                path.display()
            ))
        })?;
    if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
        return Err(TlsError::new(format!(
            "{setting}: {} is larger than {MAX_TLS_FILE_BYTES} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

fn configure(
    files: &TlsFiles,
    (cert, key, client_ca): &Contents,
) -> Result<ServerConfig, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            TlsError::new(format!(
                "serve.tls_cert_file: {} is not PEM certificates: {error}",
                files.cert.display()
            ))
        })?;
    if chain.is_empty() {
        return Err(TlsError::new(format!(
            "serve.tls_cert_file: {} holds no certificate (-----BEGIN CERTIFICATE-----)",
            files.cert.display()
        )));
    }
    // The key's text is never quoted in an error.
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| {
        TlsError::new(format!(
            "serve.tls_key_file: {} holds no private key in PEM (PKCS#8, PKCS#1 or SEC1)",
            files.key.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| TlsError::new(format!("TLS versions: {error}")))?;
    let builder = match (client_ca, &files.client_ca) {
        (Some(bytes), Some(path)) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_slice_iter(bytes) {
                let certificate = certificate.map_err(|error| {
                    TlsError::new(format!(
                        "serve.tls_client_ca_file: {} is not PEM certificates: {error}",
                        path.display()
                    ))
                })?;
                roots.add(certificate).map_err(|error| {
                    TlsError::new(format!(
                        "serve.tls_client_ca_file: {}: {error}",
                        path.display()
                    ))
                })?;
            }
            if roots.is_empty() {
                return Err(TlsError::new(format!(
                    "serve.tls_client_ca_file: {} holds no certificate",
                    path.display()
                )));
            }
            // Optional: a client without a certificate authenticates with a token instead.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|error| TlsError::new(format!("serve.tls_client_ca_file: {error}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|error| {
        TlsError::new(format!(
            "serve.tls_cert_file and serve.tls_key_file do not make a certificate and its key: \
             {error}"
        ))
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The first byte of every TLS connection: a handshake record.
pub(crate) const HANDSHAKE_RECORD: u8 = 0x16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_answer_is_one_json_answer_of_the_length_it_declares() {
        let answer = not_tls_answer();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: crate::error::ErrorBody = serde_json::from_str(body).unwrap();
        assert_eq!(body.error, crate::error::ErrorCode::InvalidArgument);
    }
}
