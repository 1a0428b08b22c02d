//! Who may do what: principals, their grants, and the tokens file that names them.
//!
//! A tokens file holds one principal per line: its name, the SHA-256 of its secret, and its
//! grants. It never holds a secret: `mend token new` prints the secret once, with the line to
//! add, and whoever reads the file learns no secret from it.
//!
//! ```text
//! # principal   credential                                                                grants
//! indexer       sha256:3b1f…(64 hex digits)                                               write:logs-* read:logs-*
//! operations    sha256:9c0a…                                                              operate:*
//! root          sha256:77de…                                                              admin
//! ingest-box    cert:ingest-1.example.internal                                            write:logs-*
//! ```
//!
//! - **Credentials.** `sha256:HEX` is the hash of a bearer secret. `cert:NAME` is a client
//!   certificate (mutual TLS, `serve.tls_client_ca_file`): a request on a connection whose
//!   client presented a certificate the client CA signed, valid for the DNS name `NAME` (a
//!   subject alternative name), and no `Authorization` header, is that principal's. A
//!   certificate holding several listed names is the first such line's. Only an exact DNS
//!   name counts: a wildcard certificate (`*.example.internal`) is no principal's.
//! - **Rotation.** A principal may have several lines, one per credential, with the same
//!   grants: add a line with the new secret (or certificate name) under the same name, move
//!   the clients to it, then remove the old line. The name, and with it the principal's
//!   operations and idempotency keys, stays.
//! - **Grants.** `admin` allows everything. `read:P`, `write:P` and `operate:P` allow that
//!   action on the datasets whose ids match the pattern `P`: an exact dataset id, a prefix
//!   followed by `*` (`logs-*`), or `*` for every dataset. The actions are separate: a writer
//!   that reads its checkpoint positions needs `read` beside `write`.
//! - **Secrets.** `mend_` and 64 hex digits: 256 bits from the operating system's random
//!   source ([`new_secret`]). A request presents one as `Authorization: Bearer SECRET`; the
//!   server hashes it, finds the principals whose hash starts as its does, and compares the
//!   whole hashes in time that does not depend on where they differ
//!   ([`Tokens::authenticate`]).
//! - **Bounds.** A file of at most [`MAX_TOKENS_FILE_BYTES`], [`MAX_PRINCIPALS`] lines of
//!   at most [`MAX_GRANTS`] grants each; a name of 1 to [`MAX_PRINCIPAL_NAME`] characters of
//!   `A-Z a-z 0-9 . _ -`. A file that breaks a rule is refused whole, with the number of the
//!   line that breaks it and the rule, never the line's text (a secret pasted into the wrong
//!   field would be printed): a server never runs with half a tokens file.

use std::fmt;

use sha2::{Digest, Sha256};

/// The largest tokens file read.
pub const MAX_TOKENS_FILE_BYTES: usize = 1024 * 1024;
/// The most credential lines (principals, or their credentials during a rotation) a tokens
/// file may hold.
pub const MAX_PRINCIPALS: usize = 10_000;
/// The most grants one principal may hold.
pub const MAX_GRANTS: usize = 64;
/// The longest principal name.
pub const MAX_PRINCIPAL_NAME: usize = 64;
/// The names a tokens file may not give a principal: the server's own principals
/// (`access::ANONYMOUS`, `access::ADMIN_TOKEN_PRINCIPAL`), and `cli`, which audit records
/// give for the command line (a principal so named would read as it). A replica's own
/// sweeps are `supervisor@REPLICA`, which no principal name can be ('@' is not in a name).
pub const RESERVED_PRINCIPALS: [&str; 3] = ["anonymous", "admin-token", "cli"];
/// What every secret starts with, so that one found in a log or a repository is known for
/// what it is.
pub const SECRET_PREFIX: &str = "mend_";
/// Random bytes in a secret (printed as twice as many hex digits).
const SECRET_BYTES: usize = 32;
/// The longest dataset id a pattern may name (the engine's limit on ids).
const MAX_ID_BYTES: usize = mend::validate::MAX_ID_BYTES;

/// What a request does to a dataset (or, for `Admin`, to the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Reads rows, the manifest, checkpoints, operations' states.
    Read,
    /// Stages, publishes, marks, begins and ends operations, creates datasets.
    Write,
    /// Recovers, collects garbage, reconciles, fences and unfences.
    Operate,
    /// Swaps and rolls back policies, exclusive recovery, anything naming a server file.
    Admin,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Read => "read",
            Action::Write => "write",
            Action::Operate => "operate",
            Action::Admin => "admin",
        })
    }
}

/// Which datasets a grant covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Exactly this dataset id.
    Exact(String),
    /// Every dataset id that starts with this prefix (`""` for every dataset).
    Prefix(String),
}

impl Pattern {
    /// Whether `dataset_id` matches.
    pub fn matches(&self, dataset_id: &str) -> bool {
        match self {
            Pattern::Exact(id) => id == dataset_id,
            Pattern::Prefix(prefix) => dataset_id.starts_with(prefix.as_str()),
        }
    }

    /// Reads `*`, `ID` or `PREFIX*`.
    fn parse(text: &str) -> Result<Self, String> {
        let (body, prefix) = match text.strip_suffix('*') {
            Some(body) => (body, true),
            None => (text, false),
        };
        if body.contains('*') {
            return Err(
                "in a pattern, '*' may only come last (an id prefix and '*', or '*' alone)".into(),
            );
        }
        if !prefix && body.is_empty() {
            return Err("an empty pattern: name a dataset id, a prefix and '*', or '*'".into());
        }
        if body.len() > MAX_ID_BYTES {
            return Err(format!(
                "a pattern is at most as long as a dataset id ({MAX_ID_BYTES} bytes)"
            ));
        }
        if !in_id_alphabet(body, true) {
            return Err(
                "a pattern's dataset id (or prefix) holds ASCII letters, digits, '.', \
                 '_' and '-', starting with a letter or digit"
                    .into(),
            );
        }
        Ok(if prefix {
            Pattern::Prefix(body.to_string())
        } else {
            Pattern::Exact(body.to_string())
        })
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(id) => f.write_str(id),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// One grant of a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Everything, on every dataset and the server.
    Admin,
    /// One action on the datasets a pattern matches.
    On(Action, Pattern),
}

impl Grant {
    /// Reads `admin`, `read:P`, `write:P` or `operate:P`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "admin" {
            return Ok(Grant::Admin);
        }
        let Some((action, pattern)) = text.split_once(':') else {
            return Err("a grant is admin, read:PATTERN, write:PATTERN or operate:PATTERN".into());
        };
        let action = match action {
            "read" => Action::Read,
            "write" => Action::Write,
            "operate" => Action::Operate,
            _ => {
                return Err(
                    "a grant's action is unknown: read, write or operate (or admin alone)".into(),
                );
            }
        };
        Ok(Grant::On(action, Pattern::parse(pattern)?))
    }

    /// Whether this grant allows `action`, on `dataset_id` when the action names one (an
    /// action on no dataset, such as listing the datasets, is allowed by a grant of that
    /// action on any pattern).
    pub fn allows(&self, action: Action, dataset_id: Option<&str>) -> bool {
        match self {
            Grant::Admin => true,
            Grant::On(granted, pattern) => {
                *granted == action && dataset_id.is_none_or(|id| pattern.matches(id))
            }
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Admin => f.write_str("admin"),
            Grant::On(action, pattern) => write!(f, "{action}:{pattern}"),
        }
    }
}

/// A principal: who a request is from, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub grants: Vec<Grant>,
}

impl Principal {
    /// Whether one of its grants allows `action` on `dataset_id`.
    pub fn may(&self, action: Action, dataset_id: Option<&str>) -> bool {
        self.grants
            .iter()
            .any(|grant| grant.allows(action, dataset_id))
    }

    /// Whether it holds `admin`.
    pub fn is_admin(&self) -> bool {
        self.grants.contains(&Grant::Admin)
    }
}

/// The SHA-256 of a secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `secret`.
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    /// Reads `sha256:` and 64 hex digits.
    fn parse(text: &str) -> Result<Self, String> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(
                "a token hash is sha256: and 64 hex digits (the tokens file holds hashes, \
                 never secrets: `mend token new` prints the line to add)"
                    .into(),
            );
        };
        if hex.len() != 64 {
            return Err(format!(
                "a token hash has 64 hex digits after sha256:, not {}",
                hex.len()
            ));
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks(2)) {
            let digits = std::str::from_utf8(pair).map_err(|_| "a token hash is hex digits")?;
            *byte = u8::from_str_radix(digits, 16)
                .map_err(|_| "a token hash is hex digits".to_string())?;
        }
        Ok(Self(bytes))
    }
}

impl fmt::Display for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({self})")
    }
}

/// Why a tokens file was refused, and on which line (1-based; 0 for the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tokens file{}: {message}", if *.line > 0 { format!(" line {}", .line) } else { String::new() })]
pub struct TokensError {
    pub line: usize,
    pub message: String,
}

/// How a principal proves who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// The SHA-256 of its bearer secret.
    Token(TokenHash),
    /// A client certificate valid for this DNS name.
    Certificate(String),
}

impl Credential {
    /// Reads `sha256:HEX` or `cert:NAME`.
    fn parse(text: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("cert:") {
            let valid = rustls_pki_types::DnsName::try_from(name).is_ok()
                && !name.is_empty()
                && name.len() <= 253;
            if !valid {
                return Err(
                    "a cert: credential is a DNS name without wildcards that the client \
                     certificate holds (a subject alternative name), such as \
                     cert:ingest-1.example.internal"
                        .into(),
                );
            }
            return Ok(Credential::Certificate(name.to_ascii_lowercase()));
        }
        TokenHash::parse(text).map(Credential::Token)
    }
}

/// The principals of a tokens file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    /// By line, with each one's credential: a principal has a line per credential it holds.
    lines: Vec<(Credential, Principal)>,
    /// The principals with a token, by the first 8 bytes of its hash: a request is checked
    /// against the few whose hash starts as the presented secret's does, not against all
    /// (10,000 principals would cost a request 10,000 comparisons).
    by_hash_prefix: std::collections::HashMap<[u8; 8], Vec<usize>>,
}

/// The first 8 bytes of a token hash.
fn prefix_of(hash: &TokenHash) -> [u8; 8] {
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&hash.0[..8]);
    prefix
}

impl Tokens {
    /// Reads a tokens file's text (see the module doc); refused whole at the first line that
    /// breaks a rule. Over 100 lines: one check per rule of a line, each with its message,
    /// in the order a reader of the file meets them.
    pub fn parse(text: &str) -> Result<Self, TokensError> {
        if text.len() > MAX_TOKENS_FILE_BYTES {
            return Err(TokensError {
                line: 0,
                message: format!(
                    "it is {} bytes; the most read is {MAX_TOKENS_FILE_BYTES}",
                    text.len()
                ),
            });
        }
        // Every message below says the line's number and the rule it breaks, never the
        // line's text: a refused line may hold a secret pasted in the wrong place, and the
        // message goes to a terminal and to the logs.
        let mut lines: Vec<(Credential, Principal)> = Vec::new();
        let mut line_numbers: Vec<usize> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let at = |message: String| TokensError {
                line: index + 1,
                message,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(name), Some(credential)) = (fields.next(), fields.next()) else {
                return Err(at(
                    "expected a principal, its credential (sha256:HASH or cert:NAME) and its \
                     grants"
                        .into(),
                ));
            };
            check_principal_name(name).map_err(at)?;
            if RESERVED_PRINCIPALS.contains(&name) {
                return Err(at(
                    "the principal name is one of the server's own (a request without a \
                     credential is `anonymous`; the admin token's principal is `admin-token`; \
                     audit records name the command line `cli`): name this principal otherwise"
                        .into(),
                ));
            }
            let credential = Credential::parse(credential).map_err(at)?;
            let grants = fields
                .map(Grant::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(at)?;
            if grants.is_empty() {
                return Err(at(
                    "the principal has no grants: give it admin, read:, write: or operate: \
                     grants, or remove its line"
                        .into(),
                ));
            }
            if grants.len() > MAX_GRANTS {
                return Err(at(format!(
                    "the principal has {} grants; the most is {MAX_GRANTS}",
                    grants.len()
                )));
            }
            if let Some(earlier) = lines.iter().position(|(known, _)| *known == credential) {
                return Err(at(format!(
                    "the credential of line {} again: every principal needs a secret (or a \
                     certificate name) of its own, and a rotation a new one",
                    line_numbers[earlier]
                )));
            }
            // Several lines for one name are one principal holding several credentials at
            // once: how a secret or a certificate is rotated without a new name (operations
            // and idempotency keys are kept per name). The lines must agree on the grants,
            // so that which credential a request presents never changes what it may do.
            if let Some(earlier) = lines.iter().position(|(_, known)| known.name == name)
                && lines[earlier].1.grants != grants
            {
                return Err(at(format!(
                    "the principal of line {} with other grants: the lines of one principal \
                     (one per credential, for a rotation) hold the same grants",
                    line_numbers[earlier]
                )));
            }
            if lines.len() == MAX_PRINCIPALS {
                return Err(at(format!(
                    "more than {MAX_PRINCIPALS} credential lines in one tokens file"
                )));
            }
            lines.push((
                credential,
                Principal {
                    name: name.to_string(),
                    grants,
                },
            ));
            line_numbers.push(index + 1);
        }
        let mut by_hash_prefix: std::collections::HashMap<[u8; 8], Vec<usize>> =
            std::collections::HashMap::new();
        for (index, (credential, _)) in lines.iter().enumerate() {
            if let Credential::Token(hash) = credential {
                by_hash_prefix
                    .entry(prefix_of(hash))
                    .or_default()
                    .push(index);
            }
        }
        Ok(Self {
            lines,
            by_hash_prefix,
        })
    }

    /// The principal whose secret is `presented`, if any. The presented secret is hashed and
    /// found by its hash's first 8 bytes; its whole hash is then compared with each candidate's
    /// in constant time, none cut short. What timing could tell is whether some principal's
    /// hash starts as the presented one's does, which says nothing of any secret: finding a
    /// secret with a given hash is what SHA-256 makes infeasible.
    pub fn authenticate(&self, presented: &str) -> Option<&Principal> {
        let presented = TokenHash::of(presented);
        let mut found = None;
        for &index in self
            .by_hash_prefix
            .get(&prefix_of(&presented))
            .into_iter()
            .flatten()
        {
            if let (Credential::Token(hash), principal) = &self.lines[index]
                && constant_time_eq(&hash.0, &presented.0)
            {
                found = Some(principal);
            }
        }
        found
    }

    /// The principal of a client certificate (its chain already verified against the client
    /// CA by the TLS handshake): the first `cert:NAME` line whose name the certificate holds
    /// exactly, as a DNS subject alternative name.
    ///
    /// Exactly: a wildcard name such as `*.example.internal` names no principal, though TLS
    /// would take it as valid for `ops.example.internal`. Internal CAs often issue wildcard
    /// certificates for clientAuth, and one such certificate would otherwise be every
    /// principal its pattern covers.
    pub fn authenticate_certificate(
        &self,
        certificate: &rustls_pki_types::CertificateDer<'_>,
    ) -> Option<&Principal> {
        let certificate = webpki::EndEntityCert::try_from(certificate).ok()?;
        // `valid_dns_names` yields wildcard names too; they are left out here.
        let held: Vec<String> = certificate
            .valid_dns_names()
            .filter(|name| !name.contains('*'))
            .map(|name| name.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        self.lines
            .iter()
            .find_map(|(credential, principal)| match credential {
                Credential::Certificate(name) => held.contains(name).then_some(principal),
                Credential::Token(_) => None,
            })
    }

    /// How many principals the file names (a principal with several credential lines counts
    /// once).
    pub fn len(&self) -> usize {
        self.principals().count()
    }

    /// Whether the file names no principal.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The principals, in the order of their first lines.
    pub fn principals(&self) -> impl Iterator<Item = &Principal> {
        let mut seen = std::collections::HashSet::new();
        self.lines
            .iter()
            .map(|(_, principal)| principal)
            .filter(move |principal| seen.insert(principal.name.as_str()))
    }
}

/// Compares without stopping at the first difference, so timing does not reveal where two
/// secrets (or their hashes) differ; only whether their lengths do.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `text` is in the one alphabet of mend's ids: ASCII letters, digits, '.', '_' and
/// '-', starting with a letter or digit; an empty `text` only where `empty_ok` (the prefix of
/// the pattern `*`).
fn in_id_alphabet(text: &str, empty_ok: bool) -> bool {
    let first_ok = text
        .chars()
        .next()
        .map_or(empty_ok, |first| first.is_ascii_alphanumeric());
    first_ok
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A principal name: 1 to [`MAX_PRINCIPAL_NAME`] characters of `A-Z a-z 0-9 . _ -`, starting
/// with a letter or digit, so that it prints in logs and audit records as it is.
pub fn check_principal_name(name: &str) -> Result<(), String> {
    if !in_id_alphabet(name, false) || name.len() > MAX_PRINCIPAL_NAME {
        return Err(format!(
            "a principal name is 1 to {MAX_PRINCIPAL_NAME} ASCII letters, digits, '.', '_' or \
             '-', starting with a letter or digit"
        ));
    }
    Ok(())
}

/// A new secret: [`SECRET_PREFIX`] and 64 hex digits from the operating system's random
/// source.
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes)?;
    let mut secret = String::with_capacity(SECRET_PREFIX.len() + 2 * SECRET_BYTES);
    secret.push_str(SECRET_PREFIX);
    for byte in bytes {
        secret.push_str(&format!("{byte:02x}"));
    }
    Ok(secret)
}

/// The least strength a secret the server takes from a setting (`serve.admin_token`) must
/// have to serve on an address other machines can reach, in bits.
pub const MIN_SECRET_BITS: u32 = 128;
/// The fewest distinct characters such a secret must hold: a long run of one or two
/// characters has the length but not the strength.
pub const MIN_SECRET_DISTINCT_CHARACTERS: usize = 8;

/// How strong a secret is, as counted without knowing how it was made: its length times the
/// bits of each character of the alphabet its characters come from (lower-case letters,
/// upper-case letters, digits, anything else: 32 more), and how many distinct characters it
/// holds. A secret of [`new_secret`] counts 420 bits; 25 letters and digits, 129; `qz`, 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretStrength {
    pub bits: u32,
    pub distinct_characters: usize,
}

impl SecretStrength {
    pub fn of(secret: &str) -> Self {
        let has = |class: fn(&char) -> bool| secret.chars().any(|c| class(&c));
        let alphabet = [
            (has(char::is_ascii_lowercase), 26),
            (has(char::is_ascii_uppercase), 26),
            (has(char::is_ascii_digit), 10),
            (has(|c| !c.is_ascii_alphanumeric()), 32),
        ]
        .iter()
        .filter(|(present, _)| *present)
        .map(|(_, size)| size)
        .sum::<u32>();
        let length = secret.chars().count();
        let bits = if alphabet == 0 {
            0
        } else {
            (length as f64 * f64::from(alphabet).log2()).floor() as u32
        };
        let distinct_characters = secret
            .chars()
            .collect::<std::collections::HashSet<_>>()
            .len();
        Self {
            bits,
            distinct_characters,
        }
    }

    /// Whether it is strong enough for a server other machines can reach.
    pub fn is_enough(&self) -> bool {
        self.bits >= MIN_SECRET_BITS && self.distinct_characters >= MIN_SECRET_DISTINCT_CHARACTERS
    }
}

/// The tokens file line for `principal` holding `grants`, whose secret is `secret`.
pub fn tokens_file_line(principal: &str, secret: &str, grants: &[Grant]) -> String {
    let grants: Vec<String> = grants.iter().map(ToString::to_string).collect();
    format!("{principal} {} {}", TokenHash::of(secret), grants.join(" "))
}

/// A tokens file on disk, read again when its content changes ([`TokensFile::reload`]): a
/// server picks up a principal added or removed without a restart. A change that breaks a
/// rule is refused whole and the principals read last stay in force, so that a typo never
/// locks every client out, nor lets one in.
#[derive(Debug)]
pub struct TokensFile {
    path: std::path::PathBuf,
    loaded: std::sync::RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    tokens: std::sync::Arc<Tokens>,
    /// The SHA-256 of the text the tokens came from.
    digest: [u8; 32],
    /// What its permission bits allowed others when last read.
    exposure: crate::secret_files::Exposure,
}

/// The setting that names a tokens file, as its messages say it.
const SETTING: &str = "serve.tokens_file";

/// What a [`TokensFile::reload`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The file says what it said.
    Unchanged,
    /// The file changed, and now names this many principals.
    Reloaded { principals: usize },
    /// The file changed or could not be read; the principals read before stay in force.
    Refused { error: TokensError },
}

impl TokensFile {
    /// Reads the tokens file at `path`: an error if it cannot be read or breaks a rule (a
    /// server does not start on it).
    ///
    /// A file users other than its owner may write is refused, at start and at every reload
    /// ([`crate::secret_files`]): whoever can write it can add a principal.
    pub fn open(path: &std::path::Path) -> Result<Self, TokensError> {
        let exposure = check_exposure(path)?;
        let text = read_bounded(path)?;
        let tokens = Tokens::parse(&text)?;
        Ok(Self {
            path: path.to_path_buf(),
            loaded: std::sync::RwLock::new(Loaded {
                tokens: std::sync::Arc::new(tokens),
                digest: Sha256::digest(text.as_bytes()).into(),
                exposure,
            }),
        })
    }

    /// The warning to give while users other than its owner may read the file (as last
    /// read), or `None`.
    pub fn readable_warning(&self) -> Option<String> {
        let exposure = self
            .loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .exposure;
        crate::secret_files::readable_warning(&self.path, SETTING, exposure)
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The principals in force.
    pub fn current(&self) -> std::sync::Arc<Tokens> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        std::sync::Arc::clone(&loaded.tokens)
    }

    /// Reads the file again; takes its principals if its content changed and holds every rule.
    pub fn reload(&self) -> Reload {
        let exposure = match check_exposure(&self.path) {
            Ok(exposure) => exposure,
            Err(error) => return Reload::Refused { error },
        };
        let text = match read_bounded(&self.path) {
            Ok(text) => text,
            Err(error) => return Reload::Refused { error },
        };
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        {
            let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
            loaded.exposure = exposure;
            if loaded.digest == digest {
                return Reload::Unchanged;
            }
        }
        match Tokens::parse(&text) {
            Ok(tokens) => {
                let principals = tokens.len();
                *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Loaded {
                    tokens: std::sync::Arc::new(tokens),
                    digest,
                    exposure,
                };
                Reload::Reloaded { principals }
            }
            Err(error) => Reload::Refused { error },
        }
    }
}

/// What the file's permission bits allow others; refused if they may write it.
fn check_exposure(path: &std::path::Path) -> Result<crate::secret_files::Exposure, TokensError> {
    crate::secret_files::check(path, SETTING).map_err(|message| TokensError { line: 0, message })
}

/// The text of the file at `path`, refused past [`MAX_TOKENS_FILE_BYTES`] before it is read
/// whole.
fn read_bounded(path: &std::path::Path) -> Result<String, TokensError> {
    use std::io::Read;
    let whole = |message: String| TokensError { line: 0, message };
    let file = std::fs::File::open(path)
        .map_err(|error| whole(format!("cannot open {}: {error}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(MAX_TOKENS_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| whole(format!("cannot read {}: {error}", path.display())))?;
    if bytes.len() > MAX_TOKENS_FILE_BYTES {
        return Err(whole(format!(
            "{} is larger than {MAX_TOKENS_FILE_BYTES} bytes",
            path.display()
        )));
    }
    String::from_utf8(bytes).map_err(|_| whole(format!("{} is not UTF-8 text", path.display())))
}

#[cfg(test)]
mod tests;
