//! `mend policy ...`: look at a component, replay the audit log against it, swap the active
//! policy of a deployment, roll it back, say which one is active.
//!
//! The active policy of a deployment is kept in its policy registry, next to the split objects
//! ([`PolicyRegistry`]), so that every `mend` process opening the catalog runs the same one.
//! Components are compiled once per machine into the cache directory (the `cache_dir` setting),
//! and loaded with the settings' policy limits. `inspect` and `test` need only the component
//! file and open no catalog ([`run_without_catalog`]).

use std::path::{Path, PathBuf};

use crate::config::Settings;
use anyhow::{Context, bail};
use mend::runtime::registry::PolicyRegistry;
use mend::runtime::{DEFAULT_POLICY_WASM, LoadOptions, PolicyRuntime, imports_of};
use mend::{Engine, MendError};
use serde::Serialize;

use super::PolicyCommand;
use super::output;
use crate::scaffold::{self, Language};

/// How many of the catalog's newest audit records (every dataset's together) a swap or replay
/// asks the candidate.
pub const DEFAULT_REPLAY_RECORDS: usize = 10_000;

/// The policy registry of the deployment the engine's objects live in.
pub fn registry(engine: &Engine) -> PolicyRegistry {
    let (store, prefix) = engine.objects().store();
    PolicyRegistry::new(store.clone(), prefix.clone())
}

/// The deployment's active policy: the registry's, or the built-in default before any swap;
/// either way under the settings' limits. The built-in one is compiled in this process only,
/// as it always was: a plain `mend status` writes nothing to the cache directory.
pub async fn active_policy(
    registry: &PolicyRegistry,
    settings: &Settings,
) -> anyhow::Result<PolicyRuntime> {
    match registry.active().await.context("read the active policy")? {
        None => {
            let options = LoadOptions {
                cache_dir: None,
                ..settings.load_options()
            };
            PolicyRuntime::load_with(DEFAULT_POLICY_WASM, &options)
                .context("load the built-in policy")
        }
        Some(record) => {
            let bytes = registry
                .component(&record.digest)
                .await
                .with_context(|| format!("read active policy {}", record.digest))?;
            PolicyRuntime::load_with(&bytes, &settings.load_options())
                .with_context(|| format!("load active policy {}", record.digest))
        }
    }
}

/// A component file, loaded and checked under the settings' limits.
pub fn load_file(path: &Path, settings: &Settings) -> anyhow::Result<(Vec<u8>, PolicyRuntime)> {
    let bytes = std::fs::read(path).map_err(|error| {
        super::BadInput(format!("read policy component {}: {error}", path.display()))
    })?;
    let policy = PolicyRuntime::load_with(&bytes, &settings.load_options())
        .with_context(|| format!("load policy component {}", path.display()))?;
    Ok((bytes, policy))
}

/// The suites in `paths`: files, or every `.json` file of a directory, in name order.
fn load_suites(paths: &[PathBuf]) -> anyhow::Result<Vec<mend::scenarios::Suite>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|error| {
                    super::BadInput(format!(
                        "read scenario directory {}: {error}",
                        path.display()
                    ))
                })?
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|file| file.extension().is_some_and(|e| e == "json"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    files
        .iter()
        .map(|file| mend::scenarios::load_suite(file).map_err(anyhow::Error::from))
        .collect()
}

#[derive(Serialize)]
struct Inspection<'a> {
    digest: &'a str,
    #[serde(flatten)]
    description: &'a mend_contract::PolicyDescription,
    imports: Vec<String>,
    /// What one decision's sandbox holds of it.
    needs: &'a mend::runtime::ComponentShape,
}

/// `policy inspect`: the component file and the settings' limits are all it needs, so it
/// opens no catalog (and creates no `./mend-data`).
pub fn inspect(settings: &Settings, component: &Path, json: bool) -> anyhow::Result<()> {
    let (bytes, policy) = load_file(component, settings)?;
    let inspection = Inspection {
        digest: policy.digest(),
        description: policy.description(),
        imports: imports_of(&bytes).context("list the component's imports")?,
        needs: policy.shape(),
    };
    check_capabilities(&policy).context("this host could not run it")?;
    output::json_or(&inspection, json, || {
        let d = inspection.description;
        format!(
            "{}\n  name {} {}\n  ABI {}.{}, semantics revision {}\n  requires [{}]\n  imports [{}]\n  needs {}\n  loads and runs on this host, with every catalog backend",
            inspection.digest,
            d.name,
            d.version,
            d.abi_major,
            d.abi_minor,
            d.semantics_revision,
            d.required_capabilities.join(", "),
            inspection.imports.join(", "),
            inspection.needs
        )
    })
}

/// `policy new`: writes the project, then says where it is and how to build and test it.
/// Opens no catalog.
pub fn new_project(
    name: &str,
    language: Language,
    parent: &Path,
    mend_dir: Option<&Path>,
    json: bool,
) -> anyhow::Result<()> {
    let project = scaffold::new_policy(name, language, parent, mend_dir)?;
    #[derive(Serialize)]
    struct Written<'a> {
        project: &'a Path,
        build: &'a str,
        component: &'a str,
    }
    let component = scaffold::component_path(name, language);
    let written = Written {
        project: &project,
        build: language.build_command(),
        component: &component,
    };
    output::json_or(&written, json, || {
        format!(
            "wrote {}
  build: cd {} && {}
  test:  mend policy test {component} scenarios/
  its README.md says how to swap it in and roll it back",
            project.display(),
            project.display(),
            written.build,
        )
    })
}

/// `policy test`: like [`inspect`], it opens no catalog.
pub fn test(
    settings: &Settings,
    component: &Path,
    scenarios: &[PathBuf],
    json: bool,
) -> anyhow::Result<()> {
    let (_, policy) = load_file(component, settings)?;
    let suites = load_suites(scenarios)?;
    let reports: Vec<_> = suites
        .iter()
        .map(|suite| mend::scenarios::run(&policy, suite))
        .collect();
    let failed: usize = reports.iter().map(|report| report.failed.len()).sum();
    if json {
        output::print_json(&reports)?;
    } else {
        for report in &reports {
            print!("{}", mend::scenarios::render(report));
        }
    }
    if failed > 0 {
        bail!("{failed} scenario(s) failed against {}", policy.digest());
    }
    Ok(())
}

/// Refuses a policy that requires a capability this host lacks with any backend: the
/// engine's own check ([`Engine::check_policy`]) without a catalog, since both backends
/// provide every capability the host implements.
fn check_capabilities(policy: &PolicyRuntime) -> Result<(), MendError> {
    let provided = mend::engine::engine_capabilities(&mend::Capabilities::full_backend());
    let description = policy.description();
    match description
        .required_capabilities
        .iter()
        .find(|required| !provided.contains(required))
    {
        None => Ok(()),
        Some(missing) => Err(MendError::CapabilityMissing {
            capability: missing.clone(),
            detail: format!(
                "policy {} {} ({}) requires it, but this host provides only [{provided}]",
                description.name,
                description.version,
                policy.digest()
            ),
        }),
    }
}

/// The policy commands that need the deployment: its catalog, its registry, its audit log.
pub async fn run(
    engine: &Engine,
    settings: &Settings,
    command: PolicyCommand,
    json: bool,
) -> anyhow::Result<()> {
    match command {
        PolicyCommand::New {
            name,
            lang,
            dir,
            mend_dir,
        } => new_project(&name, lang, &dir, mend_dir.as_deref(), json),
        PolicyCommand::Inspect { component } => inspect(settings, &component, json),
        PolicyCommand::Test {
            component,
            scenarios,
        } => test(settings, &component, &scenarios, json),
        PolicyCommand::Active => active(engine, settings, json).await,
        PolicyCommand::Replay { component, records } => {
            let (_, candidate) = load_file(&component, settings)?;
            let report = engine
                .replay_policy(&candidate, records)
                .await
                .context("replay the audit log")?;
            output::replay_report(&report, json)
        }
        PolicyCommand::Swap {
            component,
            records,
            scenarios,
            idempotency_key,
        } => {
            swap(
                engine,
                settings,
                &component,
                records,
                &scenarios,
                idempotency_key.as_deref(),
                json,
            )
            .await
        }
        PolicyCommand::Rollback { idempotency_key } => {
            let (registry, load) = (registry(engine), settings.load_options());
            let record = engine
                .rollback_deployment_policy(&registry, &load)
                .idempotency_key(idempotency_key.as_deref())
                .await
                .context("roll back the active policy")?;
            output::json_or(&record, json, || {
                format!(
                    "rolled back: {} is active again (change {}), replacing {}",
                    record.digest,
                    record.version,
                    record.previous.as_deref().unwrap_or("-")
                )
            })
        }
    }
}

/// `mend policy active`: the policy this process runs and the registry's record of it.
async fn active(engine: &Engine, settings: &Settings, json: bool) -> anyhow::Result<()> {
    let registry = registry(engine);
    let record = registry.active().await.context("read the active policy")?;
    let policy = engine.policy();
    #[derive(Serialize)]
    struct Active<'a> {
        digest: &'a str,
        name: &'a str,
        version: &'a str,
        record: Option<mend::runtime::registry::ActiveRecord>,
        /// Set when the `policy` setting has this process run a file instead of the
        /// deployment's active policy: digest, name and version are then the file's.
        #[serde(skip_serializing_if = "Option::is_none")]
        policy_file: Option<&'a Path>,
    }
    let active = Active {
        digest: policy.digest(),
        name: &policy.description().name,
        version: &policy.description().version,
        record,
        policy_file: settings.policy.as_deref(),
    };
    let overridden = active.policy_file.map(|file| {
        format!(
            "\nthis process runs {} (the `policy` setting), not the deployment's active policy",
            file.display()
        )
    });
    output::json_or(&active, json, || {
        let line = match &active.record {
            None => format!(
                "{} ({} {}), the built-in policy: no swap has happened",
                active.digest, active.name, active.version
            ),
            Some(record) => format!(
                "{} ({} {}), active since change {} ({}) at {}; previous {}",
                active.digest,
                active.name,
                active.version,
                record.version,
                record.change,
                mend::clock::rfc3339(record.changed_at_ms),
                record.previous.as_deref().unwrap_or("the built-in policy")
            ),
        };
        line + overridden.as_deref().unwrap_or_default()
    })
}

/// `mend policy swap`: the component checked, replayed and run against its golden
/// scenarios, then made the deployment's active policy.
async fn swap(
    engine: &Engine,
    settings: &Settings,
    component: &Path,
    records: usize,
    scenarios: &[PathBuf],
    idempotency_key: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let (bytes, candidate) = load_file(component, settings)?;
    let golden = load_suites(scenarios)?;
    let registry = registry(engine);
    let swap = engine
        .swap_deployment_policy(&registry, &bytes, candidate, records, &golden)
        .idempotency_key(idempotency_key)
        .await
        .context("swap the active policy")?;
    if json {
        output::print_json(&swap)?;
    } else {
        output::replay_report(&swap.replay, false)?;
        println!(
            "swapped: {} is active (change {}), replacing {}; `mend policy rollback` restores it",
            swap.record.digest,
            swap.record.version,
            swap.record.previous.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}
