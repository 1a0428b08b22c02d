//! TLS for `mend serve`, with rustls: the certificate chain and key from PEM files
//! (`serve.tls_cert_file`, `serve.tls_key_file`), read again when they change so that a renewed
//! certificate is served without a restart, and optional client certificates
//! (`serve.tls_client_ca_file`): a client may present one the CA signed, and the tokens file
//! maps the names it holds to principals (`cert:NAME`, [`crate::auth`]).
//!
//! - **Versions.** TLS 1.3 and 1.2 only, on rustls's default cipher suites (ring).
//! - **Reload.** [`Tls::reload`] reads the three files; a change that does not make a
//!   working configuration (a key that does not match, a file cut short mid-write, any of the
//!   refusals below) is refused whole, and the configuration loaded last keeps serving.
//! - **The server's certificate in time.** Its own (first) certificate is taken only inside
//!   its validity: one that has expired or is not valid yet is refused, at start (the server
//!   does not start) and at reload ([`TlsError::CertificateExpired`],
//!   [`TlsError::CertificateNotYetValid`]). rustls checks a peer's dates, never its own, and a
//!   client would refuse every handshake. One that ends within [`EXPIRY_WARNING`] is served
//!   and warned about ([`TlsWarning::CertificateExpiresSoon`]); the time left is the gauge
//!   `mend_tls_certificate_expiry_seconds` ([`crate::metrics`]).
//! - **The key file's mode** ([`crate::secret_files`]): a key file users other than its owner
//!   may write is refused, at start and at every reload ([`TlsError::KeyFilePermissions`]):
//!   whoever can write it can swap the key the server proves itself with. One they may read
//!   is served and warned about ([`TlsWarning::KeyReadableByOthers`]). A client CA file
//!   others may write is refused the same way (whoever writes it lets any certificate in);
//!   it holds nothing secret, so reading it is anyone's.
//! - **Client CA rotation.** A client's certificate is verified in its handshake, but a
//!   keep-alive connection outlives a change of `serve.tls_client_ca_file`. Every
//!   configuration taken has a generation; a connection keeps the chain its client presented
//!   and the generation it was verified under, and its next request after a reload verifies
//!   the chain again against the client CA then in force (`Tls::admits`). A chain it no
//!   longer admits gets a 401 and the connection is closed (`connections.rs`).
//! - **Not TLS.** A connection whose first byte is not a TLS handshake (plain HTTP sent to the
//!   TLS port) is answered one plain-text HTTP 400 in the JSON error form, saying to use
//!   `https://`, and closed; a handshake that fails (a client that does not
//!   trust the certificate, an expired or unknown client certificate) is closed, logged at
//!   debug.
//!
//! The clock comes in as `now` ([`Tls::open`], [`Tls::reload`], [`Tls::warnings`]); what to
//! log, and when, is the caller's (the TLS watcher in `lib.rs`, `mend serve` at start).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use sha2::{Digest, Sha256};

use crate::secret_files::{self, Exposure};

/// The largest certificate, key or CA file read.
pub const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// How long before its end a served certificate is warned about: two weeks, time for a
/// person to renew it when its automatic renewal failed.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 60 * 60);

const CERT_SETTING: &str = "serve.tls_cert_file";
const KEY_SETTING: &str = "serve.tls_key_file";
const CLIENT_CA_SETTING: &str = "serve.tls_client_ca_file";

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

/// Why the TLS files could not be used: nothing of them was taken. Every message names the
/// setting at fault; none quotes a key's text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be opened or read.
    #[error("{setting}: cannot read {}: {source}", path.display())]
    Unreadable {
        setting: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file is larger than [`MAX_TLS_FILE_BYTES`].
    #[error("{setting}: {} is larger than {MAX_TLS_FILE_BYTES} bytes", path.display())]
    TooLarge {
        setting: &'static str,
        path: PathBuf,
    },
    /// A file does not hold what its setting takes (PEM certificates, a private key).
    #[error("{setting}: {} {problem}", path.display())]
    Malformed {
        setting: &'static str,
        path: PathBuf,
        problem: String,
    },
    /// Users other than its owner may write the key file or the client CA file, or their
    /// permissions cannot be read ([`crate::secret_files::check`]'s message).
    #[error("{message}")]
    KeyFilePermissions { message: String },
    /// The server's certificate is not valid before a time still to come. (The message
    /// leaves out the time it was refused at: a refusal at reload is logged when it changes.)
    #[error(
        "serve.tls_cert_file: the certificate in {} is not valid before {}: every client \
         would refuse it; serve one valid now, or check this machine's clock",
        path.display(), mend::clock::rfc3339(not_before.saturating_mul(1000))
    )]
    CertificateNotYetValid {
        path: PathBuf,
        /// Seconds since the Unix epoch.
        not_before: i64,
    },
    /// The server's certificate has expired.
    #[error(
        "serve.tls_cert_file: the certificate in {} expired at {}: every client would refuse \
         it; renew it",
        path.display(), mend::clock::rfc3339(not_after.saturating_mul(1000))
    )]
    CertificateExpired {
        path: PathBuf,
        /// Seconds since the Unix epoch.
        not_after: i64,
    },
    /// The certificate and the key are not a pair (or rustls takes neither).
    #[error(
        "serve.tls_cert_file and serve.tls_key_file do not make a certificate and its key: \
         {reason}"
    )]
    NotAPair { reason: rustls::Error },
    /// rustls refused a part of the configuration other than the pair.
    #[error("{setting}: {reason}")]
    Refused {
        setting: &'static str,
        reason: String,
    },
    /// The client CA in force no longer admits the certificate chain a connection's client
    /// presented (the CA file changed since its handshake).
    #[error(
        "the client certificate of this connection is no longer admitted by the client CA in \
         force (serve.tls_client_ca_file, read again since the connection was opened): {reason}"
    )]
    ClientNoLongerAdmitted { reason: rustls::Error },
}

/// Something about the TLS files in force that an operator should act on, though the server
/// serves them. Equal warnings are the same condition: a caller logs a warning when it first
/// applies and at each reload, not on every look.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsWarning {
    /// The served certificate ends within [`EXPIRY_WARNING`].
    CertificateExpiresSoon {
        path: PathBuf,
        /// Seconds since the Unix epoch.
        not_after: i64,
    },
    /// The served certificate has ended since it was taken, and no renewed one was: clients
    /// refuse it.
    CertificateExpired {
        path: PathBuf,
        /// Seconds since the Unix epoch.
        not_after: i64,
    },
    /// Users other than its owner may read the key file.
    KeyReadableByOthers {
        path: PathBuf,
        /// The permission bits, as `ls` shows them in octal.
        mode: u32,
    },
}

impl std::fmt::Display for TlsWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let date = |seconds: i64| mend::clock::rfc3339(seconds.saturating_mul(1000));
        match self {
            Self::CertificateExpiresSoon { path, not_after } => write!(
                f,
                "{CERT_SETTING}: the certificate in {} expires at {}, within {} days: renew it \
                 (a renewed file is served within a second, without a restart)",
                path.display(),
                date(*not_after),
                EXPIRY_WARNING.as_secs() / 86_400
            ),
            Self::CertificateExpired { path, not_after } => write!(
                f,
                "{CERT_SETTING}: the certificate in {} expired at {} and clients refuse it: \
                 renew it (a renewed file is served within a second, without a restart)",
                path.display(),
                date(*not_after)
            ),
            Self::KeyReadableByOthers { path, mode } => {
                let exposure = Exposure::ReadableByOthers { mode: *mode };
                // Always a warning: the exposure is one others may read.
                let warning = secret_files::readable_warning(path, KEY_SETTING, exposure);
                f.write_str(&warning.unwrap_or_default())
            }
        }
    }
}

/// When a certificate may be used (its `notBefore` and `notAfter`, both included), in seconds
/// since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
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
    /// The verifier `config` checks client certificates with; `None` without a client CA.
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    /// How many configurations were taken before this one. A connection verified under an
    /// older one is verified again ([`Tls::admits`]).
    generation: u64,
    /// The SHA-256 of the files' contents, in order.
    digest: [u8; 32],
    /// The served certificate's.
    validity: Validity,
    /// What the key file's permission bits allowed others when last looked at (every
    /// reload, whether or not the contents changed).
    key_exposure: Exposure,
}

/// What a [`Tls::reload`] found.
#[derive(Debug)]
pub enum TlsReload {
    Unchanged,
    Reloaded,
    /// The files changed, but not into a working configuration: the last one stays.
    Refused(TlsError),
}

/// The certificate chain a client presented in its handshake, kept by its connection, and
/// the generation of the configuration it was last verified under.
#[derive(Debug)]
pub(crate) struct ClientChain {
    end_entity: CertificateDer<'static>,
    intermediates: Vec<CertificateDer<'static>>,
    verified_under: AtomicU64,
}

impl ClientChain {
    /// The chain `presented` (end entity first), verified in a handshake under the
    /// configuration of `generation`; `None` for a client that presented none.
    pub(crate) fn new(presented: &[CertificateDer<'_>], generation: u64) -> Option<Self> {
        let (end_entity, intermediates) = presented.split_first()?;
        Some(Self {
            end_entity: end_entity.clone().into_owned(),
            intermediates: intermediates
                .iter()
                .map(|certificate| certificate.clone().into_owned())
                .collect(),
            verified_under: AtomicU64::new(generation),
        })
    }

    /// The client's own certificate.
    pub(crate) fn end_entity(&self) -> &CertificateDer<'static> {
        &self.end_entity
    }
}

impl Tls {
    /// Reads the files: an error if one cannot be read or they do not make a configuration
    /// valid at `now`.
    pub fn open(files: TlsFiles, now: UnixTime) -> Result<Self, TlsError> {
        let read = read_all(&files)?;
        let configured = configure(&files, &read.contents, now)?;
        Ok(Self {
            files,
            loaded: RwLock::new(Loaded::new(configured, &read, 0)),
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

    /// When the certificate served now may be used.
    pub fn validity(&self) -> Validity {
        self.loaded().validity
    }

    /// What an operator should know about the files in force at `now`: a certificate near
    /// its end or past it, a key file others may read.
    pub fn warnings(&self, now: UnixTime) -> Vec<TlsWarning> {
        let loaded = self.loaded();
        let now = seconds(now);
        let path = self.files.cert.clone();
        let not_after = loaded.validity.not_after;
        let mut warnings = Vec::new();
        if now > not_after {
            warnings.push(TlsWarning::CertificateExpired { path, not_after });
        } else if not_after.saturating_sub(now) <= EXPIRY_WARNING.as_secs() as i64 {
            warnings.push(TlsWarning::CertificateExpiresSoon { path, not_after });
        }
        if let Exposure::ReadableByOthers { mode } = loaded.key_exposure {
            let path = self.files.key.clone();
            warnings.push(TlsWarning::KeyReadableByOthers { path, mode });
        }
        warnings
    }

    /// The configuration in force, for one connection's handshake, and its generation: what
    /// the client presents in that handshake is verified under it ([`ClientChain::new`]).
    pub(crate) fn acceptor(&self) -> (tokio_rustls::TlsAcceptor, u64) {
        let loaded = self.loaded();
        let acceptor = tokio_rustls::TlsAcceptor::from(loaded.config.clone());
        (acceptor, loaded.generation)
    }

    /// Whether the client CA in force admits `chain` at `now`. Verified again only when a
    /// configuration was taken since it last was: a connection pays for one verification
    /// per reload, not one per request.
    pub(crate) fn admits(&self, chain: &ClientChain, now: UnixTime) -> Result<(), TlsError> {
        let (generation, verifier) = {
            let loaded = self.loaded();
            (loaded.generation, loaded.client_verifier.clone())
        };
        // Connections are HTTP/1: one request at a time reads and writes it.
        if chain.verified_under.load(Ordering::Relaxed) == generation {
            return Ok(());
        }
        // The files (and so whether there is a client CA) are fixed for the server's life: a
        // chain was verified in a handshake, so there is a verifier. Refused all the same
        // if not, rather than admitted unverified.
        let Some(verifier) = verifier else {
            let reason = rustls::Error::General("no client CA is in force".into());
            return Err(TlsError::ClientNoLongerAdmitted { reason });
        };
        verifier
            .verify_client_cert(&chain.end_entity, &chain.intermediates, now)
            .map_err(|reason| TlsError::ClientNoLongerAdmitted { reason })?;
        chain.verified_under.store(generation, Ordering::Relaxed);
        Ok(())
    }

    /// Reads the files again and takes them if they changed and make a configuration valid
    /// at `now`. The key file's mode is looked at every time: made writable by others, the
    /// files are refused even unchanged (and the configuration loaded last keeps serving).
    pub fn reload(&self, now: UnixTime) -> TlsReload {
        let read = match read_all(&self.files) {
            Ok(read) => read,
            Err(error) => return TlsReload::Refused(error),
        };
        {
            let mut loaded = self.loaded_mut();
            loaded.key_exposure = read.key_exposure;
            if loaded.digest == read.digest {
                return TlsReload::Unchanged;
            }
        }
        match configure(&self.files, &read.contents, now) {
            Ok(configured) => {
                let mut loaded = self.loaded_mut();
                let generation = loaded.generation + 1;
                *loaded = Loaded::new(configured, &read, generation);
                TlsReload::Reloaded
            }
            Err(error) => TlsReload::Refused(error),
        }
    }

    fn loaded(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded.read().unwrap_or_else(|p| p.into_inner())
    }

    fn loaded_mut(&self) -> std::sync::RwLockWriteGuard<'_, Loaded> {
        self.loaded.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl Loaded {
    fn new(configured: Configured, read: &FilesRead, generation: u64) -> Self {
        Self {
            config: Arc::new(configured.config),
            client_verifier: configured.client_verifier,
            generation,
            digest: read.digest,
            validity: configured.validity,
            key_exposure: read.key_exposure,
        }
    }
}

/// `now` in seconds since the Unix epoch, as certificates' dates are compared.
fn seconds(now: UnixTime) -> i64 {
    i64::try_from(now.as_secs()).unwrap_or(i64::MAX)
}

/// The files' contents (cert, key, client CA).
type Contents = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// What one read of the files found.
#[derive(Debug)]
struct FilesRead {
    contents: Contents,
    /// The SHA-256 of the contents, in order.
    digest: [u8; 32],
    key_exposure: Exposure,
}

fn read_all(files: &TlsFiles) -> Result<FilesRead, TlsError> {
    // Before the key is read: a key others may write is not one to take, whatever it holds.
    let key_exposure = secret_files::check(&files.key, KEY_SETTING)
        .map_err(|message| TlsError::KeyFilePermissions { message })?;
    let cert = read_bounded(&files.cert, CERT_SETTING)?;
    let key = read_bounded(&files.key, KEY_SETTING)?;
    let client_ca = match &files.client_ca {
        Some(path) => {
            // Whoever can write the client CA can let any certificate in as any `cert:`
            // principal. It holds nothing secret: others may read it.
            secret_files::check(path, CLIENT_CA_SETTING)
                .map_err(|message| TlsError::KeyFilePermissions { message })?;
            Some(read_bounded(path, CLIENT_CA_SETTING)?)
        }
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
    Ok(FilesRead {
        contents: (cert, key, client_ca),
        digest: digest.finalize().into(),
        key_exposure,
    })
}

fn read_bounded(path: &Path, setting: &'static str) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let unreadable = |source| TlsError::Unreadable {
        setting,
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_TLS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
        return Err(TlsError::TooLarge {
            setting,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// A configuration made of the files, and what else a [`Loaded`] keeps of them.
struct Configured {
    config: ServerConfig,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    validity: Validity,
}

fn configure(
    files: &TlsFiles,
    (cert, key, client_ca): &Contents,
    now: UnixTime,
) -> Result<Configured, TlsError> {
    let chain = certificate_chain(&files.cert, cert)?;
    let validity = validity_of(&files.cert, &chain[0])?;
    check_validity(&files.cert, validity, now)?;
    // The key's text is never quoted in an error.
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| TlsError::Malformed {
        setting: KEY_SETTING,
        path: files.key.clone(),
        problem: "holds no private key in PEM (PKCS#8, PKCS#1 or SEC1)".into(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| TlsError::Refused {
            setting: "TLS versions",
            reason: error.to_string(),
        })?;
    let client_verifier = match (client_ca, &files.client_ca) {
        (Some(bytes), Some(path)) => Some(client_verifier(path, bytes, provider)?),
        _ => None,
    };
    let builder = match &client_verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|reason| TlsError::NotAPair { reason })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Configured {
        config,
        client_verifier,
        validity,
    })
}

/// The PEM certificates of the file at `path`: at least one.
fn certificate_chain(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let malformed = |problem: String| TlsError::Malformed {
        setting: CERT_SETTING,
        path: path.to_path_buf(),
        problem,
    };
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| malformed(format!("is not PEM certificates: {error}")))?;
    if chain.is_empty() {
        return Err(malformed(
            "holds no certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(chain)
}

/// The validity of `certificate`, the server's own, of the file at `path`.
fn validity_of(path: &Path, certificate: &CertificateDer<'_>) -> Result<Validity, TlsError> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(certificate).map_err(|error| TlsError::Malformed {
            setting: CERT_SETTING,
            path: path.to_path_buf(),
            problem: format!("holds a first certificate that is not X.509: {error}"),
        })?;
    let validity = parsed.validity();
    Ok(Validity {
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

/// Refuses a certificate `now` is outside the validity of.
fn check_validity(path: &Path, validity: Validity, now: UnixTime) -> Result<(), TlsError> {
    let now = seconds(now);
    if now < validity.not_before {
        return Err(TlsError::CertificateNotYetValid {
            path: path.to_path_buf(),
            not_before: validity.not_before,
        });
    }
    if now > validity.not_after {
        return Err(TlsError::CertificateExpired {
            path: path.to_path_buf(),
            not_after: validity.not_after,
        });
    }
    Ok(())
}

/// The verifier of client certificates signed by the CAs of the file at `path`.
fn client_verifier(
    path: &Path,
    pem: &[u8],
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let malformed = |problem: String| TlsError::Malformed {
        setting: CLIENT_CA_SETTING,
        path: path.to_path_buf(),
        problem,
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(pem) {
        let certificate =
            certificate.map_err(|error| malformed(format!("is not PEM certificates: {error}")))?;
        roots
            .add(certificate)
            .map_err(|error| malformed(format!("holds a CA rustls cannot take: {error}")))?;
    }
    if roots.is_empty() {
        return Err(malformed("holds no certificate".into()));
    }
    // Optional: a client without a certificate authenticates with a token instead.
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|error| TlsError::Refused {
            setting: CLIENT_CA_SETTING,
            reason: error.to_string(),
        })
}

/// The first byte of every TLS connection: a handshake record.
pub(crate) const HANDSHAKE_RECORD: u8 = 0x16;

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    const DAY: i64 = 86_400;
    /// 2026-01-01T00:00:00Z, the tests' "now".
    const NOW: i64 = 1_767_225_600;

    fn at(seconds: i64) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(seconds).unwrap()))
    }

    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn issuer() -> (Issuer<'static, KeyPair>, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        (Issuer::new(params, key), pem)
    }

    /// A certificate for localhost valid from `not_before` to `not_after` (seconds since the
    /// Unix epoch) for `purpose`, signed by `issuer`: its PEM and its key's PEM.
    fn pair(
        issuer: &Issuer<'static, KeyPair>,
        purpose: ExtendedKeyUsagePurpose,
        not_before: i64,
        not_after: i64,
    ) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.extended_key_usages = vec![purpose];
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.not_before = epoch + Duration::from_secs(u64::try_from(not_before).unwrap());
        params.not_after = epoch + Duration::from_secs(u64::try_from(not_after).unwrap());
        let certificate = params.signed_by(&key, issuer).unwrap();
        (certificate.pem(), key.serialize_pem())
    }

    /// TLS files in a directory of their own, the key of mode 0600.
    struct Files {
        _dir: tempfile::TempDir,
        files: TlsFiles,
    }

    impl Files {
        fn new(client_ca: bool) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let files = TlsFiles {
                cert: dir.path().join("server.pem"),
                key: dir.path().join("server.key"),
                client_ca: client_ca.then(|| dir.path().join("client-ca.pem")),
            };
            Self { _dir: dir, files }
        }

        fn write(&self, (cert, key): &(String, String)) {
            std::fs::write(&self.files.key, key).unwrap();
            set_mode(&self.files.key, 0o600);
            std::fs::write(&self.files.cert, cert).unwrap();
        }
    }

    #[test]
    fn the_plain_http_answer_is_one_json_answer_of_the_length_it_declares() {
        let answer = not_tls_answer();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: crate::error::ErrorBody = serde_json::from_str(body).unwrap();
        assert_eq!(body.error, crate::error::ErrorCode::InvalidArgument);
    }

    /// Valid from its first second to its last, both included; refused a second outside, at
    /// open and at reload (the pair loaded before stays); warned about from 14 days before
    /// its end, and once past it.
    #[test]
    fn a_server_certificate_is_taken_inside_its_validity_only() {
        let (ca, _) = issuer();
        let server = ExtendedKeyUsagePurpose::ServerAuth;
        let (from, to) = (NOW - DAY, NOW + 30 * DAY);
        let files = Files::new(false);
        files.write(&pair(&ca, server.clone(), from, to));
        for outside in [from - 1, to + 1] {
            let refused = Tls::open(files.files.clone(), at(outside)).unwrap_err();
            let message = refused.to_string();
            assert!(message.starts_with("serve.tls_cert_file: "), "{message}");
            match refused {
                TlsError::CertificateNotYetValid { not_before, .. } => {
                    assert_eq!((not_before, outside), (from, from - 1));
                    assert!(message.contains("2025-12-31T00:00:00.000Z"), "{message}");
                }
                TlsError::CertificateExpired { not_after, .. } => {
                    assert_eq!((not_after, outside), (to, to + 1));
                    assert!(message.contains("2026-01-31T00:00:00.000Z"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
        // The same refusal at any time: the TLS watcher logs a refusal when its message changes.
        let refusal = |now| {
            Tls::open(files.files.clone(), at(now))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(refusal(to + 1), refusal(to + DAY));
        Tls::open(files.files.clone(), at(from)).unwrap();
        let tls = Tls::open(files.files.clone(), at(to)).unwrap();
        let taken = Validity {
            not_before: from,
            not_after: to,
        };
        assert_eq!(tls.validity(), taken);

        let expiry_warning = EXPIRY_WARNING.as_secs() as i64;
        let soon = TlsWarning::CertificateExpiresSoon {
            path: files.files.cert.clone(),
            not_after: to,
        };
        assert_eq!(tls.warnings(at(to - expiry_warning - 1)), []);
        assert_eq!(
            tls.warnings(at(to - expiry_warning)),
            std::slice::from_ref(&soon)
        );
        assert_eq!(tls.warnings(at(to)), std::slice::from_ref(&soon));
        assert!(soon.to_string().contains("within 14 days"), "{soon}");
        let expired = TlsWarning::CertificateExpired {
            path: files.files.cert.clone(),
            not_after: to,
        };
        assert_eq!(tls.warnings(at(to + 1)), [expired]);

        for (from, to) in [(NOW - 20 * DAY, NOW - DAY), (NOW + DAY, NOW + 20 * DAY)] {
            files.write(&pair(&ca, server.clone(), from, to));
            let reload = tls.reload(at(NOW));
            assert!(
                matches!(
                    reload,
                    TlsReload::Refused(
                        TlsError::CertificateExpired { .. }
                            | TlsError::CertificateNotYetValid { .. }
                    )
                ),
                "{reload:?}"
            );
            assert_eq!(tls.validity(), taken);
        }
        files.write(&pair(&ca, server, NOW - DAY, NOW + DAY));
        assert!(matches!(tls.reload(at(NOW)), TlsReload::Reloaded));
        assert_eq!(tls.validity().not_after, NOW + DAY);
    }

    /// A key others may write is refused at open and at every reload, changed or not; one
    /// they may read is taken with a warning.
    #[test]
    fn a_key_file_others_may_write_is_refused_and_one_they_may_read_warned_about() {
        let (ca, _) = issuer();
        let files = Files::new(false);
        files.write(&pair(
            &ca,
            ExtendedKeyUsagePurpose::ServerAuth,
            NOW - DAY,
            NOW + 100 * DAY,
        ));
        let key = &files.files.key;
        set_mode(key, 0o666);
        let refused = Tls::open(files.files.clone(), at(NOW)).unwrap_err();
        assert!(
            matches!(&refused, TlsError::KeyFilePermissions { message }
                if message.contains("serve.tls_key_file") && message.contains("0666")),
            "{refused:?}"
        );
        set_mode(key, 0o644);
        let tls = Tls::open(files.files.clone(), at(NOW)).unwrap();
        let readable = TlsWarning::KeyReadableByOthers {
            path: key.clone(),
            mode: 0o644,
        };
        assert_eq!(tls.warnings(at(NOW)), std::slice::from_ref(&readable));
        assert!(readable.to_string().contains("0644"), "{readable}");
        set_mode(key, 0o620);
        assert!(matches!(
            tls.reload(at(NOW)),
            TlsReload::Refused(TlsError::KeyFilePermissions { .. })
        ));
        set_mode(key, 0o600);
        assert!(matches!(tls.reload(at(NOW)), TlsReload::Unchanged));
        assert_eq!(tls.warnings(at(NOW)), []);
    }

    /// A chain verified in a handshake is verified again after a reload, against the client
    /// CA then in force: refused once the file names another CA, admitted again once it names
    /// its own.
    #[test]
    fn a_client_chain_is_verified_again_after_a_reload() {
        let (server_ca, _) = issuer();
        let ((first, first_pem), (_, second_pem)) = (issuer(), issuer());
        let files = Files::new(true);
        let client_ca = files.files.client_ca.clone().unwrap();
        files.write(&pair(
            &server_ca,
            ExtendedKeyUsagePurpose::ServerAuth,
            NOW - DAY,
            NOW + 100 * DAY,
        ));
        std::fs::write(&client_ca, &first_pem).unwrap();
        let tls = Tls::open(files.files.clone(), at(NOW)).unwrap();
        let (client, _) = pair(
            &first,
            ExtendedKeyUsagePurpose::ClientAuth,
            NOW - DAY,
            NOW + DAY,
        );
        let presented = [CertificateDer::from_pem_slice(client.as_bytes()).unwrap()];
        let (_, generation) = tls.acceptor();
        assert!(ClientChain::new(&[], generation).is_none());
        let chain = ClientChain::new(&presented, generation).unwrap();
        assert_eq!(chain.end_entity(), &presented[0]);
        // Not verified again while no reload happened, even where it would now fail.
        tls.admits(&chain, at(NOW + 2 * DAY)).unwrap();

        std::fs::write(&client_ca, &second_pem).unwrap();
        assert!(matches!(tls.reload(at(NOW)), TlsReload::Reloaded));
        let refused = tls.admits(&chain, at(NOW)).unwrap_err();
        assert!(
            matches!(refused, TlsError::ClientNoLongerAdmitted { .. }),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("serve.tls_client_ca_file"));
        // Refused again on every request while the CA in force does not admit it.
        assert!(tls.admits(&chain, at(NOW)).is_err());

        std::fs::write(&client_ca, format!("{second_pem}{first_pem}")).unwrap();
        assert!(matches!(tls.reload(at(NOW)), TlsReload::Reloaded));
        tls.admits(&chain, at(NOW)).unwrap();
        // Cached: the next look does not verify (an expired chain would fail otherwise).
        tls.admits(&chain, at(NOW + 2 * DAY)).unwrap();
    }
}
