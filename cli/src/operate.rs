//! An operator's runs on a dataset from the command line: `mend recover`, `gc`,
//! `reconcile`, `verify`, `audit`.

use anyhow::{Context, bail};
use mend::Engine;
use mend_contract::RecoveryMode;

use super::BadInput;
use super::RecoverModeArg;
use super::output;
use super::{AuditArgs, GcArgs, ReconcileArgs, RecoverArgs, VerifyArgs};

/// `mend recover`.
pub(crate) async fn recover(engine: &Engine, args: RecoverArgs, json: bool) -> anyhow::Result<()> {
    let RecoverArgs {
        dataset,
        mode,
        idempotency_key,
    } = args;
    let mode = match mode {
        RecoverModeArg::Probe => RecoveryMode::Probe,
        RecoverModeArg::RollForward => RecoveryMode::RollForward,
        RecoverModeArg::Exclusive => RecoveryMode::Exclusive,
        RecoverModeArg::Verify => RecoveryMode::Verify,
    };
    let report = engine
        .recover(&dataset, mode)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .with_context(|| format!("recover dataset {dataset}"))?;
    output::recovery_report(&report, json)?;
    if let Some(verified) = &report.verify {
        if !json {
            output::verify_report(verified, false)?;
        }
        if !verified.violations.is_empty() {
            bail!(
                "{} invariant violation(s) in dataset {dataset}",
                verified.violations.len()
            );
        }
    }
    Ok(())
}

/// `mend gc`.
pub(crate) async fn gc(engine: &Engine, args: GcArgs, json: bool) -> anyhow::Result<()> {
    let GcArgs {
        dataset,
        node,
        idempotency_key,
    } = args;
    let result = engine
        .gc(&dataset, &node)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .with_context(|| format!("collect the garbage of dataset {dataset}"))?;
    output::json_or(&result, json, || {
        format!(
            "marked {} abandoned staged split(s); saw {} published split(s) marked since, their deletion \
             grace period beginning now; deleted {} expired split(s), objects then rows",
            result.marked.len(),
            result.seen.len(),
            result.deleted.len()
        )
    })
}

/// `mend reconcile`.
pub(crate) async fn reconcile(
    engine: &Engine,
    args: ReconcileArgs,
    json: bool,
) -> anyhow::Result<()> {
    let ReconcileArgs {
        dataset,
        node,
        idempotency_key,
    } = args;
    let report = engine
        .reconcile(&dataset, &node)
        .idempotency_key(idempotency_key.as_deref())
        .await
        .with_context(|| format!("reconcile dataset {dataset}"))?;
    output::reconcile_report(&report, json)
}

/// `mend verify`.
pub(crate) async fn verify(engine: &Engine, args: VerifyArgs, json: bool) -> anyhow::Result<()> {
    let VerifyArgs { dataset, deep } = args;
    let report = if deep {
        engine.verify_deep(&dataset).await
    } else {
        engine.verify(&dataset).await
    }
    .with_context(|| format!("verify dataset {dataset}"))?;
    output::verify_report(&report, json)?;
    if !report.violations.is_empty() {
        bail!(
            "{} invariant violation(s) in dataset {dataset}",
            report.violations.len()
        );
    }
    Ok(())
}

/// `mend audit`.
pub(crate) async fn audit(engine: &Engine, args: AuditArgs, json: bool) -> anyhow::Result<()> {
    let AuditArgs {
        dataset,
        principal,
        kind,
        since,
        before,
        limit,
    } = args;
    let since_ms = since
        .map(|ms| {
            i64::try_from(ms)
                .map_err(|_| BadInput("--since: past the largest time in milliseconds".into()))
        })
        .transpose()?;
    let before = before
        .map(|text| {
            text.parse::<mend::engine::AuditCursor>()
                .map_err(|error| BadInput(format!("--before: {error}")))
        })
        .transpose()?;
    let query = mend::engine::AuditQuery {
        principal,
        kind,
        since_ms,
        before,
        limit,
    };
    let page = engine
        .audit_page(&dataset, &query)
        .await
        .with_context(|| format!("read the audit of dataset {dataset}"))?;
    output::audit_trail(&dataset, &page, json)
}
