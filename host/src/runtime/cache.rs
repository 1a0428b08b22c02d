//! Compiled components on disk, so that a process does not compile again what an earlier one
//! compiled: one file per component digest and engine compatibility.
//!
//! A compiled component is native code that wasmtime runs without checking it again, so only
//! files this host wrote are ever loaded: the file name is derived from the sha256 of the
//! component bytes the caller holds (and has just hashed) and from the engine's compatibility
//! hash (wasmtime version, target, settings), the directory is created private (0700) and
//! files appear in it only by an atomic rename of a file the host wrote itself. An artifact
//! that fails to deserialise (stale, truncated) is discarded and compiled again. The
//! directory must not be writable by anyone but mend's user: whoever can write there can run
//! code as mend.

// Loading compiled code is unsafe by nature; this module is the only place mend does it.
#![allow(unsafe_code)]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::PolicyError;

/// Where the compiled form of the component with `digest` lives for `engine`.
pub fn artifact_path(dir: &Path, engine: &Engine, digest: &str) -> PathBuf {
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    dir.join(format!("{hex}-{:016x}.cwasm", hasher.finish()))
}

/// The component with `digest`, from `dir` if this host compiled it before, else compiled
/// from `bytes` and written there.
pub fn load_or_compile(
    engine: &Engine,
    digest: &str,
    bytes: &[u8],
    dir: &Path,
) -> Result<Component, PolicyError> {
    let path = artifact_path(dir, engine, digest);
    if path.is_file() {
        // SAFETY: the file is one this host wrote (see the module doc): its name binds it to
        // the digest of `bytes` and to this engine's compatibility hash, and wasmtime checks
        // the compatibility again on load.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => return Ok(component),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let component = Component::new(engine, bytes).map_err(|error| PolicyError::Compile {
        message: format!("{error:#}"),
    })?;
    // The cache only saves time: a failure to write it is not the caller's failure.
    if let Ok(serialized) = component.serialize() {
        let _ = write_atomically(dir, &path, &serialized);
    }
    Ok(component)
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create_private_dir(dir)?;
    let temporary = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{DEFAULT_POLICY_WASM, digest_of, shared_engine};

    #[test]
    fn a_component_is_compiled_once_then_loaded_and_a_bad_artifact_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let engine = shared_engine().unwrap();
        let digest = digest_of(DEFAULT_POLICY_WASM);
        let path = artifact_path(dir.path(), engine, &digest);

        load_or_compile(engine, &digest, DEFAULT_POLICY_WASM, dir.path()).unwrap();
        let written = std::fs::metadata(&path).unwrap().modified().unwrap();
        load_or_compile(engine, &digest, DEFAULT_POLICY_WASM, dir.path()).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            written,
            "the second load reads the artifact"
        );

        std::fs::write(&path, b"not a compiled component").unwrap();
        load_or_compile(engine, &digest, DEFAULT_POLICY_WASM, dir.path()).unwrap();
        assert!(
            std::fs::read(&path).unwrap().len() > 1_000,
            "a bad artifact is compiled again and replaced"
        );
    }
}
