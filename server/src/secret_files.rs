//! Who else may touch a file that holds secrets or decides who is let in: the tokens file,
//! the TLS private key, the client CA, and the settings file when it holds the admin token.
//!
//! A file that a user other than its owner may write (group or others have the write bit) is
//! refused: whoever can write it can add a principal or swap the key, and the server would
//! take the change in silence within a second. One that others may read is served, with a
//! warning at start and at each reload, since a group such as `ssl-cert` reading a key is a
//! common and deliberate setup.
//!
//! On platforms without Unix permission bits, every file is taken as private.

use std::path::Path;

/// What the permission bits of a secret file allow others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Only the owner may read or write it.
    Private,
    /// Its group or others may read it, and no one but the owner may write it.
    ReadableByOthers {
        /// The permission bits, as `ls` shows them in octal.
        mode: u32,
    },
    /// Its group or others may write it.
    WritableByOthers {
        /// The permission bits, as `ls` shows them in octal.
        mode: u32,
    },
}

impl Exposure {
    /// Reads the permission bits of the file `path` names (following a symbolic link, as
    /// the server's read of it does).
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let metadata = std::fs::metadata(path)?;
        Ok(Self::of_metadata(&metadata))
    }

    #[cfg(unix)]
    fn of_metadata(metadata: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let mode = metadata.permissions().mode() & 0o7777;
        Self::of_mode(mode)
    }

    #[cfg(not(unix))]
    fn of_metadata(_metadata: &std::fs::Metadata) -> Self {
        Exposure::Private
    }

    /// What `mode`'s group and other bits allow.
    pub fn of_mode(mode: u32) -> Self {
        if mode & 0o022 != 0 {
            Exposure::WritableByOthers { mode }
        } else if mode & 0o044 != 0 {
            Exposure::ReadableByOthers { mode }
        } else {
            Exposure::Private
        }
    }
}

/// Refuses `path` if others may write it; says (as the `Ok` value) whether others may read it,
/// for the caller to warn. `setting` names it in the message, such as `serve.tokens_file`.
pub fn check(path: &Path, setting: &str) -> Result<Exposure, String> {
    let exposure = Exposure::of(path).map_err(|error| {
        format!(
            "{setting}: cannot read the permissions of {}: {error}",
            path.display()
        )
    })?;
    match exposure {
        Exposure::WritableByOthers { mode } => Err(format!(
            "{setting}: {} may be written by users other than its owner (mode {mode:04o}): \
             whoever can write it can change who is let in, or who the server says it is; \
             make it writable by its owner alone (chmod go-w)",
            path.display()
        )),
        other => Ok(other),
    }
}

/// The warning for a file others may read, or `None` for a private one.
pub fn readable_warning(path: &Path, setting: &str, exposure: Exposure) -> Option<String> {
    match exposure {
        Exposure::ReadableByOthers { mode } => Some(format!(
            "{setting}: {} may be read by users other than its owner (mode {mode:04o}); \
             consider chmod 600",
            path.display()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_private_readable_or_writable_by_others() {
        assert_eq!(Exposure::of_mode(0o600), Exposure::Private);
        assert_eq!(Exposure::of_mode(0o400), Exposure::Private);
        assert_eq!(Exposure::of_mode(0o700), Exposure::Private);
        for readable in [0o640, 0o604, 0o644, 0o444] {
            assert_eq!(
                Exposure::of_mode(readable),
                Exposure::ReadableByOthers { mode: readable }
            );
        }
        for writable in [0o620, 0o602, 0o666, 0o622, 0o660] {
            assert_eq!(
                Exposure::of_mode(writable),
                Exposure::WritableByOthers { mode: writable }
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_write_is_refused_and_one_they_may_read_is_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "x").unwrap();
        let set =
            |mode| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        set(0o666);
        let refused = check(&path, "serve.tokens_file").unwrap_err();
        assert!(
            refused.contains("mode 0666") && refused.contains("serve.tokens_file"),
            "{refused}"
        );
        set(0o644);
        let exposure = check(&path, "serve.tokens_file").unwrap();
        assert_eq!(exposure, Exposure::ReadableByOthers { mode: 0o644 });
        assert!(
            readable_warning(&path, "serve.tokens_file", exposure)
                .unwrap()
                .contains("0644")
        );
        set(0o600);
        let exposure = check(&path, "serve.tokens_file").unwrap();
        assert_eq!(exposure, Exposure::Private);
        assert_eq!(readable_warning(&path, "serve.tokens_file", exposure), None);
        assert!(check(&dir.path().join("missing"), "serve.tokens_file").is_err());
    }
}
