//! What each command does: open the engine, call it, print the result.

use crate::config::Settings;
use anyhow::Context;
use mend::Engine;
use mend::catalog;
use mend::model::DatasetConfig;

use super::interrupt::Signals;
use super::output;
use super::{Args, BadInput, Command, DatasetCommand, PolicyCommand, TokenCommand};

/// Resolves the settings once, before anything is opened (bad settings change nothing), then
/// runs the command with them: until it ends, or a signal or a panic stops it with its gates
/// released (`interrupt.rs`).
pub async fn run(args: Args) -> anyhow::Result<()> {
    // Made from the command line's own definition; no setting can change them.
    match &args.command {
        Command::Completions { shell } => return super::completions(*shell),
        Command::Man => return super::man_page(),
        _ => {}
    }
    let settings = Settings::resolve(&args.settings_inputs())?;
    super::logging::init(&settings);
    let json = args.json;
    output::set_table_width(output::TableWidth::for_stdout(args.wide));
    match args.command {
        // Needs no catalog: it must work when the catalog is what is being fixed.
        Command::Config => return crate::config::print(&settings, json),
        // Prints a secret and a line; opens nothing.
        Command::Token {
            command: TokenCommand::New { principal, grants },
        } => return super::token::new(&principal, &grants, json),
        // Talks to a server, which opens the catalog; this process opens none.
        Command::Request(request) => return super::request::run(request).await,
        // Writes files only; opening the catalog would create ./mend-data.
        Command::Policy {
            command:
                PolicyCommand::New {
                    name,
                    lang,
                    dir,
                    mend_dir,
                },
        } => return super::policy::new_project(&name, lang, &dir, mend_dir.as_deref(), json),
        // Needs only the component file; opening the catalog would create ./mend-data.
        Command::Policy {
            command: PolicyCommand::Inspect { component },
        } => return super::policy::inspect(&settings, &component, json),
        Command::Policy {
            command:
                PolicyCommand::Test {
                    component,
                    scenarios,
                },
        } => return super::policy::test(&settings, &component, &scenarios, json),
        // Stops gracefully on SIGINT and SIGTERM by itself.
        Command::Serve { .. } => {
            let engine = open_engine(&settings, args.command.program(), json).await?;
            return super::serve::run(engine, &settings, json).await;
        }
        _ => {}
    }
    let mut signals = Signals::watch()?;
    let opened = std::sync::OnceLock::new();
    let command = async {
        // Its audit records name who acted: the command line.
        let engine = open_engine(&settings, args.command.program(), json)
            .await?
            .acting_as(CLI_PRINCIPAL);
        let _ = opened.set(std::sync::Arc::clone(engine.gates()));
        execute(&engine, &settings, args.command, json).await
    };
    super::interrupt::run_to_end(command, &opened, &mut signals).await
}

/// The principal of what the command line does, in the audit records it writes.
pub const CLI_PRINCIPAL: &str = "cli";

async fn execute(
    engine: &Engine,
    settings: &Settings,
    command: Command,
    json: bool,
) -> anyhow::Result<()> {
    match command {
        Command::Dataset { command } => dataset(engine, settings, command, json).await,
        Command::Stage(args) => super::splits::stage(engine, args, json).await,
        Command::Publish(args) => super::splits::publish(engine, args, json).await,
        Command::Commit(args) => super::commit::run(engine, settings, args, json).await,
        Command::Operation { command } => super::operation::run(engine, command, json).await,
        Command::Mark(args) => super::splits::mark(engine, args, json).await,
        Command::Delete(args) => super::splits::delete(engine, args, json).await,
        Command::List(args) => super::splits::list(engine, args, json).await,
        Command::Recover(args) => super::operate::recover(engine, args, json).await,
        Command::Gc(args) => super::operate::gc(engine, args, json).await,
        Command::Reconcile(args) => super::operate::reconcile(engine, args, json).await,
        Command::Verify(args) => super::operate::verify(engine, args, json).await,
        Command::Audit(args) => super::operate::audit(engine, args, json).await,
        Command::Policy { command } => super::policy::run(engine, settings, command, json).await,
        Command::Serve { .. } => super::serve::run(engine.clone(), settings, json).await,
        Command::Config => crate::config::print(settings, json),
        Command::Completions { shell } => super::completions(shell),
        Command::Man => super::man_page(),
        Command::Token {
            command: TokenCommand::New { principal, grants },
        } => super::token::new(&principal, &grants, json),
        Command::Request(request) => super::request::run(request).await,
        Command::Status => super::status::run(engine, settings, json).await,
        Command::Demo => super::demo::run(engine, settings, json).await,
    }
}

/// The engine the settings describe: their catalog and objects, their limits, and the policy
/// file they name or else the deployment's active policy; its gates name this process
/// `program` to other holders.
async fn open_engine(settings: &Settings, program: &str, json: bool) -> anyhow::Result<Engine> {
    // A policy file is loaded first, so that a bad one fails before anything is opened.
    let file_policy = match &settings.policy {
        Some(path) => Some(super::policy::load_file(path, settings)?.1),
        None => None,
    };
    let (catalog, objects) = catalog::open_with(
        &settings.catalog,
        settings.objects.as_deref(),
        settings.postgres_options(),
    )
    .await
    .with_context(|| format!("open catalog {}", settings.catalog))?;
    let policy = match file_policy {
        Some(policy) => policy,
        None => {
            let registry = mend::runtime::registry::PolicyRegistry::new(
                objects.store().0.clone(),
                objects.store().1.clone(),
            );
            super::policy::active_policy(&registry, settings).await?
        }
    };
    let gates = mend::gates::open_gates_as(&settings.catalog, program, settings.gate_lease)
        .await
        .with_context(|| format!("open the gates of catalog {}", settings.catalog))?;
    let engine = Engine::new(catalog, objects, policy, settings.engine_options())
        .context("start the engine")?
        .with_gates(gates);
    Ok(match super::progress::TerminalProgress::for_stderr(json) {
        Some(progress) => engine.with_progress(std::sync::Arc::new(progress)),
        None => engine,
    })
}

async fn dataset(
    engine: &Engine,
    settings: &Settings,
    command: DatasetCommand,
    json: bool,
) -> anyhow::Result<()> {
    match command {
        DatasetCommand::Create {
            dataset,
            staged_grace_period_ms,
            deletion_grace_period_ms,
            idempotency_key,
        } => {
            // The settings' grace periods, unless this command's own flags say otherwise.
            let mut config = settings.dataset_config_defaults();
            if let Some(ms) = staged_grace_period_ms {
                config.staged_grace_period_ms = ms;
            }
            if let Some(ms) = deletion_grace_period_ms {
                config.deletion_grace_period_ms = ms;
            }
            let created = engine
                .create_dataset(&dataset, &config)
                .idempotency_key(idempotency_key.as_deref())
                .await
                .with_context(|| format!("create dataset {dataset}"))?;
            output::datasets(std::slice::from_ref(&created), json)
        }
        DatasetCommand::List => {
            let datasets = engine.datasets().await.context("list datasets")?;
            output::datasets(&datasets, json)
        }
        DatasetCommand::Show { dataset } => {
            let found = engine
                .dataset(&dataset)
                .await
                .with_context(|| format!("show dataset {dataset}"))?;
            output::dataset(&found, json)
        }
        DatasetCommand::Config {
            dataset,
            set,
            idempotency_key,
        } => dataset_config(engine, &dataset, &set, idempotency_key.as_deref(), json).await,
        DatasetCommand::Fence {
            dataset,
            token,
            clear,
            idempotency_key,
        } => {
            if token.is_none() && !clear {
                return Err(BadInput(
                    "give --token TOKEN to set the publish token, or --clear to remove it".into(),
                )
                .into());
            }
            let result = engine
                .set_publish_token(&dataset, token.as_deref())
                .idempotency_key(idempotency_key.as_deref())
                .await
                .with_context(|| format!("set the publish token of dataset {dataset}"))?;
            output::dataset(&result, json)
        }
    }
}

/// `mend dataset config NAME [--set KEY=VALUE ...]`: shows the config, or applies the
/// settings to it as read (under the key, if one is given).
async fn dataset_config(
    engine: &Engine,
    dataset: &str,
    set: &[String],
    idempotency_key: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let result = if set.is_empty() {
        if let Some(key) = idempotency_key {
            // Showing the config is a read: the key is only checked.
            mend::validate::idempotency_key(key)
                .with_context(|| format!("show the config of dataset {dataset}"))?;
        }
        engine
            .dataset(dataset)
            .await
            .with_context(|| format!("read dataset {dataset}"))?
    } else {
        // The settings are checked once, on the defaults, before anything is read: a
        // bad one is a bad flag, whatever the dataset holds.
        let mut checked = DatasetConfig::default();
        for assignment in set {
            apply_setting(&mut checked, assignment)?;
        }
        let edit = |config: &DatasetConfig| -> mend::Result<DatasetConfig> {
            let mut config = config.clone();
            for assignment in set {
                apply_setting(&mut config, assignment)
                    .map_err(|error| mend::MendError::invalid(error.0))?;
            }
            Ok(config)
        };
        engine
            .apply_config_edit(dataset, &edit, "cli")
            .idempotency_key(idempotency_key)
            .await
            .with_context(|| format!("apply a new config to dataset {dataset}"))?
    };
    output::json_or(&result.config, json, || {
        format!(
            "config version {}\n{}",
            result.config_version,
            serde_json::to_string_pretty(&result.config).unwrap_or_default()
        )
    })
}

fn apply_setting(config: &mut DatasetConfig, assignment: &str) -> Result<(), BadInput> {
    let (key, value) = assignment
        .split_once('=')
        .ok_or_else(|| BadInput(format!("--set {assignment:?}: expected KEY=VALUE")))?;
    // The range itself is checked with the whole config, by the library; a value that is not
    // even a number in u64 is refused here, with that same range.
    let number = |bound: mend::bounds::Bound| -> Result<u64, BadInput> {
        value
            .parse()
            .map_err(|_| BadInput(format!("--set {}", bound.not_a_number(value))))
    };
    match key {
        "staged_grace_period_ms" => {
            config.staged_grace_period_ms = number(mend::bounds::STAGED_GRACE_PERIOD_MS)?
        }
        "deletion_grace_period_ms" => {
            config.deletion_grace_period_ms = number(mend::bounds::DELETION_GRACE_PERIOD_MS)?
        }
        _ => match key.strip_prefix("policy.") {
            Some(name) if !name.is_empty() => {
                config.policy_params.insert(name.into(), value.into());
            }
            _ => {
                return Err(BadInput(format!(
                    "--set {key}: unknown setting; use staged_grace_period_ms, deletion_grace_period_ms or policy.NAME"
                )));
            }
        },
    }
    Ok(())
}
