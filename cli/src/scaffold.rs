//! `mend policy new NAME --lang rust|js`: writes a policy project that builds to a component
//! mend accepts and passes the default policy's golden scenarios as it is written.
//!
//! The files come from this checkout, compiled into the binary, so a project is always the one
//! this mend can run: the templates in `cli/templates/`, the contract (`wit/policy.wit`), the
//! JavaScript policy and its pinned builders (`policies/js/`), and the default policy's
//! scenarios (`guest/scenarios/`). A Rust project depends on the SDK and the default policy by
//! path, in the checkout this binary was built from (or `--mend-dir`).
//!
//! The project is written into a temporary folder beside its destination and renamed into place
//! when complete: an interrupted `policy new` leaves no half-written project, and an existing
//! folder is never written into.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use mend::MendError;

/// The languages a policy project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// A Rust crate on mend's policy SDK, built for wasm32-wasip2 with cargo.
    Rust,
    /// An ES module built with componentize-js and componentize-qjs from npm.
    Js,
}

impl Language {
    /// The command, run in the project's folder, that builds its component (as its README
    /// says).
    pub fn build_command(self) -> &'static str {
        match self {
            Self::Rust => "cargo build --release --target wasm32-wasip2",
            Self::Js => "npm ci && node build.mjs dist",
        }
    }
}

/// Where the build of the project `name` writes its component, in the project's folder.
pub fn component_path(name: &str, language: Language) -> String {
    match language {
        Language::Rust => format!("target/wasm32-wasip2/release/{}.wasm", crate_name(name)),
        Language::Js => "dist/mend_policy_js.wasm".to_string(),
    }
}

/// The Rust crate a project name makes: dashes are not allowed in a crate's name.
fn crate_name(name: &str) -> String {
    name.replace('-', "_")
}

/// The longest project name: it becomes a folder, a package and a crate name.
const MAX_NAME_CHARS: usize = 64;

/// The mend checkout this binary was built from: where a Rust project finds the SDK.
const BUILT_FROM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The default policy's golden scenarios, copied into every project.
const SCENARIOS: &[(&str, &str)] = &[
    (
        "stage.json",
        include_str!("../../guest/scenarios/stage.json"),
    ),
    (
        "publish.json",
        include_str!("../../guest/scenarios/publish.json"),
    ),
    (
        "recovery.json",
        include_str!("../../guest/scenarios/recovery.json"),
    ),
    (
        "reconcile.json",
        include_str!("../../guest/scenarios/reconcile.json"),
    ),
    ("gc.json", include_str!("../../guest/scenarios/gc.json")),
    (
        "README.md",
        include_str!("../templates/scenarios-README.md"),
    ),
];

const RUST_FILES: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../templates/policy-rust/Cargo.toml"),
    ),
    (
        "build.rs",
        include_str!("../templates/policy-rust/build.rs"),
    ),
    (
        "src/lib.rs",
        include_str!("../templates/policy-rust/src/lib.rs"),
    ),
    (
        "rust-toolchain.toml",
        include_str!("../templates/policy-rust/rust-toolchain.toml"),
    ),
    (
        "README.md",
        include_str!("../templates/policy-rust/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../templates/policy-rust/gitignore"),
    ),
    // mend's own lock file: cargo keeps the versions of every package the project shares with
    // mend (wit-bindgen above all) and drops the rest, so the project builds with the
    // dependencies mend is tested with rather than whatever is newest.
    ("Cargo.lock", include_str!("../../Cargo.lock")),
];

const JS_FILES: &[(&str, &str)] = &[
    ("policy.js", include_str!("../../policies/js/policy.js")),
    ("build.mjs", include_str!("../../policies/js/build.mjs")),
    (
        "fixed-entropy.c",
        include_str!("../../policies/js/fixed-entropy.c"),
    ),
    (
        "package.json",
        include_str!("../../policies/js/package.json"),
    ),
    (
        "package-lock.json",
        include_str!("../../policies/js/package-lock.json"),
    ),
    ("wit/policy.wit", include_str!("../../wit/policy.wit")),
    (
        "README.md",
        include_str!("../templates/policy-js/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../templates/policy-js/gitignore"),
    ),
];

/// The name the JavaScript policy's `describe()` reports, replaced by the project's.
const JS_POLICY_NAME: &str = "'mend-default-js'";

/// Writes the project `name` in `language` into `parent/name`; answers its folder.
pub fn new_policy(
    name: &str,
    language: Language,
    parent: &Path,
    mend_dir: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    let parent = parent
        .canonicalize()
        .with_context(|| format!("find {}", parent.display()))?;
    let destination = parent.join(name);
    if destination.exists() {
        return Err(MendError::invalid(format!(
            "{} already exists; `mend policy new` writes a new folder and never into an existing one",
            destination.display()
        ))
        .into());
    }
    let mend_dir = match (language, mend_dir) {
        (Language::Rust, Some(dir)) => Some(checkout(dir)?),
        (Language::Rust, None) => Some(checkout(Path::new(BUILT_FROM)).context(
            "the mend checkout this binary was built from is gone; pass --mend-dir with a checkout of the same version",
        )?),
        (Language::Js, _) => None,
    };
    let files = project_files(name, language, mend_dir.as_deref())?;

    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(&parent)
        .with_context(|| format!("create a folder in {}", parent.display()))?;
    for (path, contents) in &files {
        let file = staging.path().join(path);
        if let Some(folder) = file.parent() {
            fs::create_dir_all(folder).with_context(|| format!("create {}", folder.display()))?;
        }
        fs::write(&file, contents).with_context(|| format!("write {}", file.display()))?;
    }
    let staged = staging.keep();
    if let Err(error) = fs::rename(&staged, &destination) {
        let _ = fs::remove_dir_all(&staged);
        return Err(error)
            .with_context(|| format!("move the project to {}", destination.display()));
    }
    Ok(destination)
}

/// Every file of the project, with its placeholders filled.
fn project_files(
    name: &str,
    language: Language,
    mend_dir: Option<&Path>,
) -> anyhow::Result<Vec<(String, String)>> {
    let crate_name = crate_name(name);
    let mend_dir = mend_dir
        .map(|dir| dir.display().to_string())
        .unwrap_or_default();
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate_name}}", &crate_name)
            .replace("{{mend_dir}}", &mend_dir)
    };
    let templates = match language {
        Language::Rust => RUST_FILES,
        Language::Js => JS_FILES,
    };
    let mut files: Vec<(String, String)> = templates
        .iter()
        .map(|(path, text)| {
            // The contract and the lock files are copied as they are.
            let text = if path.ends_with(".wit")
                || path.ends_with(".json")
                || path.ends_with(".lock")
                || path.ends_with(".c")
            {
                (*text).to_string()
            } else {
                fill(text)
            };
            ((*path).to_string(), text)
        })
        .collect();
    if language == Language::Js {
        let (_, policy) = files
            .iter_mut()
            .find(|(path, _)| path == "policy.js")
            .expect("the JavaScript template has a policy");
        if policy.matches(JS_POLICY_NAME).count() != 1 {
            bail!("policies/js/policy.js no longer names itself {JS_POLICY_NAME} exactly once");
        }
        *policy = policy.replace(JS_POLICY_NAME, &format!("'{name}'"));
    }
    files.extend(SCENARIOS.iter().map(|(file, text)| {
        let text = if file.ends_with(".md") {
            fill(text)
        } else {
            (*text).to_string()
        };
        (format!("scenarios/{file}"), text)
    }));
    Ok(files)
}

/// A project name is a folder, an npm package and a cargo package: lowercase letters, digits
/// and dashes, starting with a letter.
fn check_name(name: &str) -> Result<(), MendError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(MendError::invalid(format!(
            "policy name {:?}: use 1 to {MAX_NAME_CHARS} lowercase letters, digits and dashes, starting with a letter and not ending with a dash",
            mend::validate::truncated(name, mend::validate::QUOTED_CHARS)
        )))
    }
}

/// `dir` if it is a mend checkout (it has the SDK and the default policy), made absolute.
fn checkout(dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("find the mend checkout {}", dir.display()))?;
    for part in [
        "policy-sdk/Cargo.toml",
        "guest/Cargo.toml",
        "wit/policy.wit",
    ] {
        if !dir.join(part).is_file() {
            return Err(MendError::invalid(format!(
                "{} is not a mend checkout: it has no {part}",
                dir.display()
            ))
            .into());
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_folder_package_and_crate_names() {
        for good in ["p", "my-policy", "cautious2", "a-b-c"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "My",
            "-x",
            "x-",
            "1x",
            "a_b",
            "a b",
            "../x",
            "é",
            &"a".repeat(65),
        ] {
            let error = check_name(bad).unwrap_err();
            assert!(
                matches!(error, MendError::InvalidArgument { .. }),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn an_existing_folder_is_never_written_into() {
        let parent = tempfile::tempdir().unwrap();
        fs::create_dir(parent.path().join("taken")).unwrap();
        fs::write(parent.path().join("taken/keep"), "mine").unwrap();
        let error = new_policy("taken", Language::Js, parent.path(), None).unwrap_err();
        assert!(error.to_string().contains("already exists"), "{error}");
        assert_eq!(
            fs::read_to_string(parent.path().join("taken/keep")).unwrap(),
            "mine"
        );
        assert_eq!(
            fs::read_dir(parent.path()).unwrap().count(),
            1,
            "nothing else written"
        );
    }

    #[test]
    fn every_placeholder_is_filled() {
        let parent = tempfile::tempdir().unwrap();
        for (name, language) in [("rusty", Language::Rust), ("scripted", Language::Js)] {
            let project = new_policy(name, language, parent.path(), None).unwrap();
            for (path, _) in project_files(name, language, Some(Path::new("/m"))).unwrap() {
                let text = fs::read_to_string(project.join(&path)).unwrap();
                assert!(
                    !text.contains("{{"),
                    "{name}: {path} has a placeholder left"
                );
            }
        }
        let policy = fs::read_to_string(parent.path().join("scripted/policy.js")).unwrap();
        assert!(policy.contains("'scripted'"));
        let manifest = fs::read_to_string(parent.path().join("rusty/Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"rusty\""));
        assert!(
            manifest.contains(&format!(
                "{}/policy-sdk",
                checkout(Path::new(BUILT_FROM)).unwrap().display()
            )),
            "{manifest}"
        );
    }
}
